"""Tests of chapter 11's modules: lm (the GPT/BERT stack), layers, optim, generation and bert."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from hostreads import reads_with_steps
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from transformer_book.bert import mask_tokens
from transformer_book.generation import generate, sample_next, top_k_filter, top_p_filter
from transformer_book.kvcache import KVCache
from transformer_book.layers import GELUFeedForward, RMSNorm, RotaryMultiHeadAttention, SwiGLU, gelu, silu
from transformer_book.lm import IGNORE_INDEX, RECIPES, StackConfig, StackLayer, TransformerStack
from transformer_book.masking import causal_mask
from transformer_book.model import EncoderLayer
from transformer_book.multihead import MultiHeadAttention
from transformer_book.optim import (
    AdamW,
    CosineWarmupSchedule,
    clip_grad_norm,
    cosine_rate,
    weight_decay_groups,
)
from transformer_book.positional import apply_rotary

VOCAB = 40
SPECIALS = (0, 1, 2, 3)


def tiny(recipe: str = "2017", **overrides) -> TransformerStack:
    torch.manual_seed(0)
    config = StackConfig(VOCAB, d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0, max_len=48,
                         **{**RECIPES[recipe], **overrides})
    return TransformerStack(config).eval()


# --- equivalence with PyTorch ------------------------------------------------------------------------------


def test_rmsnorm_matches_torch():
    ours, theirs = RMSNorm(24), nn.RMSNorm(24, eps=1e-5)
    with torch.no_grad():
        ours.weight.normal_()
        theirs.weight.copy_(ours.weight)
    x = torch.randn(3, 7, 24) * 5 - 2
    assert_close(ours(x), theirs(x))


def test_gelu_and_silu_match_torch():
    x = torch.linspace(-8, 8, 2001, dtype=torch.float64)
    assert_close(gelu(x), F.gelu(x))
    assert_close(silu(x), F.silu(x))


def test_gelu_feed_forward_uses_gelu():
    ff = GELUFeedForward(16, 32, dropout=0.0)
    x = torch.randn(2, 5, 16)
    assert_close(ff(x), ff.linear2(F.gelu(ff.linear1(x))))


def test_swiglu_formula_and_size():
    ff = SwiGLU(16, 40, dropout=0.0)
    x = torch.randn(2, 5, 16)
    expected = F.silu(x @ ff.gate_proj.weight.T) * (x @ ff.up_proj.weight.T) @ ff.down_proj.weight.T
    assert_close(ff(x), expected)
    assert sum(p.numel() for p in ff.parameters()) == 3 * 16 * 40


def _twin_parameters(make_optimizer, steps: int = 15) -> list[torch.Tensor]:
    """Parameters of a small network after `steps` steps on fixed data, from fixed weights.

    Every parameter has a gradient that matters: a key bias in attention, whose gradient is zero up to rounding,
    would let Adam amplify rounding noise and the two optimizers drift apart for no fault of either.
    """
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), RMSNorm(16), nn.Linear(16, 3))
    optimizer = make_optimizer(model)
    data = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(32, 6, generator=data)
        loss = F.cross_entropy(model(x), (x[:, 0] > 0).long() + (x[:, 1] > 0).long())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adamw_matches_torch(weight_decay):
    kwargs = {"lr": 5e-3, "betas": (0.9, 0.95), "eps": 1e-8}
    ours = _twin_parameters(lambda m: AdamW(weight_decay_groups(m, weight_decay), **kwargs))
    theirs = _twin_parameters(lambda m: torch.optim.AdamW(weight_decay_groups(m, weight_decay), **kwargs))
    start = _twin_parameters(lambda m: torch.optim.SGD(m.parameters(), lr=0.0))
    assert any(not torch.equal(a, b) for a, b in zip(ours, start))  # the parameters did move
    for a, b in zip(ours, theirs):
        assert_close(a, b)


def test_weight_decay_groups_split_matrices_from_vectors():
    model = tiny()
    decay, no_decay = weight_decay_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def _lrs(make_schedule, steps: int) -> list[float]:
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2e-3)
    schedule = make_schedule(optimizer)
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return out


@pytest.mark.parametrize(("warmup", "total", "floor"), [(2, 10, 0.0), (5, 40, 0.1), (10, 11, 0.5)])
def test_cosine_schedule_matches_torch(warmup, total, floor):
    ours = _lrs(lambda opt: CosineWarmupSchedule(opt, warmup, total, floor), total + 1)
    lr = torch.optim.lr_scheduler
    theirs = _lrs(lambda opt: lr.SequentialLR(opt, [
        lr.LinearLR(opt, start_factor=1 / warmup, total_iters=warmup - 1),
        lr.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=floor * 2e-3),
    ], milestones=[warmup]), total + 1)
    assert_close(torch.tensor(ours), torch.tensor(theirs))


def test_cosine_rate_shape():
    assert cosine_rate(0, 4, 20) == 0.25 and cosine_rate(3, 4, 20) == 1.0 and cosine_rate(4, 4, 20) == 1.0
    assert cosine_rate(20, 4, 20, 0.1) == pytest.approx(0.1) and cosine_rate(99, 4, 20, 0.1) == pytest.approx(0.1)
    rates = [cosine_rate(s, 4, 20) for s in range(3, 21)]
    assert all(a >= b for a, b in zip(rates, rates[1:]))


@pytest.mark.parametrize("scale", [1e-3, 1.0, 100.0])
def test_clip_grad_norm_matches_torch(scale):
    def run(clip):
        params = [nn.Parameter(torch.zeros(4, 3)), nn.Parameter(torch.zeros(5)), nn.Parameter(torch.zeros(2))]
        for i, p in enumerate(params[:2]):  # the third has no gradient
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * scale
        return clip(params, 0.5), [p.grad for p in params[:2]]

    norm_ours, grads_ours = run(clip_grad_norm)
    norm_theirs, grads_theirs = run(nn.utils.clip_grad_norm_)
    assert_close(norm_ours, norm_theirs)
    for a, b in zip(grads_ours, grads_theirs):
        assert_close(a, b)


# --- the stack ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_stack_layer_defaults_are_chapter_6_encoder_layer(norm_first):
    torch.manual_seed(0)
    paper = EncoderLayer(32, 4, 64, dropout=0.0, norm_first=norm_first).eval()
    ours = StackLayer(32, 4, 64, dropout=0.0, norm_first=norm_first).eval()
    ours.load_state_dict(paper.state_dict())
    x = torch.randn(2, 9, 32)
    assert_close(ours(x, causal_mask(9)), paper(x, causal_mask(9)))


def test_rotary_attention_without_rotation_is_multihead_attention():
    torch.manual_seed(0)
    rotary = RotaryMultiHeadAttention(32, 4).eval()
    plain = MultiHeadAttention(32, 4).eval()
    plain.load_state_dict(rotary.state_dict())
    x = torch.randn(2, 1, 32)  # one position: position 0, no rotation
    assert_close(rotary(x, x, x), plain(x, x, x))


def test_rotary_attention_weights_are_rotated_scores():
    torch.manual_seed(0)
    attn = RotaryMultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 6, 32)
    q = apply_rotary(attn.split_heads(attn.q_proj(x)))
    k = apply_rotary(attn.split_heads(attn.k_proj(x)))
    expected = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~causal_mask(6), float("-inf")).softmax(-1)
    out, weights = attn(x, x, x, causal_mask(6), need_weights=True)
    assert_close(weights, expected)
    assert_close(out, attn(x, x, x, causal_mask(6)))  # fused path = explicit path


def test_rotary_attention_cache_matches_full_sequence():
    torch.manual_seed(0)
    attn = RotaryMultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 7, 32)
    full = attn(x, x, x, causal_mask(7))
    cache = KVCache()
    first = attn(x[:, :4], x[:, :4], x[:, :4], causal_mask(4), cache=cache)
    steps = [attn(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(4, 7)]
    assert_close(torch.cat([first, *steps], dim=1), full)


@pytest.mark.parametrize("recipe", ["2017", "modern"])
def test_causal_stack_ignores_the_future(recipe):
    model = tiny(recipe)
    tokens = torch.randint(4, VOCAB, (2, 10))
    changed = tokens.clone()
    changed[:, 6:] = torch.randint(4, VOCAB, (2, 4))
    assert_close(model(tokens)[:, :6], model(changed)[:, :6])


def test_bidirectional_stack_sees_the_future():
    model = tiny(causal=False)
    tokens = torch.randint(4, VOCAB, (1, 10))
    changed = tokens.clone()
    changed[0, -1] = (tokens[0, -1] + 1 - 4) % (VOCAB - 4) + 4
    assert not torch.allclose(model(tokens)[:, 0], model(changed)[:, 0])


def test_padding_does_not_change_the_real_positions():
    model = tiny("modern", causal=False, num_segments=2)
    tokens = torch.randint(4, VOCAB, (1, 6))
    segments = torch.tensor([[0, 0, 0, 1, 1, 1]])
    padded = torch.cat([tokens, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    padded_segments = torch.cat([segments, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    assert_close(model(padded, padded_segments)[:, :6], model(tokens, segments), atol=1e-5, rtol=1e-5)


@settings(max_examples=20, deadline=None)
@given(batch=st.integers(1, 3), length=st.integers(1, 12), recipe=st.sampled_from(["2017", "modern"]),
       causal=st.booleans())
def test_stack_shapes(batch, length, recipe, causal):
    model = tiny(recipe, causal=causal)
    tokens = torch.randint(0, VOCAB, (batch, length))
    tokens[:, 0] = 5  # no row made only of padding
    assert model(tokens).shape == (batch, length, VOCAB)


def test_output_layer_is_tied_to_the_embedding():
    model = tiny()
    assert model.generator.weight is model.embed.weight


@pytest.mark.parametrize("recipe", ["2017", "modern"])
def test_cached_forward_matches_full_forward(recipe):
    model = tiny(recipe)
    tokens = torch.randint(4, VOCAB, (2, 11))
    full = model(tokens)
    cache = model.new_cache()
    parts = [model(tokens[:, :5], cache=cache), model(tokens[:, 5:8], cache=cache)]
    parts += [model(tokens[:, t : t + 1], cache=cache) for t in range(8, 11)]
    assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("recipe", ["2017", "modern"])
def test_generate_same_tokens_with_and_without_cache(recipe):
    model = tiny(recipe)
    prompt = torch.randint(4, VOCAB, (3, 4))
    for kwargs in ({"temperature": 0}, {"temperature": 1.0, "top_k": 5}, {"temperature": 0.7, "top_p": 0.9}):
        outs = [generate(model, prompt, 12, use_cache=c, generator=torch.Generator().manual_seed(0), **kwargs)
                for c in (True, False)]
        assert torch.equal(outs[0], outs[1])
        assert outs[0].shape == (3, 16) and torch.equal(outs[0][:, :4], prompt)


class _PreferredTokens(TransformerStack):
    """A stack whose next-token choice is fixed: token 2 (EOS) after token 6, token 6 after anything else."""

    def forward(self, tokens, segments=None, cache=None, check_ids=True):
        logits = torch.zeros(*tokens.shape, VOCAB)
        logits[..., 6] = 1.0
        logits[..., 2] = torch.where(tokens == 6, 2.0, 0.0)
        return logits


def test_generate_pads_after_eos_and_stops():
    model = _PreferredTokens(StackConfig(VOCAB, d_model=8, num_heads=2, num_layers=1, d_ff=8)).eval()
    out = generate(model, torch.tensor([[5], [6]]), 10, temperature=0, eos_id=2)
    assert out.tolist() == [[5, 6, 2], [6, 2, 0]]  # row 2 ended first, then got padding; both ended: stop


def test_generate_restores_training_mode():
    model = tiny().train()
    generate(model, torch.tensor([[5]]), 2)
    assert model.training


# --- sampling -------------------------------------------------------------------------------------------------

logits_strategy = st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=30)


@settings(max_examples=60, deadline=None)
@given(values=logits_strategy, k=st.integers(1, 40))
def test_top_k_keeps_k_tokens(values, k):
    logits = torch.tensor([values])
    kept = top_k_filter(logits, k).isfinite()
    assert int(kept.sum()) == min(k, len(values))
    if k < len(values):  # no dropped token beats a kept one
        assert logits[kept].min() >= logits[~kept].max()


@settings(max_examples=80, deadline=None)
@given(values=logits_strategy, p=st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_set_with_enough_mass(values, p):
    logits = torch.tensor([values], dtype=torch.float64)
    probs = logits.softmax(-1)[0]
    kept = top_p_filter(logits, p).isfinite()[0]
    assert probs[kept].sum() >= p - 1e-9  # enough mass
    smallest_kept = probs[kept].min()
    assert probs[kept].sum() - smallest_kept < p + 1e-9  # one token fewer would not be enough
    if (~kept).any():
        assert probs[~kept].max() <= smallest_kept  # the most likely tokens are the ones kept


def test_top_p_one_keeps_everything():
    logits = torch.randn(2, 9)
    assert torch.equal(top_p_filter(logits, 1.0), logits)


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=20, unique=True))
def test_small_temperature_is_greedy(values):
    logits = torch.tensor([values], dtype=torch.float64)
    gap = (logits.sort(descending=True).values[0, 0] - logits.sort(descending=True).values[0, 1]).item()
    if gap < 1e-2:
        return
    draws = sample_next(logits.expand(50, -1), temperature=1e-4, generator=torch.Generator().manual_seed(0))
    assert (draws == logits.argmax()).all()
    assert sample_next(logits, temperature=0).item() == logits.argmax().item()


def test_sampling_follows_the_distribution():
    probs = torch.tensor([0.6, 0.3, 0.1])
    draws = sample_next(probs.log().expand(20_000, -1), generator=torch.Generator().manual_seed(0))
    assert_close(torch.bincount(draws, minlength=3) / 20_000, probs, atol=0.015, rtol=0)


# --- BERT's input and masking ---------------------------------------------------------------------------------


def test_mask_tokens_proportions_on_a_large_batch():
    specials = (*SPECIALS, 40, 41)
    tokens = torch.randint(4, 40, (400, 100))
    tokens[:, 0], tokens[:, -1], tokens[:50, 50:] = 40, 41, 0
    inputs, labels = mask_tokens(tokens, 42, specials, 43, torch.Generator().manual_seed(0))
    chosen = labels != IGNORE_INDEX
    maskable = ~torch.isin(tokens, torch.tensor(specials))
    assert not (chosen & ~maskable).any()  # special tokens never chosen...
    assert torch.equal(inputs[~maskable], tokens[~maskable])  # ...nor changed
    assert torch.equal(labels[chosen], tokens[chosen])
    assert torch.equal(inputs[~chosen], tokens[~chosen])
    n = chosen.sum().item()
    assert abs(n / maskable.sum().item() - 0.15) < 0.005
    assert abs(((inputs == 42) & chosen).sum().item() / n - 0.8) < 0.015
    random = (inputs != 42) & (inputs != tokens) & chosen
    assert abs(random.sum().item() / n - 0.1 * (1 - 1 / 36)) < 0.01
    assert not torch.isin(inputs[random], torch.tensor([*specials, 42])).any()  # random ids are normal ids


@settings(max_examples=30, deadline=None)
@given(batch=st.integers(1, 4), length=st.integers(1, 20), seed=st.integers(0, 1000))
def test_mask_tokens_shapes_and_labels(batch, length, seed):
    tokens = torch.randint(0, 20, (batch, length))
    inputs, labels = mask_tokens(tokens, 20, SPECIALS, 21, torch.Generator().manual_seed(seed))
    assert inputs.shape == labels.shape == tokens.shape
    assert ((labels == IGNORE_INDEX) | (labels == tokens)).all()
    assert not ((labels != IGNORE_INDEX) & (tokens < 4)).any()


# --- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "message"), [
    (lambda: StackConfig(50, d_model=30, num_heads=4), "divisible by num_heads"),
    (lambda: StackConfig(50, d_model=12, num_heads=4, positions="rotary"), "head size"),
    (lambda: RotaryMultiHeadAttention(12, 4), "head size"),
    (lambda: StackConfig(50, norm="batchnorm"), "norm must be one of"),
    (lambda: StackConfig(50, dropout=1.0), "dropout"),
    (lambda: StackConfig(50, pad_id=60), "pad_id"),
    (lambda: top_p_filter(torch.zeros(1, 4), 0.0), "top_p"),
    (lambda: top_p_filter(torch.zeros(1, 4), 1.01), "top_p"),
    (lambda: sample_next(torch.zeros(1, 4), temperature=0, top_p=2.0), "top_p"),
    (lambda: top_k_filter(torch.zeros(1, 4), 0), "top_k"),
    (lambda: sample_next(torch.zeros(1, 4), temperature=-0.5), "temperature"),
    (lambda: sample_next(torch.zeros(4), temperature=1.0), "shape"),
    (lambda: mask_tokens(torch.zeros(2, 3, dtype=torch.long), 5, SPECIALS, 6, mask_prob=0.0), "mask_prob"),
    (lambda: CosineWarmupSchedule(torch.optim.SGD([nn.Parameter(torch.zeros(1))]), 5, 5), "total_steps"),
    (lambda: AdamW([nn.Parameter(torch.zeros(1))], betas=(0.9, 1.0)), "betas"),
    (lambda: clip_grad_norm([], 0.0), "max_norm"),
])
def test_bad_input_raises_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_stack_input_errors():
    model = tiny()
    with pytest.raises(ValueError, match="tokens holds token ids from"):
        model(torch.tensor([[VOCAB]]))
    with pytest.raises(ValueError, match="segments"):
        model(torch.tensor([[5]]), torch.tensor([[0]]))
    with pytest.raises(ValueError, match="max_len"):
        model(torch.ones(1, 49, dtype=torch.long))
    with pytest.raises(ValueError, match="causal"):
        tiny(causal=False)(torch.tensor([[5]]), cache=[KVCache(), KVCache()])
    with pytest.raises(ValueError, match="max_len"):
        generate(model, torch.ones(1, 40, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="padding"):
        generate(model, torch.tensor([[5, 0]]), 2)
    with pytest.raises(ValueError, match="causal"):
        generate(tiny(causal=False), torch.tensor([[5]]), 2)


def test_segment_errors_name_the_shape_or_the_ids():
    model = tiny(causal=False, num_segments=2)
    tokens = torch.tensor([[1, 5, 6, 7]])
    with pytest.raises(ValueError, match=r"segment ids must be in 0 \.\. 1 .*got ids from 0 to 2"):
        model(tokens, torch.tensor([[0, 0, 1, 2]]))
    with pytest.raises(ValueError, match=r"segment ids must be in 0 \.\. 1 .*got ids from -1 to 0"):
        model(tokens, torch.tensor([[0, 0, -1, 0]]))
    with pytest.raises(ValueError, match=r"shape of tokens, \(1, 4\); got \(1, 3\)"):
        model(tokens, torch.tensor([[0, 0, 1]]))
    with pytest.raises(TypeError, match="segments must be a tensor"):
        model(tokens, [[0, 0, 1, 1]])


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_reads_back_nothing_at_any_step(use_cache):
    # generate runs a fixed number of steps, so it never needs to look at what it drew: the prompt's id range and
    # its check for padding (2 reads) happen once, before the loop; any read inside the loop would grow with it.
    prompt = torch.randint(4, VOCAB, (3, 4))

    def run(steps):
        out = generate(tiny("2017"), prompt, steps, temperature=0, use_cache=use_cache)
        assert out.shape == (3, 4 + steps)  # every step ran

    once, per_step = reads_with_steps(run, few=10, many=20)
    assert per_step == {}, f"reads that grow with the steps: {per_step}"
    assert once.total() <= 2, once


def test_a_stack_of_the_wrong_config_is_a_type_error_naming_it():
    # The package review: TransformerStack({}) failed with "'dict' object has no attribute 'positions'".
    with pytest.raises(TypeError, match=r"config must be a StackConfig, .*; got dict"):
        TransformerStack({"vocab_size": 10})


def test_a_config_of_a_notebook_s_own_copy_of_stackconfig_is_accepted():
    # Chapter 11's notebook defines StackConfig again and builds stacks of both copies: a class check broke it.
    copy = dataclasses.make_dataclass(
        "StackConfig", [(f.name, f.type, dataclasses.field(default=f.default)) for f in dataclasses.fields(StackConfig)]
    )
    torch.manual_seed(0)
    stack = TransformerStack(copy(vocab_size=10, d_model=16, num_heads=2, num_layers=1, d_ff=32))
    assert stack(torch.randint(0, 10, (1, 4))).shape == (1, 4, 10)
