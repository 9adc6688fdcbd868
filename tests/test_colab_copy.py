"""What the Colab button opens shows no MyST: the converted copy of the chapters (`make colab`, tools/colab.py).

Every chapter is converted into a temporary folder and rendered as Jupyter renders it, with nbconvert's
Markdown and HTML exporters. The rendering must hold no MyST syntax (`{glue`, a ```{ or :::{ directive, a
`{cite`, `{numref`, `{ref` or `{doc` role), no Markdown table left as a line of pipes (a table inside a box), no
exercise solution outside a closed `<details>` element, and no nbdev directive line (`#|`) in the code. The checker
is tried on bad notebooks too: the unconverted chapters, solutions left open, a table left as text.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
import yaml
from nbconvert import HTMLExporter, MarkdownExporter

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import colab  # noqa: E402  (tools/colab.py)

CONFIG = yaml.safe_load((REPO_ROOT / "_config.yml").read_text(encoding="utf-8"))
CHAPTERS = colab.chapter_paths()
MYST = ["{glue", "```{", ":::{", "{cite", "{numref", "{ref", "{doc"]
# A solution: an admonition folded with `:class: dropdown` in the chapter's source.
DROPDOWN = re.compile(r"^(`{3,}|:{3,})\{admonition\}[^\n]*\n((?:\s*:[\w-]+:[^\n]*\n)*)(.*?)^\1\s*$",
                      re.MULTILINE | re.DOTALL)
PLAIN_LINE = re.compile(r"^[A-Za-z0-9 ,.;'()-]+$")
# A table's rule row (`| --- | ---: |`) in the text a reader sees: the table was not rendered as one.
TABLE_AS_TEXT = re.compile(r"\|\s*:?-{3,}:?\s*\|")
DIRECTIVE_LINE = re.compile(r"^[ \t]*#\|.*(?:\n|$)", re.MULTILINE)


class _Text(HTMLParser):
    """The visible text of rendered HTML, split into what a closed <details> hides and what is shown."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.shown, self.folded, self.open_details = [], [], 0
        self._stack: list[bool] = []  # per <details>: is it closed?
        self._summary = 0
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag == "details":
            closed = "open" not in dict(attrs)
            self._stack.append(closed)
            self.open_details += not closed
        elif tag == "summary":
            self._summary += 1
        elif tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag == "details" and self._stack:
            self._stack.pop()
        elif tag == "summary":
            self._summary = max(0, self._summary - 1)
        elif tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)

    def handle_data(self, data):
        if self._skip:
            return
        hidden = any(self._stack) and not self._summary
        (self.folded if hidden else self.shown).append(data)


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _without_math(text: str) -> str:
    """`text` without its TeX ($...$, $$...$$): `\\text{ref}` in an equation is not a MyST role."""
    return re.sub(r"\$\$.*?\$\$|\$[^$\n]+\$", "$math$", text, flags=re.DOTALL)


def solution_samples(source_nb: nbformat.NotebookNode) -> list[str]:
    """One plain line of text from each folded solution of a chapter's source (none when it has no plain line)."""
    samples = []
    for cell in source_nb.cells:
        if cell.cell_type != "markdown":
            continue
        for match in DROPDOWN.finditer(cell.source):
            if "dropdown" not in match.group(2):
                continue
            plain = [line.strip() for line in match.group(3).splitlines()
                     if PLAIN_LINE.match(line.strip()) and len(line.split()) >= 6]
            samples.append(plain[0] if plain else "")
    return samples


def rendering_problems(nb: nbformat.NotebookNode, source_nb: nbformat.NotebookNode) -> list[str]:
    """What Jupyter would show wrongly of `nb`: MyST text, or a solution of `source_nb` left unfolded."""
    problems = []
    markdown, _ = MarkdownExporter(exclude_code_cell=True).from_notebook_node(nb)
    html, _ = HTMLExporter(template_name="basic", exclude_code_cell=True).from_notebook_node(nb)
    text = _Text()
    text.feed(html)
    shown, folded = _squash("".join(text.shown)), _squash("".join(text.folded))
    for syntax in MYST:
        for where, rendered in (("Markdown", _without_math(markdown)), ("HTML", _without_math(shown))):
            if syntax in rendered:
                at = rendered.index(syntax)
                problems.append(f"{syntax!r} in the {where} rendering: ...{_squash(rendered[at:at + 60])}...")
    for where, rendered in (("shown", shown), ("folded", folded)):
        if match := TABLE_AS_TEXT.search(rendered):
            at = match.start()
            problems.append(f"a Markdown table left as text ({where}): ...{rendered[max(0, at - 40):at + 40]}...")
    if text.open_details:
        problems.append(f"{text.open_details} <details> element(s) open before the reader opens them")
    samples = solution_samples(source_nb)
    if len(samples) > len(re.findall(r"<details(?![^>]*\bopen\b)[^>]*>", html)):
        problems.append(f"{len(samples)} solutions but fewer closed <details> elements")
    for sample in filter(None, samples):
        if _squash(sample) in shown:
            problems.append(f"a solution is shown unfolded: {sample[:60]!r}")
        elif _squash(sample) not in folded:
            problems.append(f"a solution is missing from the rendering: {sample[:60]!r}")
    return problems


