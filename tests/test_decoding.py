"""Tests of transformer_book.decoding (chapter 8): the cache, EOS handling, beam search, BLEU, bad inputs."""

import itertools
import math
from types import SimpleNamespace

import pytest
import sacrebleu
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_book.decoding import (
    beam_search,
    corpus_bleu,
    gnmt_length_penalty,
    greedy_decode,
    hypothesis_score,
)
from transformer_book.model import Transformer, TransformerConfig

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
FIRST_SYMBOL = 3


def random_model(
    seed: int, vocab: int = 12, norm_first: bool = False, max_len: int = 24, dropout: float = 0.1
) -> Transformer:
    """A small untrained model in float64 (so that argmax ties cannot flip), in eval mode."""
    torch.manual_seed(seed)
    config = TransformerConfig(
        src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, num_heads=2, num_encoder_layers=2,
        num_decoder_layers=2, d_ff=32, dropout=dropout, max_len=max_len, norm_first=norm_first,
    )
    return Transformer(config).double().eval()


def random_src(lengths: list[int], vocab: int, seed: int) -> torch.Tensor:
    """Source ids in FIRST_SYMBOL..vocab-1, row i padded with PAD_ID after lengths[i] tokens."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(FIRST_SYMBOL, vocab, (len(lengths), max(lengths)), generator=generator)
    src[torch.arange(max(lengths)) >= torch.tensor(lengths)[:, None]] = PAD_ID
    return src


def strip(row: list[int]) -> list[int]:
    """A decoded row without the padding after its EOS."""
    return row[: row.index(EOS_ID) + 1] if EOS_ID in row else row


source_lengths = st.lists(st.integers(1, 7), min_size=1, max_size=4)


# ---------------------------------------------------------------- greedy decoding and the cache


@settings(max_examples=25, deadline=None)
@given(lengths=source_lengths, max_len=st.integers(1, 10), seed=st.integers(0, 10_000), norm_first=st.booleans())
def test_cached_and_uncached_greedy_give_identical_tokens(lengths, max_len, seed, norm_first):
    model = random_model(seed, norm_first=norm_first)
    src = random_src(lengths, 12, seed)
    cached = greedy_decode(model, src, max_len, BOS_ID, EOS_ID, use_cache=True)
    uncached = greedy_decode(model, src, max_len, BOS_ID, EOS_ID, use_cache=False)
    assert torch.equal(cached, uncached)


@settings(max_examples=25, deadline=None)
@given(lengths=source_lengths, max_len=st.integers(1, 10), seed=st.integers(0, 10_000))
def test_greedy_picks_the_argmax_and_pads_after_each_eos(lengths, max_len, seed):
    model = random_model(seed, vocab=6)  # few tokens, so that EOS comes early in many rows
    src = random_src(lengths, 6, seed)
    out = greedy_decode(model, src, max_len, BOS_ID, EOS_ID)
    assert out.dtype == torch.long and out.size(0) == len(lengths) and 2 <= out.size(1) <= 1 + max_len
    logits = model(src, out[:, :-1])  # (B, T_out, V): one teacher-forced pass over greedy's own output
    for b, row in enumerate(out.tolist()):
        assert row[0] == BOS_ID
        end = row.index(EOS_ID) if EOS_ID in row else len(row) - 1
        assert all(token == PAD_ID for token in row[end + 1 :]), row  # padding after the EOS only
        if EOS_ID not in row:
            assert len(row) == 1 + max_len, row  # a row without EOS ran to max_len
        for t in range(1, end + 1):
            assert row[t] == logits[b, t - 1].argmax().item()  # every token is the argmax given its prefix
    rows = out.tolist()
    if all(EOS_ID in row for row in rows):  # stopped early: at the step the last sentence finished
        assert any(row[-1] == EOS_ID for row in rows)


def test_greedy_rows_do_not_depend_on_the_rest_of_the_batch():
    model = random_model(0)
    lengths = [5, 2, 7, 3]
    src = random_src(lengths, 12, 0)
    batched = greedy_decode(model, src, 8, BOS_ID, EOS_ID).tolist()
    for i, length in enumerate(lengths):
        alone = greedy_decode(model, src[i : i + 1, :length], 8, BOS_ID, EOS_ID)[0].tolist()
        assert strip(batched[i]) == strip(alone)


def test_decoders_run_in_eval_mode_and_restore_the_mode():
    model = random_model(1, dropout=0.5)
    src = random_src([4, 6, 2, 7], 12, 1)
    reference = greedy_decode(model, src, 10, BOS_ID, EOS_ID)
    model.train()
    torch.manual_seed(0)
    assert not torch.equal(model(src, reference), model(src, reference))  # dropout is on in training mode
    for _ in range(3):
        assert torch.equal(greedy_decode(model, src, 10, BOS_ID, EOS_ID), reference)
        assert torch.equal(greedy_decode(model, src, 10, BOS_ID, EOS_ID, use_cache=False), reference)
        assert torch.equal(beam_search(model, src, 1, 10, BOS_ID, EOS_ID), reference)
    assert model.training and all(m.training for m in model.modules())


# ---------------------------------------------------------------- beam search


def test_gnmt_length_penalty():
    lengths = torch.tensor([1.0, 2.0, 10.0])
    assert torch.equal(gnmt_length_penalty(lengths, 0.0), torch.ones(3))
    torch.testing.assert_close(gnmt_length_penalty(lengths, 0.6), ((5 + lengths) / 6) ** 0.6)
    assert gnmt_length_penalty(torch.tensor(1.0), 0.6) == 1.0


@settings(max_examples=25, deadline=None)
@given(lengths=source_lengths, max_len=st.integers(1, 10), seed=st.integers(0, 10_000))
def test_beam_size_one_is_greedy(lengths, max_len, seed):
    model = random_model(seed)
    src = random_src(lengths, 12, seed)
    greedy = greedy_decode(model, src, max_len, BOS_ID, EOS_ID)
    assert torch.equal(beam_search(model, src, 1, max_len, BOS_ID, EOS_ID), greedy)


def brute_force_best(model, src, max_len: int, alpha: float) -> tuple[list[int], float]:
    """The best output of one source by exhaustive enumeration: every token at every step, EOS ends."""
    vocab = model.config.tgt_vocab_size
    outputs = []
    for length in range(1, max_len + 1):
        for tokens in itertools.product(range(vocab), repeat=length):
            if EOS_ID in tokens[:-1] or (length < max_len and tokens[-1] != EOS_ID):
                continue  # EOS ends an output; without EOS an output must run to max_len
            outputs.append([BOS_ID, *tokens] + [PAD_ID] * (max_len - length))
    candidates = torch.tensor(outputs)  # (N, 1 + max_len)
    scores = hypothesis_score(model, src.expand(len(outputs), -1), candidates, EOS_ID, alpha)  # (N,)
    best = int(scores.argmax())
    return strip(outputs[best]), scores[best].item()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_exhaustive_beam_is_exact_search_and_beats_greedy(seed, alpha):
    vocab, max_len = 5, 3
    model = random_model(seed, vocab=vocab)
    src = random_src([4], vocab, seed)
    beam = beam_search(model, src, vocab**max_len, max_len, BOS_ID, EOS_ID, length_penalty=alpha)
    greedy = greedy_decode(model, src, max_len, BOS_ID, EOS_ID)
    best_tokens, best_score = brute_force_best(model, src, max_len, alpha)
    beam_score = hypothesis_score(model, src, beam, EOS_ID, alpha).item()
    greedy_score = hypothesis_score(model, src, greedy, EOS_ID, alpha).item()
    assert strip(beam[0].tolist()) == best_tokens
    assert beam_score == pytest.approx(best_score, abs=1e-9)
    assert beam_score >= greedy_score - 1e-9


@settings(max_examples=20, deadline=None)
@given(lengths=source_lengths, beam_size=st.integers(2, 5), seed=st.integers(0, 10_000))
def test_batched_beam_equals_beam_on_each_sentence_alone(lengths, beam_size, seed):
    model = random_model(seed)
    src = random_src(lengths, 12, seed)
    batched = beam_search(model, src, beam_size, 8, BOS_ID, EOS_ID).tolist()
    for i, length in enumerate(lengths):
        alone = beam_search(model, src[i : i + 1, :length], beam_size, 8, BOS_ID, EOS_ID)[0].tolist()
        assert strip(batched[i]) == strip(alone)


def test_hypothesis_score_matches_stepwise_log_probs_and_ignores_padding():
    model = random_model(2, vocab=6)
    src = random_src([5, 3], 6, 2)
    out = beam_search(model, src, 3, 6, BOS_ID, EOS_ID)
    memory = model.encode(src)
    src_mask = (src != PAD_ID)[:, None, None, :]
    cache, expected = model.new_cache(), torch.zeros(2, dtype=torch.float64)
    lengths = [len(strip(row)) - 1 for row in out.tolist()]
    for t in range(out.size(1) - 1):  # the cached path, one token at a time
        log_probs = torch.log_softmax(model.decode(out[:, t : t + 1], memory, src_mask, cache=cache)[:, -1], -1)
        for b in range(2):
            if t < lengths[b]:
                expected[b] += log_probs[b, out[b, t + 1]]
    torch.testing.assert_close(hypothesis_score(model, src, out, EOS_ID, 0.0), expected)
    penalty = gnmt_length_penalty(torch.tensor(lengths, dtype=torch.float64), 0.6)
    torch.testing.assert_close(hypothesis_score(model, src, out, EOS_ID, 0.6), expected / penalty)
    padded = torch.cat([out, torch.full((2, 3), PAD_ID)], dim=1)  # more padding after EOS changes nothing
    if all(EOS_ID in row for row in out.tolist()):
        torch.testing.assert_close(hypothesis_score(model, src, padded, EOS_ID, 0.6), expected / penalty)


class PrefixCache:
    """The tree model's decoding state: the tokens seen so far, (B, T_seen); select() reorders its rows."""

    def __init__(self):
        self.tokens = None

    def select(self, index: torch.Tensor) -> None:
        self.tokens = self.tokens.index_select(0, index)


