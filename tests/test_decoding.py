"""Tests of transformer_book.decoding (chapter 8): the cache, EOS handling, beam search, BLEU, bad inputs."""

import itertools
import math
from types import SimpleNamespace

import pytest
import sacrebleu
import torch
from hostreads import reads_with_steps
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
from transformer_book.kvcache import new_cache
from transformer_book.masking import padding_mask
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
    if all(EOS_ID in row for row in rows):  # stopped at the step the last sentence finished
        assert any(row[-1] == EOS_ID for row in rows)
    else:  # some sentence never finished: the loop ran all max_len steps
        assert out.size(1) == 1 + max_len


def test_the_cache_holds_a_key_and_a_value_per_layer_and_position_and_gives_the_full_logits():
    # Chapter 8's memory formula, 2 * N * D * (t + T_src) numbers per sentence, and the cache's exactness:
    # the logits of step t, fed one token at a time, equal those of a full teacher-forced pass.
    model = random_model(3)
    src = random_src([5, 3, 7], 12, 3)  # (B, T_src) = (3, 7)
    tgt = torch.cat([torch.full((3, 1), BOS_ID), random_src([6, 6, 6], 12, 4)], dim=1)  # (B, 7)
    src_mask = padding_mask(src, PAD_ID)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask)  # (B, 7, V), causal mask inside
        cache = new_cache(model)
        steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    config = model.config
    heads, d_head = config.num_heads, config.d_model // config.num_heads
    for layer_cache in cache:
        assert layer_cache.self_attn.key.shape == (3, heads, 7, d_head)  # (B, H, t, D_h), grown step by step
        assert layer_cache.cross_attn.key.shape == (3, heads, 7, d_head)  # (B, H, T_src, D_h), projected once
        assert layer_cache.cross_attn.static and not layer_cache.self_attn.static
    kv_caches = [c for layer_cache in cache for c in (layer_cache.self_attn, layer_cache.cross_attn)]
    held = sum(c.key.numel() + c.value.numel() for c in kv_caches)
    assert held == 3 * 2 * config.num_decoder_layers * config.d_model * (7 + 7)


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


@settings(max_examples=20, deadline=None)
@given(lengths=source_lengths, beam_size=st.integers(1, 4), seed=st.integers(0, 10_000), data=st.data())
def test_each_sentence_stops_at_its_own_limit_as_if_decoded_alone(lengths, beam_size, seed, data):
    model = random_model(seed)
    src = random_src(lengths, 12, seed)
    limits = data.draw(st.lists(st.integers(1, 9), min_size=len(lengths), max_size=len(lengths)))
    never = -1  # an eos_id the model never produces: every sentence runs to its limit
    for eos_id in (EOS_ID, never):
        if beam_size == 1:
            batched = greedy_decode(model, src, max(limits), BOS_ID, eos_id, limits=torch.tensor(limits))
        else:
            batched = beam_search(model, src, beam_size, max(limits), BOS_ID, eos_id, limits=torch.tensor(limits))
        for i, (length, limit) in enumerate(zip(lengths, limits)):
            if beam_size == 1:
                alone = greedy_decode(model, src[i : i + 1, :length], limit, BOS_ID, eos_id)
            else:
                alone = beam_search(model, src[i : i + 1, :length], beam_size, limit, BOS_ID, eos_id)
            row = batched[i].tolist()
            assert strip(row)[: 1 + limit] == strip(alone[0].tolist())
            assert all(token == PAD_ID for token in row[1 + limit :])  # nothing after its own limit


