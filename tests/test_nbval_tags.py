"""nbval's markers are cell tags, not comments a reader sees (tools/nbval_tags.py moves them).

The first test fails while any chapter still holds a `# NBVAL_...` comment; the others check that the script
changes only the marker line and the tags, that a second run changes nothing, and that each tag it writes is
one nbval itself reads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from nbval.plugin import comment_markers, find_metadata_tags

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import nbval_tags  # noqa: E402  (tools/nbval_tags.py)

NOTEBOOKS = sorted((REPO_ROOT / "chapters").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[nb.name for nb in NOTEBOOKS])
def test_no_chapter_holds_an_nbval_comment(path):
    _, changes = nbval_tags.convert_text(path.read_text(encoding="utf-8"), path.name)
    assert not changes, "\n".join(changes) + "\nRun `python tools/nbval_tags.py` to move them into cell tags."


def _notebook(*sources: str) -> str:
    cells = []
    for i, source in enumerate(sources):
        cells.append({
            "cell_type": "code", "execution_count": i + 1, "id": f"cell{i}",
            "metadata": {"execution": {"shell.execute_reply": "2026-01-01T00:00:00Z"}},
            "outputs": [{"name": "stdout", "output_type": "stream", "text": [f"out {i} é\n"]}],
            "source": source.splitlines(keepends=True),
        })
    cells.append({"cell_type": "markdown", "id": "prose", "metadata": {},
                  "source": ["Cells marked `# NBVAL_IGNORE_OUTPUT` ...\n", "# NBVAL_SKIP\n"]})
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return nbval_tags.serialize(nb)


def test_the_marker_line_becomes_a_tag_and_nothing_else_changes():
    text = _notebook("# NBVAL_IGNORE_OUTPUT\nx = 1\nprint(x)", "y = 2  # NBVAL_IGNORE_OUTPUT is not a marker here")
    new_text, changes = nbval_tags.convert_text(text)
    assert len(changes) == 1, changes
    before, after = json.loads(text), json.loads(new_text)
    assert after["cells"][0]["source"] == ["x = 1\n", "print(x)"]
    assert after["cells"][0]["metadata"]["tags"] == ["nbval-ignore-output"]
    # Everything else is as it was: ids, outputs, counts, other metadata, other cells, markdown prose.
    after["cells"][0]["source"] = before["cells"][0]["source"]
    del after["cells"][0]["metadata"]["tags"]
    assert after == before


def test_a_marker_on_the_last_line_leaves_no_trailing_newline_and_tags_are_kept():
    text = _notebook("x = 1\n# NBVAL_SKIP")
    nb = json.loads(text)
    nb["cells"][0]["metadata"]["tags"] = ["hide-input"]
    new_text, _ = nbval_tags.convert_text(nbval_tags.serialize(nb))
    cell = json.loads(new_text)["cells"][0]
    assert cell["source"] == ["x = 1"]
    assert cell["metadata"]["tags"] == ["hide-input", "nbval-skip"]


def test_a_second_run_changes_nothing():
    once, changes = nbval_tags.convert_text(_notebook("# NBVAL_IGNORE_OUTPUT\nx = 1", "#NBVAL_SKIP\ny = 2"))
    assert len(changes) == 2
    twice, changes = nbval_tags.convert_text(once)
    assert twice == once and changes == []


def test_a_notebook_not_in_nbformat_layout_is_refused():
    text = json.dumps(json.loads(_notebook("# NBVAL_IGNORE_OUTPUT\nx = 1")), indent=2)
    with pytest.raises(ValueError, match="layout"):
        nbval_tags.convert_text(text)


@pytest.mark.parametrize("marker", sorted(nbval_tags.MARKER_TAGS))
def test_every_tag_written_is_read_by_nbval_as_its_marker(marker):
    from_comment = dict([comment_markers[marker] if isinstance(comment_markers[marker], tuple)
                         else (comment_markers[marker], True)])
    from_tag = dict(find_metadata_tags({"tags": [nbval_tags.MARKER_TAGS[marker]]}))
    assert from_tag == from_comment, f"nbval reads tag {nbval_tags.MARKER_TAGS[marker]!r} as {from_tag}"


def test_the_check_option_fails_on_a_marker_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "nb.ipynb"
    path.write_text(_notebook("# NBVAL_IGNORE_OUTPUT\nx = 1"), encoding="utf-8")
    before = path.read_bytes()
    assert nbval_tags.main(["--check", str(path)]) == 1
    assert path.read_bytes() == before
    assert nbval_tags.main([str(path)]) == 0
    assert nbval_tags.main(["--check", str(path)]) == 0