class TreeModel(nn.Module):
    """A "model" that reads p(next token | prefix) from a table and ignores its source (chapter 8's toy)."""

    def __init__(self, tree: dict[tuple, dict[int, float]], vocab: int):
        super().__init__()
        self.tree = tree
        self.config = SimpleNamespace(pad_id=PAD_ID, src_vocab_size=vocab, tgt_vocab_size=vocab, max_len=8)

    def encode(self, src, src_mask=None):
        return torch.zeros(src.size(0), src.size(1), 1)

    def new_cache(self):
        return [SimpleNamespace(self_attn=PrefixCache())]

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None, cache=None):
        new = tgt.size(1)
        if cache is not None:
            prefix = cache[0].self_attn
            prefix.tokens = tgt if prefix.tokens is None else torch.cat([prefix.tokens, tgt], dim=1)
            tgt = prefix.tokens
        logits = torch.full((tgt.size(0), tgt.size(1), self.config.tgt_vocab_size), -math.inf)
        for b, row in enumerate(tgt.tolist()):
            for t in range(len(row)):
                for token, p in self.tree.get(tuple(row[1 : t + 1]), {EOS_ID: 1.0}).items():
                    logits[b, t, token] = math.log(p)
        return logits[:, -new:]


def tree_output_probability(tree: dict, row: list[int]) -> float:
    p = 1.0
    for t in range(1, len(strip(row))):
        p *= tree.get(tuple(row[1:t]), {EOS_ID: 1.0})[row[t]]
    return p


