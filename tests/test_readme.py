"""README.md speaks to a reader first: what the book is and for whom, where it is online, a Colab badge, a quick
start that opens the chapters as the book shows them, and a Python snippet that runs as written.

The addresses come from _config.yml (the published book's `html.baseurl`, the repository and branch the Colab
buttons open), so a move of the book or the repository cannot leave the README pointing at the old place.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
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


def _records() -> tuple[dict, dict]:
    """The gpu and cpu runs that chapter 10 reads from chapters/records/."""
    records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((REPO_ROOT / "chapters" / "records").glob("*.json"))]
    gpu = [r for r in records if r["preset"] == "gpu" and r.get("train_minutes") is not None]  # not the float16 check
    cpu = [r for r in records if r["preset"] == "cpu" and r["device_type"] == "cpu"]
    assert len(gpu) == 1 and len(cpu) == 1, "chapters/records/ should hold one full run of each of gpu and cpu"
    return gpu[0], cpu[0]


SETUP = (REPO_ROOT / "book" / "setup.md").read_text(encoding="utf-8")


def test_the_runs_quoted_agree_with_chapters_records_and_no_score_is_typed():
    # Chapter 10 shows its runs from chapters/records/. The README and the set-up page name the gpu run's card and
    # its choice of weights and length penalty, and say the cpu preset takes "about an hour"; a re-made run (another
    # card, other choices, another time) must change them too. Scores and times are not copied by hand.
    gpu, cpu = _records()
    setup = _one_line(SETUP)
    assert f"chapter 10 shows a run of it on an {gpu['device']}" in setup, f"book/setup.md: not {gpu['device']}"
    average = re.fullmatch(r"average of last (\d+)", gpu["weights"])
    assert average, f"the gpu record's weights should be 'average of last N': {gpu['weights']!r}"
    command = f"--average {average.group(1)} --length-penalty {gpu['length_penalty']}"
    assert command in setup, f"book/setup.md's evaluate command should use the gpu run's choice: {command!r}"
    assert 45 <= cpu["wall_minutes"] <= 80, "the cpu preset no longer takes 'about an hour': change the pages"
    assert "--preset cpu --out runs/multi30k     # about an hour" in README
    for text, name in ((README, "README.md"), (SETUP, "book/setup.md")):
        for typed in (f"{gpu['test_bleu_beam']:.1f}", f"{cpu['test_bleu_beam']:.1f}", f"{gpu['steps']:,}"):
            assert typed not in text, f"{name} types a record's number ({typed}): chapter 10 shows it"


def test_the_first_screen_says_what_for_whom_and_how_to_start():
    first = README[:README.index("**PyTorch without a GPU")]
    assert len(first.splitlines()) <= 40, "the first screen (up to the quick start's commands) is too long"
    intro = README[:README.index("\n## ")]
    assert "Transformer" in intro and "PyTorch" in intro
    assert re.search(r"\bfor people who know\b", intro), "the README does not say whom the book is for"
    quick = _section("Quick start")
    for way in ("**Read**", "**Run on Colab**", "**Run on your computer**", "make setup", "make notebooks"):
        assert way in quick, f"the quick start does not name {way}"


def test_the_reference_lives_on_the_set_up_page():
    # The command line's options and the thread measurements are the set-up page's; the README links there.
    for moved in ("--length-penalty", "OMP_WAIT_POLICY", "torchrun", "bench/throughput.py"):
        assert moved not in README, f"README.md still holds the reference's {moved!r}"
        assert moved in SETUP, f"book/setup.md lacks {moved!r}"
    link = re.search(r"\(book/setup\.md#([\w-]+)\)", README)
    assert link, "README.md does not link the command line's reference on book/setup.md"
    headings = {re.sub(r"[^\w]+", "-", h.lower()).strip("-") for h in re.findall(r"^#+ (.+)$", SETUP, re.MULTILINE)}
    assert link.group(1) in headings, f"book/setup.md has no heading for #{link.group(1)}"


def _cpu_wheel_advice(text: str) -> list[str]:
    return re.findall(r"^export PIP_EXTRA_INDEX_URL=(\S+)$", text, re.MULTILINE)


def test_one_piece_of_advice_for_pytorch_s_cpu_wheel_with_how_to_check_and_undo_it():
    torch_pin = re.search(r"^torch==([\d.]+)", (REPO_ROOT / "constraints.txt").read_text(), re.MULTILINE).group(1)
    for text, name in ((README, "README.md"), (SETUP, "book/setup.md")):
        assert _cpu_wheel_advice(text) == ["https://download.pytorch.org/whl/cpu"], \
            f"{name} should give the CPU index once, as one export line"
        flat = _one_line(text)
        assert "before `make setup`" in flat, f"{name}: the advice should come before `make setup`"
        assert f"prints `{torch_pin}+cpu`" in flat, f"{name} does not say how to tell that the CPU build came"
        assert "unset PIP_EXTRA_INDEX_URL" in flat, f"{name} does not say what to do when the index cannot be reached"


def _python_snippets() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README, re.MULTILINE | re.DOTALL)


def test_the_python_snippet_runs_as_written(tmp_path):
    snippets = _python_snippets()
    assert len(snippets) == 1, "README.md should hold one Python snippet"
    # the pretrained translator needs no data and no network: no TRANSFORMER_BOOK_DATA is passed on
    env = {key: value for key, value in os.environ.items() if key != "TRANSFORMER_BOOK_DATA"}
    env |= {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    result = subprocess.run([sys.executable, "-c", snippets[0]], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"README.md's snippet failed:\n{result.stderr[-3000:]}"
    printed = result.stdout.strip().splitlines()
    assert printed and re.search(r"[A-Za-z]", printed[-1]), f"the snippet printed no translation: {result.stdout!r}"
