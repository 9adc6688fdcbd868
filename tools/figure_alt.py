"""Write the alt text of every figure a chapter's code cell draws into the cell's metadata, from tools/figure_alt.yml.

myst-nb gives an output image the alt text of its cell's `metadata.mystnb.image.alt`; without it the page's <img>
carries the image's file path. The texts live in tools/figure_alt.yml, by notebook and cell id, so that they can
be written again after a merge that brought a notebook from another branch (the cells keep their ids).

    python tools/figure_alt.py           # write the alt texts that differ (all of chapters/)
    python tools/figure_alt.py --check   # change nothing; exit 1 when a notebook differs from the file

Only the metadata changes: cell ids, sources and outputs keep their bytes (`serialize` writes the notebook as nbformat does).
A cell id that the notebook no longer has is reported, and makes --check fail. tests/test_alt_text.py checks that
every figure has alt text.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
CHAPTERS_DIR = REPO_ROOT / "chapters"
ALT_FILE = Path(__file__).with_name("figure_alt.yml")


def serialize(nb: dict) -> str:
    """A notebook as nbformat writes it (one-space indent, sorted keys, UTF-8 text, final newline)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def apply(text: str, alts: dict[str, str], name: str = "notebook") -> tuple[str, list[str], list[str]]:
    """(new text, cells changed, cell ids not found) for a notebook's text and its {cell id: alt} table."""
    nb = json.loads(text)
    if serialize(nb) != text:
        raise ValueError(f"{name}: not in nbformat's own layout; save it with nbformat (or Jupyter) first")
    cells = {cell.get("id"): cell for cell in nb["cells"]}
    changed, missing = [], []
    for cell_id, alt in alts.items():
        cell = cells.get(cell_id)
        if cell is None or cell["cell_type"] != "code":
            missing.append(f"{name}: no code cell with id {cell_id}")
            continue
        image = cell.setdefault("metadata", {}).setdefault("mystnb", {}).setdefault("image", {})
        if image.get("alt") != alt:
            image["alt"] = alt
            changed.append(f"{name}: cell {cell_id}")
    return (serialize(nb) if changed else text), changed, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a notebook differs")
    args = parser.parse_args(argv)
    table = yaml.safe_load(ALT_FILE.read_text(encoding="utf-8"))
    all_changed, all_missing = [], []
    for name, alts in table.items():
        path = CHAPTERS_DIR / name
        if not path.is_file():
            all_missing.append(f"{name}: no such chapter")
            continue
        text = path.read_text(encoding="utf-8")
        new_text, changed, missing = apply(text, alts, name)
        all_changed += changed
        all_missing += missing
        if changed and not args.check:
            path.write_text(new_text, encoding="utf-8")
    for line in all_missing:
        print(f"figure_alt: {line} (update {ALT_FILE.name})")
    for line in all_changed:
        print(("differs: " if args.check else "written: ") + line)
    if args.check:
        return 1 if all_changed or all_missing else 0
    print(f"figure_alt: {len(all_changed)} cell(s) written")
    return 1 if all_missing else 0


if __name__ == "__main__":
    sys.exit(main())