def test_beam_search_escapes_greedy_trap():
    a, the, cat, dog = 3, 4, 5, 6
    tree = {(): {a: 0.5, the: 0.4, EOS_ID: 0.1}, (a,): {cat: 0.4, dog: 0.3, EOS_ID: 0.3}, (the,): {cat: 0.9, dog: 0.1}}
    toy, src = TreeModel(tree, 7), torch.tensor([[3]])
    greedy = greedy_decode(toy, src, 5, BOS_ID, EOS_ID)[0].tolist()
    beam = beam_search(toy, src, 2, 5, BOS_ID, EOS_ID)[0].tolist()
    assert strip(greedy) == [BOS_ID, a, cat, EOS_ID] and strip(beam) == [BOS_ID, the, cat, EOS_ID]
    assert tree_output_probability(tree, beam) == pytest.approx(0.36)


def test_narrow_beam_can_lose_to_greedy():
    a, the, cat, dog = 3, 4, 5, 6
    spread = {a: 0.25, the: 0.25, dog: 0.25, EOS_ID: 0.25}
    tree = {
        (): {a: 0.45, the: 0.4, EOS_ID: 0.15}, (a,): {cat: 0.4, dog: 0.3, EOS_ID: 0.3},
        (the,): {cat: 0.5, dog: 0.5}, (the, cat): spread, (the, dog): spread,
    }
    toy, src = TreeModel(tree, 7), torch.tensor([[3]])
    greedy = greedy_decode(toy, src, 5, BOS_ID, EOS_ID)
    assert strip(greedy[0].tolist()) == [BOS_ID, a, cat, EOS_ID]  # probability 0.18, the best output
    beam2 = beam_search(toy, src, 2, 5, BOS_ID, EOS_ID)  # "the cat" and "the dog" (0.2 each) push "a cat" out
    assert tree_output_probability(tree, beam2[0].tolist()) == pytest.approx(0.05)
    beam3 = beam_search(toy, src, 3, 5, BOS_ID, EOS_ID)
    assert strip(beam3[0].tolist()) == strip(greedy[0].tolist())  # a beam of 3 keeps "a cat"


