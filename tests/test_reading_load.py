"""The reading rule: a chapter's page shows the idea's code and the calls that run its experiments; the rest folds.

A reader sees every line of a code cell that is not tagged hide-input, hide-cell, remove-input or remove-cell (blank
lines included; the folded cells still run under nbval). CONTRIBUTING.md ("The reading rule") says what folds.
This test counts those lines per chapter and fails above the cap.

Chapter 10a, the engineering of the run, has a lower cap: its lesson is short and its machinery folds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CAP = 550  # visible code lines per chapter
CAPS = {"10a_engineering_the_run": 300}  # chapters held to a lower cap
FOLDED = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
CHAPTERS = [
    "01_rnn_limits",
    "02_attention",
    "03_multi_head_attention",
    "04_positional_encoding",
    "05_masking",
    "06_the_transformer",
    "07_label_smoothing_and_training",
    "08_decoding",
    "09_translation_data",
    "10_training_on_gpu",
    "10a_engineering_the_run",
    "11_one_stack",
    "12_long_sequences",
    "13_check_your_code",
]


def visible_code_lines(path: Path) -> list[tuple[str, int]]:
    """(cell id, lines) of every code cell the page shows with its code, in order."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    shown = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or FOLDED & set(cell.get("metadata", {}).get("tags", [])):
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        shown.append((cell.get("id", "?"), len(source.splitlines())))
    return shown


def test_counts_blank_lines_and_skips_folded_cells(tmp_path):
    nb = {"cells": [
        {"cell_type": "code", "id": "a", "metadata": {}, "source": ["x = 1\n", "\n", "y = 2"]},
        {"cell_type": "code", "id": "b", "metadata": {"tags": ["hide-input"]}, "source": "assert x == 1"},
        {"cell_type": "code", "id": "c", "metadata": {"tags": ["remove-cell"]}, "source": "print(y)"},
        {"cell_type": "markdown", "id": "d", "metadata": {}, "source": "Some prose\nover two lines"},
        {"cell_type": "code", "id": "e", "metadata": {"tags": ["nbval-ignore-output"]}, "source": "z = 3\n"},
    ]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert visible_code_lines(path) == [("a", 3), ("e", 1)]


@pytest.mark.parametrize("name", CHAPTERS)
def test_visible_code_fits_the_cap(name):
    shown = visible_code_lines(REPO_ROOT / "chapters" / f"{name}.ipynb")
    total = sum(n for _, n in shown)
    cap = CAPS.get(name, CAP)
    largest = ", ".join(f"{cell_id} ({n})" for cell_id, n in sorted(shown, key=lambda s: -s[1])[:5])
    assert total <= cap, (
        f"{name}: {total} visible code lines, more than {cap}. Fold what is not the idea (CONTRIBUTING.md, "
        f"'The reading rule'): tag the cell hide-input, or move checks into a folded helper cell. "
        f"Largest visible cells: {largest}"
    )
