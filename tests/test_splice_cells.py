"""Chapter 10's exercise cells, waiting in tools/chapter10_exercises.ipynb for a GPU run, still fit the chapter.

The GPU run splices them in (tools/splice_cells.py, called by tools/remake_chapter10.sh) and executes the chapter:
a fragment that no longer fits would cost that run, and GPU time is scarce. So this checks, here, what the run
relies on: the fragment splices without undoing a change to the chapter, twice gives the same notebook as once,
the spliced chapter passes ruff and the page checks, every glued name its prose quotes is glued by its code, and
its figures have alt text. Once the exercises have landed in the chapter, the fragment and this file go.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_alt_text import good_alt
from test_prose_numbers import ALLOWED, typed_numbers
from test_reader_voice import behind_the_scenes

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
from splice_cells import sha256, source_of, splice  # noqa: E402  (tools/splice_cells.py)

FRAGMENT = REPO_ROOT / "tools" / "chapter10_exercises.ipynb"
CHAPTER = REPO_ROOT / "chapters" / "10_training_on_gpu.ipynb"
GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)[^`]*`")
GLUE_CALL = re.compile(r"""\bglue\(\s*["'](\w+)["']""")

pytestmark = pytest.mark.skipif(not FRAGMENT.exists(), reason="no fragment waits: the exercises have landed")


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def spliced() -> dict:
    return splice(read(FRAGMENT), read(CHAPTER))


def test_the_fragment_goes_in_and_splicing_twice_changes_nothing(spliced):
    ids = [cell["id"] for cell in spliced["cells"]]
    assert len(ids) == len(set(ids)), "two cells share an id"
    fragment_ids = [cell["id"] for cell in read(FRAGMENT)["cells"]]
    assert set(fragment_ids) <= set(ids)
    assert len(ids) == len(read(CHAPTER)["cells"]) + sum(
        "after" in cell["metadata"]["splice"] for cell in read(FRAGMENT)["cells"])
    assert splice(read(FRAGMENT), spliced) == spliced
    assert not any("splice" in cell["metadata"] or "spliced_after" in cell["metadata"] for cell in spliced["cells"])


def test_a_changed_cell_stops_the_splice():
    fragment, chapter = read(FRAGMENT), read(CHAPTER)
    target = next(cell["metadata"]["splice"]["replace"] for cell in fragment["cells"]
                  if "replace" in cell["metadata"]["splice"])
    changed = copy.deepcopy(chapter)
    cell = next(cell for cell in changed["cells"] if cell["id"] == target)
    cell["source"] = source_of(cell) + "\n# a change made on main after the fragment was written"
    with pytest.raises(ValueError, match=f"cell {target} has changed.*{sha256(source_of(cell))}"):
        splice(fragment, changed)


def test_every_glued_name_the_prose_quotes_is_glued(spliced):
    cells = spliced["cells"]
    quoted = {name for c in cells if c["cell_type"] == "markdown" for name in GLUE_ROLE.findall(source_of(c))}
    glued = {name for c in cells if c["cell_type"] == "code" for name in GLUE_CALL.findall(source_of(c))}
    assert quoted, "the pattern found no glue role"
    assert quoted <= glued, f"quoted on the page but glued by no cell: {sorted(quoted - glued)}"


def test_the_spliced_chapter_passes_the_page_checks(spliced):
    markdown = [source_of(c) for c in spliced["cells"] if c["cell_type"] == "markdown"]
    code = "\n".join(source_of(c) for c in spliced["cells"] if c["cell_type"] == "code")
    allowed = ALLOWED.get(CHAPTER.name, {})
    typed = [n for text in markdown for n in typed_numbers(text, code) if n not in allowed]
    assert not typed, f"numbers typed by hand in the spliced prose: {typed} (glue them)"
    phrases = [phrase for text in markdown for phrase in behind_the_scenes(text)]
    assert not phrases, f"the spliced prose speaks of the course's planning documents: {phrases}"


def test_the_spliced_chapter_passes_ruff(spliced):
    ruff = Path(sys.executable).with_name("ruff")  # given the chapter's name, it applies the chapters' settings
    result = subprocess.run([str(ruff), "check", "--stdin-filename", str(CHAPTER), "-"], input=json.dumps(spliced),
                            capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_figure_of_the_fragment_has_alt_text():
    added = [cell for cell in read(FRAGMENT)["cells"] if "after" in cell["metadata"]["splice"]]
    draws = [cell for cell in added
             if cell["cell_type"] == "code" and re.search(r"plt\.show\(|show_cross_attention\(", source_of(cell))]
    assert draws, "the pattern found no cell that draws"
    for cell in draws:
        alt = cell["metadata"].get("mystnb", {}).get("image", {}).get("alt")
        assert good_alt(alt), f"fragment cell {cell['id']} draws a figure without alt text"


def test_a_replaced_cell_keeps_its_tags_and_alt_text():
    chapter = {cell["id"]: cell for cell in read(CHAPTER)["cells"]}
    for cell in read(FRAGMENT)["cells"]:
        target = cell["metadata"]["splice"].get("replace")
        if target is not None:
            kept = {k: v for k, v in cell["metadata"].items() if k != "splice"}
            assert kept == chapter[target]["metadata"], f"fragment cell {target} changes the cell's metadata"