def test_length_penalty_ranks_hypotheses_during_the_search():
    # After one step "<eos>" (0.3, finished, 1 token) outranks "a dog" (0.245, 2 tokens) by log-probability,
    # but not by log p / lp with alpha = 2. Only a search that ranks by the penalised score keeps "a dog",
    # whose completion "a dog <eos>" is the best output by that score.
    a, the, cat, dog = 3, 4, 5, 6
    tree = {
        (): {a: 0.5, EOS_ID: 0.3, the: 0.2}, (a,): {cat: 0.51, dog: 0.49},
        (a, cat): {EOS_ID: 0.3, a: 0.35, the: 0.35},
    }
    toy, src = TreeModel(tree, 7), torch.tensor([[3]])
    beam = beam_search(toy, src, 2, 5, BOS_ID, EOS_ID, length_penalty=2.0)
    assert strip(beam[0].tolist()) == [BOS_ID, a, dog, EOS_ID]


# ---------------------------------------------------------------- BLEU against sacreBLEU


def sacrebleu_none(hypotheses, references):
    return sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none", smooth_method="none").score


REFERENCES = ["the cat sat on the mat", "there is a dog in the garden"]
CORPORA = {
    "worked example": ["the cat sat on a mat", "a dog is in the garden"],
    "shorter than the references": ["the cat sat", "a dog in the garden"],
    "longer than the references": ["the cat sat on the mat today", "there is a big dog in the old garden"],
    "repeated words": ["the the the cat sat on the mat", "there is a dog dog in the garden"],
    "repeated words, no 4-gram match": ["the the the cat the mat", "in the the garden a dog is"],
    "shorter than four words": ["on the mat", "there is a dog in the garden"],
    "empty hypothesis": ["", "there is a dog in the garden"],
    "all empty": ["", ""],
    "no match": ["dogs bark loudly", "cats sleep"],
    "identical": REFERENCES,
}


@pytest.mark.parametrize("name", CORPORA)
def test_corpus_bleu_equals_sacrebleu(name):
    assert corpus_bleu(CORPORA[name], REFERENCES) == pytest.approx(sacrebleu_none(CORPORA[name], REFERENCES), abs=1e-9)


