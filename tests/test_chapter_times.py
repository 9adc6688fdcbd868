"""The reading and run times on the landing page and in the README are computed from the notebooks.

tools/chapter_times.py writes them (`make times`) from each chapter's word count and the execution times Jupyter
stored in its cells; this test computes them again and fails when a file holds anything else: a number typed by
hand, or one left stale by a re-run chapter.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import chapter_times  # noqa: E402  (tools/chapter_times.py)


@pytest.mark.parametrize("relative", [chapter_times.INCLUDED, chapter_times.README], ids=str)
def test_the_times_written_are_those_the_notebooks_give(relative):
    expected = chapter_times.expected_files()[relative]
    assert (REPO_ROOT / relative).read_text(encoding="utf-8") == expected, \
        f"{relative}: the chapter times differ from the notebooks'; run `make times` (tools/chapter_times.py)"


def test_the_landing_page_includes_the_table_and_lists_every_chapter():
    intro = (REPO_ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert "```{include} generated/chapter_times.md" in intro
    table = (REPO_ROOT / chapter_times.INCLUDED).read_text(encoding="utf-8")
    rows = [line for line in table.splitlines() if line.startswith("| Chapter ") or line.startswith("| Appendix")]
    assert len(rows) - 1 == len(chapter_times.colab.chapter_paths()) >= 14  # the head row starts "| Chapter |"


def _timed_notebook(seconds: list[float], words: int) -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_markdown_cell("# Chapter 0: A test\n\n" + " ".join(["word"] * words))]
    for i, s in enumerate(seconds):
        cell = nbformat.v4.new_code_cell("pass")
        start = f"2026-01-01T00:00:{i:02d}.000000Z"
        end_s = i + s
        cell.metadata["execution"] = {"iopub.execute_input": start,
                                      "shell.execute_reply": f"2026-01-01T00:{int(end_s // 60):02d}:"
                                                             f"{end_s % 60:09.6f}Z"}
        cells.append(cell)
    return nbformat.v4.new_notebook(cells=cells)


def test_run_time_is_the_sum_of_the_stored_cell_times():
    nb = _timed_notebook([1.5, 30.0, 100.25], words=10)
    assert chapter_times.stored_run_seconds(nb) == pytest.approx(131.75)
    assert chapter_times.as_minutes(131.75) == "3 min" and chapter_times.as_minutes(59) == "under 1 min"


def test_reading_time_follows_the_word_count():
    assert chapter_times.reading_minutes(_timed_notebook([], words=4 * chapter_times.READING_PACE)) == 5
    assert chapter_times.reading_minutes(_timed_notebook([], words=40 * chapter_times.READING_PACE)) == 40


def test_a_chapter_without_stored_times_stops_the_tool():
    nb = _timed_notebook([1.0], words=10)
    nb.cells.append(nbformat.v4.new_code_cell("pass"))  # never run
    with pytest.raises(SystemExit, match="1 of 2 code cells have no stored run time"):
        chapter_times.stored_run_seconds(nb)
