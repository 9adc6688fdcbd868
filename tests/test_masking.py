"""Tests for transformer_book.masking (chapter 5): masks, padding, shifted targets, batches, and the two
invariances the masks exist for (no information from the future, none from padding), checked on the full
Transformer."""

import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from transformer_book.attention import scaled_dot_product_attention
from transformer_book.masking import (
    Batch,
    bert_pair_input,
    causal_mask,
    make_batch,
    pad_sequences,
    padding_mask,
)
from transformer_book.model import Transformer, TransformerConfig
from transformer_book.multihead import MultiHeadAttention

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
NUM_SPECIALS = 3
VOCAB_SIZE = 16
MAX_LEN = 7
FAST = settings(max_examples=30, deadline=None)
SLOW = settings(max_examples=15, deadline=None)  # examples that run the Transformer
EXACT = {"atol": 1e-12, "rtol": 0.0}  # float64: "unchanged" means equal up to round-off

word_ids = st.integers(NUM_SPECIALS, VOCAB_SIZE - 1)


@st.composite
def sequences(draw, min_len: int = 1, max_len: int = MAX_LEN, max_batch: int = 4) -> list[torch.Tensor]:
    """A list of 1-D tensors of word ids with random lengths."""
    lengths = draw(st.lists(st.integers(min_len, max_len), min_size=1, max_size=max_batch))
    return [torch.tensor(draw(st.lists(word_ids, min_size=n, max_size=n))) for n in lengths]


