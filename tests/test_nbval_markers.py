"""nbval's markers are cell tags (`nbval-ignore-output`), never comment lines a reader would see in the code.

nbval reads both; a `# NBVAL_IGNORE_OUTPUT` comment would show in Jupyter, on Colab, and in a cell the page hides
the input of. The markers are found with nbval's own reader of them, so a marker nbval adds is found too.
"""

from pathlib import Path

import nbformat
import pytest
from nbval.plugin import find_comment_markers

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "chapters").glob("*.ipynb"))


def comment_markers(nb: nbformat.NotebookNode) -> list[str]:
    """'cell <id>: <markers>' for every code cell whose source holds an nbval comment marker."""
    return [f"cell {cell.get('id', index)}: {dict(find_comment_markers(cell.source))}"
            for index, cell in enumerate(nb.cells)
            if cell.cell_type == "code" and dict(find_comment_markers(cell.source))]


def test_a_comment_marker_is_found():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint(x)"),
                                         nbformat.v4.new_markdown_cell("# NBVAL_SKIP")])
    assert len(comment_markers(nb)) == 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[nb.name for nb in NOTEBOOKS])
def test_no_chapter_holds_an_nbval_comment_marker(path):
    found = comment_markers(nbformat.read(path, as_version=nbformat.NO_CONVERT))
    assert not found, (f"{path.name}: " + "; ".join(found) + ". Delete the comment line and give the cell the tag "
                       "nbval reads instead (`nbval-ignore-output`, `nbval-skip`, `nbval-raises-exception`).")
