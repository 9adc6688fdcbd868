"""Every measured number in a chapter's prose is written by a cell, not typed by hand.

The book promises that the numbers in its text come from the cells that compute them (myst-nb's glue), so that a
re-run cannot leave the text stale. This test lists the numbers with a decimal point or a thousands separator
that a page's markdown types by hand, and accepts one only when the page itself shows where it comes from:

- it appears in a code cell of the same notebook (a constant the page shows, such as a batch size or an
  asserted parameter count);
- it is the result of a formula written next to it in the same math span (`$\\ln 16 \\approx 2.77$`);
- or it is listed in ALLOWED below with the reason (a figure quoted from a paper, a software version).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = sorted(ROOT.glob("chapters/*.ipynb")) + sorted((ROOT / "book").glob("*.md"))

NUMBER = re.compile(r"(?<![\w.^_{/-])(\d+\.\d+|\d{1,3}(?:,\d{3})+)(?![\w.])")
GLUE_ROLE = re.compile(r"\{glue:\w+\}`[^`]*`")
OTHER_ROLE = re.compile(r"\{(?:cite\w*|numref|ref|doc)\}`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
FENCE = re.compile(r"^(`{3,}).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.DOTALL)
# In a math span, a number after one of these is the value of the formula written before it.
DERIVED = re.compile(r"(?:\\approx|=)\s*$")

ALLOWED: dict[str, dict[str, str]] = {
    "01_rnn_limits.ipynb": {"6.25": "1/16 written as a percentage, next to the fraction"},
    "03_multi_head_attention.ipynb": {"16,384": "a document length that an exercise asks about"},
    "04_positional_encoding.ipynb": {
        "25.7": "BLEU of the paper's learned-positions row (Table 3, row E), quoted",
        "25.8": "BLEU of the paper's sinusoidal base model on the same set, quoted",
    },
    "05_masking.ipynb": {
        "2.1": "a PyTorch version named in a bug report",
        "2.0": "a PyTorch version named in a bug report",
        "30,000": "the size of BERT's vocabulary, quoted from its paper",
    },
    "06_the_transformer.ipynb": {"5.4": "a section number of the paper"},
    "07_label_smoothing_and_training.ipynb": {"0.8": "an example confidence in the definition of calibration"},
    "08_decoding.ipynb": {"1.8": "the largest BLEU difference between configurations that Post (2018) reports"},
    "09_translation_data.ipynb": {
        "31,014": "the number of images Multi30k's German descriptions were written for, from its paper",
        "4.5": "the paper's WMT 2014 English-German training set, in millions of sentence pairs",
        "0.9": "a torchtext release number",
        "0.18": "a torchtext release number",
        "2.3": "a PyTorch release number",
        "2.13": "the PyTorch release the book pins",
        "3.11": "a Python release number",
    },
    "10_training_on_gpu.ipynb": {
        "36.52": "test BLEU of Ben Trevett's Transformer tutorial (German to English), quoted",
        "41.02": "test BLEU of Wu et al. (2021)'s text-only Transformer-Tiny (English to German), quoted",
        "25,000": "the paper's batch size in tokens",
        "37,000": "the paper's vocabulary size",
        "27.3": "the paper's BLEU, base model, English-German (Table 2)",
        "38.1": "the paper's BLEU, base model, English-French (Table 2)",
        "28.4": "the paper's BLEU, big model, English-German (Table 2)",
        "41.8": "the paper's BLEU, big model, English-French (Table 2)",
        "100,000": "the paper's training steps, base model",
        "300,000": "the paper's training steps, big model",
        "3.5": "the paper's training days, big model",
    },
    "11_one_stack.ipynb": {"4,000": "the paper's warm-up steps"},
    "beyond.md": {
        "29,000": "Multi30k's training pairs, from its paper",
        "4.5": "the paper's WMT 2014 English-German training set, in millions of sentence pairs",
        "37,000": "the paper's vocabulary size, English-German",
        "32,000": "the paper's vocabulary size, English-French",
        "25,000": "the paper's batch size in tokens",
        "100,000": "the paper's training steps, base model",
        "300,000": "the paper's training steps, big model",
        "27.3": "the paper's BLEU, base model, English-German (Table 2)",
        "38.1": "the paper's BLEU, base model, English-French (Table 2)",
        "28.4": "the paper's BLEU, big model, English-German (Table 2)",
        "41.8": "the paper's BLEU, big model, English-French (Table 2)",
        "3.5": "the paper's training days, big model",
        "29.3": "Ott et al. (2018)'s English-German BLEU after 85 minutes on 128 GPUs",
    },
    "12_long_sequences.ipynb": {"0.01": "the learning rate, written 1e-2 in the code"},
    "notation.md": {
        "0.1": "the paper's dropout and label-smoothing values",
        "0.9": "the paper's Adam beta_1",
        "0.98": "the paper's Adam beta_2",
    },
    "setup.md": {
        "3.11": "the Python version the book needs",
        "0.6": "the paper's length penalty alpha, the command line's default",
    },
}


def markdown_and_code(path: Path) -> tuple[list[str], str]:
    """The markdown texts of a page, and all its code as one string (empty for a .md page)."""
    if path.suffix == ".md":
        return [path.read_text(encoding="utf-8")], ""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    markdown = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return markdown, code


def _plain(number: str) -> str:
    return number.replace(",", "").replace("_", "")


def typed_numbers(text: str, code: str) -> list[str]:
    """The numbers of `text` that nothing on the page computes or shows (see the module's docstring)."""
    for pattern in (GLUE_ROLE, OTHER_ROLE, LINK_TARGET, FENCE, INLINE_CODE):
        text = pattern.sub(" ", text)
    shown = {_plain(n) for n in re.findall(r"\d[\d_,]*\.?\d*", code)}
    found = []
    spans = [(m.start(), m.end()) for m in MATH.finditer(text)]
    for match in NUMBER.finditer(text):
        number = match.group(1)
        if _plain(number) in shown:
            continue
        span = next(((a, b) for a, b in spans if a <= match.start() < b), None)
        if span and DERIVED.search(text[span[0] : match.start()]):
            continue
        found.append(number)
    return found


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: p.name)
def test_no_number_typed_by_hand(path: Path) -> None:
    markdown, code = markdown_and_code(path)
    allowed = ALLOWED.get(path.name, {})
    typed = [n for text in markdown for n in typed_numbers(text, code) if n not in allowed]
    assert not typed, (
        f"{path.name}: numbers typed by hand in the prose: {typed}. Glue them from the cell that computes them "
        f"(glue(name, value, fmt) and {{glue:text}}`name`), or add them to ALLOWED in {Path(__file__).name} "
        f"with the reason"
    )


def test_the_check_finds_a_typed_number() -> None:
    code = "SIZE = 4096\nratio = a / b"
    assert typed_numbers("The ratio was 0.84 on this run.", code) == ["0.84"]
    assert typed_numbers("A batch of 4,096 tokens.", code) == []  # a constant the code shows
    assert typed_numbers("Chance is $1/16 \\approx 0.06$ here.", code) == []  # a formula's value
    assert typed_numbers("It reached {glue:text}`ch9_x:.3f`.", code) == []  # written by a cell
    assert typed_numbers("It reached 1,234 steps and $0.5 x$.", code) == ["1,234", "0.5"]