@st.composite
def pairs(draw, max_batch: int = 3) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Source sentences (words + EOS) and full targets (BOS + words + EOS), the same number of each."""
    batch = draw(st.integers(1, max_batch))
    src = [
        torch.cat([torch.tensor(draw(st.lists(word_ids, min_size=1, max_size=MAX_LEN))), torch.tensor([EOS_ID])])
        for _ in range(batch)
    ]
    tgt = [
        torch.tensor([BOS_ID, *draw(st.lists(word_ids, min_size=1, max_size=MAX_LEN)), EOS_ID])
        for _ in range(batch)
    ]
    return src, tgt


@functools.cache
def tiny_model(seed: int = 0) -> Transformer:
    """A small Transformer in float64, dropout 0, eval mode: its outputs are deterministic."""
    torch.manual_seed(seed)
    config = TransformerConfig(
        src_vocab_size=VOCAB_SIZE, tgt_vocab_size=VOCAB_SIZE, d_model=16, num_heads=2, num_encoder_layers=2,
        num_decoder_layers=2, d_ff=32, dropout=0.0, max_len=64, pad_id=PAD_ID,
    )
    return Transformer(config).double().eval()


def other_word(token: int) -> int:
    return NUM_SPECIALS + (token - NUM_SPECIALS + 1) % (VOCAB_SIZE - NUM_SPECIALS)


# ---------------------------------------------------------------- pad_sequences and padding_mask


@FAST
@given(sequences(), st.integers(0, 2))
def test_pad_sequences_copies_each_sequence_and_pads_the_rest(seqs, pad_id):
    padded = pad_sequences(seqs, pad_id)
    assert padded.shape == (len(seqs), max(len(s) for s in seqs))
    assert padded.dtype == seqs[0].dtype
    for row, seq in zip(padded, seqs, strict=True):
        assert torch.equal(row[: len(seq)], seq)
        assert (row[len(seq) :] == pad_id).all()


@FAST
@given(sequences())
def test_padding_mask_is_true_exactly_at_real_tokens_of_a_padded_batch(seqs):
    tokens = pad_sequences(seqs, PAD_ID)  # (B, T)
    mask = padding_mask(tokens, PAD_ID)
    assert mask.shape == (len(seqs), 1, 1, tokens.size(1)) and mask.dtype == torch.bool
    lengths = torch.tensor([len(s) for s in seqs])
    assert torch.equal(mask[:, 0, 0, :], torch.arange(tokens.size(1))[None, :] < lengths[:, None])


@FAST
@given(st.integers(1, 4), st.integers(1, 9), st.data())
def test_padding_mask_follows_pad_id_wherever_it_is(batch, length, data):
    pad_id = data.draw(st.integers(0, VOCAB_SIZE - 1))
    values = data.draw(st.lists(st.integers(0, VOCAB_SIZE - 1), min_size=batch * length, max_size=batch * length))
    tokens = torch.tensor(values).view(batch, length)
    mask = padding_mask(tokens, pad_id)
    assert torch.equal(mask[:, 0, 0, :], tokens != pad_id)


# ---------------------------------------------------------------- causal_mask and combining masks


@FAST
@given(st.integers(1, 40))
def test_causal_mask_is_lower_triangular_with_the_diagonal(size):
    mask = causal_mask(size)
    assert mask.shape == (size, size) and mask.dtype == torch.bool
    i, j = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    assert torch.equal(mask, j <= i)
    assert mask.sum(dim=1).tolist() == list(range(1, size + 1))
    # PyTorch's additive mask (0 = allowed, -inf = blocked) is the same pattern.
    assert torch.equal(mask, nn.Transformer.generate_square_subsequent_mask(size) == 0)


def test_causal_mask_device_argument():
    assert causal_mask(3, device="cpu").device.type == "cpu"
    assert causal_mask(3, torch.device("cpu")).device.type == "cpu"


@FAST
@given(sequences(), st.integers(1, 4))
def test_padding_and_causal_combine_by_broadcasting(seqs, num_heads):
    tokens = pad_sequences(seqs, PAD_ID)  # (B, T)
    batch, length = tokens.shape
    combined = padding_mask(tokens, PAD_ID) & causal_mask(length)  # (B, 1, 1, T) & (T, T)
    assert combined.shape == (batch, 1, length, length)
    i, j = torch.meshgrid(torch.arange(length), torch.arange(length), indexing="ij")
    assert torch.equal(combined, (tokens != PAD_ID)[:, None, None, :] & (j <= i))
    # Against scores (B, H, T, T): blocked keys get exactly zero weight, rows still sum to one
    # (key 0 is a real token in every sentence, so no row is fully masked).
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, num_heads, length, 4, dtype=torch.float64) for _ in range(3))
    out, weights = scaled_dot_product_attention(q, k, v, combined)
    assert weights.shape == (batch, num_heads, length, length)
    assert (weights.masked_select(~combined.expand_as(weights)) == 0).all()
    assert_close(weights.sum(-1), torch.ones(batch, num_heads, length, dtype=torch.float64))
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=combined))


# ---------------------------------------------------------------- make_batch and Batch


@FAST
@given(pairs())
def test_make_batch_shifts_the_target_and_builds_both_masks(pair):
    src_seqs, tgt_seqs = pair
    src, tgt = pad_sequences(src_seqs, PAD_ID), pad_sequences(tgt_seqs, PAD_ID)
    batch = make_batch(src, tgt, PAD_ID)
    assert isinstance(batch, Batch)
    assert torch.equal(batch.src, src)
    assert torch.equal(batch.tgt_in, tgt[:, :-1]) and torch.equal(batch.tgt_out, tgt[:, 1:])
    assert (batch.tgt_in[:, 0] == BOS_ID).all()
    assert torch.equal(batch.src_mask, padding_mask(src, PAD_ID))
    length = tgt.size(1) - 1
    assert batch.tgt_mask.shape == (len(tgt_seqs), 1, length, length)
    assert torch.equal(batch.tgt_mask, padding_mask(batch.tgt_in, PAD_ID) & causal_mask(length))
    assert batch.tgt_mask.any(dim=-1).all(), "BOS is visible to every query: no fully masked row"
    # Real target tokens: every word and EOS of every sentence (BOS is read, never predicted).
    assert batch.num_tokens == sum(len(t) - 1 for t in tgt_seqs)
    assert isinstance(batch.num_tokens, int)
    moved = batch.to("cpu")
    for name in ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask"):
        assert torch.equal(getattr(moved, name), getattr(batch, name))
    assert moved.num_tokens == batch.num_tokens


# ---------------------------------------------------------------- the future does not leak


@SLOW
@given(pairs(max_batch=2), st.data())
def test_changing_a_future_token_leaves_earlier_outputs_unchanged(pair, data):
    model = tiny_model()
    batch = make_batch(pad_sequences(pair[0], PAD_ID), pad_sequences(pair[1], PAD_ID), PAD_ID)
    k = data.draw(st.integers(0, batch.tgt_in.size(1) - 1), label="changed position")
    changed = batch.tgt_in.clone()
    changed[:, k] = torch.tensor([other_word(int(t)) for t in changed[:, k]])  # a word in every row
    new_mask = padding_mask(changed, PAD_ID) & causal_mask(changed.size(1))
    with torch.no_grad():
        before = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        after = model(batch.src, changed, batch.src_mask, new_mask)
    assert_close(after[:, :k], before[:, :k], **EXACT)
    assert (after[:, k] - before[:, k]).abs().max() > 1e-6, "the changed position itself must react"


def test_without_the_causal_mask_the_future_leaks():
    """The control for the test above: the same change, padding mask only, reaches earlier positions."""
    model = tiny_model()
    torch.manual_seed(1)
    src = torch.randint(NUM_SPECIALS, VOCAB_SIZE, (2, 5))
    tgt_in = torch.cat([torch.full((2, 1), BOS_ID), torch.randint(NUM_SPECIALS, VOCAB_SIZE, (2, 5))], dim=1)
    changed = tgt_in.clone()
    changed[:, 4] = torch.tensor([other_word(int(t)) for t in changed[:, 4]])
    with torch.no_grad():
        before = model(src, tgt_in, None, padding_mask(tgt_in, PAD_ID))
        after = model(src, changed, None, padding_mask(changed, PAD_ID))
    assert (after[:, :4] - before[:, :4]).abs().amax(dim=-1).min() > 1e-4


@SLOW
@given(pairs(max_batch=1))
def test_one_parallel_pass_equals_prefix_by_prefix_decoding(pair):
    model = tiny_model()
    batch = make_batch(pad_sequences(pair[0], PAD_ID), pad_sequences(pair[1], PAD_ID), PAD_ID)
    with torch.no_grad():
        parallel = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        steps = torch.stack(
            [model(batch.src, batch.tgt_in[:, : t + 1], batch.src_mask)[:, -1] for t in range(batch.tgt_in.size(1))],
            dim=1,
        )
    assert_close(parallel, steps, **EXACT)


# ---------------------------------------------------------------- padding is invisible


@SLOW
@given(pairs(), st.integers(1, 5))
def test_appending_source_padding_leaves_the_outputs_unchanged(pair, extra):
    model = tiny_model()
    batch = make_batch(pad_sequences(pair[0], PAD_ID), pad_sequences(pair[1], PAD_ID), PAD_ID)
    src_more = torch.cat([batch.src, torch.full((batch.src.size(0), extra), PAD_ID)], dim=1)
    with torch.no_grad():
        before = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        after = model(src_more, batch.tgt_in, padding_mask(src_more, PAD_ID), batch.tgt_mask)
        memory = model.encode(batch.src, batch.src_mask)
        memory_more = model.encode(src_more, padding_mask(src_more, PAD_ID))
    real_src = batch.src != PAD_ID
    assert_close(memory_more[:, : batch.src.size(1)][real_src], memory[real_src], **EXACT)
    assert_close(after, before, **EXACT)


@SLOW
@given(pairs(), st.integers(1, 5))
def test_appending_target_padding_leaves_real_positions_unchanged(pair, extra):
    model = tiny_model()
    src, tgt = pad_sequences(pair[0], PAD_ID), pad_sequences(pair[1], PAD_ID)
    batch = make_batch(src, tgt, PAD_ID)
    longer = make_batch(src, torch.cat([tgt, torch.full((tgt.size(0), extra), PAD_ID)], dim=1), PAD_ID)
    with torch.no_grad():
        before = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        after = model(longer.src, longer.tgt_in, longer.src_mask, longer.tgt_mask)
    real = batch.tgt_out != PAD_ID
    assert_close(after[:, : batch.tgt_in.size(1)][real], before[real], **EXACT)


@SLOW
@given(pairs())
def test_each_sentence_alone_equals_its_row_in_the_padded_batch(pair):
    model = tiny_model()
    batch = make_batch(pad_sequences(pair[0], PAD_ID), pad_sequences(pair[1], PAD_ID), PAD_ID)
    with torch.no_grad():
        together = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        for b, (s, t) in enumerate(zip(*pair, strict=True)):
            alone = make_batch(s[None], t[None], PAD_ID)
            logits = model(alone.src, alone.tgt_in, alone.src_mask, alone.tgt_mask)
            assert_close(together[b, : alone.tgt_in.size(1)], logits[0], **EXACT)


def test_unmasked_source_padding_changes_the_outputs():
    """The control for the padding tests: with an all-True source mask, padding changes the logits."""
    model = tiny_model()
    src = torch.tensor([[4, 5, 6, EOS_ID]])
    tgt_in = torch.tensor([[BOS_ID, 7, 8]])
    src_more = torch.cat([src, torch.full((1, 3), PAD_ID)], dim=1)
    with torch.no_grad():
        before = model(src, tgt_in)
        after = model(src_more, tgt_in, torch.ones(1, 1, 1, src_more.size(1), dtype=torch.bool))
    assert (after - before).abs().max() > 1e-3


# ---------------------------------------------------------------- fully masked rows: no NaN


def test_plain_minus_inf_gives_nan_for_a_fully_masked_row():
    """The trap the package avoids (checks that the scenario below really is the dangerous one)."""
    torch.manual_seed(0)
    v = torch.randn(4, 8, requires_grad=True)
    allowed = torch.tensor([[True, True, False, False], [False] * 4])
    weights = torch.randn(2, 4).masked_fill(~allowed, float("-inf")).softmax(-1)
    (weights @ v)[0].sum().backward()
    assert weights[1].isnan().all() and v.grad.isnan().all()


def test_fully_masked_row_gives_zeros_and_finite_gradients():
    torch.manual_seed(0)
    q = torch.randn(3, 8, requires_grad=True)
    k = torch.randn(4, 8, requires_grad=True)
    v = torch.randn(4, 8, requires_grad=True)
    allowed = torch.tensor([[True, True, False, False], [False] * 4, [True] * 4])
    out, weights = scaled_dot_product_attention(q, k, v, allowed)
    assert (weights[1] == 0).all() and (out[1] == 0).all()
    assert_close(weights[[0, 2]].sum(-1), torch.ones(2))
    out.sum().backward()
    assert all(t.grad.isfinite().all() for t in (q, k, v))


@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention_with_a_fully_masked_sentence_stays_finite(need_weights):
    torch.manual_seed(0)
    attention = MultiHeadAttention(8, num_heads=2)
    x = torch.randn(2, 4, 8, requires_grad=True)
    allowed = torch.tensor([[True, True, False, False], [False] * 4])[:, None, None, :]  # (B, 1, 1, T)
    result = attention(x, x, x, mask=allowed, need_weights=need_weights)
    out = result[0] if need_weights else result
    assert out.isfinite().all()
    out.sum().backward()
    assert x.grad.isfinite().all()
    assert all(p.grad.isfinite().all() for p in attention.parameters())


def test_transformer_with_an_all_padding_source_stays_finite():
    """An empty source sentence (all padding) makes every encoder and cross-attention row dead."""
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=VOCAB_SIZE, tgt_vocab_size=VOCAB_SIZE, d_model=16, num_heads=2, num_encoder_layers=1,
        num_decoder_layers=1, d_ff=32, dropout=0.0, max_len=32, pad_id=PAD_ID,
    )
    model = Transformer(config)
    src = torch.tensor([[4, 5, 6, EOS_ID], [PAD_ID] * 4])
    tgt = torch.tensor([[BOS_ID, 7, 8, EOS_ID], [BOS_ID, 9, EOS_ID, PAD_ID]])
    batch = make_batch(src, tgt, PAD_ID)
    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    assert logits.isfinite().all()
    loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID)
    loss.backward()
    assert loss.isfinite()
    assert all(p.grad.isfinite().all() for p in model.parameters() if p.grad is not None)
    # The healthy sentence is unaffected by its dead neighbour.
    alone = make_batch(src[:1], tgt[:1], PAD_ID)
    with torch.no_grad():
        assert_close(model(alone.src, alone.tgt_in, alone.src_mask, alone.tgt_mask)[0], logits[0].detach())


# ---------------------------------------------------------------- bad input


def test_padding_mask_rejects_bad_tokens():
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, T\); got \(5,\)"):
        padding_mask(torch.arange(5), PAD_ID)
    with pytest.raises(ValueError, match=r"got \(1, 2, 3\)"):
        padding_mask(torch.zeros(1, 2, 3, dtype=torch.long), PAD_ID)
    with pytest.raises(TypeError, match="integer token ids.*torch.float32"):
        padding_mask(torch.zeros(2, 3), PAD_ID)
    with pytest.raises(TypeError, match="tensor of token ids.*list"):
        padding_mask([[1, 2]], PAD_ID)


def test_causal_mask_rejects_bad_sizes():
    with pytest.raises(ValueError, match=r"size must be a positive sequence length; got 0; pass .* tokens.size\(1\)"):
        causal_mask(0)
    with pytest.raises(ValueError, match="got -3"):
        causal_mask(-3)
    with pytest.raises(TypeError, match="size must be an integer sequence length; got float 2.5"):
        causal_mask(2.5)
    with pytest.raises(TypeError, match="bool"):
        causal_mask(True)


def test_pad_sequences_rejects_bad_sequences():
    with pytest.raises(ValueError, match="at least one sequence"):
        pad_sequences([], PAD_ID)
    with pytest.raises(ValueError, match=r"sequence 1 must be a non-empty 1-D tensor; got shape \(2, 2\)"):
        pad_sequences([torch.tensor([1, 2]), torch.ones(2, 2, dtype=torch.long)], PAD_ID)
    with pytest.raises(ValueError, match=r"sequence 0 .* got shape \(0,\)"):
        pad_sequences([torch.tensor([], dtype=torch.long)], PAD_ID)
    with pytest.raises(TypeError, match="sequence 1 is torch.int32"):
        pad_sequences([torch.tensor([1, 2]), torch.tensor([3], dtype=torch.int32)], PAD_ID)
    with pytest.raises(TypeError, match="sequence 0 must be a 1-D tensor.*list"):
        pad_sequences([[1, 2]], PAD_ID)


def test_make_batch_rejects_bad_input():
    src = torch.tensor([[4, 5, EOS_ID]])
    with pytest.raises(ValueError, match=r"tgt must have at least 2 columns .* got \(1, 1\)"):
        make_batch(src, torch.tensor([[BOS_ID]]), PAD_ID)
    with pytest.raises(ValueError, match=r"same number of sentences .* src \(1, 3\) and tgt \(2, 3\)"):
        make_batch(src, torch.tensor([[BOS_ID, 4, EOS_ID]] * 2), PAD_ID)
    with pytest.raises(ValueError, match=r"src must have shape \(B, T\); got \(3,\)"):
        make_batch(src[0], torch.tensor([[BOS_ID, 4, EOS_ID]]), PAD_ID)
    with pytest.raises(TypeError, match="tgt must hold integer token ids"):
        make_batch(src, torch.tensor([[1.0, 2.0]]), PAD_ID)


# ---------------------------------------------------------------- BERT's input for sentence pairs

CLS_ID, SEP_ID = 1, 2  # BERT's [CLS] and [SEP] here; words use ids NUM_SPECIALS and up, PAD_ID is 0


@st.composite
def sentence_pairs(draw, max_batch: int = 4) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Sentence A and sentence B of 1 to max_batch pairs, each 1 to MAX_LEN word ids."""
    batch = draw(st.integers(1, max_batch))
    first, second = ([torch.tensor(draw(st.lists(word_ids, min_size=1, max_size=MAX_LEN))) for _ in range(batch)]
                     for _ in range(2))
    return first, second


