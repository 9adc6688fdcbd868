"""The checks a reader runs on their own code (transformer_book.exercises, the appendix after chapter 12).

Every recognised mistake, written into an implementation on its own, gets exactly its diagnosis; the book's own
implementations pass; implementations that return their input, zeros or random values never pass; code that raises,
or returns the wrong type or shape, gets one clear line in the report and a False result, never a traceback.
"""

import json
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_book.attention import scaled_dot_product_attention
from transformer_book.decoding import beam_search, corpus_bleu, greedy_decode
from transformer_book.efficient import blockwise_attention
from transformer_book.exercises import MISTAKES_BY_CHECK, check_attention, check_multi_head_attention
from transformer_book.exercises.framework import NOT_WRITTEN, compare
from transformer_book.layers import RMSNorm
from transformer_book.masking import causal_mask, padding_mask
from transformer_book.model import EncoderLayer, layer_norm
from transformer_book.multihead import MultiHeadAttention
from transformer_book.positional import apply_rotary, sinusoidal_encoding
from transformer_book.training import LabelSmoothingLoss, noam_rate

REPO_ROOT = Path(__file__).resolve().parents[1]


class SmoothingFrom:
    """A loss class whose instances compute `compute(logits, target, smoothing, pad_id)`."""

    compute = None

    def __init__(self, smoothing, ignore_index):
        self.smoothing, self.ignore_index = smoothing, ignore_index

    def __call__(self, logits, target):
        return type(self).compute(logits, target, self.smoothing, self.ignore_index)


def reader(check: str, compute):
    """An implementation with the check's calling convention whose output is `compute(<the check's inputs>)`.

    For a function check, compute gets the arguments the check passes; for a class check, the instance first.
    """
    if check == "check_multi_head_attention":
        return type("Layer", (MultiHeadAttention,), {"forward": lambda self, q, k, v, mask=None: compute(self, q, k, v, mask)})
    if check == "check_encoder_layer":
        return type("Layer", (EncoderLayer,), {"forward": lambda self, x, src_mask=None: compute(self, x, src_mask)})
    if check == "check_rms_norm":
        return type("Norm", (RMSNorm,), {"forward": lambda self, x: compute(self, x)})
    if check == "check_label_smoothing":
        return type("Loss", (SmoothingFrom,), {"compute": staticmethod(lambda logits, t, e, p: compute(logits, t, e, p))})
    return compute


def with_mistake(check: str, output, way: int):
    """An implementation with exactly one known mistake: its output is the mistake's (its `way`-th way, where the
    mistake's output lists several)."""

    def chosen(value):
        return value[way] if isinstance(value, list) else value

    adapters = {
        "check_attention": lambda q, k, v, mask=None: chosen(output((q, k, v, mask))),
        "check_multi_head_attention": lambda self, q, k, v, mask: chosen(output((self, q, k, v, mask))),
        "check_positional_encoding": lambda max_len, d: chosen(output((max_len, d))),
        "check_padding_mask": lambda tokens, pad: chosen(output((tokens, pad))),
        "check_causal_mask": lambda size: chosen(output(size)),
        "check_shift_right": lambda tgt: chosen(output(tgt)),
        "check_layer_norm": lambda x, w, b, eps: chosen(output((x, w, b, eps))),
        "check_encoder_layer": lambda self, x, mask: chosen(output((self, x, mask))),
        "check_label_smoothing": lambda logits, target, eps, pad: chosen(output((logits, target, eps, pad))),
        "check_warmup_schedule": lambda step, d, w: float(chosen(output((d, w, (step,))))[0]),
        "check_greedy_decode": lambda *x: chosen(output(x)),
        "check_beam_search": lambda *x: chosen(output(x)),
        "check_bleu": lambda hyps, refs: chosen(output((hyps, refs))),
        "check_rotary": lambda x, positions=None: chosen(output((x, positions))),
        "check_rms_norm": lambda self, x: chosen(output((x, self.weight, None, self.eps))),
        "check_blockwise_attention": lambda q, k, v, causal=False, block_size=4: chosen(
            output((q, k, v, causal, block_size))
        ),
    }
    return reader(check, adapters[check])


BOOK = {
    "check_attention": scaled_dot_product_attention,
    "check_multi_head_attention": MultiHeadAttention,
    "check_positional_encoding": sinusoidal_encoding,
    "check_padding_mask": padding_mask,
    "check_causal_mask": causal_mask,
    "check_shift_right": lambda tgt: (tgt[:, :-1], tgt[:, 1:]),
    "check_layer_norm": layer_norm,
    "check_encoder_layer": EncoderLayer,
    "check_label_smoothing": LabelSmoothingLoss,
    "check_warmup_schedule": noam_rate,
    "check_greedy_decode": greedy_decode,
    "check_beam_search": beam_search,
    "check_bleu": corpus_bleu,
    "check_rotary": apply_rotary,
    "check_rms_norm": RMSNorm,
    "check_blockwise_attention": blockwise_attention,
}
CLASS_CHECKS = {"check_multi_head_attention", "check_encoder_layer", "check_rms_norm", "check_label_smoothing"}
CHECKS = list(MISTAKES_BY_CHECK)


