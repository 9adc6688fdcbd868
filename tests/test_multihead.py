"""Tests for transformer_book.multihead (chapter 3): equivalence with torch.nn.MultiheadAttention, the fused
and explicit paths, and bad inputs (chapter 8's key/value cache: test_kvcache.py)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from transformer_book.multihead import MultiHeadAttention

HYPOTHESIS = settings(max_examples=30, deadline=None)


def to_torch_mha(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """torch.nn.MultiheadAttention (batch_first=True) with the weights of `mha` (in_proj_weight = q, k, v stacked)."""
    bias = mha.q_proj.bias is not None
    ref = nn.MultiheadAttention(mha.d_model, mha.num_heads, bias=bias, batch_first=True).to(mha.q_proj.weight.dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]))
        ref.out_proj.weight.copy_(mha.out_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
            ref.out_proj.bias.copy_(mha.out_proj.bias)
    return ref.eval()


def make_layer(d_model: int = 16, num_heads: int = 4, seed: int = 0, dropout: float = 0.0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    layer = MultiHeadAttention(d_model, num_heads, dropout=dropout).double().eval()
    with torch.no_grad():  # non-zero biases, so that a mix-up of q/k/v biases would show
        for proj in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj):
            proj.bias.normal_()
    return layer


def lengths_mask(lengths: list[int], max_len: int) -> torch.Tensor:
    """(B, max_len) boolean, True at the first lengths[b] positions of row b."""
    return torch.arange(max_len) < torch.tensor(lengths)[:, None]


def compare_with_torch(layer, query, key, our_mask, attn_mask, key_padding_mask):
    ref = to_torch_mha(layer)
    with torch.no_grad():
        out, weights = layer(query, key, key, mask=our_mask, need_weights=True)
        fused = layer(query, key, key, mask=our_mask)
        ref_out, ref_weights = ref(
            query, key, key, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
            need_weights=True, average_attn_weights=False,
        )
    assert_close(out, ref_out)
    assert_close(fused, ref_out)
    assert_close(weights, ref_weights)


# ---------------------------------------------------------------- equivalence with torch.nn.MultiheadAttention


def test_self_attention_matches_torch():
    layer = make_layer()
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    compare_with_torch(layer, x, x, None, None, None)


def test_self_attention_with_padding_matches_torch():
    layer = make_layer()
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    real = lengths_mask([6, 3, 1], 6)  # (B, T)
    compare_with_torch(layer, x, x, real[:, None, None, :], None, ~real)


def test_causal_self_attention_matches_torch():
    layer = make_layer()
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    real = lengths_mask([6, 4, 2], 6)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    compare_with_torch(layer, x, x, causal, ~causal, None)
    compare_with_torch(layer, x, x, real[:, None, None, :] & causal, ~causal, ~real)


def test_cross_attention_with_padding_matches_torch():
    layer = make_layer(32, 8)
    tgt = torch.randn(2, 4, 32, dtype=torch.float64)
    src = torch.randn(2, 7, 32, dtype=torch.float64)
    real = lengths_mask([7, 2], 7)
    compare_with_torch(layer, tgt, src, real[:, None, None, :], None, ~real)


def test_without_biases_matches_torch():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, bias=False).double().eval()
    assert all(proj.bias is None for proj in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj))
    ref = to_torch_mha(layer)
    assert ref.in_proj_bias is None and ref.out_proj.bias is None
    tgt = torch.randn(2, 3, 16, dtype=torch.float64)
    src = torch.randn(2, 5, 16, dtype=torch.float64)
    real = lengths_mask([5, 2], 5)
    compare_with_torch(layer, src, src, None, None, None)
    compare_with_torch(layer, tgt, src, real[:, None, None, :], None, ~real)
    assert sum(p.numel() for p in layer.parameters()) == sum(p.numel() for p in ref.parameters()) == 4 * 16 * 16


@HYPOTHESIS
@given(
    batch=st.integers(1, 3),
    len_q=st.integers(1, 6),
    len_k=st.integers(1, 6),
    num_heads=st.sampled_from([1, 2, 4]),
    d_head=st.integers(1, 4),
    data=st.data(),
)
def test_random_shapes_and_masks_match_torch(batch, len_q, len_k, num_heads, d_head, data):
    d_model = num_heads * d_head
    layer = make_layer(d_model, num_heads, seed=data.draw(st.integers(0, 2**16)))
    query = torch.randn(batch, len_q, d_model, dtype=torch.float64)
    key = torch.randn(batch, len_k, d_model, dtype=torch.float64)
    lengths = data.draw(st.lists(st.integers(1, len_k), min_size=batch, max_size=batch))
    real = lengths_mask(lengths, len_k)  # (B, L_k)
    allowed = torch.tensor(
        data.draw(st.lists(st.lists(st.booleans(), min_size=len_k, max_size=len_k), min_size=len_q, max_size=len_q))
    ).reshape(len_q, len_k)
    allowed[:, 0] = True  # key 0 is real in every row, so no query is left with nothing to attend to
    compare_with_torch(layer, query, key, real[:, None, None, :] & allowed, ~allowed, ~real)


# ---------------------------------------------------------------- fused path == explicit path


@HYPOTHESIS
@given(
    batch=st.integers(1, 3),
    len_q=st.integers(1, 6),
    len_k=st.integers(1, 6),
    num_heads=st.sampled_from([1, 2, 4]),
    mask_kind=st.sampled_from(["none", "2d", "padding", "full"]),
    seed=st.integers(0, 2**16),
)
def test_fused_and_explicit_paths_agree(batch, len_q, len_k, num_heads, mask_kind, seed):
    layer = make_layer(4 * num_heads, num_heads, seed)
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, len_q, 4 * num_heads, dtype=torch.float64, generator=generator)
    key = torch.randn(batch, len_k, 4 * num_heads, dtype=torch.float64, generator=generator)
    shapes = {"none": None, "2d": (len_q, len_k), "padding": (batch, 1, 1, len_k), "full": (batch, 1, len_q, len_k)}
    # Random masks may block whole rows: both paths must then give zero attention (just the output bias).
    mask = None if shapes[mask_kind] is None else torch.rand(shapes[mask_kind], generator=generator) < 0.7
    with torch.no_grad():
        explicit, weights = layer(query, key, key, mask=mask, need_weights=True)
        fused = layer(query, key, key, mask=mask)
    assert explicit.shape == fused.shape == (batch, len_q, 4 * num_heads)
    assert weights.shape == (batch, num_heads, len_q, len_k)
    assert torch.isfinite(fused).all()
    assert_close(fused, explicit)


@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding"])
def test_paths_agree_in_training_mode_without_dropout(mask_kind):
    layer = make_layer(dropout=0.0).train()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    masks = {
        "none": None,
        "causal": torch.ones(5, 5, dtype=torch.bool).tril(),
        "padding": lengths_mask([5, 3], 5)[:, None, None, :],
    }
    explicit, _ = layer(x, x, x, mask=masks[mask_kind], need_weights=True)
    fused = layer(x, x, x, mask=masks[mask_kind])
    assert layer.training
    assert_close(fused, explicit)


def test_paths_agree_in_eval_mode_with_dropout():
    layer = make_layer(dropout=0.5).eval()
    assert layer.dropout_p == 0.5 and layer.attn_dropout.p == 0.5
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    for mask in (None, causal):
        explicit, _ = layer(x, x, x, mask=mask, need_weights=True)
        assert_close(layer(x, x, x, mask=mask), explicit)
        assert_close(layer(x, x, x, mask=mask), layer(x, x, x, mask=mask))  # eval mode: no randomness


def test_dropout_in_training_mode_changes_both_paths():
    layer = make_layer(dropout=0.5).train()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    torch.manual_seed(1)
    assert not torch.allclose(layer(x, x, x), layer(x, x, x)), "the fused path applies dropout when training"
    first, second = layer(x, x, x, need_weights=True)[1], layer(x, x, x, need_weights=True)[1]
    assert not torch.equal(first, second), "the explicit path applies dropout to the weights when training"


def test_weights_rows_sum_to_one_and_respect_the_mask():
    layer = make_layer()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    _, weights = layer(x, x, x, mask=causal, need_weights=True)
    assert_close(weights.sum(-1), torch.ones(2, 4, 5, dtype=torch.float64))
    assert (weights[..., ~causal] == 0).all()


def test_split_and_merge_heads_are_inverse_and_cut_the_features_in_order():
    layer = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    heads = layer.split_heads(x)
    assert heads.shape == (2, 3, 5, 4)
    assert torch.equal(heads[:, 1], x[..., 4:8])  # head 1 holds features 4..7
    assert torch.equal(layer.merge_heads(heads), x)


def test_changing_a_future_token_leaves_earlier_outputs_alone():
    layer = make_layer()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    before = layer(x, x, x, mask=causal)
    x[:, 4] += 1.0
    after = layer(x, x, x, mask=causal)
    assert_close(before[:, :4], after[:, :4])
    assert not torch.allclose(before[:, 4:], after[:, 4:])


def test_parameter_count_of_the_base_setting():
    assert sum(p.numel() for p in MultiHeadAttention(512, 8).parameters()) == 4 * (512 * 512 + 512)


def test_the_layer_is_the_plain_one_and_attend_is_steps_two_and_three():
    # Chapter 3's layer takes no cache (chapter 8 adds it); forward = the projections, then attend.
    import inspect

    assert "cache" not in inspect.signature(MultiHeadAttention.forward).parameters
    layer = make_layer()
    x, m = torch.randn(2, 5, 16, dtype=torch.float64), torch.randn(2, 3, 16, dtype=torch.float64)
    q, k, v = (layer.split_heads(proj(t)) for proj, t in ((layer.q_proj, x), (layer.k_proj, m), (layer.v_proj, m)))
    for need_weights in (False, True):
        assert_close(layer.attend(q, k, v, need_weights=need_weights), layer(x, m, m, need_weights=need_weights))


# ---------------------------------------------------------------- bad inputs


def test_d_model_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by num_heads \(4\).*\[1, 2, 5, 10\]"):
        MultiHeadAttention(10, 4)


def test_non_positive_sizes():
    with pytest.raises(ValueError, match=r"num_heads must be an int >= 1; got 0"):
        MultiHeadAttention(16, 0)


def test_wrong_last_dimension():
    layer = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"key must have shape \(B, T, d_model=16\); got \(2, 5, 8\)"):
        layer(torch.randn(2, 5, 16), torch.randn(2, 5, 8), torch.randn(2, 5, 16))


def test_wrong_rank():
    layer = MultiHeadAttention(16, 4)
    x = torch.randn(5, 16)
    with pytest.raises(ValueError, match=r"query must have shape \(B, T, d_model=16\); got \(5, 16\).*query\[None\]"):
        layer(x, x, x)


def test_key_and_value_lengths_differ():
    layer = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"key and value the length L_k.*key \(2, 5, 16\), value \(2, 4, 16\)"):
        layer(torch.randn(2, 3, 16), torch.randn(2, 5, 16), torch.randn(2, 4, 16))


def test_batch_size_mismatch_between_query_and_key():
    layer = MultiHeadAttention(16, 4)
    with pytest.raises(
        ValueError,
        match=r"must share the batch size B.*query \(2, 3, 16\), key \(3, 5, 16\), value \(3, 5, 16\)",
    ):
        layer(torch.randn(2, 3, 16), torch.randn(3, 5, 16), torch.randn(3, 5, 16))


@pytest.mark.parametrize("need_weights", [False, True])
def test_mask_must_be_boolean(need_weights):
    layer = MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16)
    with pytest.raises(TypeError, match=r"mask must be a boolean tensor \(True = may attend\); got dtype torch.float32"):
        layer(x, x, x, mask=torch.ones(5, 5), need_weights=need_weights)


@pytest.mark.parametrize("need_weights", [False, True])
def test_mask_of_the_wrong_shape(need_weights):
    layer = MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"mask of shape \(5, 4\) does not broadcast .* \(2, 4, 5, 5\)"):
        layer(x, x, x, mask=torch.ones(5, 4, dtype=torch.bool), need_weights=need_weights)


def test_three_dimensional_per_example_mask_is_refused():
    # (B, L_q, L_k) with B == H would broadcast silently against the heads: refused with the fix in the message.
    layer = MultiHeadAttention(16, 4)
    x = torch.randn(4, 5, 16)
    with pytest.raises(ValueError, match=r"3-D mask \(4, 5, 5\) is ambiguous.*mask\[:, None\]"):
        layer(x, x, x, mask=torch.ones(4, 5, 5, dtype=torch.bool))


def test_a_mask_on_another_device_than_the_input_is_refused_by_name():
    # before: a mask on the meta device reached PyTorch's fused attention, which returned uninitialised memory
    layer, x = MultiHeadAttention(8, 2), torch.randn(2, 5, 8)
    mask = torch.ones(5, 5, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"mask is on the device meta, but the attention's inputs are on cpu; "
                                         r"move it there: mask\.to\('cpu'\)"):
        layer(x, x, x, mask=mask)