@FAST
@given(sentence_pairs())
def test_bert_pair_input_lays_out_cls_a_sep_b_sep_and_pads(pair):
    first, second = pair
    tokens, segments, mask = bert_pair_input(first, second, cls_id=CLS_ID, sep_id=SEP_ID, pad_id=PAD_ID)
    longest = max(len(a) + len(b) + 3 for a, b in zip(first, second))
    assert tokens.shape == segments.shape == (len(first), longest)
    assert mask.shape == (len(first), 1, 1, longest) and mask.dtype == torch.bool
    assert tokens.dtype == segments.dtype == torch.long
    for row, (a, b) in enumerate(zip(first, second)):
        n = len(a) + len(b) + 3
        expected = torch.cat([torch.tensor([CLS_ID]), a, torch.tensor([SEP_ID]), b, torch.tensor([SEP_ID])])
        assert torch.equal(tokens[row, :n], expected)
        assert (tokens[row, n:] == PAD_ID).all() and (segments[row, n:] == 0).all()
        assert torch.equal(mask[row, 0, 0], torch.arange(longest) < n), "True exactly at the real positions"


@FAST
@given(sentence_pairs())
def test_bert_segment_ids_switch_exactly_after_the_first_sep(pair):
    first, second = pair
    tokens, segments, _ = bert_pair_input(first, second, cls_id=CLS_ID, sep_id=SEP_ID, pad_id=PAD_ID)
    for row, (a, b) in enumerate(zip(first, second)):
        n = len(a) + len(b) + 3
        seps = (tokens[row] == SEP_ID).nonzero().flatten().tolist()
        assert seps == [len(a) + 1, n - 1], "exactly two [SEP]: after A and at the end"
        first_sep = seps[0]
        assert (segments[row, : first_sep + 1] == 0).all(), "[CLS], A and the first [SEP] are segment 0"
        assert (segments[row, first_sep + 1 : n] == 1).all(), "B and the second [SEP] are segment 1"
        changes = (segments[row, :n].diff() != 0).nonzero().flatten().tolist()
        assert changes == [first_sep], "the only switch is from the first [SEP] to the token after it"