def run(check: str, implementation):
    return MISTAKES_BY_CHECK[check][0](implementation, verbose=False)


class Ways(BaseException):  # not an Exception: the check lets it through instead of reporting it
    pass


def ways_of(check: str, mistake) -> int:
    """In how many ways the mistake is made: its output lists one output per way where there are several (an
    inverted mask filled three ways), or is the output itself. Read from its output on the check's first case,
    by starting the check on an implementation that makes the mistake."""

    def output(inputs):
        value = mistake.output(inputs)
        raise Ways(len(value) if isinstance(value, list) else 1)

    try:
        run(check, with_mistake(check, output, 0))
    except Ways as answer:
        return answer.args[0]
    raise AssertionError(f"{check} never ran an implementation that makes {mistake.name!r}")


# One case per way of making each mistake, generated from the mistakes themselves: nothing to skip.
MISTAKE_CASES = [
    pytest.param(check, i, way, id=f"{check}-{i}-{way}")
    for check, (_, mistakes) in MISTAKES_BY_CHECK.items()
    for i, mistake in enumerate(mistakes)
    for way in range(ways_of(check, mistake))
]


def test_the_table_holds_enough_mistakes():
    counts = {check: len(mistakes) for check, (_, mistakes) in MISTAKES_BY_CHECK.items()}
    assert len(counts) == 16 and min(counts.values()) >= 3 and sum(counts.values()) >= 40, counts
    for _, mistakes in MISTAKES_BY_CHECK.values():
        assert len({m.name for m in mistakes}) == len(mistakes), "two mistakes of one check share a name"


@pytest.mark.parametrize("check", CHECKS)
def test_the_books_implementation_passes(check):
    result = run(check, BOOK[check])
    assert result and result.diagnoses == [], str(result)
    assert all(line.startswith("  ok") for line in result.lines[1:-1]), str(result)


def assert_diagnosed(check: str, implementation, mistake):
    """The check fails `implementation` and names exactly `mistake`, in its report too."""
    result = run(check, implementation)
    assert not result, f"{mistake.name}: passed\n{result}"
    assert result.diagnoses == [mistake.name], f"{mistake.name}: diagnosed as {result.diagnoses}\n{result}"
    assert f"likely mistake: {mistake.name}." in str(result)


@pytest.mark.parametrize(("check", "index", "way"), MISTAKE_CASES)
def test_each_mistake_gets_its_diagnosis(check, index, way):
    mistake = MISTAKES_BY_CHECK[check][1][index]
    assert_diagnosed(check, with_mistake(check, mistake.output, way), mistake)


def test_every_way_of_a_mistake_is_a_case_of_its_own():
    # The inverted attention mask is filled in three ways, a float mask in two: each way runs, none is skipped.
    cases = {(p.values[0], p.values[1]) for p in MISTAKE_CASES}
    mistakes = sum(len(m) for _, m in MISTAKES_BY_CHECK.values())
    assert len(cases) == mistakes and len(MISTAKE_CASES) > mistakes, (len(MISTAKE_CASES), mistakes)


@pytest.mark.parametrize("check", CHECKS)
def test_a_mistake_is_not_taken_for_another(check):
    # The diagnosis test can fail: each mistake's output, offered as the next mistake of the same check, is told
    # apart (a check that named every wrong output after its first mistake would pass no case of this test).
    mistakes = MISTAKES_BY_CHECK[check][1]
    for made, claimed in zip(mistakes, mistakes[1:] + mistakes[:1]):
        with pytest.raises(AssertionError, match="diagnosed as"):
            assert_diagnosed(check, with_mistake(check, made.output, 0), claimed)


def _degenerate(check: str, kind: str):
    """An implementation that returns its first input, zeros, or random values shaped like the book's output."""
    generator = torch.Generator().manual_seed(5)

    def replace(book_output, first_input):
        if kind == "input":
            return first_input
        if isinstance(book_output, tuple):
            return tuple(replace(o, first_input) for o in book_output)
        if not isinstance(book_output, torch.Tensor):
            return 0.0 if kind == "zeros" else float(torch.rand(1, generator=generator)) * 100
        if kind == "zeros":
            return torch.zeros_like(book_output)
        if book_output.dtype == torch.bool:
            return torch.rand(book_output.shape, generator=generator) < 0.5
        if not book_output.dtype.is_floating_point:
            return torch.randint(0, 12, book_output.shape, generator=generator)
        return torch.randn(book_output.shape, generator=generator, dtype=book_output.dtype)

    book = BOOK[check]
    if check in CLASS_CHECKS:
        if check == "check_label_smoothing":
            return type("Loss", (book,), {"forward": lambda self, logits, t: replace(book.forward(self, logits, t), logits)})
        return type("Layer", (book,), {"forward": lambda self, x, *a: replace(book.forward(self, x, *a), x)})
    if check == "check_warmup_schedule":
        return lambda step, d, w: replace(book(step, d, w), step)
    return lambda *args, **kwargs: replace(book(*args, **kwargs), args[0])


