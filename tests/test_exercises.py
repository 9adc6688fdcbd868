"""The checks a reader runs on their own code (transformer_book.exercises, the appendix after chapter 12).

Every recognised mistake, written into an implementation on its own, gets exactly its diagnosis; the book's own
implementations pass; implementations that return their input, zeros or random values never pass; code that raises,
or returns the wrong type or shape, gets one clear line in the report and a False result, never a traceback.
"""

import collections
import contextlib
import io
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
from transformer_book.efficient import GroupedQueryAttention, blockwise_attention, window_mask
from transformer_book.exercises import (
    CONVENTIONS_BY_CHECK,
    MISTAKES_BY_CHECK,
    check_attention,
    check_beam_search,
    check_bleu,
    check_causal_mask,
    check_greedy_decode,
    check_label_smoothing,
    check_multi_head_attention,
    check_padding_mask,
)
from transformer_book.exercises.framework import NOT_WRITTEN, compare
from transformer_book.exercises.generation import next_token_probs
from transformer_book.layers import RMSNorm
from transformer_book.masking import causal_mask, padding_mask
from transformer_book.model import EncoderLayer, layer_norm
from transformer_book.multihead import MultiHeadAttention
from transformer_book.optim import AdamW, cosine_rate
from transformer_book.positional import apply_rotary, sinusoidal_encoding
from transformer_book.tokens import BOS_ID
from transformer_book.training import LabelSmoothingLoss, noam_rate

REPO_ROOT = Path(__file__).resolve().parents[1]


def chapter_function(notebook: str, cell_id: str, name: str):
    """A function as a chapter's (unexported) cell defines it, run from the notebook's own source."""
    cells = json.loads((REPO_ROOT / "chapters" / notebook).read_text(encoding="utf-8"))["cells"]
    source = "".join(next(c for c in cells if c["id"] == cell_id)["source"])
    namespace = {"collections": collections}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, f"{notebook}:{cell_id}", "exec"), namespace)
    return namespace[name]


# Chapter 9 writes byte-pair encoding out in a cell it does not export.
learn_merges = chapter_function("09_translation_data.ipynb", "2603701d", "learn_merges")


class OptimizerFrom:
    """An optimizer whose parameters, after each step, are `compute((initial parameters, gradients so far,
    settings))`'s last row: a known mistake's trajectories, one step at a time."""

    compute = None

    def __init__(self, params, **settings):
        self.params, self.settings = list(params), settings
        self.initial, self.grads = [p.detach().clone() for p in self.params], [[] for _ in self.params]

    @torch.no_grad()
    def step(self):
        for seen, p in zip(self.grads, self.params):
            seen.append(p.grad.clone())
        after = type(self).compute((tuple(self.initial), tuple(map(tuple, self.grads)), self.settings))
        for p, trajectory in zip(self.params, after):
            p.copy_(trajectory[-1])


def merges_from(written):
    """A merges list from the way the BPE check writes it ('H+a, Ha+u'; merged symbols 'Ha, Hau')."""
    items = written.split(", ") if written else []
    return [tuple(item.split("+")) if "+" in item else item for item in items]


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
    if check == "check_grouped_query_attention":
        return type(
            "Layer", (GroupedQueryAttention,), {"forward": lambda self, q, k, v, mask=None: compute(self, q, k, v, mask)}
        )
    if check == "check_adamw":
        return type("Optimizer", (OptimizerFrom,), {"compute": staticmethod(compute)})
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
        "check_bpe_merges": lambda word_counts, n: merges_from(chosen(output((word_counts, n)))),
        "check_sampling": lambda logits, temperature, top_k: chosen(output((logits, temperature, top_k))),
        "check_adamw": lambda inputs: chosen(output(inputs)),
        "check_cosine_schedule": lambda step, w, t, r: float(chosen(output((w, t, r, (step,))))[0]),
        "check_sliding_window_mask": lambda length, window, causal: chosen(output((length, window, causal))),
        "check_grouped_query_attention": lambda self, q, k, v, mask: chosen(output((self, q, k, v, mask))),
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
    "check_bpe_merges": learn_merges,
    "check_sampling": next_token_probs,
    "check_adamw": AdamW,
    "check_cosine_schedule": cosine_rate,
    "check_sliding_window_mask": window_mask,
    "check_grouped_query_attention": GroupedQueryAttention,
}
CLASS_CHECKS = {
    "check_multi_head_attention", "check_encoder_layer", "check_rms_norm", "check_label_smoothing",
    "check_grouped_query_attention", "check_adamw",
}
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
    assert len(counts) == 22 and min(counts.values()) >= 3 and sum(counts.values()) >= 120, counts
    new_checks = ("bpe_merges", "sampling", "adamw", "cosine_schedule", "sliding_window_mask", "grouped_query_attention")
    assert all(counts[f"check_{name}"] >= 4 for name in new_checks), counts  # issue 50, item 7
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
    if check == "check_adamw":  # an optimizer that leaves the parameters, zeroes them or draws them at random

        class Degenerate(OptimizerFrom):
            @torch.no_grad()
            def step(self):
                for p in self.params:
                    p.copy_(replace(p.clone(), p) if kind != "input" else p)

        return Degenerate
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

    def step(self):  # an optimizer's stub
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

    implementation = type("Broken", (Stub,), {"forward": broken, "step": broken}) if check in CLASS_CHECKS else broken
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