def code_problems(nb: nbformat.NotebookNode) -> list[str]:
    """nbdev directive lines (`#| export`, ...) left in the code a reader sees."""
    return [f"cell {cell.get('id')}: {line.strip()!r}" for cell in nb.cells if cell.cell_type == "code"
            for line in cell.source.splitlines() if DIRECTIVE_LINE.match(line)]


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("colab")
    colab.write_copy(out)
    return out


def test_every_chapter_with_a_colab_button_is_converted(copy):
    assert len(CHAPTERS) >= 13
    for path in CHAPTERS:
        assert (copy / path.relative_to(REPO_ROOT)).is_file(), f"{path.name} is missing from the Colab copy"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_jupyter_renders_the_copy_without_myst(copy, path):
    source = nbformat.read(path, as_version=4)
    converted = nbformat.read(copy / path.relative_to(REPO_ROOT), as_version=4)
    problems = rendering_problems(converted, source)
    assert not problems, f"{path.name} as Jupyter shows it:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_copy_keeps_every_code_cell_without_nbdev_directives(copy, path):
    """Code and the set-up cell are as on main less the `#|` lines (tooling): the copy runs as the chapter does."""
    source = nbformat.read(path, as_version=4)
    converted = nbformat.read(copy / path.relative_to(REPO_ROOT), as_version=4)
    assert not code_problems(converted), f"{path.name}: nbdev directives left in the copy: {code_problems(converted)}"
    code_cells = [c for c in source.cells if c.cell_type == "code"]
    kept = [DIRECTIVE_LINE.sub("", c.source).lstrip("\n") for c in code_cells]
    assert [c.source for c in converted.cells if c.cell_type == "code"] == \
           [code for code, cell in zip(kept, code_cells) if code.strip() or cell.outputs]
    assert converted.metadata.get("colab") == source.metadata.get("colab")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_set_up_cell_shows_one_line_on_colab(copy, path):
    """Colab shows a cell with `cellView: form` as its `#@title` line, its code folded behind "Show code"."""
    converted = nbformat.read(copy / path.relative_to(REPO_ROOT), as_version=4)
    setup = next(c for c in converted.cells if c.cell_type == "code")
    assert setup.source.startswith("#@title "), f"{path.name}: the set-up cell has no Colab title line"
    assert setup.metadata.get("cellView") == "form", f"{path.name}: the set-up cell's code is not folded on Colab"


def test_the_unconverted_chapters_hold_nbdev_directives_the_check_finds():
    source = nbformat.read(REPO_ROOT / "chapters" / "06_the_transformer.ipynb", as_version=4)
    assert len(code_problems(source)) > 5


def test_a_table_inside_a_box_becomes_an_html_table():
    conv = colab.Converter({}, {}, "https://example.org/", "chapters/x.ipynb")
    out = conv.convert("```{note}\nRuns:\n\n| run | min |\n| --- | ---: |\n| `cpu` **2 cores** | 56 |\n```")
    assert "> <table>" in out and "| --- |" not in out
    assert '<td><code>cpu</code> <strong>2 cores</strong></td><td style="text-align: right">56</td>' in out
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(out)])
    assert rendering_problems(nb, nb) == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_what_the_page_folds_is_folded_on_colab_and_in_jupyterlab(copy, path):
    """A cell whose code the page folds opens on Colab as a form (code behind "Show code"); no other cell does."""
    converted = nbformat.read(copy / path.relative_to(REPO_ROOT), as_version=4)
    for cell in converted.cells:
        if cell.cell_type != "code":
            continue
        tags = set(cell.metadata.get("tags", []))
        hidden = cell.metadata.get("jupyter", {})
        folds_code = bool(tags & {"hide-input", "hide-cell"})
        assert (cell.metadata.get("cellView") == "form") == folds_code, (cell.id, tags)
        assert hidden.get("source_hidden", False) == folds_code, (cell.id, tags)
        assert hidden.get("outputs_hidden", False) == bool(tags & {"hide-output", "hide-cell"}), (cell.id, tags)


