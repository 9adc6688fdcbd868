"""README.md speaks to a reader first: where the book is online, a Colab badge, a quick start.

The addresses come from _config.yml (the published book's `html.baseurl`, the repository and branch the Colab
buttons open), so a move of the book or the repository cannot leave the README pointing at the old place.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
CONFIG = yaml.safe_load((REPO_ROOT / "_config.yml").read_text(encoding="utf-8"))


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def test_readme_links_the_online_book_before_anything_else():
    url = CONFIG["html"]["baseurl"]
    assert url.startswith("https://"), f"_config.yml html.baseurl is {url!r}"
    assert url in README, f"README.md does not link the online book {url}"
    assert README.index(url) < README.index("\n## "), "the online book's link comes after the first section"


def test_the_colab_badge_opens_a_chapter_of_this_repository():
    repo = CONFIG["repository"]
    owner_repo = repo["url"].removeprefix("https://github.com/").strip("/")
    badges = re.findall(r"\[!\[Open In Colab\]\([^)]*\)\]\(([^)]+)\)", README)
    assert badges, "README.md has no 'Open In Colab' badge"
    prefix = f"{CONFIG['launch_buttons']['colab_url']}/github/{owner_repo}/blob/{repo['branch']}/"
    for link in badges:
        assert link.startswith(prefix), f"the Colab badge opens {link}, not a notebook under {prefix}"
        assert (REPO_ROOT / link.removeprefix(prefix)).is_file(), f"the Colab badge opens a missing notebook: {link}"


def test_quick_start_comes_first_and_says_what_it_needs():
    quick = _section("Quick start")
    assert README.index("## Quick start") == README.index("\n## ") + 1, "Quick start is not the first section"
    assert "make setup" in quick and "git clone" in quick
    assert re.search(r"\d(\.\d)? GB", README[README.index("## Quick start"):README.index("## Build and test")]), \
        "the quick start does not say how much disk the set-up takes"


def test_maintainer_detail_lives_in_contributing():
    contributing = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for title in ("How the repository works", "Releasing"):
        assert f"## {title}" in contributing, f"CONTRIBUTING.md has no '## {title}'"
        assert f"## {title}" not in README, f"README.md still holds the maintainers' '## {title}'"
    assert "(CONTRIBUTING.md)" in README