@pytest.mark.parametrize("kind", ["input", "zeros", "random"])
@pytest.mark.parametrize("check", CHECKS)
def test_inputs_zeros_or_random_values_never_pass(check, kind):
    result = run(check, _degenerate(check, kind))
    assert not result, f"{check} passed an implementation returning {kind}\n{result}"


class Stub(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, *args, **kwargs):
        raise NotImplementedError


def stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("check", CHECKS)
def test_a_stub_is_not_written_yet(check):
    result = run(check, Stub if check in CLASS_CHECKS else stub)
    assert not result and NOT_WRITTEN in str(result) and len(result.lines) == 2, str(result)


@pytest.mark.parametrize("check", CHECKS)
def test_code_that_raises_gets_one_line_not_a_traceback(check):
    def broken(*args, **kwargs):
        raise KeyError("the reader's own bug")

    implementation = type("Broken", (Stub,), {"forward": broken}) if check in CLASS_CHECKS else broken
    result = run(check, implementation)
    assert not result
    assert "raised KeyError: \"the reader's own bug\"" in str(result), str(result)
    assert "Traceback" not in str(result)


def test_wrong_shapes_types_and_nans_are_named():
    q = lambda q, k, v, mask=None: scaled_dot_product_attention(q, k, v, mask)[0]  # noqa: E731
    assert "shape (2, 4, 6), expected (2, 4, 5)" in str(check_attention(lambda q, k, v, mask=None: q[..., :6], verbose=False))
    assert "returned None; expected a tensor" in str(check_attention(lambda *a, **k: None, verbose=False))
    assert "returned a list; expected a tensor" in str(check_attention(lambda *a, **k: [1.0], verbose=False))
    nan = check_attention(lambda *a, **k: q(*a, **k) * float("nan"), verbose=False)
    assert not nan and "NaN in the output" in str(nan)
    ints = check_attention(lambda *a, **k: q(*a, **k).long(), verbose=False)
    assert not ints and "expected a floating-point tensor" in str(ints)


def test_a_layer_without_the_books_names_is_told_which():
    class Unnamed(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, query, key, value, mask=None):
            return query

    report = str(check_multi_head_attention(Unnamed, verbose=False))
    assert "q_proj = nn.Linear(d_model, d_model)" in report


def test_a_layer_whose_projections_have_no_bias_is_told_so():
    class NoBias(MultiHeadAttention):
        def __init__(self, d_model, num_heads):
            super().__init__(d_model, num_heads)
            for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
                setattr(self, name, nn.Linear(d_model, d_model, bias=False))

    report = str(check_multi_head_attention(NoBias, verbose=False))
    assert "q_proj has no bias: use nn.Linear(d_model, d_model), bias included" in report
    assert "name your projections" not in report


def test_the_report_prints_no_digit_that_a_cpu_could_change():
    passing = [str(run(check, BOOK[check])) for check in CHECKS]
    for report in passing:
        for line in report.splitlines()[1:-1]:
            assert re.search(r": (max \|difference\| < 1e-\d\d|identical)$", line), line


@settings(max_examples=50, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e6, allow_nan=False), st.sampled_from([0.0, 1e-9, 1e-7, 1e-4]))
def test_a_difference_is_printed_as_a_bound_or_one_digit(difference, tolerance):
    expected = torch.zeros(3, dtype=torch.float64)
    ok, words = compare(expected + torch.tensor([difference, 0.0, 0.0], dtype=torch.float64), expected, tolerance)
    assert ok == (difference <= tolerance)
    assert re.fullmatch(r"max \|difference\| (< \de-\d\d|≈ \de[+-]\d+)|identical", words), words


def test_a_check_leaves_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    for check in ("check_multi_head_attention", "check_encoder_layer", "check_beam_search"):
        run(check, BOOK[check])
    assert torch.equal(torch.rand(3), expected)


HEADING = re.compile(r"^#+ (.*)$", re.MULTILINE)


def _plain(title: str) -> str:
    """A heading as the reports quote it: no TeX, no backticks."""
    title = title.replace(r"$-\infty$", "-inf").replace(r"$\sqrt{d_k}$", "sqrt(d_k)").replace("$q$", "q")
    return title.replace("`", "")


@pytest.mark.parametrize("check", CHECKS)
def test_every_section_to_reread_exists(check):
    for mistake in MISTAKES_BY_CHECK[check][1]:
        match = re.fullmatch(r'chapter (\d+), "(.+)"', mistake.section)
        assert match, mistake.section
        notebook = next((REPO_ROOT / "chapters").glob(f"{int(match.group(1)):02d}_*.ipynb"))
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        headings = {_plain(h) for h in HEADING.findall(text)}
        assert match.group(2) in headings, f"{mistake.section}: no such heading in {notebook.name}"
