"""Every figure a chapter shows stays narrow enough to read on a phone.

The page scales an image down to the screen's width: a 390 px phone shows a 1,100 px figure at a third of its size,
and its 10-point labels at about 5 px. Figures with several panels are therefore drawn in rows, at most
MAX_WIDTH_PX wide (matplotlib's 100 dpi: a figsize of at most 9 inches across; the stacked ones are 6.5-7 inches).
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO_ROOT / "chapters").glob("*.ipynb"))
MAX_WIDTH_PX = 900
HIDDEN = {"remove-output", "remove_output", "remove-cell"}  # outputs the page does not show

# Figures still wider, with their width when the rule came in (2026-11-28). A width may only fall; a figure leaves
# the list once it fits.
STILL_WIDE = {
    # two rows already; the wide x axis carries the sequence length
    ("01_rnn_limits", "d05f3c7e"): 988,
    # one strip of three token rows: narrower, its tokens would not fit their cells
    ("05_masking", "d1f5b8e2"): 990,
    # chapter 10's figures change only when chapter 10 is re-executed, on a GPU
    ("10_training_on_gpu", "8f2df3ea"): 1090,
    ("10_training_on_gpu", "116f6ad7"): 1478,
    ("10_training_on_gpu", "10bca23f"): 1310,
}


def png_width(data: str) -> int:
    """The width in pixels of a base64-encoded PNG, from its IHDR chunk."""
    head = base64.b64decode(data[:64])
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">I", head[16:20])[0]


def shown_png_widths(path: Path) -> dict[str, int]:
    """{cell id: widest PNG it outputs} for the code cells whose outputs the page shows."""
    widths = {}
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code" or HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
            continue
        pngs = [out["data"]["image/png"] for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]
        if pngs:
            widths[cell["id"]] = max(png_width(data) for data in pngs)
    return widths


def test_png_width_reads_the_header():
    one_by_one = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    assert png_width(one_by_one) == 1
    with pytest.raises(AssertionError, match="not a PNG"):
        png_width(base64.b64encode(b"GIF89a" + bytes(40)).decode())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_figures_fit_a_phone(path):
    too_wide = {}
    for cell_id, width in shown_png_widths(path).items():
        allowed = STILL_WIDE.get((path.stem, cell_id), MAX_WIDTH_PX)
        if width > allowed:
            too_wide[cell_id] = width
    assert not too_wide, (
        f"{path.name}: figures wider than {MAX_WIDTH_PX} px (cell id: width) {too_wide}; draw their panels in rows "
        "(plt.subplots(n, 1, figsize=(7, ...))) and re-execute the chapter")


def test_the_figures_still_wide_are_still_wide():
    widths = {(path.stem, cell_id): width for path in NOTEBOOKS for cell_id, width in shown_png_widths(path).items()}
    gone = [key for key in STILL_WIDE if key not in widths]
    assert not gone, f"{gone} show no figure any more: remove them from STILL_WIDE"
    fitting = [key for key in STILL_WIDE if widths[key] <= MAX_WIDTH_PX]
    assert not fitting, f"{fitting} now fit: remove them from STILL_WIDE, so that they stay fitting"
