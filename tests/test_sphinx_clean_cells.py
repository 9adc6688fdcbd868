"""The book's page shows a reader's code, not the build's tooling (tools/sphinx_clean_cells.py).

The extension works on the document tree myst-nb builds from a notebook: a code cell is a container
(`nb_element="cell_code"`) holding a source container (`"cell_code_source"`) with one literal block. These tests
build such trees by hand; the browser test (tests/browser/) checks the built book itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import bootstrap  # noqa: E402  (tools/bootstrap.py)
import sphinx_clean_cells as ext  # noqa: E402  (tools/sphinx_clean_cells.py)


def _page(*sources: str, output: bool = False) -> nodes.document:
    doc = new_document("chapter", get_default_settings(Parser))
    for source in sources:
        cell = nodes.container(nb_element="cell_code", classes=["cell"])
        box = nodes.container(nb_element="cell_code_source", classes=["cell_input"])
        box += nodes.literal_block(source, source)
        cell += box
        if output:
            cell += nodes.container(nb_element="cell_code_output", classes=["cell_output"])
        doc += cell
    return doc


def _shown(doc: nodes.document) -> list[str]:
    return [block.astext() for block in doc.findall(nodes.literal_block)]


def test_directive_lines_are_dropped_and_the_code_kept():
    assert ext.strip_directives("#| export\nclass A:\n    pass\n") == "class A:\n    pass\n"
    assert ext.strip_directives("#| export model\n#| public A B\n\nx = 1") == "x = 1"
    assert ext.strip_directives("x = 1  # a comment, not a directive\n#x") == "x = 1  # a comment, not a directive\n#x"
    assert ext.strip_directives("s = '#| not at the start of a line'") == "s = '#| not at the start of a line'"


def test_the_page_shows_the_code_without_directives():
    doc = _page("#| export\ndef f():\n    return 1", "y = 2")
    assert ext.clean_cell_sources(doc) == 1
    assert _shown(doc) == ["def f():\n    return 1", "y = 2"]
    block = next(iter(doc.findall(nodes.literal_block)))
    assert block.rawsource == block.astext(), "Sphinx highlights rawsource: both must hold the cleaned code"


def test_a_cell_with_only_directives_leaves_no_empty_box():
    doc = _page("#| default_exp model", "z = 3")
    ext.clean_cell_sources(doc)
    assert _shown(doc) == ["z = 3"]
    assert len(list(doc.findall(ext._is_cell))) == 1, "the emptied cell (no output) is removed"
    with_output = _page("#| default_exp model", output=True)
    ext.clean_cell_sources(with_output)
    assert _shown(with_output) == [] and len(list(with_output.findall(ext._is_cell))) == 1


def test_the_set_up_cell_is_left_out_of_the_page():
    setup = bootstrap.render("1.2.3", "https://example.org/book")
    assert setup.startswith(ext.SETUP_FIRST_LINE), "tools/bootstrap.py's template changed its first line"
    doc = _page(setup, "import torch")
    assert ext.drop_setup_cells(doc) == 1
    assert _shown(doc) == ["import torch"]
    assert "_glue_into_page" not in doc.astext()


def test_an_exported_cell_is_labelled_with_its_module():
    doc = _page("#| default_exp model", "#| export\nclass A: ...", "#| export interop\ndef b(): ...", "c = 1")
    ext.clean_cell_sources(doc)
    labels = [p.astext() for p in doc.findall(nodes.paragraph) if "cell-export-label" in p["classes"]]
    assert labels == ["exported to transformer_book.model", "exported to transformer_book.interop"]
    assert _shown(doc) == ["class A: ...", "def b(): ...", "c = 1"]