def test_bert_pair_input_keeps_int32_and_the_device():
    tokens, segments, mask = bert_pair_input(
        [torch.tensor([5, 6], dtype=torch.int32)], [torch.tensor([7], dtype=torch.int32)],
        cls_id=CLS_ID, sep_id=SEP_ID, pad_id=PAD_ID,
    )
    assert tokens.dtype == segments.dtype == torch.int32
    assert tokens.tolist() == [[CLS_ID, 5, 6, SEP_ID, 7, SEP_ID]] and segments.tolist() == [[0, 0, 0, 0, 1, 1]]
    assert mask.all()


def test_bert_pair_input_of_single_sentences_is_cls_a_sep():
    tokens, segments, mask = bert_pair_input(
        [torch.tensor([5, 6]), torch.tensor([7])], None, cls_id=CLS_ID, sep_id=SEP_ID, pad_id=PAD_ID
    )
    assert tokens.tolist() == [[CLS_ID, 5, 6, SEP_ID], [CLS_ID, 7, SEP_ID, PAD_ID]]
    assert segments.tolist() == [[0, 0, 0, 0], [0, 0, 0, 0]]
    assert mask[:, 0, 0].tolist() == [[True] * 4, [True, True, True, False]]


def test_bert_pair_input_rejects_bad_input():
    ids = {"cls_id": CLS_ID, "sep_id": SEP_ID, "pad_id": PAD_ID}
    a, b = torch.tensor([5, 6]), torch.tensor([7])
    with pytest.raises(ValueError, match="one sentence per pair; got 2 first and 1 second"):
        bert_pair_input([a, a], [b], **ids)
    with pytest.raises(ValueError, match=r"at least one sentence \(pair\)"):
        bert_pair_input([], [], **ids)
    with pytest.raises(ValueError, match=r"second\[0\] contains the special id 2 .*adds the special tokens"):
        bert_pair_input([a], [torch.tensor([7, SEP_ID])], **ids)
    with pytest.raises(ValueError, match=r"first\[1\] contains the special id 0"):
        bert_pair_input([a, torch.tensor([PAD_ID, 5])], [b, b], **ids)
    with pytest.raises(ValueError, match=r"first\[0\] must be a non-empty 1-D tensor of token ids; got \(0,\)"):
        bert_pair_input([torch.tensor([], dtype=torch.long)], [b], **ids)
    with pytest.raises(TypeError, match=r"second\[0\] must be a non-empty 1-D tensor .* of type list"):
        bert_pair_input([a], [[7]], **ids)
    with pytest.raises(TypeError, match=r"second\[0\] must hold integer token ids.*torch.float32"):
        bert_pair_input([a], [torch.tensor([7.0])], **ids)
    with pytest.raises(TypeError, match="pair 0 mixes torch.int64 and torch.int32"):
        bert_pair_input([a], [b.int()], **ids)
    with pytest.raises(ValueError, match="three different ids; got 1, 1, 0"):
        bert_pair_input([a], [b], cls_id=1, sep_id=1, pad_id=0)


