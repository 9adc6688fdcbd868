"""Tests for transformer_book.efficient (chapter 12): blockwise, sliding-window, linear and grouped-query attention,
each against an exact reference (chapter 2's attention, PyTorch's, chapter 3's layer), and bad inputs."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from transformer_book.attention import scaled_dot_product_attention
from transformer_book.data import PAD_ID
from transformer_book.efficient import (
    GroupedQueryAttention,
    blockwise_attention,
    elu_feature_map,
    linear_attention,
    linear_attention_recurrent,
    repeat_kv,
    sliding_window_attention,
    window_mask,
)
from transformer_book.generation import generate
from transformer_book.kvcache import KVCache
from transformer_book.lm import StackConfig, TransformerStack
from transformer_book.masking import causal_mask
from transformer_book.multihead import MultiHeadAttention

HYPOTHESIS = settings(max_examples=40, deadline=None)


def qkv(*leading: int, length_q: int, length_k: int | None = None, d_k: int = 8, d_v: int = 6, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    length_k = length_q if length_k is None else length_k
    q = torch.randn(*leading, length_q, d_k, dtype=torch.float64, generator=generator)
    k = torch.randn(*leading, length_k, d_k, dtype=torch.float64, generator=generator)
    v = torch.randn(*leading, length_k, d_v, dtype=torch.float64, generator=generator)
    return q, k, v


# ---- blockwise attention -------------------------------------------------------------------------------------------


@HYPOTHESIS
@given(
    batch=st.integers(1, 3),
    heads=st.integers(1, 3),
    length_q=st.integers(1, 40),
    length_k=st.integers(1, 40),
    block_size=st.integers(1, 50),
    seed=st.integers(0, 1000),
)
def test_blockwise_equals_pytorch_and_chapter_2_with_any_mask(
    batch, heads, length_q, length_k, block_size, seed
):
    q, k, v = qkv(batch, heads, length_q=length_q, length_k=length_k, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, 1, length_q, length_k, generator=generator) < 0.7
    mask[..., 0] = True  # every query keeps a key, so PyTorch's rows are defined
    ours = blockwise_attention(q, k, v, mask=mask, block_size=block_size)
    assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert_close(ours, scaled_dot_product_attention(q, k, v, mask)[0])
    assert_close(blockwise_attention(q, k, v, block_size=block_size), F.scaled_dot_product_attention(q, k, v))


@HYPOTHESIS
@given(length=st.integers(1, 50), block_size=st.integers(1, 60), seed=st.integers(0, 1000))
def test_blockwise_causal_equals_pytorch_is_causal(length, block_size, seed):
    q, k, v = qkv(2, 2, length_q=length, seed=seed)
    ours = blockwise_attention(q, k, v, causal=True, block_size=block_size)
    assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert_close(ours, scaled_dot_product_attention(q, k, v, causal_mask(length))[0])


def test_blockwise_fully_masked_rows_are_zero_as_in_chapter_2():
    q, k, v = qkv(1, 2, length_q=9, length_k=13)
    mask = torch.ones(9, 13, dtype=torch.bool)
    mask[3] = False
    ours = blockwise_attention(q, k, v, mask=mask, block_size=4)
    assert (ours[..., 3, :] == 0).all()
    assert_close(ours, scaled_dot_product_attention(q, k, v, mask)[0])


def test_blockwise_with_no_keys_returns_zeros_as_chapter_2():
    q, k, v = qkv(2, 1, length_q=5, length_k=0)
    ours = blockwise_attention(q, k, v, block_size=4)
    assert ours.shape == (2, 1, 5, 6) and ours.dtype == q.dtype and (ours == 0).all()
    assert_close(ours, scaled_dot_product_attention(q, k, v)[0])


def test_blockwise_broadcasts_leading_dimensions_and_float32():
    q = torch.randn(2, 4, 17, 8)
    k, v = torch.randn(1, 4, 23, 8), torch.randn(2, 1, 23, 5)
    assert_close(blockwise_attention(q, k, v, block_size=5), scaled_dot_product_attention(q, k, v)[0])


def test_blockwise_gradients_match_dense():
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, length_q=11))
    blockwise_attention(q, k, v, causal=True, block_size=3).square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum().backward()
    for ours, ref in zip(grads, (q.grad, k.grad, v.grad)):
        assert_close(ours, ref)


@pytest.mark.parametrize("block_size", [0, -3])
def test_blockwise_rejects_block_size_below_one(block_size):
    q, k, v = qkv(1, length_q=4)
    with pytest.raises(ValueError, match="block_size must be an int >= 1"):
        blockwise_attention(q, k, v, block_size=block_size)


def test_blockwise_rejects_non_integer_block_size_and_bad_masks():
    q, k, v = qkv(1, length_q=4, length_k=6)
    with pytest.raises(TypeError, match="block_size must be an int"):
        blockwise_attention(q, k, v, block_size=2.5)
    with pytest.raises(TypeError, match="boolean"):
        blockwise_attention(q, k, v, mask=torch.ones(4, 6))
    with pytest.raises(ValueError, match="does not broadcast"):
        blockwise_attention(q, k, v, mask=torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="causal=True needs as many queries as keys"):
        blockwise_attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match="last dimension d_k"):
        blockwise_attention(q, k[..., :3], v)


# ---- sliding-window attention --------------------------------------------------------------------------------------


@HYPOTHESIS
@given(
    length=st.integers(1, 45),
    window=st.integers(1, 60),
    causal=st.booleans(),
    heads=st.integers(1, 3),
    seed=st.integers(0, 1000),
)
def test_sliding_window_equals_dense_banded_attention(length, window, causal, heads, seed):
    q, k, v = qkv(2, heads, length_q=length, seed=seed)
    mask = window_mask(length, window, causal)
    ours = sliding_window_attention(q, k, v, window, causal)
    assert ours.shape == (2, heads, length, v.size(-1))
    assert_close(ours, scaled_dot_product_attention(q, k, v, mask)[0])
    assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@HYPOTHESIS
@given(length=st.integers(1, 30), window=st.integers(1, 40), causal=st.booleans())
def test_window_mask_is_the_band(length, window, causal):
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    expected = (i - j <= window) & (i - j >= (0 if causal else -window))
    assert torch.equal(window_mask(length, window, causal), expected)


def test_window_longer_than_the_sequence_is_full_or_causal_attention():
    q, k, v = qkv(1, 2, length_q=10)
    assert_close(sliding_window_attention(q, k, v, 100), F.scaled_dot_product_attention(q, k, v))
    assert_close(
        sliding_window_attention(q, k, v, 9, causal=True),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


def test_sliding_window_gradient_reach_is_the_window():
    x = torch.randn(1, 20, 4, dtype=torch.float64, requires_grad=True)
    sliding_window_attention(x, x, x, 3, causal=True)[0, 12].sum().backward()
    touched = (x.grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist()
    assert touched == [9, 10, 11, 12]


@pytest.mark.parametrize("window", [0, -1])
def test_sliding_window_rejects_window_below_one(window):
    q, k, v = qkv(1, length_q=5)
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        sliding_window_attention(q, k, v, window)
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        window_mask(5, window)


def test_sliding_window_rejects_cross_attention_and_bad_types():
    q, k, v = qkv(1, length_q=5, length_k=7)
    with pytest.raises(ValueError, match="same length T"):
        sliding_window_attention(q, k, v, 2)
    q, k, v = qkv(1, length_q=5)
    with pytest.raises(TypeError, match="window must be an int"):
        sliding_window_attention(q, k, v, True)


# ---- linear attention ----------------------------------------------------------------------------------------------


@HYPOTHESIS
@given(length=st.integers(1, 30), d_k=st.integers(1, 9), heads=st.integers(1, 3), seed=st.integers(0, 1000))
def test_linear_attention_recurrent_equals_parallel_causal(length, d_k, heads, seed):
    q, k, v = qkv(2, heads, length_q=length, d_k=d_k, seed=seed)
    recurrent = linear_attention_recurrent(q, k, v)
    assert recurrent.shape == (2, heads, length, v.size(-1))
    assert_close(recurrent, linear_attention(q, k, v, causal=True))


@HYPOTHESIS
@given(length_q=st.integers(1, 20), length_k=st.integers(1, 20), seed=st.integers(0, 1000))
def test_linear_attention_reordering_equals_the_table_form(length_q, length_k, seed):
    q, k, v = qkv(3, length_q=length_q, length_k=length_k, seed=seed)
    similarity = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)  # (B, L_q, L_k)
    assert_close(linear_attention(q, k, v), (similarity @ v) / similarity.sum(-1, keepdim=True))


def test_linear_attention_with_exp_features_is_softmax_attention():
    # With phi = exp on a one-hot encoding of the key, phi(q).phi(k) is exp of the score: softmax attention exactly.
    q, k, v = qkv(2, length_q=5, d_k=4)
    scores = q @ k.transpose(-2, -1)  # (B, L_q, L_k)
    eye = torch.eye(5, dtype=torch.float64)
    query_features = scores.exp()  # phi(q_i)_j = exp(q_i . k_j)
    key_features = eye.expand(2, 5, 5)  # phi(k_j) = e_j
    out = linear_attention(query_features, key_features, v, feature_map=lambda x: x)
    assert_close(out, torch.softmax(scores, -1) @ v)


def test_elu_feature_map_is_positive_and_matches_its_formula():
    x = torch.linspace(-30, 30, 101, dtype=torch.float64)
    assert (elu_feature_map(x) > 0).all()
    assert_close(elu_feature_map(x), torch.where(x > 0, x + 1, x.exp()))


def test_linear_attention_rejects_bad_causal_shapes():
    q, k, v = qkv(1, length_q=4, length_k=6)
    with pytest.raises(ValueError, match="L_q == L_k"):
        linear_attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match="L_q == L_k"):
        linear_attention_recurrent(q, k, v)


# ---- grouped-query attention ---------------------------------------------------------------------------------------


def grouped(d_model=24, num_heads=6, num_kv_heads=2, seed=0):
    torch.manual_seed(seed)
    layer = GroupedQueryAttention(d_model, num_heads, num_kv_heads).double().eval()
    with torch.no_grad():
        for proj in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj):
            proj.bias.normal_()
    return layer


def mha_with_repeated_kv(gqa: GroupedQueryAttention) -> MultiHeadAttention:
    mha = MultiHeadAttention(gqa.d_model, gqa.num_heads).double().eval()
    with torch.no_grad():
        mha.q_proj.load_state_dict(gqa.q_proj.state_dict())
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
        for name in ("k_proj", "v_proj"):
            source, target = getattr(gqa, name), getattr(mha, name)
            weight = source.weight.view(gqa.num_kv_heads, gqa.d_head, gqa.d_model)
            target.weight.copy_(weight.repeat_interleave(gqa.groups, 0).reshape(gqa.d_model, gqa.d_model))
            target.bias.copy_(
                source.bias.view(gqa.num_kv_heads, gqa.d_head).repeat_interleave(gqa.groups, 0).flatten()
            )
    return mha


def test_gqa_with_as_many_kv_heads_is_multi_head_attention_with_the_same_weights():
    gqa = grouped(num_kv_heads=6)
    mha = MultiHeadAttention(24, 6).double().eval()
    mha.load_state_dict(gqa.state_dict())
    x, y = torch.randn(2, 7, 24, dtype=torch.float64), torch.randn(2, 9, 24, dtype=torch.float64)
    assert_close(gqa(x, y, y), mha(x, y, y))
    out, weights = gqa(x, x, x, causal_mask(7), need_weights=True)
    ref_out, ref_weights = mha(x, x, x, causal_mask(7), need_weights=True)
    assert_close(out, ref_out)
    assert_close(weights, ref_weights)


def test_gqa_in_chapter_11_stack_with_as_many_kv_heads_is_the_stack():
    """Chapter 12 swaps GQA into TransformerStack; with h_kv = h and the same weights nothing may change."""
    torch.manual_seed(0)
    config = StackConfig(vocab_size=40, d_model=24, num_heads=6, num_layers=2, d_ff=48, dropout=0.0, norm_first=True)
    stack = TransformerStack(config).double().eval()
    swapped = TransformerStack(config).double().eval()
    swapped.load_state_dict(stack.state_dict())
    for layer in swapped.layers:
        gqa = GroupedQueryAttention(24, 6, 6).double()
        gqa.load_state_dict(layer.self_attn.state_dict())
        layer.self_attn = gqa
    tokens = torch.randint(4, 40, (3, 9))
    tokens[0, 6:] = PAD_ID  # right padding: the padding mask must reach GQA as it reaches MultiHeadAttention
    assert_close(swapped(tokens), stack(tokens))


@HYPOTHESIS
@given(
    kv_heads=st.sampled_from([1, 2, 3, 6]),
    length_q=st.integers(1, 10),
    length_k=st.integers(1, 10),
    use_mask=st.booleans(),
    seed=st.integers(0, 100),
)
def test_gqa_equals_multi_head_attention_with_repeated_kv_heads(kv_heads, length_q, length_k, use_mask, seed):
    gqa = grouped(num_kv_heads=kv_heads, seed=seed)
    mha = mha_with_repeated_kv(gqa)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2, length_q, 24, dtype=torch.float64, generator=generator)
    memory = torch.randn(2, length_k, 24, dtype=torch.float64, generator=generator)
    mask = None
    if use_mask:
        mask = torch.rand(2, 1, 1, length_k, generator=generator) < 0.7
        mask[..., 0] = True
    reference = mha(x, memory, memory, mask)
    assert_close(gqa(x, memory, memory, mask), reference)
    assert_close(gqa(x, memory, memory, mask, need_weights=True)[0], reference)


def test_gqa_fused_path_matches_pytorch_enable_gqa_and_repeat_kv():
    gqa = grouped(num_kv_heads=3)
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    q = gqa.split_heads(gqa.q_proj(x), 6)
    k, v = gqa.split_heads(gqa.k_proj(x), 3), gqa.split_heads(gqa.v_proj(x), 3)
    with_copies = F.scaled_dot_product_attention(q, repeat_kv(k, 2), repeat_kv(v, 2), is_causal=True)
    assert_close(with_copies, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
    expected = gqa.out_proj(with_copies.transpose(1, 2).reshape(2, 5, 24))
    assert_close(gqa(x, x, x, causal_mask(5)), expected)


def test_repeat_kv_order_is_the_group_order():
    x = torch.arange(3.0).view(1, 3, 1, 1)  # three kv heads holding 0, 1, 2
    assert repeat_kv(x, 2).flatten().tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("kv_heads", [6, 2, 1])
def test_gqa_cache_holds_kv_heads_only_and_gives_the_same_outputs(kv_heads):
    gqa = grouped(num_kv_heads=kv_heads)
    x = torch.randn(2, 8, 24, dtype=torch.float64)
    full = gqa(x, x, x, causal_mask(8))
    cache, steps = KVCache(), []
    for t in range(8):
        steps.append(gqa(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache))
    assert cache.key.shape == cache.value.shape == (2, kv_heads, 8, 4)
    assert_close(torch.cat(steps, dim=1), full)
    memory = torch.randn(2, 5, 24, dtype=torch.float64)
    static = KVCache(static=True)
    first = gqa(x[:, :1], memory, memory, cache=static)
    assert static.key.shape == (2, kv_heads, 5, 4)
    assert_close(
        gqa(x[:, :1], memory[:, :0], memory[:, :0], cache=static), first
    )  # reuses the projected memory


def test_gqa_rejects_heads_that_do_not_group():
    with pytest.raises(
        ValueError, match=r"num_heads \(8\) must be divisible by num_kv_heads \(3\).*\[1, 2, 4, 8\]"
    ):
        GroupedQueryAttention(32, 8, 3)
    with pytest.raises(ValueError, match="num_kv_heads must be an int >= 1"):
        GroupedQueryAttention(32, 8, 0)
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by num_heads \(8\)"):
        GroupedQueryAttention(30, 8, 2)
    with pytest.raises(TypeError, match="num_kv_heads must be an int"):
        GroupedQueryAttention(32, 8, 2.0)
    with pytest.raises(ValueError, match="dropout"):
        GroupedQueryAttention(32, 8, 2, dropout=1.5)


def test_gqa_rejects_bad_inputs_and_masks():
    gqa = grouped()
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"query must have shape \(B, T, d_model=24\)"):
        gqa(x[0], x, x)
    with pytest.raises(TypeError, match="boolean"):
        gqa(x, x, x, torch.ones(5, 5))
    with pytest.raises(ValueError, match="does not broadcast"):
        gqa(x, x, x, torch.ones(4, 5, dtype=torch.bool))


def test_gqa_parameter_count():
    assert sum(p.numel() for p in GroupedQueryAttention(512, 8, 8).parameters()) == 1_050_624
    assert sum(p.numel() for p in GroupedQueryAttention(512, 8, 1).parameters()) == 2 * (
        512 * 512 + 512
    ) + 2 * (512 * 64 + 64)


def test_gqa_in_chapter_11_stack_generates_the_same_tokens_with_and_without_the_cache():
    """StackLayer hands chapter 8's cache to GQA itself (a later layer, not chapter 3's), and the cache changes nothing."""
    torch.manual_seed(0)
    config = StackConfig(vocab_size=40, d_model=24, num_heads=6, num_layers=2, d_ff=48, dropout=0.0, norm_first=True)
    stack = TransformerStack(config).double().eval()
    for layer in stack.layers:
        layer.self_attn = GroupedQueryAttention(24, 6, 2).double()
    prompt = torch.randint(4, 40, (3, 4))
    cached, uncached = (generate(stack, prompt, 10, temperature=0, use_cache=c) for c in (True, False))
    assert torch.equal(cached, uncached)
    cache = stack.new_cache()
    stack(prompt, cache=cache)
    assert cache[0].key.shape == (3, 2, 4, 4)  # (B, H_kv, T, D_h): the GQA layer filled the cache itself


def test_a_feature_map_that_is_not_a_function_is_a_type_error_naming_it():
    # The package review: feature_map=3 failed with "'int' object is not callable".
    q = torch.randn(2, 4, 8)
    for attend in (linear_attention, linear_attention_recurrent):
        with pytest.raises(TypeError, match=r"feature_map must be a function of a tensor"):
            attend(q, q, q, feature_map=3)
