"""One version everywhere: every place that names the book's version agrees with pyproject.toml's [project].version,
and `make bump` (bump-my-version, configured in pyproject.toml's [tool.bumpversion]) reaches every such place.

The places are found by what names the version (the patterns below), not read from bump-my-version's list, so a
place the list forgets fails the second test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
BUMP = Path(sys.executable).with_name("bump-my-version")
# What names the book's version: the package's __version__, a chapter's first cell (as its JSON holds it), the
# install command, the git tag of a release. `<V>` stands for the version.
NAMES_VERSION = [r'__version__ = "(<V>)"', r'BOOK_VERSION = \\"(<V>)\\"', r"transformer-book==(<V>)",
                 r"transformer-book\[pretrained\]==(<V>)",
                 r"transformer-book@v(<V>)", r"tag `v(<V>)`"]
VERSION = r"\d+\.\d+\.\d+[\w.]*"
FOUND = re.compile("|".join(pattern.replace("<V>", VERSION) for pattern in NAMES_VERSION))
# Every file that must name the version at least once.
MUST_NAME_IT = ["src/transformer_book/__init__.py", "README.md", "book/setup.md",
                *(f"chapters/{path.name}" for path in sorted((REPO_ROOT / "chapters").glob("*.ipynb")))]


def text_files(root: Path) -> list[Path]:
    """The files a version could be written in: the package's __init__, the chapters, the pages in Markdown."""
    files = [root / "src/transformer_book/__init__.py", *root.glob("*.md"), *root.glob("book/**/*.md"),
             *root.glob("chapters/*.ipynb")]
    return sorted(path for path in files if path.is_file())


def versions_named(root: Path) -> dict[str, list[str]]:
    """file (relative to root) -> every version it names, in order."""
    named = {}
    for path in text_files(root):
        found = [next(group for group in match.groups() if group) for match in FOUND.finditer(path.read_text())]
        if found:
            named[path.relative_to(root).as_posix()] = found
    return named


def pyproject(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_place_names_the_version_of_pyproject():
    config = pyproject(REPO_ROOT)
    version = config["project"]["version"]
    assert config["tool"]["bumpversion"]["current_version"] == version, "[tool.bumpversion] current_version differs"
    named = versions_named(REPO_ROOT)
    assert not [place for place in MUST_NAME_IT if place not in named], f"no version found in some places: {named}"
    wrong = {place: found for place, found in named.items() if set(found) != {version}}
    assert not wrong, (f"pyproject.toml says {version}; these differ (write {version} there: `make bump` replaces only the "
                       f"current version): {wrong}")


def test_each_way_of_naming_the_version_is_found():
    assert FOUND.search('  "BOOK_VERSION = \\"9.9.9\\"\\n",')
    assert [m.group(0) for m in FOUND.finditer("pip install transformer-book==1.0.0rc1; git tag `v1.0.0` ...")] == [
        "transformer-book==1.0.0rc1", "tag `v1.0.0`"]


@pytest.fixture
def copy_of_the_repository(tmp_path: Path) -> Path:
    """The files bump-my-version reads and writes, copied into a folder of their own (no git repository)."""
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path)
    for path in text_files(REPO_ROOT):
        target = tmp_path / path.relative_to(REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return tmp_path


def test_make_bump_writes_every_place_and_nothing_else(copy_of_the_repository):
    root = copy_of_the_repository
    old = pyproject(REPO_ROOT)["project"]["version"]
    before = {path: path.read_text() for path in [root / "pyproject.toml", *text_files(root)]}
    bumped = subprocess.run([str(BUMP), "bump", "--new-version", "9.8.7rc6"], cwd=root, capture_output=True,
                            text=True)
    assert bumped.returncode == 0, bumped.stdout + bumped.stderr
    assert pyproject(root)["project"]["version"] == "9.8.7rc6"
    named = versions_named(root)
    assert named.keys() == versions_named(REPO_ROOT).keys()
    missed = {place: found for place, found in named.items() if set(found) != {"9.8.7rc6"}}
    assert not missed, f"`make bump` (pyproject.toml's [tool.bumpversion]) leaves these out: {missed}"
    # Only the version changed: the rest of each file, a notebook's JSON included, keeps its bytes.
    changed = [path for path, text in before.items() if path.read_text().replace("9.8.7rc6", old) != text]
    assert not changed, f"bump-my-version changed more than the version in {changed}"


def test_make_bump_refuses_what_is_not_a_version(copy_of_the_repository):
    root = copy_of_the_repository
    before = (root / "pyproject.toml").read_text()
    refused = subprocess.run([str(BUMP), "bump", "--new-version", "latest"], cwd=root, capture_output=True, text=True)
    assert refused.returncode != 0
    assert (root / "pyproject.toml").read_text() == before