def test_folding_tags_are_on_some_cells():
    """The test above checks something: chapters fold code (exercise solutions, drawing code)."""
    tags = [set(c.metadata.get("tags", [])) for path in CHAPTERS
            for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert sum(bool(t & {"hide-input", "hide-cell"}) for t in tags) > 50
    assert any("hide-output" in t for t in tags)


def test_what_the_chapters_read_from_the_repository_is_in_the_copy(copy):
    records = sorted(p.name for p in (REPO_ROOT / "chapters" / "records").glob("*.json"))
    assert records, "chapters/records/ holds no run record"
    assert sorted(p.name for p in (copy / "chapters" / "records").glob("*.json")) == records


def test_glued_values_read_as_the_book_shows_them():
    """Every `{glue:text}` of every chapter becomes the text myst-nb writes into the HTML page."""
    from myst_nb.core.variables import format_plain_text

    count = 0
    for path in CHAPTERS:
        nb = nbformat.read(path, as_version=4)
        values = colab.glue_values(nb)
        for cell in nb.cells:
            if cell.cell_type != "markdown":
                continue
            for ref in re.findall(r"\{glue:text\}`([^`]+)`", cell.source):
                key, _, fmt = ref.rpartition(":") if ":" in ref else (ref, "", "")
                plain = values[key]["text/plain"]
                assert colab.format_plain_text(plain, fmt) == format_plain_text(plain, fmt or "s"), ref
                count += 1
    assert count > 300


def test_a_glued_number_replaces_its_reference():
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("glue('acc', 0.98765, '.3f')")
    code.outputs = [nbformat.v4.new_output(
        "display_data", data={colab.GLUE_PREFIX + "text/plain": "0.988"},
        metadata={"scrapbook": {"name": "acc", "mime_prefix": colab.GLUE_PREFIX}})]
    nb.cells = [nbformat.v4.new_markdown_cell("Accuracy {glue:text}`acc:.2f`, {glue:text}`acc:.1%`."), code]
    out = colab.convert_notebook(nb, {}, "https://example.org/book/", "chapters/x.ipynb")
    assert out.cells[0].source == "Accuracy 0.99, 98.8%."
    assert out.cells[1].outputs == [], "the glue-only output stays in the copy"


def test_links_between_pages_go_to_the_online_book():
    conv = colab.Converter({}, {}, "https://example.org/book/", "chapters/03_x.ipynb")
    assert conv.inline("[chapter 2](02_attention.ipynb#why-divide)") == \
        "[chapter 2](https://example.org/book/chapters/02_attention.html#why-divide)"
    assert conv.inline("[set-up](../book/setup.md)") == "[set-up](https://example.org/book/book/setup.html)"
    assert conv.inline("[PyTorch](https://pytorch.org)") == "[PyTorch](https://pytorch.org)"


def test_a_container_leaves_its_content_as_markdown():
    conv = colab.Converter({}, {}, "https://example.org/", "chapters/x.ipynb")
    table = "| Family | Cost |\n| --- | --- |\n| Linformer [chapter 2](02_attention.ipynb) | $O(T k d)$ |"
    out = conv.convert(f"Before.\n\n```{{container}} cards-on-phone\n{table}\n```\n\nAfter.")
    assert out == "Before.\n\n" + table.replace("02_attention.ipynb", "https://example.org/chapters/02_attention.html") \
        + "\n\nAfter."


def test_unknown_markup_stops_the_conversion():
    conv = colab.Converter({}, {}, "https://example.org/", "chapters/x.ipynb")
    with pytest.raises(colab.ConversionError, match="directive"):
        conv.convert("```{mermaid}\ngraph TD\n```")
    with pytest.raises(colab.ConversionError, match="no glued value"):
        conv.convert("{glue:text}`missing:.2f`")


# ---- the checker itself must be able to fail ----

def test_the_unconverted_chapters_fail_the_check():
    path = REPO_ROOT / "chapters" / "07_label_smoothing_and_training.ipynb"
    source = nbformat.read(path, as_version=4)
    problems = "\n".join(rendering_problems(source, source))
    for expected in ("'{glue'", "'```{'", "'{cite'", "a solution is shown unfolded", "fewer closed <details>"):
        assert expected in problems, f"the raw chapter passed the check for {expected}:\n{problems}"


SOLUTION = "The answer is that the rows of the weights sum to one in every case here"


@pytest.mark.parametrize("markdown, expected", [
    (f"> **Solution**\n>\n> {SOLUTION}.", "a solution is shown unfolded"),
    (f"<details open>\n<summary>Solution</summary>\n\n{SOLUTION}.\n\n</details>", "open before the reader"),
    ("See {ref}`the plot <a-plot>` and {numref}`fig-1` and {doc}`setup`.", "'{ref'"),
    ("::: {note}\ntext\n:::\n\n:::{note}\ntext\n:::", "':::{'"),
    ("> **Note**\n>\n> | run | min |\n> | --- | ---: |\n> | cpu | 56 |", "a Markdown table left as text"),
    (f"<details>\n<summary>Solution</summary>\n\n{SOLUTION}.\n\n</details>", None),
])
def test_the_check_catches_a_bad_notebook(markdown, expected):
    source = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        f"```{{admonition}} Solution\n:class: dropdown\n\n{SOLUTION}.\n```")])
    bad = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(markdown)])
    problems = "\n".join(rendering_problems(bad, source))
    if expected is None:
        assert problems == ""
    else:
        assert expected in problems, problems


def test_the_colab_button_opens_the_branch_the_workflow_publishes():
    workflow = (REPO_ROOT / ".github" / "workflows" / "book.yml").read_text(encoding="utf-8")
    published = re.search(r"COLAB_BRANCH:\s*(\S+)", workflow)
    assert published, "book.yml does not publish the Colab copy (no COLAB_BRANCH)"
    assert CONFIG["repository"]["branch"] == published.group(1), \
        "the Colab buttons (repository.branch in _config.yml) open another branch than book.yml publishes"
    assert "make colab" in workflow
