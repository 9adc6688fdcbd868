"""Tests for transformer_book.attention (chapter 2): scaled dot-product attention."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from transformer_book.attention import scaled_dot_product_attention

DTYPE = torch.float64


def _random_inputs(batch: tuple[int, ...], l_q: int, l_k: int, d_k: int, d_v: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(*batch, l_q, d_k, generator=gen, dtype=DTYPE)
    key = torch.randn(*batch, l_k, d_k, generator=gen, dtype=DTYPE)
    value = torch.randn(*batch, l_k, d_v, generator=gen, dtype=DTYPE)
    return query, key, value


def _reference(query, key, value, mask=None):
    """The formula written out directly, with -inf for masked scores (NaN rows where nothing is allowed)."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


# --- equivalence with PyTorch -------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [(), (3,), (2, 3), (2, 1, 3)])
@pytest.mark.parametrize("mask_kind", [None, "full", "broadcast_queries", "broadcast_batch"])
def test_matches_torch_sdpa(batch, mask_kind):
    l_q, l_k, d_k, d_v = 4, 6, 8, 5
    query, key, value = _random_inputs(batch, l_q, l_k, d_k, d_v)
    gen = torch.Generator().manual_seed(1)
    mask = None
    if mask_kind == "full":
        mask = torch.rand(*batch, l_q, l_k, generator=gen) > 0.4  # (..., L_q, L_k)
    elif mask_kind == "broadcast_queries":
        mask = torch.rand(*batch, 1, l_k, generator=gen) > 0.4  # (..., 1, L_k), like a padding mask
    elif mask_kind == "broadcast_batch":
        mask = torch.rand(l_q, l_k, generator=gen) > 0.4  # (L_q, L_k), shared by every batch element
    if mask is not None:
        mask[..., 0] = True  # at least one allowed key per row (fully masked rows: tested below)
    ours, weights = scaled_dot_product_attention(query, key, value, mask=mask)
    theirs = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    assert ours.shape == (*batch, l_q, d_v)
    assert weights.shape == (*batch, l_q, l_k)
    assert_close(ours, theirs)
    assert_close(weights, _reference(query, key, value, mask)[1])


def test_fully_masked_rows_match_torch_and_are_zero():
    query, key, value = _random_inputs((2, 3), 4, 5, 8, 6)
    mask = torch.ones(2, 3, 4, 5, dtype=torch.bool)
    mask[0, 1, 2] = False  # one query of one head sees nothing
    mask[1, :, 0] = False  # the first query of every head of the second element sees nothing
    out, weights = scaled_dot_product_attention(query, key, value, mask=mask)
    fully_masked = ~mask.any(-1)  # (2, 3, 4)
    assert fully_masked.sum() == 1 + 3
    assert not out.isnan().any() and not weights.isnan().any()
    assert (out[fully_masked] == 0).all()
    assert (weights[fully_masked] == 0).all()
    assert_close(out, F.scaled_dot_product_attention(query, key, value, attn_mask=mask))


def test_fully_masked_rows_have_finite_gradients():
    query, key, value = _random_inputs((2,), 3, 4, 8, 6)
    for tensor in (query, key, value):
        tensor.requires_grad_()
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    out, _ = scaled_dot_product_attention(query, key, value, mask=mask)
    out.sum().backward()
    for tensor in (query, key, value):
        assert torch.isfinite(tensor.grad).all()
    assert (query.grad[:, 1] == 0).all(), "a query that sees nothing gets no gradient"


def test_gradients_match_torch():
    query, key, value = _random_inputs((2, 2), 3, 4, 8, 5)
    mask = torch.tensor([[True, True, False, True], [True, False, False, False], [True, True, True, True]])
    grads = []
    for fn in (
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=mask)[0],
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    ):
        inputs = [t.clone().requires_grad_() for t in (query, key, value)]
        fn(*inputs).square().sum().backward()
        grads.append([t.grad for t in inputs])
    for ours, theirs in zip(*grads):
        assert_close(ours, theirs)


def test_dropout_is_applied_to_the_weights():
    query, key, value = _random_inputs((2,), 4, 6, 8, 5)
    _, plain = scaled_dot_product_attention(query, key, value)
    dropout = nn.Dropout(p=0.5)
    torch.manual_seed(0)
    out, dropped = scaled_dot_product_attention(query, key, value, dropout=dropout.train())
    kept = dropped != 0
    assert 0 < kept.sum() < kept.numel(), "some weights dropped, some kept"
    assert_close(dropped[kept], 2.0 * plain[kept])
    assert_close(out, dropped @ value)
    _, evaluated = scaled_dot_product_attention(query, key, value, dropout=dropout.eval())
    assert_close(evaluated, plain)


def test_one_hot_lookup_returns_the_value():
    keys = torch.eye(4, dtype=DTYPE)
    values = torch.arange(12, dtype=DTYPE).reshape(4, 3)
    out, weights = scaled_dot_product_attention(100.0 * keys[2:3], keys, values)
    assert_close(out, values[2:3])
    assert weights.argmax().item() == 2


# --- properties over random shapes and masks ------------------------------------------------------------

shapes = st.fixed_dictionaries(
    {
        "batch": st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple),
        "l_q": st.integers(1, 5),
        "l_k": st.integers(1, 5),
        "d_k": st.integers(1, 6),
        "d_v": st.integers(1, 6),
        "seed": st.integers(0, 2**16),
        "p_allowed": st.sampled_from([0.0, 0.3, 0.7, 1.0]),
    }
)


