"""The numbers glued into the book's text carry no digit that another CPU could change.

nbval compares every stored output of a chapter as text, glued values included. A float kept at full precision
differs in its last digits between CPUs (their vector kernels add in other orders) and between thread counts, so
the same notebook would pass on the machine that made it and fail on a reader's. Each chapter's `glue` (its first
cell) therefore rounds a float to the format the page shows it with; these tests read the stored outputs and fail
when a glued float escaped that rounding.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import bootstrap  # noqa: E402  (tools/bootstrap.py: the first cell of every chapter)

NOTEBOOKS = sorted((REPO_ROOT / "chapters").glob("*.ipynb"))
PAGES = NOTEBOOKS + sorted((REPO_ROOT / "book").glob("*.md"))

# float32 carries about 7 significant decimal digits, and sums taken in another order already change the 7th.
# A glued float with more than this many significant digits keeps digits that depend on the machine.
MAX_SIGNIFICANT_DIGITS = 6
GLUE_MIME = "application/papermill.record/text/plain"
FLOAT_LITERAL = re.compile(r"-?(\d+\.\d*|\d*\.\d+|\d+)(e[-+]?\d+)?")
GLUE_REFERENCE = re.compile(r"\{glue:text\}`([^`:]+):([^`]+)`")


def glued_values(path: Path) -> dict[str, str]:
    """Every value the notebook at `path` glued, as its stored text, by name."""
    values = {}
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            if GLUE_MIME in output.get("data", {}):
                values[output["metadata"]["scrapbook"]["name"]] = "".join(output["data"][GLUE_MIME]).strip()
    return values


def page_formats(path: Path) -> dict[str, str]:
    """The format each `{glue:text}` reference of a page gives its value, by name."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        cells = json.loads(text)["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return {name: fmt for name, fmt in GLUE_REFERENCE.findall(text)}


def significant_digits(literal: str) -> int:
    """The digits of a float literal between its first and last non-zero one: 0.00120 has 2, 1.5e-06 has 2."""
    digits = literal.lstrip("-").split("e")[0].replace(".", "")
    return len(digits.strip("0"))


@functools.cache
def first_cell() -> dict:
    """The names that every chapter's first cell defines (it is run here once)."""
    names: dict = {}
    exec(bootstrap.render(bootstrap.read_version(), bootstrap.read_repository()), names)
    return names


def as_shown(value: float, fmt: str) -> float | int:
    """What the page's format keeps of `value`: the rounding of `glue` in every chapter's first cell."""
    return first_cell()["_as_shown"](value, fmt)


def test_significant_digits_counts_what_a_reader_would():
    assert significant_digits("0.00120") == 2
    assert significant_digits("1.5e-06") == 2
    assert significant_digits("4020.0") == 3
    assert significant_digits("0.9493332505226135") == 16
    assert significant_digits("1.2035442088598823e-06") == 17


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_glued_floats_are_rounded(path):
    too_precise = {
        name: value for name, value in glued_values(path).items()
        if FLOAT_LITERAL.fullmatch(value) and ("." in value or "e" in value)
        and significant_digits(value) > MAX_SIGNIFICANT_DIGITS
    }
    assert not too_precise, (
        f"{path.name} glued floats with more than {MAX_SIGNIFICANT_DIGITS} significant digits, which change from "
        f"one CPU to another: {too_precise}. Glue them with the format the page shows, glue(name, value, '.3f'), "
        f"and re-run the chapter (make execute NB=chapters/{path.name})."
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_glued_floats_keep_only_the_digits_the_page_shows(path):
    formats: dict[str, str] = {}
    for page in PAGES:
        formats.update(page_formats(page))
    extra = {}
    for name, value in glued_values(path).items():
        if name not in formats or not FLOAT_LITERAL.fullmatch(value) or formats[name][-1:] in ("d", ","):
            continue
        if float(value) != as_shown(float(value), formats[name]):
            extra[name] = (value, formats[name])
    assert not extra, (
        f"{path.name} glued floats with more digits than the page's format shows (value, format): {extra}. "
        f"Glue each with that format, glue(name, value, fmt), and re-run the chapter."
    )


GLUE_MARKDOWN_MIME = "application/papermill.record/text/markdown"
TEX_IN_TEXT = re.compile(r"\$|\\\(|\\\[")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_glued_markdown_holds_no_math(path):
    """A text glued as Markdown ({glue:md}) reaches the page without its math rendered: `$T$` stays `$T$`."""
    with_math = {}
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            text = "".join(output.get("data", {}).get(GLUE_MARKDOWN_MIME, ""))
            if TEX_IN_TEXT.search(text):
                with_math[output["metadata"]["scrapbook"]["name"]] = text[:120]
    assert not with_math, (
        f"{path.name} glued Markdown with TeX in it, which the page shows as raw text: {with_math}. Write the "
        "symbol in words, or keep the math in the page's own prose and glue only the numbers."
    )