# Other conventions (the Annotated Transformer's, PyTorch's): each way of writing one is named as a convention, never
# taken for a mistake; an accepted one passes.
CONVENTION_CASES = [
    pytest.param(check, i, way, id=f"{check}-convention-{i}-{way}")
    for check, conventions in CONVENTIONS_BY_CHECK.items()
    for i, convention in enumerate(conventions)
    for way in range(ways_of(check, convention))
]


@pytest.mark.parametrize(("check", "index", "way"), CONVENTION_CASES)
def test_each_convention_is_named_as_a_convention(check, index, way):
    convention = CONVENTIONS_BY_CHECK[check][index]
    result = run(check, with_mistake(check, convention.output, way))
    assert result.conventions == [convention.name] and result.diagnoses == [], str(result)
    assert bool(result) == convention.accepted, str(result)
    assert "no mistake the check knows" not in str(result) and f"what differs: {convention.differs}" in str(result)


# What readers wrote, each a miss or a false alarm of the checks before issue 51 (each of these tests failed then).


def names(result) -> list[str]:
    return result.diagnoses + result.conventions


def reader_greedy(model, src, max_len, bos_id, eos_id, bos=None, pad=None, to_max_len=False):
    """A reader's greedy decoding, recomputing the prefix each step; bos and pad hard-code ids when given."""
    pad_id = model.config.pad_id if pad is None else pad
    mask = padding_mask(src, pad_id)
    memory = model.encode(src, mask)
    tokens = torch.full((src.size(0), 1), bos_id if bos is None else bos, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        next_token = model.decode(tokens, memory, mask)[:, -1].argmax(dim=-1).masked_fill(finished, pad_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= next_token == eos_id
        if finished.all() and not to_max_len:
            break
    return tokens


def test_greedy_decoding_that_ignores_bos_id_is_named():
    result = check_greedy_decode(lambda *x: reader_greedy(*x, bos=BOS_ID), verbose=False)
    assert not result and names(result) == ["bos_id is ignored: every output starts with 1"], str(result)


def test_greedy_decoding_with_the_pad_id_hard_coded_to_0_is_named():
    result = check_greedy_decode(lambda *x: reader_greedy(*x, pad=0), verbose=False)
    assert not result
    assert names(result) == ["the padding id is taken to be 0 whatever model.config.pad_id says"], str(result)


def test_greedy_decoding_that_pads_to_max_len_passes_and_says_so():
    result = check_greedy_decode(lambda *x: reader_greedy(*x, to_max_len=True), verbose=False)
    assert result and "never stops" not in str(result), str(result)
    assert result.conventions == ["every sentence padded up to max_len after its EOS (trailing padding)"]


def test_beam_search_that_ignores_bos_id_is_named():
    result = check_beam_search(lambda model, src, k, n, bos, eos, alpha: beam_search(model, src, k, n, 1, eos, alpha), verbose=False)
    assert not result and names(result) == ["bos_id is ignored: every hypothesis starts with 1"], str(result)


class ReaderAttention(MultiHeadAttention):
    """A reader's multi-head attention; `wiring` says which argument each projection reads."""

    wiring = ("query", "key", "value")

    def forward(self, query, key, value, mask=None):
        given = {"query": query, "key": key, "value": value}
        batch, heads = query.size(0), self.num_heads

        def split(x):
            return x.view(batch, x.size(1), heads, -1).transpose(1, 2)

        q, k, v = (split(proj(given[name])) for proj, name in zip((self.q_proj, self.k_proj, self.v_proj), self.wiring))
        out = scaled_dot_product_attention(q, k, v, mask)[0]
        return self.out_proj(out.transpose(1, 2).reshape(batch, query.size(1), -1))


@pytest.mark.parametrize(
    ("wiring", "expected"),
    [
        (("query", "key", "key"), "the values are projected from the key argument (v_proj(key))"),
        (("query", "value", "value"), "the keys are projected from the value argument (k_proj(value))"),
    ],
)
def test_multi_head_attention_that_reads_the_wrong_argument_is_named(wiring, expected):
    assert check_multi_head_attention(type("Layer", (ReaderAttention,), {}), verbose=False)  # the wiring is right
    result = check_multi_head_attention(type("Layer", (ReaderAttention,), {"wiring": wiring}), verbose=False)
    assert not result and names(result) == [expected], str(result)


def test_bleu_without_a_guard_for_an_order_with_no_match_is_named():
    import math
    from collections import Counter

    def unguarded(hypotheses, references):
        matches, totals, hyp_len, ref_len = [0] * 4, [0] * 4, 0, 0
        for hyp, ref in zip(hypotheses, references):
            h, r = hyp.split(), ref.split()
            hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
            for n in range(1, 5):
                hc = Counter(tuple(h[i : i + n]) for i in range(len(h) - n + 1))
                rc = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
                matches[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
                totals[n - 1] += max(len(h) - n + 1, 0)
        log_p = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
        return 100 * math.exp(min(0.0, 1 - ref_len / hyp_len) + log_p)

    result = check_bleu(unguarded, verbose=False)
    assert not result and names(result) == ["an n-gram order without any match is not guarded: log(0) raises"], str(result)


def test_float16_arithmetic_passes():
    def half(q, k, v, mask=None):
        return scaled_dot_product_attention(q.half(), k.half(), v.half(), mask)[0]

    result = check_attention(half, verbose=False)
    assert result and "float16's rounding" in str(result), str(result)


def test_the_annotated_transformers_minus_1e9_fill_passes_and_is_named():
    def annotated(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        return scores.softmax(dim=-1) @ v

    result = check_attention(annotated, verbose=False)
    assert result and result.diagnoses == [] and len(result.conventions) == 1, str(result)
    assert "Annotated Transformer" in str(result) and "mean of all the values" in str(result)


def test_softmax_over_the_queries_with_minus_inf_masks_is_named():
    def over_queries(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(dim=-2) @ v

    result = check_attention(over_queries, verbose=False)
    assert not result and names(result) == ["the softmax is taken over the queries (dim=-2) instead of the keys"], str(result)


def test_the_annotated_transformers_label_smoothing_is_named_as_a_convention():
    class Annotated(nn.Module):  # the Annotated Transformer's LabelSmoothing, fed log-probabilities
        def __init__(self, smoothing, padding_idx):
            super().__init__()
            self.smoothing, self.padding_idx = smoothing, padding_idx

        def forward(self, logits, target):
            x = logits.log_softmax(dim=-1)
            true_dist = torch.full_like(x, self.smoothing / (x.size(1) - 2))
            true_dist.scatter_(1, target[:, None], 1.0 - self.smoothing)
            true_dist[:, self.padding_idx] = 0
            true_dist[target == self.padding_idx] = 0.0
            return nn.KLDivLoss(reduction="sum")(x, true_dist)

    result = check_label_smoothing(Annotated, verbose=False)
    assert not result and result.diagnoses == [], str(result)
    assert result.conventions == ["the Annotated Transformer's label smoothing (KLDivLoss, smoothing / (K - 2))"]


@pytest.mark.parametrize(
    ("check", "mask_fn", "convention"),
    [
        (check_padding_mask, lambda tokens, pad: (tokens != pad).unsqueeze(-2), "shape (B, 1, T)"),
        (check_padding_mask, lambda tokens, pad: (tokens != pad).long()[:, None, None, :], "an integer mask"),
        (check_causal_mask, lambda size: torch.triu(torch.ones(1, size, size), diagonal=1) == 0, "shape (1, T, T)"),
        (check_causal_mask, lambda size: torch.ones(size, size, dtype=torch.uint8).tril(), "an integer mask"),
    ],
)
def test_masks_in_another_convention_are_named(check, mask_fn, convention):
    result = check(mask_fn, verbose=False)
    assert not result and result.diagnoses == [] and len(result.conventions) == 1, str(result)
    assert convention in result.conventions[0] and "no mistake the check knows" not in str(result)


def test_a_function_that_changes_its_input_in_place_is_named_and_compared_rightly():
    def scales_the_query(q, k, v, mask=None):
        q.mul_(1.0)  # harmless on its own...
        q.div_(q.size(-1) ** 0.5)  # ...but this divides the caller's query
        scores = q @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        return (scores.softmax(dim=-1).masked_fill(~mask, 0.0) if mask is not None else scores.softmax(dim=-1)) @ v

    result = check_attention(scales_the_query, verbose=False)
    assert not result and result.diagnoses == ["your code changes a tensor it was given, in place"], str(result)
    # Each output was compared on fresh inputs: every one matches the book's, and the report says so.
    assert all("max |difference| < 1e-04; but it changed its input in place" in line for line in result.lines[1:5])
    assert "the outputs match the book's" in result.lines[-1]