def test_hypothesis_score_matches_stepwise_log_probs_and_ignores_padding():
    model = random_model(2, vocab=6)
    src = random_src([5, 3], 6, 2)
    out = torch.tensor([[BOS_ID, 4, 5, 3, EOS_ID, PAD_ID], [BOS_ID, 3, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
    memory = model.encode(src)
    src_mask = (src != PAD_ID)[:, None, None, :]
    cache, expected = new_cache(model), torch.zeros(2, dtype=torch.float64)
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
    torch.testing.assert_close(hypothesis_score(model, src, padded, EOS_ID, 0.6), expected / penalty)
    tokens_after_eos = out.masked_fill(out == PAD_ID, 5)  # nor do other tokens after EOS
    torch.testing.assert_close(hypothesis_score(model, src, tokens_after_eos, EOS_ID, 0.6), expected / penalty)
    beam = beam_search(model, src, 3, 6, BOS_ID, EOS_ID)  # and the same score for beam search's own output
    beam_lengths = torch.tensor([len(strip(row)) - 1 for row in beam.tolist()], dtype=torch.float64)
    beam_log_p = hypothesis_score(model, src, beam, EOS_ID, 0.0)
    torch.testing.assert_close(
        hypothesis_score(model, src, beam, EOS_ID, 0.6), beam_log_p / gnmt_length_penalty(beam_lengths, 0.6)
    )


class PrefixCache:
    """The tree model's decoding state: the tokens seen so far, (B, T_seen); select() reorders its rows."""

    def __init__(self):
        self.tokens = None

    def select(self, index: torch.Tensor) -> None:
        self.tokens = self.tokens.index_select(0, index)


class TreeModel(nn.Module):
    """A "model" that reads p(next token | prefix) from a table and ignores its source (chapter 8's toy).

    With trees_by_source, the first source token of each sentence picks its table instead.
    """

    def __init__(self, tree: dict[tuple, dict[int, float]], vocab: int, trees_by_source: dict | None = None):
        super().__init__()
        self.tree, self.trees_by_source = tree, trees_by_source
        self.config = SimpleNamespace(pad_id=PAD_ID, src_vocab_size=vocab, tgt_vocab_size=vocab, max_len=8)

    def encode(self, src, src_mask=None):
        return src[:, :1, None].double()  # (B, 1, 1): the first source token, all the "memory" there is

    def new_cache(self):
        return [SimpleNamespace(self_attn=PrefixCache())]

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None, cache=None, check_ids=True):
        new = tgt.size(1)
        if cache is not None:
            prefix = cache[0].self_attn
            prefix.tokens = tgt if prefix.tokens is None else torch.cat([prefix.tokens, tgt], dim=1)
            tgt = prefix.tokens
        logits = torch.full((tgt.size(0), tgt.size(1), self.config.tgt_vocab_size), -math.inf)
        for b, row in enumerate(tgt.tolist()):
            tree = self.tree if self.trees_by_source is None else self.trees_by_source[int(memory[b, 0, 0])]
            for t in range(len(row)):
                for token, p in tree.get(tuple(row[1 : t + 1]), {EOS_ID: 1.0}).items():
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


A, THE, CAT, DOG = 3, 4, 5, 6
SPREAD = {A: 0.3, THE: 0.25, DOG: 0.2, EOS_ID: 0.25}
# K = 2. Step 1 keeps "a" (0.7) and the finished "<eos>" (0.2). Step 2: "a cat" (0.385) and "a dog" (0.315)
# both outrank "<eos>", which leaves the beam. No completion of theirs has a probability above 0.385 * 0.3,
# less than 0.2 at both alphas used here: the best output is "<eos>", found at step 1. (No ties, so that
# greedy decoding's argmax and beam search's topk cannot break one differently.)
PUSHED_OUT_TREE = {(): {A: 0.7, EOS_ID: 0.2, THE: 0.1}, (A,): {CAT: 0.55, DOG: 0.45}, (A, CAT): SPREAD, (A, DOG): SPREAD}


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_finished_hypothesis_pushed_out_of_the_beam_is_still_returned(alpha):
    toy, src = TreeModel(PUSHED_OUT_TREE, 7), torch.tensor([[3]])
    beam = beam_search(toy, src, 2, 5, BOS_ID, EOS_ID, length_penalty=alpha)
    assert strip(beam[0].tolist()) == [BOS_ID, EOS_ID]
    assert hypothesis_score(toy, src, beam, EOS_ID, alpha).item() == pytest.approx(math.log(0.2))
    assert torch.equal(beam_search(toy, src, 1, 5, BOS_ID, EOS_ID), greedy_decode(toy, src, 5, BOS_ID, EOS_ID))


def test_remembered_hypothesis_goes_to_its_own_sentence():
    # Sentences whose first source token is 3 read PUSHED_OUT_TREE (the best output leaves the beam);
    # those with 4 read the greedy-trap tree, whose best output "the cat <eos>" stays in the beam.
    trap = {(): {A: 0.5, THE: 0.4, EOS_ID: 0.1}, (A,): {CAT: 0.4, DOG: 0.3, EOS_ID: 0.3}, (THE,): {CAT: 0.9, DOG: 0.1}}
    toy = TreeModel({}, 7, trees_by_source={3: PUSHED_OUT_TREE, 4: trap})
    out = beam_search(toy, torch.tensor([[3], [4], [3]]), 2, 5, BOS_ID, EOS_ID)
    assert [strip(row) for row in out.tolist()] == [[BOS_ID, EOS_ID], [BOS_ID, THE, CAT, EOS_ID], [BOS_ID, EOS_ID]]
    assert out[0, 2:].eq(PAD_ID).all() and out[2, 2:].eq(PAD_ID).all()  # padding after the remembered EOS


class NoReorderPrefixCache(PrefixCache):
    def select(self, index: torch.Tensor) -> None:
        pass  # the bug: the cached prefixes stay in their rows while the hypotheses move


class NoReorderTreeModel(TreeModel):
    def new_cache(self):
        return [SimpleNamespace(self_attn=NoReorderPrefixCache())]


def random_tree(num_symbols: int, depth: int, seed: int) -> dict:
    """Random next-token probabilities over EOS and num_symbols symbols for every prefix shorter than depth."""
    generator = torch.Generator().manual_seed(seed)
    tokens = [EOS_ID, *range(FIRST_SYMBOL, FIRST_SYMBOL + num_symbols)]
    tree = {}
    for length in range(depth):
        for prefix in itertools.product(tokens[1:], repeat=length):
            p = torch.rand(len(tokens), generator=generator, dtype=torch.float64) ** 2  # (num_symbols + 1,)
            tree[prefix] = dict(zip(tokens, (p / p.sum()).tolist()))
    return tree


def best_tree_output(tree: dict, alpha: float) -> list[int]:
    """The best output of a tree by enumeration: every prefix followed by EOS (prefixes of full depth end)."""

    outputs = [[BOS_ID, *prefix, EOS_ID] for prefix, probs in tree.items() if EOS_ID in probs] + [
        [BOS_ID, *prefix, token, EOS_ID] for prefix, probs in tree.items() for token in probs
        if token != EOS_ID and (*prefix, token) not in tree
    ]
    def score(row):
        length = torch.tensor(float(len(row) - 1), dtype=torch.float64)
        return math.log(tree_output_probability(tree, row)) / gnmt_length_penalty(length, alpha).item()
    return max(outputs, key=score)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_exhaustive_beam_is_exact_search_on_random_tables(seed, alpha):
    # A beam wide enough to hold every hypothesis (40 outputs here) finds the best one, on tables whose
    # probabilities depend on the whole prefix.
    num_symbols, depth = 3, 3
    tree = random_tree(num_symbols, depth, seed)
    out = beam_search(TreeModel(tree, FIRST_SYMBOL + num_symbols), torch.tensor([[3]]), 64, depth + 1, BOS_ID,
                      EOS_ID, alpha)
    assert strip(out[0].tolist()) == best_tree_output(tree, alpha)


def test_exhaustive_beam_needs_the_cache_reordered():
    # After step 1 row 0 holds "a" (0.5), row 1 "the" (0.4). After step 2 the best prefix, "the cat" (0.36),
    # moves to row 0. A cache whose select() does nothing leaves "a" in row 0 of the cache, so "the cat" is
    # continued with the probabilities that follow "a cat", and "a cat" (row 1) with those of "the cat":
    # even a beam that holds every hypothesis then returns a worse output than the best one.
    tree = {
        (): {A: 0.5, THE: 0.4, EOS_ID: 0.1}, (A,): {CAT: 0.55, DOG: 0.45}, (THE,): {CAT: 0.9, DOG: 0.1},
        (A, CAT): SPREAD, (A, DOG): SPREAD,
    }
    src = torch.tensor([[3]])
    best = best_tree_output(tree, 0.6)
    assert best == [BOS_ID, THE, CAT, EOS_ID]
    assert strip(beam_search(TreeModel(tree, 7), src, 64, 4, BOS_ID, EOS_ID)[0].tolist()) == best
    wrong = beam_search(NoReorderTreeModel(tree, 7), src, 64, 4, BOS_ID, EOS_ID)[0].tolist()
    assert strip(wrong) != best
    assert tree_output_probability(tree, wrong) < tree_output_probability(tree, best)


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
        (lambda m, s: greedy_decode(m, s[0], 5, BOS_ID, EOS_ID), ValueError, r"shape \(B, T\).*src\[None\]"),
        (lambda m, s: greedy_decode(m, s[:, :0], 5, BOS_ID, EOS_ID), ValueError, "src is empty"),
        (lambda m, s: greedy_decode(m, s.float(), 5, BOS_ID, EOS_ID), TypeError, "integer token ids"),
        (lambda m, s: greedy_decode(m, s.tolist(), 5, BOS_ID, EOS_ID), TypeError, "must be a tensor"),
        (lambda m, s: greedy_decode(m, s + 12, 5, BOS_ID, EOS_ID), ValueError, "src holds token ids from 12"),
        (lambda m, s: greedy_decode(m, s * 0, 5, BOS_ID, EOS_ID), ValueError, "only padding"),
        (lambda m, s: greedy_decode(m, s, 0, BOS_ID, EOS_ID), ValueError, "max_len must be an int >= 1"),
        (lambda m, s: greedy_decode(m, s, 25, BOS_ID, EOS_ID), ValueError, "config.max_len = 24"),
        (lambda m, s: greedy_decode(m, s, 5.0, BOS_ID, EOS_ID), TypeError, "max_len must be an int"),
        (lambda m, s: greedy_decode(m, s, 5, 12, EOS_ID), ValueError, "bos_id must be a target token id"),
        (lambda m, s: greedy_decode(m, s, 5, -1, EOS_ID), ValueError, "bos_id must be an int >= 0"),
        (lambda m, s: greedy_decode(m, s, 5, 1.0, EOS_ID), TypeError, "bos_id must be an int"),
        (lambda m, s: beam_search(m, s, 2, 5, torch.tensor(1), EOS_ID), TypeError, "bos_id must be an int"),
        (lambda m, s: greedy_decode(m, s, 5, BOS_ID, 2.0), TypeError, "eos_id must be an int"),
        (lambda m, s: beam_search(m, s, 2, 5, BOS_ID, "2"), TypeError, "eos_id must be an int"),
        (lambda m, s: beam_search(m, s, 0, 5, BOS_ID, EOS_ID), ValueError, "beam_size must be an int >= 1"),
        (lambda m, s: beam_search(m, s, 2.5, 5, BOS_ID, EOS_ID), TypeError, "beam_size must be an int >= 1"),
        (lambda m, s: beam_search(m, s, True, 5, BOS_ID, EOS_ID), TypeError, "beam_size must be an int >= 1"),
        (lambda m, s: beam_search(m, s, 2, 0, BOS_ID, EOS_ID), ValueError, "max_len must be an int >= 1"),
        (lambda m, s: beam_search(m, s, 2, 5.0, BOS_ID, EOS_ID), TypeError, "max_len must be an int"),
        (lambda m, s: beam_search(m, s, 2, 5, BOS_ID, EOS_ID, length_penalty=-0.5), ValueError, "length_penalty"),
        (lambda m, s: beam_search(m, s, 2, 5, BOS_ID, EOS_ID, length_penalty=math.nan), ValueError, "length_penalty"),
        (lambda m, s: beam_search(m, s, 2, 5, BOS_ID, EOS_ID, length_penalty="0.6"), TypeError, "length_penalty"),
        (lambda m, s: beam_search(m, s, 2, 5, BOS_ID, EOS_ID, length_penalty=None), TypeError, "length_penalty"),
        (lambda m, s: hypothesis_score(m, s, s[:, :1], EOS_ID), ValueError, r"tokens must have shape"),
        (lambda m, s: greedy_decode(m, s, 5, BOS_ID, EOS_ID, limits=[3, 4]), TypeError, "limits must be an integer"),
        (lambda m, s: greedy_decode(m, s, 5, BOS_ID, EOS_ID, limits=torch.tensor([3.0, 4.0])), TypeError,
         "limits must be an integer tensor"),
        (lambda m, s: greedy_decode(m, s, 5, BOS_ID, EOS_ID, limits=torch.tensor([3])), ValueError,
         r"one cap per sentence of src.*shape \(1,\)"),
        (lambda m, s: beam_search(m, s, 2, 5, BOS_ID, EOS_ID, limits=torch.tensor([3, 6])), ValueError,
         "each between 1 and max_len = 5"),
        (lambda m, s: beam_search(m, s, 2, 5, BOS_ID, EOS_ID, limits=torch.tensor([0, 5])), ValueError,
         "each between 1 and max_len"),
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


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.float32, torch.bool])
def test_one_token_id_rule_for_masks_model_and_decoders(model, dtype):
    # padding_mask, the model and the decoders share chapter 5's check_token_ids: torch.long or int32 only.
    src = torch.tensor([[5, 6, 7, EOS_ID]]).to(dtype)
    for call in (lambda: padding_mask(src, PAD_ID), lambda: model(src, src.long()),
                 lambda: greedy_decode(model, src, 5, BOS_ID, EOS_ID)):
        with pytest.raises(TypeError, match="must hold integer token ids \\(torch.long\\)"):
            call()
    model(src.int(), src.int())  # int32 passes everywhere, as nn.Embedding takes it
    greedy_decode(model, src.int(), 5, BOS_ID, EOS_ID)


