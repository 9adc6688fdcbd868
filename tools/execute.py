"""Re-run chapter notebooks in place, refreshing their stored outputs (`make execute`).

Usage: python tools/execute.py chapters/01_rnn_limits.ipynb [more notebooks...]

Each notebook runs top to bottom in a fresh kernel whose working directory is the notebook's folder
(as in Jupyter, nbval and Colab). Cell ids and tags are kept, so the export stays byte-stable.
TRANSFORMER_BOOK_PRESET, when set in the environment, reaches the kernel unchanged.

The run itself is nbclient's. `jupyter execute --inplace` (nbclient's command line) runs a notebook the same way
but does not do the rest: it cannot empty nbclient's widget registry (a plain attribute, not an option), and it
keeps tqdm's progress bars and the saved state of widgets that no output shows.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

# Chapter 10 trains for a long time with the cpu preset; a cell may legitimately run for hours.
CELL_TIMEOUT_S = 6 * 60 * 60
KERNEL_NAME = "python3"


def drop_progress_bars(nb: nbformat.NotebookNode) -> int:
    """Remove tqdm's progress-bar widgets from the outputs; return how many were removed.

    A stored notebook keeps no widget state, so the HTML page could show such a bar only as its first frame
    ("0%"); the lines a run prints after each epoch stay. In Jupyter and Colab the bars are live as usual.
    """
    removed = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = "".join(data.get("text/plain", ""))
            if "application/vnd.jupyter.widget-view+json" in data and re.search(r"\d+%\|.*\| \d+/\d+", text):
                removed += 1
            else:
                kept.append(output)
        cell.outputs = kept
    return removed


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def drop_unused_widget_state(nb: nbformat.NotebookNode) -> int:
    """Remove the saved state of the widgets that no output shows; return how many widget models were removed.

    Jupyter saves every widget's state in the notebook's metadata, the progress bars' too (eleven models a bar),
    and the book's pages embed it whole: chapter 10's thirty epochs left 266 kB of it on a page that shows no bar.
    A shown widget keeps its model and every model that model names (its layout, its style, its children).
    """
    saved = nb.metadata.get("widgets", {}).get(WIDGET_STATE)
    if not saved:
        return 0
    models = saved.get("state", {})
    todo = [output["data"][WIDGET_VIEW]["model_id"] for cell in nb.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) if WIDGET_VIEW in output.get("data", {})]
    kept: set[str] = set()
    while todo:
        model_id = todo.pop()
        if model_id in kept or model_id not in models:
            continue
        kept.add(model_id)
        todo += re.findall(r"IPY_MODEL_(\w+)", json.dumps(models[model_id].get("state", {})))
    removed = len(models) - len(kept)
    saved["state"] = {model_id: model for model_id, model in models.items() if model_id in kept}
    if not saved["state"]:
        del nb.metadata["widgets"]
    return removed


def execute(path: Path) -> float:
    """Execute the notebook at `path` in place; return the wall time in seconds."""
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    # Without a registry nbclient tries to render ipywidgets' state and can hang (jupyter/nbclient#312);
    # the widgets' state is not needed, the book shows a static figure next to each widget.
    client.widget_registry = {}
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    drop_progress_bars(nb)
    drop_unused_widget_state(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for path in args.notebooks:
        if not path.is_file():
            print(f"execute: no such notebook: {path}", file=sys.stderr)
            return 2
        print(f"execute: {path} ...", flush=True)
        try:
            elapsed = execute(path)
        except CellExecutionError as err:
            print(f"execute: {path} failed; the notebook was not rewritten.\n{err}", file=sys.stderr)
            return 1
        print(f"execute: {path} done in {elapsed:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
