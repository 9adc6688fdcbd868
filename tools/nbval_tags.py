"""Turn nbval's comment markers (`# NBVAL_IGNORE_OUTPUT`, ...) into the cell tags nbval also reads.

Why: a comment marker is part of the code a reader sees on the page, in Jupyter and on Colab; a cell tag
(`nbval-ignore-output`) does the same for nbval and stays out of sight. For each code cell whose source holds
a marker line, the line is removed and the matching tag is added to the cell's `metadata.tags`. Nothing else
in the notebook changes: cell ids, outputs, execution counts and every other line keep their bytes, so a
notebook's stored outputs and the nbdev export are untouched.

    python tools/nbval_tags.py            # rewrite the chapters that still hold a marker (all of chapters/)
    python tools/nbval_tags.py --check    # change nothing; exit 1 and list the cells that hold a marker
    python tools/nbval_tags.py chapters/02_attention.ipynb   # only these notebooks

Idempotent: a second run finds no marker and writes nothing. Run it after merging a branch whose chapters
still use the comments. tests/test_nbval_tags.py fails while any chapter holds one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CHAPTERS_DIR = REPO_ROOT / "chapters"

# nbval's comment markers and the tag it reads for each (nbval.plugin: the marker lower-cased, `_` -> `-`).
MARKER_TAGS = {
    "NBVAL_IGNORE_OUTPUT": "nbval-ignore-output",
    "NBVAL_CHECK_OUTPUT": "nbval-check-output",
    "NBVAL_RAISES_EXCEPTION": "nbval-raises-exception",
    "NBVAL_SKIP": "nbval-skip",
    "PYTEST_VALIDATE_IGNORE_OUTPUT": "nbval-ignore-output",
}


def marker_of(line: str) -> str | None:
    """The nbval marker a source line holds, read as nbval reads it (a comment holding only the marker)."""
    stripped = line.strip()
    if not stripped.startswith("#"):
        return None
    comment = stripped.lstrip("#").strip()
    return comment if comment in MARKER_TAGS else None


def serialize(nb: dict) -> str:
    """A notebook as nbformat writes it (one-space indent, sorted keys, UTF-8 text, final newline)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _lines(source: str | list[str]) -> list[str]:
    return source if isinstance(source, list) else source.splitlines(keepends=True)


def convert_cell(cell: dict) -> list[str]:
    """Move the cell's marker lines into its tags, in place; return the markers moved (empty: unchanged)."""
    if cell.get("cell_type") != "code":
        return []
    lines = _lines(cell.get("source", ""))
    markers = [marker_of(line) for line in lines]
    if not any(markers):
        return []
    kept = [line for line, marker in zip(lines, markers, strict=True) if marker is None]
    # The last line of a cell has no newline: when a marker was the last line, the new last line loses its own.
    if kept and marker_of(lines[-1]) is not None:
        kept[-1] = kept[-1].removesuffix("\n")
    cell["source"] = kept if isinstance(cell["source"], list) else "".join(kept)
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    for marker in markers:
        if marker is not None and MARKER_TAGS[marker] not in tags:
            tags.append(MARKER_TAGS[marker])
    return [marker for marker in markers if marker is not None]


def convert_text(text: str, name: str = "notebook") -> tuple[str, list[str]]:
    """The notebook text with every marker moved into tags, and a line per cell changed.

    Refuses (ValueError) a notebook that this module would not write back byte for byte, so that it never
    rewrites bytes it did not mean to change.
    """
    nb = json.loads(text)
    if serialize(nb) != text:
        raise ValueError(
            f"{name}: not in nbformat's own layout (one-space indent, sorted keys), so rewriting it would change "
            "more than the marker lines; save it with nbformat (or Jupyter) first"
        )
    changes = []
    for index, cell in enumerate(nb.get("cells", [])):
        moved = convert_cell(cell)
        if moved:
            changes.append(f"{name}: cell {index} (id {cell.get('id', '?')}): {', '.join(moved)} -> tags "
                           f"{cell['metadata']['tags']}")
    return (serialize(nb) if changes else text), changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every chapters/*.ipynb")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a cell holds a marker")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(CHAPTERS_DIR.glob("*.ipynb"))
    all_changes = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        new_text, changes = convert_text(text, path.name)
        all_changes += changes
        if changes and not args.check:
            path.write_text(new_text, encoding="utf-8")
    for line in all_changes:
        print(("marker left in " if args.check else "moved: ") + line)
    if args.check and all_changes:
        print(f"{len(all_changes)} cell(s) hold an nbval comment marker: run `python tools/nbval_tags.py`")
        return 1
    if not args.check:
        print(f"nbval_tags: {len(all_changes)} cell(s) changed in {len(paths)} notebook(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