@settings(max_examples=40, deadline=None)
@given(shapes)
def test_properties_with_random_masks(s):
    query, key, value = _random_inputs(s["batch"], s["l_q"], s["l_k"], s["d_k"], s["d_v"], s["seed"])
    gen = torch.Generator().manual_seed(s["seed"])
    mask = torch.rand(*s["batch"], s["l_q"], s["l_k"], generator=gen) < s["p_allowed"]
    out, weights = scaled_dot_product_attention(query, key, value, mask=mask)

    assert out.shape == (*s["batch"], s["l_q"], s["d_v"])
    assert weights.shape == (*s["batch"], s["l_q"], s["l_k"])
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert (weights >= 0).all()
    assert (weights[~mask] == 0).all(), "masked weights are exactly zero"
    any_allowed = mask.any(-1)
    assert_close(weights.sum(-1)[any_allowed], torch.ones_like(weights.sum(-1)[any_allowed]))
    assert (weights[~any_allowed] == 0).all() and (out[~any_allowed] == 0).all(), "fully masked rows give zeros"
    assert_close(out, weights @ value)
    ref_out, ref_weights = _reference(query, key, value, mask)
    assert_close(out[any_allowed], ref_out[any_allowed])
    assert_close(weights[any_allowed], ref_weights[any_allowed])
    assert_close(out, F.scaled_dot_product_attention(query, key, value, attn_mask=mask))


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_properties_without_mask(s):
    query, key, value = _random_inputs(s["batch"], s["l_q"], s["l_k"], s["d_k"], s["d_v"], s["seed"])
    out, weights = scaled_dot_product_attention(query, key, value)
    assert_close(weights.sum(-1), torch.ones(*s["batch"], s["l_q"], dtype=DTYPE))
    assert (weights > 0).all()
    assert_close(out, F.scaled_dot_product_attention(query, key, value))
    # Permuting keys and values together changes nothing: attention treats them as a set.
    perm = torch.randperm(s["l_k"], generator=torch.Generator().manual_seed(s["seed"]))
    out_perm, _ = scaled_dot_product_attention(query, key[..., perm, :], value[..., perm, :])
    assert_close(out_perm, out)


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_all_true_mask_changes_nothing(s):
    query, key, value = _random_inputs(s["batch"], s["l_q"], s["l_k"], s["d_k"], s["d_v"], s["seed"])
    mask = torch.ones(s["l_q"], s["l_k"], dtype=torch.bool)
    out_masked, w_masked = scaled_dot_product_attention(query, key, value, mask=mask)
    out_plain, w_plain = scaled_dot_product_attention(query, key, value)
    assert_close(out_masked, out_plain)
    assert_close(w_masked, w_plain)


# --- bad inputs -----------------------------------------------------------------------------------------


def test_mismatched_d_k_names_both_shapes():
    query, key, value = torch.randn(2, 3, 4), torch.randn(2, 5, 6), torch.randn(2, 5, 7)
    with pytest.raises(ValueError, match=r"share their last dimension d_k.*query \(2, 3, 4\).*key \(2, 5, 6\)"):
        scaled_dot_product_attention(query, key, value)


def test_mismatched_l_k_names_both_shapes():
    query, key, value = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 6, 7)
    with pytest.raises(ValueError, match=r"same length L_k.*key \(2, 5, 4\).*value \(2, 6, 7\)"):
        scaled_dot_product_attention(query, key, value)


def test_too_few_dimensions():
    with pytest.raises(ValueError, match=r"at least 2 dimensions.*\(4,\)"):
        scaled_dot_product_attention(torch.randn(4), torch.randn(3, 4), torch.randn(3, 2))


def test_batch_dimensions_that_do_not_broadcast():
    query, key, value = torch.randn(2, 3, 4), torch.randn(3, 5, 4), torch.randn(3, 5, 7)
    with pytest.raises(ValueError, match=r"leading \(batch\) dimensions.*\(2, 3, 4\).*\(3, 5, 4\).*broadcast"):
        scaled_dot_product_attention(query, key, value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_non_bool_mask(dtype):
    query, key, value = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    mask = torch.ones(3, 5, dtype=dtype)
    with pytest.raises(TypeError, match=rf"mask must be a boolean tensor \(True = may attend\); got dtype {dtype}"):
        scaled_dot_product_attention(query, key, value, mask=mask)


@pytest.mark.parametrize(
    "mask_shape",
    [
        (3, 4),  # L_k wrong
        (2, 5),  # L_q wrong
        (7, 3, 5),  # a batch dimension the scores do not have
        (2, 2, 3, 5),  # more dimensions than the scores, and they do not match
    ],
)
def test_mask_that_does_not_broadcast(mask_shape):
    query, key, value = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    mask = torch.ones(mask_shape, dtype=torch.bool)
    shape_text = re_escape_shape(mask_shape)
    with pytest.raises(ValueError, match=rf"mask of shape {shape_text} does not broadcast.*\(2, 3, 5\)"):
        scaled_dot_product_attention(query, key, value, mask=mask)


def test_dropout_given_as_a_probability():
    query, key, value = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    with pytest.raises(TypeError, match=r"dropout must be a module such as nn.Dropout\(p\).*got float 0.1"):
        scaled_dot_product_attention(query, key, value, dropout=0.1)


def re_escape_shape(shape: tuple[int, ...]) -> str:
    return r"\(" + ", ".join(str(n) for n in shape) + r"\)"


def test_inputs_that_are_not_tensors_are_a_type_error_naming_them():
    # The package review: a list as query failed with "'list' object has no attribute 'dim'".
    q = torch.randn(2, 4, 8)
    with pytest.raises(TypeError, match=r"query must be a tensor \(\.\.\., length, features\); got list"):
        scaled_dot_product_attention([[1.0] * 8] * 4, q, q)
    with pytest.raises(TypeError, match=r"value must be a tensor .*; got ndarray"):
        scaled_dot_product_attention(q, q, q.numpy())
