"""Every `transformer_book.module.Name` that the book's pages and the README name must import: a reader who
copies it from the page gets the object, not an ImportError."""

import importlib
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((REPO_ROOT / "book").glob("*.md")) + [REPO_ROOT / "README.md"]
DOTTED = re.compile(r"`(transformer_book(?:\.\w+)+)`")


def named(page: Path) -> list[str]:
    return sorted(set(DOTTED.findall(page.read_text(encoding="utf-8"))))


def resolves(dotted: str) -> bool:
    """True when `dotted` is a module of the package, or a name a module of it defines."""
    module_name, _, attribute = dotted.rpartition(".")
    try:
        importlib.import_module(dotted)
        return True
    except ImportError:
        pass
    try:
        return hasattr(importlib.import_module(module_name), attribute)
    except ImportError:
        return False


def test_the_pages_name_package_objects_at_all():
    assert named(REPO_ROOT / "book" / "beyond.md"), "beyond.md names no transformer_book object: the pattern broke"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_package_name_on_a_page_imports(page):
    missing = [name for name in named(page) if not resolves(name)]
    assert not missing, f"{page.name} names what the package does not have: {missing}"


def test_a_missing_name_is_caught():
    assert resolves("transformer_book.training.fit")
    assert not resolves("transformer_book.training.copy_batches")
    assert not resolves("transformer_book.no_such_module.fit")


def package_names() -> set[str]:
    import pkgutil

    import transformer_book

    found = set()
    for info in pkgutil.iter_modules(transformer_book.__path__):
        found |= {info.name, *dir(importlib.import_module(f"transformer_book.{info.name}"))}
    return found


def unexplained_code_names(text: str, known: set[str]) -> list[str]:
    """Code-like names (snake_case or CamelCase) the package lacks, unless the text says they are a notebook's."""
    unexplained = []
    for match in re.finditer(r"`([A-Za-z_][A-Za-z0-9_]*)`", text):
        name = match.group(1)
        code_like = "_" in name or re.match(r"[A-Z][a-z]+[A-Z]", name)
        if code_like and name not in known and "notebook" not in text[max(0, match.start() - 40) : match.start()]:
            unexplained.append(name)
    return unexplained


def test_beyond_points_only_at_what_the_package_has_or_says_where_else():
    text = (REPO_ROOT / "book" / "beyond.md").read_text(encoding="utf-8")
    assert not unexplained_code_names(text, package_names())


def test_a_name_that_only_a_notebook_defines_must_be_said_to_be_so():
    known = {"fit"}
    assert unexplained_code_names("train chapter 7's task (its `copy_batches`, with `fit`)", known) == ["copy_batches"]
    assert unexplained_code_names("the notebook's `copy_batches`, with `fit`", known) == []
