"""Tests for transformer_book.kvcache (chapter 8): the key/value cache runs chapter 3's plain layer on new positions
only and gives the full pass's result; LayerCache, new_cache, select, and a refused call."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from transformer_book.kvcache import KVCache, LayerCache, new_cache
from transformer_book.model import Transformer, TransformerConfig
from transformer_book.multihead import MultiHeadAttention

HYPOTHESIS = settings(max_examples=30, deadline=None)


def make_layer(d_model: int = 16, num_heads: int = 4, seed: int = 0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    layer = MultiHeadAttention(d_model, num_heads).double().eval()
    with torch.no_grad():  # non-zero biases, so that a mix-up of q/k/v biases would show
        for proj in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj):
            proj.bias.normal_()
    return layer


@HYPOTHESIS
@given(batch=st.integers(1, 3), length=st.integers(1, 7), num_heads=st.sampled_from([1, 2, 4]),
       seed=st.integers(0, 2**16))
def test_cached_steps_equal_full_causal_self_attention(batch, length, num_heads, seed):
    layer = make_layer(8, num_heads, seed)
    x = torch.randn(batch, length, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    full = layer(x, x, x, mask=torch.ones(length, length, dtype=torch.bool).tril())
    cache = KVCache()
    steps = [cache.attend(layer, x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1]) for t in range(length)]
    assert len(cache) == length
    assert cache.key.shape == (batch, num_heads, length, 8 // num_heads)
    assert_close(torch.cat(steps, dim=1), full)


def test_cache_with_a_prompt_then_single_steps_and_the_weights():
    layer = make_layer()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    full, full_weights = layer(x, x, x, mask=torch.ones(6, 6, dtype=torch.bool).tril(), need_weights=True)
    cache = KVCache()
    prompt = cache.attend(layer, x[:, :3], x[:, :3], x[:, :3], mask=torch.ones(3, 3, dtype=torch.bool).tril())
    rest = [cache.attend(layer, x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], need_weights=True)
            for t in range(3, 6)]
    assert_close(torch.cat([prompt, *(out for out, _ in rest)], dim=1), full)
    for t, (_, weights) in zip(range(3, 6), rest):
        assert_close(weights[:, :, 0], full_weights[:, :, t, : t + 1])  # (B, H, T_seen): the row of step t


def test_static_cache_projects_the_memory_once():
    layer = make_layer()
    memory = torch.randn(2, 7, 16, dtype=torch.float64)
    tgt = torch.randn(2, 3, 16, dtype=torch.float64)
    expected = layer(tgt, memory, memory)
    cache = KVCache(static=True)
    first = cache.attend(layer, tgt[:, :1], memory, memory)
    cached_key = cache.key
    # After the first step the key/value arguments are ignored: pass something else to prove it.
    later = [cache.attend(layer, tgt[:, t : t + 1], tgt[:, :1], tgt[:, :1]) for t in (1, 2)]
    assert cache.key is cached_key and len(cache) == 7
    assert_close(torch.cat([first, *later], dim=1), expected)


def test_cache_select_reorders_the_batch():
    cache = KVCache(torch.arange(3.0).view(3, 1, 1, 1), torch.arange(3.0).view(3, 1, 1, 1) + 10)
    cache.select(torch.tensor([2, 2, 0]))
    assert cache.key.flatten().tolist() == [2.0, 2.0, 0.0]
    assert cache.value.flatten().tolist() == [12.0, 12.0, 10.0]
    empty = KVCache()
    empty.select(torch.tensor([0]))
    assert len(empty) == 0


def test_a_refused_call_leaves_the_cache_unchanged():
    layer = MultiHeadAttention(16, 4)
    x = torch.randn(2, 3, 16)
    cache = KVCache()
    cache.attend(layer, x, x, x, mask=torch.ones(3, 3, dtype=torch.bool).tril())
    key = cache.key
    with pytest.raises(ValueError, match="does not broadcast"):
        cache.attend(layer, x[:, :1], x[:, :1], x[:, :1], mask=torch.ones(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="must have shape"):
        cache.attend(layer, x[:, :1, :8], x[:, :1], x[:, :1])  # chapter 3's input checks run first
    assert len(cache) == 3 and cache.key is key


def test_new_cache_gives_one_layer_cache_per_decoder_layer_or_the_models_own():
    config = TransformerConfig(20, 20, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=3, d_ff=32)
    cache = new_cache(Transformer(config))
    assert len(cache) == 3 and all(isinstance(c, LayerCache) for c in cache)
    assert all(not c.self_attn.static and c.cross_attn.static and len(c.self_attn) == 0 for c in cache)
    assert cache[0].self_attn is not cache[1].self_attn  # every layer its own

    class OwnCache(Transformer):
        def new_cache(self):
            return ["the model's own"]

    assert new_cache(OwnCache(config)) == ["the model's own"]