def assert_one_read_per_step(decode, once_at_most: int):
    """A decoder reads back one thing per step, whether every sentence has ended (it cannot stop without
    knowing); everything else, the source's checks included, is read a fixed number of times, not per step."""
    src = random_src([5, 3], 12, seed=0)  # (2, 5)

    def run(steps):
        out = decode(random_model(0), src, steps)  # eos_id -1: never stops, so exactly `steps` steps run
        assert out.shape == (2, steps + 1)

    once, per_step = reads_with_steps(run, few=10, many=20)
    assert list(per_step.values()) == [10], f"one read per step, at one line; got {per_step} more for 10 more steps"
    assert once.total() - 10 <= once_at_most, f"reads outside the loop: {once}"


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_decoding_reads_back_once_per_step_and_checks_the_ids_once(use_cache):
    # Outside the loop: the source's all-padding rows and its id range (checks.id_range), 2 reads.
    assert_one_read_per_step(
        lambda model, src, steps: greedy_decode(model, src, steps, BOS_ID, -1, use_cache=use_cache), once_at_most=2
    )


def test_beam_search_reads_back_once_per_step_and_checks_the_ids_once():
    # Outside the loop: the source's two checks, and picking each sentence's finished hypotheses at the end (2).
    assert_one_read_per_step(lambda model, src, steps: beam_search(model, src, 3, steps, BOS_ID, -1), once_at_most=4)


@pytest.mark.parametrize(
    ("max_n", "error", "message"),
    [("4", TypeError, "max_n must be an int; got '4' of type str"), (4.0, TypeError, "of type float"),
     (True, TypeError, "of type bool"), (0, ValueError, "max_n must be an int >= 1; got 0")],
)
def test_corpus_bleu_rejects_a_bad_max_n(max_n, error, message):
    with pytest.raises(error, match=message):
        corpus_bleu(["the cat"], ["the cat"], max_n=max_n)
