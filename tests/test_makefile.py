"""`make help` lists the Makefile's targets from their own `## text` comments: every target the pages tell a reader or
a contributor to run is in it, with its text."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PAGES = [REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md", *sorted((REPO_ROOT / "book").glob("*.md"))]


def help_lines() -> dict[str, str]:
    """target -> text, as `make help` prints them."""
    shown = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=REPO_ROOT, capture_output=True,
                           text=True, check=True).stdout
    lines = [re.fullmatch(r"  make (\S+) +(.+)", line) for line in shown.splitlines()]
    assert all(lines), f"`make help` printed a line of another form:\n{shown}"
    return {line[1]: line[2] for line in lines}


def test_help_lists_every_target_the_pages_name():
    named = {name for page in PAGES for name in re.findall(r"`make ([a-z][a-z-]*)", page.read_text(encoding="utf-8"))}
    assert {"book", "test", "setup"} <= named
    missing = named - help_lines().keys()
    assert not missing, f"give these targets a `## what it does` comment on their line in the Makefile: {missing}"


def test_every_target_listed_is_one():
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.MULTILINE))
    listed = help_lines()
    assert listed.keys() <= targets and len(listed) >= 14