def test_pad_sequences_refuses_sequences_that_are_not_token_ids():
    with pytest.raises(TypeError, match=r"integer token ids \(torch.long or torch.int32\); got dtype torch.float32"):
        pad_sequences([torch.tensor([1.0, 2.0]), torch.tensor([3.0])], 0)
    assert pad_sequences([torch.tensor([1, 2], dtype=torch.int32)], 0).dtype == torch.int32


@pytest.mark.parametrize(
    ("pad_id", "error", "message"),
    [
        (None, TypeError, r"pad_id must be an int; got None of type NoneType"),
        (-1, ValueError, r"pad_id must be an int >= 0; got -1"),
        (0.0, TypeError, r"pad_id must be an int; got 0.0"),
    ],
)
def test_make_batch_refuses_a_bad_pad_id(pad_id, error, message):
    src, tgt = torch.tensor([[3, 4, 2]]), torch.tensor([[1, 4, 3, 2]])
    with pytest.raises(error, match=message):
        make_batch(src, tgt, pad_id)


@pytest.mark.parametrize("pad_id, error", [("0", TypeError), (-1, ValueError)])
def test_a_pad_id_that_is_not_a_token_id_names_pad_id(pad_id, error):
    # The package review: padding_mask(tokens, "0") failed with "'bool' object is not subscriptable".
    with pytest.raises(error, match=r"pad_id must be an int"):
        padding_mask(torch.tensor([[5, 6, 0]]), pad_id)
