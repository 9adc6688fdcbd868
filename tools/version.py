"""The book's version, held in several places and kept equal (`make bump`, and the release workflow).

    python tools/version.py check              # every place holds pyproject.toml's version, or exit 1
    python tools/version.py check --tag v0.2.0 # ... and the release tag names that version
    python tools/version.py bump 0.2.0         # write 0.2.0 everywhere in one step

The places: pyproject.toml (the source), the package's `__version__` (written by tools/export.py), the pin in
every chapter's first cell (written by tools/bootstrap.py), and the install commands in book/setup.md and
README.md (`transformer-book==x.y.z`). tests/test_bootstrap.py runs `check`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[1]
# Pages that show the pinned install command.
PAGES = [Path("book/setup.md"), Path("README.md")]
PIN = re.compile(r"transformer-book==(\d+\.\d+\.\d+[\w.]*)")
VERSION_FORMAT = re.compile(r"^\d+\.\d+\.\d+([ab]\d+|rc\d+|\.post\d+|\.dev\d+)?$")
PYPROJECT_VERSION = re.compile(r'^(\[project\][^\[]*?^version\s*=\s*")([^"]+)(")', re.MULTILINE | re.DOTALL)


def pyproject_version(root: Path = REPO_ROOT) -> str:
    """The `version` of pyproject.toml's [project] table."""
    match = PYPROJECT_VERSION.search((root / "pyproject.toml").read_text(encoding="utf-8"))
    if match is None:
        raise SystemExit("version: no version in the [project] table of pyproject.toml")
    return match.group(2)


def versions_found(root: Path = REPO_ROOT) -> dict[str, set[str]]:
    """Every place that holds the version, with the versions it holds there."""
    found: dict[str, set[str]] = {"pyproject.toml": {pyproject_version(root)}}
    init = (root / "src/transformer_book/__init__.py").read_text(encoding="utf-8")
    found["src/transformer_book/__init__.py"] = set(re.findall(r'^__version__ = "([^"]+)"', init, re.MULTILINE))
    for path in sorted((root / "chapters").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
        first = next((cell for cell in nb.cells if cell.cell_type == "code"), None)
        source = first.source if first is not None else ""
        found[f"chapters/{path.name} (first cell)"] = set(re.findall(r'^BOOK_VERSION = "([^"]+)"', source, re.MULTILINE))
    for page in PAGES:
        found[page.as_posix()] = set(PIN.findall((root / page).read_text(encoding="utf-8")))
    return found


def mismatches(expected: str, root: Path = REPO_ROOT) -> list[str]:
    """The places whose version is not `expected` (or that hold none)."""
    return [
        f"{place}: {', '.join(sorted(held)) or 'no version found'}"
        for place, held in versions_found(root).items()
        if held != {expected}
    ]


def bump(new: str, root: Path = REPO_ROOT) -> None:
    """Write `new` into every place that holds the version, then regenerate the package and the cells."""
    if not VERSION_FORMAT.match(new):
        raise SystemExit(f"version: {new!r} is not a version like 1.2.3 (or 1.2.3rc1, 1.2.3.post1)")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(PYPROJECT_VERSION.sub(rf"\g<1>{new}\g<3>", pyproject.read_text(encoding="utf-8"), count=1),
                         encoding="utf-8")
    for page in PAGES:
        text = (root / page).read_text(encoding="utf-8")
        (root / page).write_text(PIN.sub(f"transformer-book=={new}", text), encoding="utf-8")
    for tool in ("export.py", "bootstrap.py"):
        subprocess.run([sys.executable, str(root / "tools" / tool)], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="every place holds pyproject.toml's version")
    check.add_argument("--tag", help="a release tag (vX.Y.Z) that must name the same version")
    commands.add_parser("bump", help="write a new version everywhere").add_argument("version")
    args = parser.parse_args(argv)
    if args.command == "bump":
        bump(args.version)
        print(f"version: now {args.version} everywhere; commit, then tag v{args.version} (CONTRIBUTING.md: Releasing)")
        return 0
    expected = pyproject_version()
    problems = mismatches(expected)
    if args.tag is not None and args.tag != f"v{expected}":
        problems.insert(0, f"the tag {args.tag} does not name pyproject.toml's version {expected} (expected v{expected})")
    for problem in problems:
        print(f"version: {problem}", file=sys.stderr)
    if problems:
        print(f"version: run `make bump VERSION={expected}` to write one version everywhere", file=sys.stderr)
        return 1
    print(f"version: {expected} everywhere" + (f", and the tag {args.tag} matches" if args.tag else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