def test_corpus_bleu_worked_example_by_hand():
    # clipped matches 11/12, 6/10, 3/8, 1/6; c = 12, r = 13
    expected = 100 * math.exp(1 - 13 / 12) * (11 / 12 * 6 / 10 * 3 / 8 * 1 / 6) ** 0.25
    assert corpus_bleu(CORPORA["worked example"], REFERENCES) == pytest.approx(expected, abs=1e-9)
    assert corpus_bleu(REFERENCES, REFERENCES) == 100.0 and corpus_bleu(CORPORA["no match"], REFERENCES) == 0.0


words = st.sampled_from(["a", "b", "c", "d", "e"])
sentences = st.lists(words, max_size=9).map(" ".join)


@settings(max_examples=50, deadline=None)
@given(pairs=st.lists(st.tuples(sentences, sentences), min_size=1, max_size=5))
def test_corpus_bleu_equals_sacrebleu_on_random_corpora(pairs):
    hypotheses, references = [h for h, _ in pairs], [r for _, r in pairs]
    assert corpus_bleu(hypotheses, references) == pytest.approx(sacrebleu_none(hypotheses, references), abs=1e-9)


# ---------------------------------------------------------------- bad inputs


@pytest.fixture(scope="module")
def model():
    return random_model(0)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda m, s: greedy_decode(m, s[0], 5, BOS_ID, EOS_ID), ValueError, r"shape \(B, T_src\).*src\[None\]"),
        (lambda m, s: greedy_decode(m, s[:, :0], 5, BOS_ID, EOS_ID), ValueError, "T_src >= 1"),
        (lambda m, s: greedy_decode(m, s.float(), 5, BOS_ID, EOS_ID), TypeError, "integer token ids"),
        (lambda m, s: greedy_decode(m, s.tolist(), 5, BOS_ID, EOS_ID), TypeError, "must be a tensor"),
        (lambda m, s: greedy_decode(m, s + 12, 5, BOS_ID, EOS_ID), ValueError, "outside the model's source"),
        (lambda m, s: greedy_decode(m, s * 0, 5, BOS_ID, EOS_ID), ValueError, "only padding"),
        (lambda m, s: greedy_decode(m, s, 0, BOS_ID, EOS_ID), ValueError, "max_len must be between 1"),
        (lambda m, s: greedy_decode(m, s, 25, BOS_ID, EOS_ID), ValueError, "config.max_len = 24"),
        (lambda m, s: greedy_decode(m, s, 5.0, BOS_ID, EOS_ID), TypeError, "max_len must be an int"),
        (lambda m, s: greedy_decode(m, s, 5, 12, EOS_ID), ValueError, "bos_id must be a target token id"),
        (lambda m, s: beam_search(m, s, 0, 5, BOS_ID, EOS_ID), ValueError, "beam_size must be an int >= 1"),
        (lambda m, s: beam_search(m, s, 2.5, 5, BOS_ID, EOS_ID), ValueError, "beam_size must be an int >= 1"),
        (lambda m, s: beam_search(m, s, 2, 0, BOS_ID, EOS_ID), ValueError, "max_len must be between 1"),
        (lambda m, s: beam_search(m, s, 2, 5, BOS_ID, EOS_ID, length_penalty=-0.5), ValueError, "length_penalty"),
        (lambda m, s: hypothesis_score(m, s, s[:, :1], EOS_ID), ValueError, r"tokens must have shape"),
    ],
)
def test_decoders_reject_bad_input(model, call, error, message):
    with pytest.raises(error, match=message):
        call(model, random_src([3, 5], 12, 0))


@pytest.mark.parametrize(
    ("hypotheses", "references", "error", "message"),
    [
        ("the cat", "the cat", TypeError, "not one string"),
        (["the cat"], [["the cat"]], TypeError, "one reference per hypothesis"),
        (["the cat", "a dog"], ["the cat"], ValueError, "got 2 and 1"),
    ],
)
def test_corpus_bleu_rejects_bad_input(hypotheses, references, error, message):
    with pytest.raises(error, match=message):
        corpus_bleu(hypotheses, references)
