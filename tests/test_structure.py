"""The package's shape: small modules and functions, imports from the same or an earlier chapter only, no cycle."""

import ast
import json
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "transformer_book"
MAX_MODULE_LINES = 350
MAX_FUNCTION_LINES = 80
CHAPTER = re.compile(r"File to edit: \.\./\.\./chapters/(\d+)")
MODULES = sorted(p for p in PACKAGE.glob("*.py") if p.name not in {"__init__.py", "__main__.py"})
NOTEBOOKS = sorted((PACKAGE.parents[1] / "chapters").glob("[0-9]*.ipynb"))


def function_lengths(source: str) -> dict[str, int]:
    """Lines of every function and method (decorators and docstring included), by qualified name."""
    lengths = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    lengths[name] = child.end_lineno - first + 1
                visit(child, f"{name}.")

    visit(ast.parse(source), "")
    return lengths


def package_imports(path: Path) -> set[str]:
    """The package's modules that `path` imports (relative imports: `from .masking import ...`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:  # from . import data
                found.update(alias.name for alias in node.names)
    return found


def chapter_of(path: Path) -> int:
    """The number of the chapter whose notebook writes the module (its header names the notebook)."""
    match = CHAPTER.search(path.read_text(encoding="utf-8").split("\n", 1)[0])
    assert match, f"{path.name} does not name its notebook in its first line"
    return int(match.group(1))


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, as a list of modules, or None."""
    state: dict[str, str] = {}

    def walk(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt):], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (cycle := walk(nxt, [*path, nxt])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := walk(start, [start])):
            return cycle
    return None


def test_the_helpers_see_what_they_should():
    source = "def f():\n    return 1\n\n\nclass A:\n    @staticmethod\n    def g(x):\n        y = x\n        return y\n"
    assert function_lengths(source) == {"f": 2, "A.g": 4}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_module_is_at_most_350_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.name} has {lines} lines; split it by concept (limit {MAX_MODULE_LINES})"


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_functions_are_at_most_80_lines(path):
    long = {n: k for n, k in function_lengths(path.read_text(encoding="utf-8")).items() if k > MAX_FUNCTION_LINES}
    assert not long, f"{path.name}: functions over {MAX_FUNCTION_LINES} lines: {long}; split them into named steps"


def test_modules_import_only_from_the_same_or_earlier_chapters_and_without_cycles():
    chapters = {p.stem: chapter_of(p) for p in MODULES}
    graph = {p.stem: package_imports(p) & chapters.keys() for p in MODULES}
    later = {
        f"{module} (chapter {chapters[module]})": sorted(f"{o} (chapter {chapters[o]})" for o in others
                                                          if chapters[o] > chapters[module])
        for module, others in graph.items()
    }
    assert not {k: v for k, v in later.items() if v}, f"imports from a later chapter: {later}"
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def notebook_imports(source: str) -> set[str]:
    """The package's modules that the code of a notebook imports (`from transformer_book.x import` or
    `from transformer_book import x`); IPython lines (`%`, `!`) are left out."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] == "transformer_book":
                found.update(parts[1:2] or [alias.name for alias in node.names])
    return found


def test_notebook_imports_are_seen():
    source = "%matplotlib inline\nfrom transformer_book.model import Transformer\nfrom transformer_book import data, x\n"
    assert notebook_imports(source) == {"model", "data", "x"}


# The appendix's checks of a reader's own code: tooling that every chapter's "Write it yourself" exercise calls,
# not an idea the chapter uses, so any chapter may import it.
TOOLING_MODULES = {"exercises"}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_chapters_import_only_what_the_reader_has_met(notebook):
    """A chapter imports the modules of its own and earlier chapters only (chapter 5 uses no chapter 6 model);
    the appendix's checks (TOOLING_MODULES) are the exception."""
    chapter = int(re.match(r"\d+", notebook.name).group())  # 10a, the companion of chapter 10, counts as 10
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    chapters = {p.stem: chapter_of(p) for p in MODULES}
    later = sorted(f"{m} (chapter {chapters[m]})" for m in notebook_imports(source) & chapters.keys()
                   if chapters[m] > chapter and m not in TOOLING_MODULES)
    assert not later, f"{notebook.name} imports from a later chapter: {later}"


def test_no_module_writes_the_environment():
    writes = re.compile(r"os\.environ\[[^\]]+\]\s*=|os\.environ\.(setdefault|update|pop)\(|os\.putenv\(")
    found = [f"{p.name}:{i}" for p in MODULES
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if writes.search(line)]
    assert not found, f"the package writes os.environ at {found}; pass the value as an argument instead"
