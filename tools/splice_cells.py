"""Put cells written ahead of a run into the chapter they belong to (chapter 10's exercises wait for a GPU).

Chapter 10's page is a GPU run (CONTRIBUTING.md): cells whose outputs must come from that run cannot land with
outputs made anywhere else, so they wait in a fragment, a notebook of their own, and `tools/remake_chapter10.sh
run` splices them into the chapter just before executing it. Each cell of the fragment says where it goes in its
metadata:

    "splice": {"replace": "d0953566", "was_sha256": "<sha-256 of the source it replaces>"}
    "splice": {"after": "2b639177"}       (inserted after that cell; cells after the same one keep their order)

A replaced cell whose source has changed since the fragment was written stops the splice: the fragment's copy
would undo that change. Splicing twice gives the same notebook as splicing once.

    python tools/splice_cells.py FRAGMENT NOTEBOOK            # splice, in place
    python tools/splice_cells.py FRAGMENT NOTEBOOK --check    # change nothing; exit 1 when it cannot splice
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
from pathlib import Path

from nbval_tags import serialize


def source_of(cell: dict) -> str:
    """A cell's source as one string (nbformat stores it as a string or a list of lines)."""
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(source)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def splice(fragment: dict, notebook: dict) -> dict:
    """The notebook with the fragment's cells in place; raises ValueError naming the cell that cannot go in."""
    result = copy.deepcopy(notebook)
    cells = result["cells"]
    position = {cell.get("id"): i for i, cell in enumerate(cells)}
    for piece in fragment["cells"]:
        piece = copy.deepcopy(piece)
        where = piece["metadata"].pop("splice", None)
        if not where or ("replace" in where) == ("after" in where):
            raise ValueError(f"fragment cell {piece.get('id')}: its metadata needs splice: {{replace: ID}} or "
                             f"{{after: ID}}")
        if "replace" in where:
            target = where["replace"]
            if target not in position:
                raise ValueError(f"the notebook has no cell {target} for the fragment to replace")
            current = source_of(cells[position[target]])
            if current != source_of(piece) and sha256(current) != where.get("was_sha256"):
                raise ValueError(f"cell {target} has changed since the fragment was written: bring the change "
                                 f"into the fragment's copy of it, then set its was_sha256 to {sha256(current)}")
            piece["id"] = target
            cells[position[target]] = piece
            continue
        anchor = where["after"]
        if piece.get("id") in position:  # spliced before: put in its place again
            cells[position[piece["id"]]] = piece
            continue
        if anchor not in position:
            raise ValueError(f"the notebook has no cell {anchor} to put fragment cell {piece.get('id')} after")
        at = position[anchor] + 1
        while at < len(cells) and cells[at].get("metadata", {}).get("spliced_after") == anchor:
            at += 1  # after the cells already put after the same anchor, in the fragment's order
        piece["metadata"]["spliced_after"] = anchor
        cells.insert(at, piece)
        position = {cell.get("id"): i for i, cell in enumerate(cells)}
    for cell in cells:
        cell.get("metadata", {}).pop("spliced_after", None)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fragment", type=Path)
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when it cannot splice")
    args = parser.parse_args()
    fragment = json.loads(args.fragment.read_text(encoding="utf-8"))
    notebook = json.loads(args.notebook.read_text(encoding="utf-8"))
    try:
        spliced = splice(fragment, notebook)
    except ValueError as error:
        print(f"{args.fragment} -> {args.notebook}: {error}", file=sys.stderr)
        return 1
    if not args.check:
        args.notebook.write_text(serialize(spliced), encoding="utf-8")
    print(f"{args.notebook}: {len(fragment['cells'])} cells from {args.fragment}" + (" (checked)" * args.check))
    return 0


if __name__ == "__main__":
    sys.exit(main())
