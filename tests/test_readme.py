"""README.md speaks to a reader first: where the book is online, a Colab badge, a quick start.

The addresses come from _config.yml (the published book's `html.baseurl`, the repository and branch the Colab
buttons open), so a move of the book or the repository cannot leave the README pointing at the old place.
"""

from __future__ import annotations

import json
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


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cores_and_brand(device: str) -> str:
    """'AMD EPYC, Zen 4 (AVX-512 BF16), 2 cores' (a cpu record's device) as the README names it: '2-core AMD EPYC'."""
    brand, *_, cores = (part.strip() for part in device.split(","))
    match = re.fullmatch(r"(\d+) cores", cores)
    assert match, f"a cpu record's device should end in ', N cores': {device!r}"
    return f"{match.group(1)}-core {brand}"


def test_the_book_runs_quoted_are_those_of_chapters_records():
    # Chapter 10 reads its runs from chapters/records/; the README and the set-up page quote them by hand, so a
    # re-made run (another card, other numbers) must be copied there too.
    records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((REPO_ROOT / "chapters" / "records").glob("*.json"))]
    gpu = [r for r in records if r["preset"] == "gpu" and r.get("train_minutes") is not None]  # not the float16 check
    cpu = [r for r in records if r["preset"] == "cpu" and r["device_type"] == "cpu"]
    assert len(gpu) == 1 and len(cpu) == 1, "chapters/records/ should hold one full run of each of gpu and cpu"
    gpu, cpu = gpu[0], cpu[0]
    readme = _one_line(README)
    for quoted in (
        f"the `gpu` preset on one {gpu['device']} trained its {gpu['steps']:,} updates in "
        f"{gpu['train_minutes']:.1f} minutes ({gpu['wall_minutes']:.1f} minutes with every evaluation) and scored "
        f"{gpu['test_bleu_beam']:.1f} sacreBLEU",
        f"the `cpu` preset on a {_cores_and_brand(cpu['device'])} took {cpu['train_minutes']:.0f} minutes of "
        f"training for {cpu['test_bleu_beam']:.1f}",
    ):
        assert quoted in readme, f"README.md should say, as chapters/records/ does: {quoted!r}"
    average = re.fullmatch(r"average of last (\d+)", gpu["weights"])
    assert average, f"the gpu record's weights should be 'average of last N': {gpu['weights']!r}"
    for quoted in (
        f"chose the average of the last {average.group(1)} snapshots and alpha {gpu['length_penalty']}",
        f"--average {average.group(1)} --length-penalty {gpu['length_penalty']}",
    ):
        assert quoted in readme, f"README.md's evaluate command should use the gpu run's choice: {quoted!r}"
    setup = _one_line((REPO_ROOT / "book" / "setup.md").read_text(encoding="utf-8"))
    assert f"chapter 10 shows a run of it on an {gpu['device']}" in setup, f"book/setup.md: not {gpu['device']}"
