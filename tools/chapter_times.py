"""Write how long each chapter takes to read and to run, from the notebooks themselves (`make times`).

Nothing here is typed by hand:
- reading time: the words of a chapter's text cells (code and outputs not counted) at READING_PACE words a
  minute, rounded to 5 minutes;
- run time on a CPU: the time each code cell took in the chapter's last run, as Jupyter stored it in the cell's
  metadata (`execution`: from `iopub.execute_input` to `shell.execute_reply`), summed over the cells. The book's
  notebooks are run by `make execute` on a 2-core CPU;
- a chapter whose notebook asks Colab for a GPU (tools/bootstrap.py's GPU_CHAPTERS) was stored from a GPU run, so
  its CPU time is that of the `cpu` preset's run recorded in chapters/records/ (`wall_minutes`), and its GPU time
  the stored cells' total.

The same table is written into two places: book/generated/chapter_times.md, which the landing page
(book/intro.md) includes, and README.md between the CHAPTER-TIMES markers.

    python tools/chapter_times.py          # rewrite both when they differ
    python tools/chapter_times.py --check  # change nothing; exit 1 when either is stale

tests/test_chapter_times.py fails when the files differ from what this tool computes now.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from datetime import datetime
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bootstrap  # noqa: E402  (tools/bootstrap.py: which chapters ask for a GPU)
import colab  # noqa: E402  (tools/colab.py: the chapters in the table of contents' order)

REPO_ROOT = Path(__file__).resolve().parents[1]
INCLUDED = Path("book") / "generated" / "chapter_times.md"
README = Path("README.md")
START, END = "<!-- CHAPTER-TIMES: written by tools/chapter_times.py -->", "<!-- /CHAPTER-TIMES -->"
# Words a minute for technical text read with care (slower than the 200 to 250 of plain prose).
READING_PACE = 150


def reading_minutes(nb: nbformat.NotebookNode) -> int:
    """The time to read the chapter's text, rounded to 5 minutes (at least 5)."""
    words = sum(len(cell.source.split()) for cell in nb.cells if cell.cell_type == "markdown")
    return max(5, 5 * round(words / READING_PACE / 5))


def _moment(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def stored_run_seconds(nb: nbformat.NotebookNode) -> float:
    """The seconds the code cells took in the chapter's last run (from the metadata Jupyter stores)."""
    total, timed, code = 0.0, 0, 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        code += 1
        execution = cell.metadata.get("execution", {})
        if "iopub.execute_input" in execution and "shell.execute_reply" in execution:
            total += (_moment(execution["shell.execute_reply"]) - _moment(execution["iopub.execute_input"])).total_seconds()
            timed += 1
    if timed < code:
        raise SystemExit(f"chapter_times: {code - timed} of {code} code cells have no stored run time; "
                         "run `make execute NB=...` for that chapter")
    return total


def as_minutes(seconds: float) -> str:
    return "under 1 min" if seconds < 60 else f"{math.ceil(seconds / 60)} min"


def cpu_record(repo_root: Path) -> dict:
    """The run record of the `cpu` preset on a CPU (chapters/records/)."""
    records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((repo_root / "chapters" / "records").glob("*.json"))]
    cpu = [r for r in records if r.get("preset") == "cpu" and r.get("device_type") == "cpu"]
    if len(cpu) != 1:
        raise SystemExit(f"chapter_times: chapters/records/ should hold one run of the cpu preset on a CPU, not {len(cpu)}")
    return cpu[0]


def title(nb: nbformat.NotebookNode, path: Path) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown" and (match := re.search(r"^# (.+)$", cell.source, re.MULTILINE)):
            return match.group(1).strip()
    raise SystemExit(f"chapter_times: {path.name} has no '# title' line")


def rows(repo_root: Path = REPO_ROOT) -> list[tuple[str, str, str, str]]:
    """(chapter, reading, run on a 2-core CPU, GPU) for every chapter of the table of contents."""
    table = []
    for path in colab.chapter_paths(repo_root):
        nb = nbformat.read(path, as_version=4)
        name = title(nb, path)
        if not name.startswith(("Chapter", "Appendix")):  # a companion page: 10a
            name = f"Chapter {path.stem.split('_')[0].lstrip('0')}: {name}"
        seconds = stored_run_seconds(nb)
        if path.name in bootstrap.GPU_CHAPTERS:
            record = cpu_record(repo_root)
            cpu = f"about {math.ceil(record['wall_minutes'] / 5) * 5} min (`cpu` preset)"
            gpu = f"wants one ({as_minutes(seconds)})"
        else:
            cpu, gpu = as_minutes(seconds), "not needed"
        table.append((name, f"{reading_minutes(nb)} min", cpu, gpu))
    return table


def markdown_table(repo_root: Path = REPO_ROOT) -> str:
    lines = ["| Chapter | Reading | Run on a 2-core CPU | GPU |", "| --- | ---: | ---: | --- |"]
    lines += [f"| {' | '.join(row)} |" for row in rows(repo_root)]
    return "\n".join(lines) + "\n"


def included_page(repo_root: Path = REPO_ROOT) -> str:
    return ("<!-- Written by tools/chapter_times.py (`make times`) from the notebooks; do not edit by hand. -->\n\n"
            + markdown_table(repo_root))


def readme_with_table(readme: str, repo_root: Path = REPO_ROOT) -> str:
    if START not in readme or END not in readme:
        raise SystemExit(f"chapter_times: README.md lacks the markers {START} ... {END}")
    before, rest = readme.split(START, 1)
    _, after = rest.split(END, 1)
    return f"{before}{START}\n{markdown_table(repo_root)}{END}{after}"


def expected_files(repo_root: Path = REPO_ROOT) -> dict[Path, str]:
    readme = (repo_root / README).read_text(encoding="utf-8")
    return {INCLUDED: included_page(repo_root), README: readme_with_table(readme, repo_root)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a file is stale")
    args = parser.parse_args(argv)
    stale = []
    for relative, text in expected_files().items():
        path = REPO_ROOT / relative
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(relative)
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                print(f"chapter_times: wrote {relative}")
    if args.check and stale:
        print(f"chapter_times: stale: {', '.join(map(str, stale))}; run `make times`", file=sys.stderr)
        return 1
    if not stale:
        print("chapter_times: the chapter times are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
