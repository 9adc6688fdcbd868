"""Tests of transformer_book.training: label smoothing, the warm-up schedule and the training loop (chapter 7)."""

import copy
import math
import sys
import warnings
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from hostreads import count_host_reads
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from transformer_book.masking import make_batch
from transformer_book.model import Transformer, TransformerConfig
from transformer_book.training import (
    LabelSmoothingLoss,
    TrainState,
    WarmupSchedule,
    autocast,
    fit,
    make_optimizer,
    noam_rate,
    set_seed,
    train_step,
)

PAD, BOS, EOS = 0, 1, 2
CPU = torch.device("cpu")


def smoothed_target(target: torch.Tensor, num_classes: int, smoothing: float, convention: str) -> torch.Tensor:
    """The target distribution q written out in full, (...) -> (..., K), straight from its definition."""
    one_hot = F.one_hot(target, num_classes).double()  # (..., K)
    if convention == "uniform":
        return (1 - smoothing) * one_hot + smoothing / num_classes
    return (1 - smoothing) * one_hot + smoothing / (num_classes - 1) * (1 - one_hot)


def reference_loss(logits, target, smoothing, convention, ignore_index):
    """Mean over counted positions of KL(q || p) + H(q) = H(q, p), computed with F.kl_div in float64."""
    keep = target != ignore_index
    q = smoothed_target(target[keep], logits.size(-1), smoothing, convention)  # (N, K)
    log_p = F.log_softmax(logits[keep].double(), dim=-1)  # (N, K)
    kl = F.kl_div(log_p, q, reduction="none").sum(-1)  # (N,): sum_k q_k (log q_k - log p_k)
    entropy = -torch.special.xlogy(q, q).sum(-1)  # (N,): H(q), with 0 log 0 = 0
    return (kl + entropy).mean()


# ---------------------------------------------------------------- label smoothing


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 4),
    length=st.integers(1, 6),
    num_classes=st.integers(2, 9),
    smoothing=st.floats(0.0, 0.95),
    seed=st.integers(0, 2**16),
)
def test_uniform_convention_equals_pytorch_cross_entropy(batch, length, num_classes, smoothing, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(batch, length, num_classes, generator=gen, dtype=torch.float64)
    target = torch.randint(0, num_classes, (batch, length), generator=gen)
    target[0, 0] = 1 % num_classes  # at least one counted position
    ours = LabelSmoothingLoss(smoothing, ignore_index=0)(logits, target)
    theirs = nn.CrossEntropyLoss(ignore_index=0, label_smoothing=smoothing)(
        logits.reshape(-1, num_classes), target.reshape(-1)
    )
    assert_close(ours, theirs)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=0, max_size=2),
    num_classes=st.integers(2, 9),
    smoothing=st.floats(0.0, 0.95),
    convention=st.sampled_from(["uniform", "others"]),
    seed=st.integers(0, 2**16),
)
def test_loss_equals_kl_divergence_plus_entropy(shape, num_classes, smoothing, convention, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(*shape, 5, num_classes, generator=gen, dtype=torch.float64)
    target = torch.randint(0, num_classes, (*shape, 5), generator=gen)
    target[..., 0] = num_classes - 1  # never ignore_index=-1, so every position counts
    ours = LabelSmoothingLoss(smoothing, ignore_index=-1, convention=convention)(logits, target)
    assert_close(ours, reference_loss(logits, target, smoothing, convention, ignore_index=-1))


def test_others_convention_by_hand():
    """K = 4, eps = 0.3, target 2: q = [0.1, 0.1, 0.7, 0.1] in the 'others' convention."""
    logits = torch.tensor([[1.0, -2.0, 0.5, 3.0]], dtype=torch.float64)
    log_p = F.log_softmax(logits, dim=-1)[0]
    expected = -(0.1 * log_p[0] + 0.1 * log_p[1] + 0.7 * log_p[2] + 0.1 * log_p[3])
    ours = LabelSmoothingLoss(0.3, ignore_index=-100, convention="others")(logits, torch.tensor([2]))
    assert_close(ours, expected)


def test_conventions_agree_when_eps_is_rescaled():
    """'uniform' with eps equals 'others' with eps (K - 1) / K: the same target distribution."""
    torch.manual_seed(0)
    logits, target = torch.randn(6, 7), torch.randint(0, 7, (6,))
    uniform = LabelSmoothingLoss(0.14, ignore_index=-100)(logits, target)
    others = LabelSmoothingLoss(0.14 * 6 / 7, ignore_index=-100, convention="others")(logits, target)
    assert_close(uniform, others)


def test_ignore_index_positions_do_not_count():
    torch.manual_seed(0)
    logits, target = torch.randn(2, 5, 6), torch.randint(1, 6, (2, 5))
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=0)
    padded_logits = torch.cat([logits, 100 * torch.randn(2, 3, 6)], dim=1)  # garbage at padded positions
    padded_target = torch.cat([target, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    assert_close(loss_fn(padded_logits, padded_target), loss_fn(logits, target))


def test_pytorch_default_ignore_index_minus_100_works():
    torch.manual_seed(0)
    logits, target = torch.randn(8, 5), torch.randint(0, 5, (8,))
    target[::3] = -100
    ours = LabelSmoothingLoss(0.2, ignore_index=-100)(logits, target)
    assert_close(ours, F.cross_entropy(logits, target, label_smoothing=0.2))


def test_all_positions_ignored_gives_zero_and_no_nan():
    logits = torch.randn(3, 4, requires_grad=True)
    loss = LabelSmoothingLoss(0.1, ignore_index=0)(logits, torch.zeros(3, dtype=torch.long))
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(logits.grad == 0)


@pytest.mark.parametrize("convention", ["uniform", "others"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_masked_vocabulary_entry_gives_finite_loss_and_gradient(convention, smoothing):
    """A logit of -inf (p_k = 0) must not produce inf or NaN: the class is treated as absent."""
    torch.manual_seed(0)
    logits = torch.randn(4, 6, 7)
    logits[..., 3] = -math.inf  # a token the model may never produce
    target = torch.randint(4, 7, (4, 6))  # never the masked class
    target[:, -2:] = PAD
    logits.requires_grad_(True)
    loss_fn = LabelSmoothingLoss(smoothing, ignore_index=PAD, convention=convention, impossible_classes=True)
    loss = loss_fn(logits, target)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(logits.grad).all()
    # Equal to the loss on the vocabulary without that class (ids above 3 move down by one).
    reduced = torch.cat([logits.detach()[..., :3], logits.detach()[..., 4:]], dim=-1)
    reduced_target = torch.where(target > 3, target - 1, target)
    expected = LabelSmoothingLoss(smoothing, ignore_index=PAD, convention=convention)(reduced, reduced_target)
    assert_close(loss, expected)
    if convention == "uniform":
        theirs = F.cross_entropy(reduced.reshape(-1, 6), reduced_target.reshape(-1), ignore_index=PAD,
                                 label_smoothing=smoothing)
        assert_close(loss, theirs)


@pytest.mark.parametrize("convention", ["uniform", "others"])
def test_masked_entries_at_padding_positions_are_harmless(convention):
    """Padding positions may have any logits, even a fully masked row: finite loss, finite gradients."""
    torch.manual_seed(0)
    clean = torch.randn(2, 3, 5)
    logits = clean.clone()
    logits[1, 2] = -math.inf  # a padded position whose row is fully masked
    logits.requires_grad_(True)
    target = torch.tensor([[1, 2, 3], [4, 1, PAD]])
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=PAD, convention=convention, impossible_classes=True)
    loss = loss_fn(logits, target)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(logits.grad).all()
    assert torch.all(logits.grad[1, 2] == 0)  # the padded position gets no gradient
    clean.requires_grad_(True)
    loss_fn(clean, target).backward()  # the same loss and gradients as with ordinary logits there
    assert_close(loss, loss_fn(clean, target), rtol=0, atol=0)
    assert_close(logits.grad, clean.grad, rtol=0, atol=0)


def test_target_with_zero_probability_is_infinite_not_nan():
    """If the model rules out the correct class, the loss is +inf (fit then stops), never NaN."""
    logits = torch.tensor([[0.0, -math.inf, 1.0]])
    for convention in ("uniform", "others"):
        loss_fn = LabelSmoothingLoss(0.1, ignore_index=-100, convention=convention, impossible_classes=True)
        assert loss_fn(logits, torch.tensor([1])).item() == math.inf


def test_loss_is_float32_under_bfloat16_logits():
    logits = torch.randn(4, 9).bfloat16()
    loss = LabelSmoothingLoss(0.1, ignore_index=-100)(logits, torch.randint(0, 9, (4,)))
    assert loss.dtype == torch.float32


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"smoothing": 1.0}, ValueError, r"smoothing must be a number in \[0, 1\) \(the paper uses 0.1\); got 1.0"),
        ({"smoothing": -0.1}, ValueError, r"smoothing must be a number in \[0, 1\)"),
        ({"smoothing": "0.1"}, TypeError, "smoothing must be a number.*of type str"),
        ({"convention": "paper"}, ValueError, "convention must be 'uniform'.*'others'.*got 'paper'"),
    ],
)
def test_bad_arguments_raise(kwargs, error, match):
    with pytest.raises(error, match=match):
        LabelSmoothingLoss(**kwargs)


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match=r"leading dimensions; got logits \(2, 3, 5\) and target \(2, 4\)"):
        LabelSmoothingLoss()(torch.randn(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


def test_float_target_raises():
    with pytest.raises(TypeError, match="target must hold integer class ids"):
        LabelSmoothingLoss()(torch.randn(2, 5), torch.zeros(2))


# ---------------------------------------------------------------- schedule and optimizer


def test_noam_rate_values_and_peak():
    d_model, warmup = 512, 4000
    rates = [noam_rate(s, d_model, warmup) for s in range(1, 20001)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == warmup
    assert math.isclose(rates[warmup - 1], (d_model * warmup) ** -0.5)
    assert math.isclose(noam_rate(1, d_model, warmup), d_model**-0.5 * warmup**-1.5)
    assert math.isclose(noam_rate(16000, d_model, warmup), d_model**-0.5 / 16000**0.5)
    assert math.isclose(noam_rate(10, d_model, warmup, factor=2.0), 2 * noam_rate(10, d_model, warmup))
    assert noam_rate(0, d_model, warmup) == noam_rate(1, d_model, warmup)
    assert all(b > a for a, b in zip(rates[: warmup - 1], rates[1:warmup]))  # rises during warm-up
    assert all(b < a for a, b in zip(rates[warmup:], rates[warmup + 1 :]))  # then falls


@pytest.mark.parametrize("warmup", [0, -5])
def test_warmup_steps_below_one_raise(warmup):
    with pytest.raises(ValueError, match=f"warmup_steps must be an int >= 1; got {warmup}"):
        noam_rate(10, 512, warmup)
    optimizer = make_optimizer(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="warmup_steps must be an int >= 1"):
        WarmupSchedule(optimizer, 512, warmup)


def adam_steps(gradients: list[float]) -> list[float]:
    """How far make_optimizer's Adam moves one weight at each step, given that weight's gradient at each step."""
    model = nn.Linear(1, 1, bias=False).double()
    optimizer = make_optimizer(model)
    moves = []
    for gradient in gradients:
        before = model.weight.detach().clone()
        model.weight.grad = torch.full_like(before, gradient)
        optimizer.step()
        moves.append((model.weight.detach() - before).abs().item())
    return moves


def test_adam_moves_a_weight_with_a_tiny_gradient_by_about_the_learning_rate():
    # Chapter 7: Adam's first step moves every weight with a clear gradient by about the learning rate, 1.0 here
    # (WarmupSchedule scales it). The step is lr * g / (|g| + eps): for g = 1e-7 the paper's eps = 1e-9 gives 0.990;
    # PyTorch's default 1e-8 would give 0.909, and an eps near the gradient's size would halve it.
    (first,) = adam_steps([1e-7])
    assert 0.98 < first <= 1.0, first


def test_adam_adapts_to_smaller_gradients_within_a_few_hundred_steps():
    # Chapter 7: the average of g^2 with beta2 = 0.98 remembers about 50 steps (PyTorch's default 0.999: 1000).
    # After the gradients shrink 100-fold the step first falls (the momentum, beta1 = 0.9, forgets the large
    # gradients within a few dozen steps; the average of g^2 still holds them), then grows back to half the
    # learning rate once that average has forgotten them too: 401 steps here, about 6,400 with beta2 = 0.999.
    moves = adam_steps([1.0] * 200 + [0.01] * 1000)[200:]
    lowest = min(range(len(moves)), key=moves.__getitem__)
    back = next(k for k in range(lowest, len(moves)) if moves[k] >= 0.5) + 1
    assert moves[lowest] < 0.05 and lowest < 100, (lowest, moves[lowest])
    assert 300 < back < 500, back


def test_schedule_gives_noam_rate_at_every_step_and_resumes():
    model = nn.Linear(3, 3)
    optimizer = make_optimizer(model)
    scheduler = WarmupSchedule(optimizer, d_model=64, warmup_steps=10, factor=2.0)
    used = []
    for _ in range(25):
        used.append(optimizer.param_groups[0]["lr"])  # the rate this step uses
        model(torch.randn(2, 3)).sum().backward()
        optimizer.step()
        scheduler.step()
    assert used == pytest.approx([noam_rate(k, 64, 10, 2.0) for k in range(1, 26)], rel=1e-12)
    # Resume after 25 steps in a fresh optimizer: the 26th step uses noam_rate(26).
    resumed_optimizer = make_optimizer(model)
    resumed_optimizer.load_state_dict(optimizer.state_dict())
    resumed = WarmupSchedule(resumed_optimizer, 64, 10, 2.0, last_epoch=25 - 1)
    assert resumed_optimizer.param_groups[0]["lr"] == pytest.approx(noam_rate(26, 64, 10, 2.0), rel=1e-12)
    resumed_optimizer.step()
    resumed.step()
    assert resumed_optimizer.param_groups[0]["lr"] == pytest.approx(noam_rate(27, 64, 10, 2.0), rel=1e-12)


def test_resuming_without_optimizer_state_raises():
    with pytest.raises(ValueError, match="load the saved optimizer.state_dict"):
        WarmupSchedule(make_optimizer(nn.Linear(2, 2)), 64, 10, last_epoch=9)


def test_autocast_rejects_other_dtypes():
    with pytest.raises(ValueError, match="amp_dtype must be None, torch.bfloat16 or torch.float16"):
        autocast(CPU, torch.float64)


# ---------------------------------------------------------------- the training loop


def copy_batches(num_batches: int, seed: int, batch_size: int = 8, length: int = 5, vocab: int = 10):
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(num_batches):
        src = torch.randint(3, vocab, (batch_size, length), generator=gen)
        tgt = torch.cat([torch.full((batch_size, 1), BOS), src, torch.full((batch_size, 1), EOS)], dim=1)
        batches.append(make_batch(src, tgt, PAD))
    return batches


def tiny_model(dropout: float = 0.1) -> Transformer:
    return Transformer(TransformerConfig(
        src_vocab_size=10, tgt_vocab_size=10, d_model=16, num_heads=2, num_encoder_layers=1,
        num_decoder_layers=1, d_ff=32, dropout=dropout, max_len=16,
    ))


def run(steps_or_batches, seed=0, amp_dtype=None, epochs=1, state=None, stop_at=None):
    """Seeded model + optimizer + schedule; fit; returns (model, optimizer, scheduler, state)."""
    set_seed(seed)
    model = tiny_model()
    optimizer = make_optimizer(model)
    scheduler = WarmupSchedule(optimizer, 16, warmup_steps=4)
    on_step_end = (lambda s: s.step >= stop_at) if stop_at is not None else None
    state = fit(model, steps_or_batches, optimizer, LabelSmoothingLoss(0.1), device=CPU, epochs=epochs,
                scheduler=scheduler, amp_dtype=amp_dtype, state=state, on_step_end=on_step_end, progress=False)
    return model, optimizer, scheduler, state


def test_fit_is_deterministic_under_a_seed():
    batches = copy_batches(6, seed=1)
    _, _, _, first = run(batches, epochs=2)
    _, _, _, second = run(batches, epochs=2)
    assert len(first.losses) == 12
    assert first.losses == second.losses  # exactly, dropout included
    assert first.tokens_seen == 12 * 8 * 6
    _, _, _, other = run(batches, seed=1, epochs=2)
    assert other.losses != first.losses  # the seed matters (so the test above can fail)


def test_fit_resumes_mid_epoch_exactly():
    def batches(epoch):  # a different, deterministic set of batches every epoch
        return copy_batches(5, seed=100 + epoch)

    _, _, _, full = run(batches, epochs=3)
    # Interrupted after 7 steps (epoch 2, batch 2): save everything a checkpoint holds.
    model, optimizer, _, state = run(batches, epochs=3, stop_at=7)
    assert (state.step, state.epoch, state.batch_in_epoch) == (7, 1, 2)
    saved = (copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict()), torch.get_rng_state(),
             copy.deepcopy(state))
    torch.manual_seed(12345)  # whatever happens in between
    # Resume in fresh objects.
    model = tiny_model()
    model.load_state_dict(saved[0])
    optimizer = make_optimizer(model)
    optimizer.load_state_dict(saved[1])
    scheduler = WarmupSchedule(optimizer, 16, warmup_steps=4, last_epoch=saved[3].step - 1)
    torch.set_rng_state(saved[2])
    resumed = fit(model, batches, optimizer, LabelSmoothingLoss(0.1), device=CPU, epochs=3,
                  scheduler=scheduler, state=saved[3], progress=False)
    assert resumed.step == 15
    assert resumed.losses == full.losses


def test_on_epoch_end_is_called_after_each_epoch():
    seen = []
    set_seed(0)
    model = tiny_model()
    fit(model, copy_batches(3, seed=0), make_optimizer(model, lr=1e-3), LabelSmoothingLoss(0.1), device=CPU,
        epochs=2, on_epoch_end=lambda s: seen.append((s.epoch, s.step)), progress=False)
    assert seen == [(1, 3), (2, 6)]


def test_non_finite_loss_raises_before_updating_in_train_step():
    set_seed(0)
    model = tiny_model()
    with torch.no_grad():
        model.generator.weight[0, 0] = math.nan  # poisons every logit
    before = copy.deepcopy(model.state_dict())
    optimizer = make_optimizer(model, lr=1e-3)
    with pytest.raises(FloatingPointError, match=r"the loss is nan; the weights were not updated"):
        train_step(model, copy_batches(1, seed=0)[0], optimizer, LabelSmoothingLoss(0.1), device=CPU)
    for name, value in model.state_dict().items():
        assert torch.equal(value.nan_to_num(), before[name].nan_to_num()), f"{name} changed"


@pytest.mark.parametrize("read_every", [1, 3, 50])
def test_fit_finds_a_non_finite_loss_within_read_every_steps_and_before_the_epoch_ends(read_every):
    # fit reads the losses back every read_every steps (and at the end of an epoch, before on_epoch_end, where
    # chapter 10 saves): a NaN loss at step 1 is reported at the first read, never after a callback saw the epoch.
    set_seed(0)
    model = tiny_model()
    with torch.no_grad():
        model.generator.weight[0, 0] = math.nan  # poisons every logit
    steps_seen, epochs_ended = [], []
    with pytest.raises(FloatingPointError, match=r"the loss of step 1 is nan; the weights are no longer usable"):
        fit(model, copy_batches(5, seed=0), make_optimizer(model, lr=1e-3), LabelSmoothingLoss(0.1), device=CPU,
            epochs=2, read_every=read_every, on_step_end=lambda s: steps_seen.append(s.step),
            on_epoch_end=epochs_ended.append, progress=False)
    assert steps_seen == list(range(1, min(read_every, 6)))  # the read comes before the callback of its step
    assert epochs_ended == []


def test_read_losses_turns_the_tensors_left_on_the_device_into_floats():
    state = TrainState(step=3, losses=[1.0, torch.tensor(0.5), torch.tensor(0.25)])
    assert state.read_losses() == [1.0, 0.5, 0.25] and all(type(x) is float for x in state.losses)
    state.losses.append(torch.tensor(math.inf))
    with pytest.raises(FloatingPointError, match="the loss of step 4 is inf"):
        state.read_losses()


def test_bfloat16_autocast_runs_on_cpu():
    batches = copy_batches(4, seed=0)
    _, _, _, state = run(batches, amp_dtype=torch.bfloat16)
    _, _, _, full = run(batches)
    assert len(state.losses) == 4 and all(math.isfinite(x) for x in state.losses)
    assert state.losses != full.losses  # really computed in bfloat16
    assert state.losses[0] == pytest.approx(full.losses[0], rel=0.05)


def test_float16_with_gradient_scaler_runs_on_cpu():
    batches = copy_batches(3, seed=0)
    _, _, _, state = run(batches, amp_dtype=torch.float16)
    assert len(state.losses) == 3 and all(math.isfinite(x) for x in state.losses)
    _, _, _, full = run(batches)
    assert state.losses != full.losses  # really computed in float16


def test_fit_uses_the_gradient_scaler_passed_in():
    # growth_interval=2: after two steps without an overflow the scale doubles, and the third step starts a
    # new count. A scaler that fit did not use would still hold its initial state.
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    set_seed(0)
    model = tiny_model()
    optimizer = make_optimizer(model, lr=1e-3)
    state = fit(model, copy_batches(3, seed=0), optimizer, LabelSmoothingLoss(0.1), device=CPU,
                amp_dtype=torch.float16, scaler=scaler, progress=False)
    assert len(state.losses) == 3
    saved = scaler.state_dict()  # what a checkpoint stores, and what a resumed run loads
    assert (saved["scale"], saved["_growth_tracker"]) == (2.0**11, 1)


def test_train_step_returns_the_loss_and_moves_the_weights():
    set_seed(0)
    model = tiny_model(dropout=0.0)
    batch = copy_batches(1, seed=0)[0]
    loss_fn = LabelSmoothingLoss(0.0)
    with torch.no_grad():
        expected = loss_fn(model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask), batch.tgt_out).item()
    before = model.generator.weight.detach().clone()
    loss, stepped = train_step(model, batch, make_optimizer(model, lr=1e-3), loss_fn, device=CPU)
    assert loss == pytest.approx(expected, rel=1e-6)
    assert stepped
    assert not torch.equal(before, model.generator.weight)


def test_a_float16_step_with_an_overflowing_gradient_leaves_weights_and_schedule_alone():
    # float16 autocast and a GradScaler run on the CPU too: the branch a T4 takes, with an inf gradient injected.
    set_seed(0)
    model = tiny_model(dropout=0.0)
    batch = copy_batches(1, seed=0)[0]
    optimizer = make_optimizer(model)
    scheduler = WarmupSchedule(optimizer, d_model=model.config.d_model, warmup_steps=10)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    handle = model.generator.weight.register_hook(lambda grad: grad * float("inf"))
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    generator = model.generator.weight.detach().clone()
    rate = optimizer.param_groups[0]["lr"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyTorch warns when the schedule steps before the optimizer did
        loss, stepped = train_step(model, batch, optimizer, LabelSmoothingLoss(0.1), device=CPU, scheduler=scheduler,
                                   amp_dtype=torch.float16, scaler=scaler)
    handle.remove()
    assert math.isfinite(loss) and not stepped
    assert scheduler.last_epoch == 0 and optimizer.param_groups[0]["lr"] == rate
    assert scaler.get_scale() == 2.0**7  # halved after the overflow
    assert all(torch.equal(weights[name], p) for name, p in model.named_parameters())
    # The next, healthy step updates the weights and advances the schedule by one.
    loss, stepped = train_step(model, batch, optimizer, LabelSmoothingLoss(0.1), device=CPU, scheduler=scheduler,
                               amp_dtype=torch.float16, scaler=scaler)
    assert stepped and scheduler.last_epoch == 1
    assert not torch.equal(generator, model.generator.weight)


def test_fit_counts_the_skipped_steps():
    set_seed(0)
    model = tiny_model(dropout=0.0)
    calls = {"n": 0}

    def overflow_every_other_step(grad):
        calls["n"] += 1
        return grad * float("inf") if calls["n"] % 2 else grad

    model.generator.weight.register_hook(overflow_every_other_step)
    optimizer = make_optimizer(model)
    scheduler = WarmupSchedule(optimizer, d_model=model.config.d_model, warmup_steps=10)
    state = fit(model, copy_batches(4, seed=0), optimizer, LabelSmoothingLoss(0.1), device=CPU, scheduler=scheduler,
                amp_dtype=torch.float16, progress=False)
    assert state.step == 4 and state.skipped_steps == 2
    assert scheduler.last_epoch == state.step - state.skipped_steps
    # The resume rule of WarmupSchedule's docstring: last_epoch = updates made - 1, not state.step - 1.
    resumed_optimizer = make_optimizer(model)
    resumed_optimizer.load_state_dict(optimizer.state_dict())
    WarmupSchedule(resumed_optimizer, d_model=model.config.d_model, warmup_steps=10,
                   last_epoch=state.step - state.skipped_steps - 1)
    assert resumed_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]


def test_train_state_fields_are_the_checkpoint_format():
    """Chapter 10 stores TrainState with dataclasses.asdict and rebuilds it with TrainState(**saved)."""
    from dataclasses import asdict

    state = TrainState(step=3, epoch=1, batch_in_epoch=2, losses=[1.0, 0.5], tokens_seen=40, train_seconds=1.5)
    assert list(asdict(state)) == ["step", "epoch", "batch_in_epoch", "losses", "tokens_seen", "train_seconds",
                                   "skipped_steps"]
    assert TrainState(**{k: v for k, v in asdict(state).items() if k != "skipped_steps"}) == state  # older runs
    assert TrainState(**asdict(state)) == state


def test_float64_logits_are_not_rounded_to_float32():
    logits = torch.randn(3, 5, dtype=torch.float64)
    loss = LabelSmoothingLoss(0.1, ignore_index=-100)(logits, torch.tensor([0, 1, 2]))
    assert loss.dtype == torch.float64


@pytest.mark.parametrize("convention", ["uniform", "others"])
def test_the_plain_path_equals_the_careful_one_in_value_and_gradient(convention, monkeypatch):
    # Finite logits take the plain path (one log-softmax, no copies); the careful path, written for -inf logits,
    # must give the same loss and the same gradients on them.
    torch.manual_seed(0)
    logits = (3 * torch.randn(3, 5, 13, dtype=torch.float64)).requires_grad_(True)
    target = torch.randint(1, 13, (3, 5))
    target[0, 3:] = 0  # padding
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=0, convention=convention)
    careful_path = loss_fn._forward_with_impossible_classes
    with monkeypatch.context() as patch:  # finite logits must not take the careful path
        patch.setattr(loss_fn, "_forward_with_impossible_classes", lambda *args: pytest.fail("took the careful path"))
        plain = loss_fn(logits, target)
    (plain_grad,) = torch.autograd.grad(plain, logits)
    keep = target != 0
    careful = careful_path(logits, target.masked_fill(~keep, 0), keep)
    (careful_grad,) = torch.autograd.grad(careful, logits)
    torch.testing.assert_close(plain, careful, rtol=0, atol=1e-12)
    torch.testing.assert_close(plain_grad, careful_grad, rtol=0, atol=1e-12)


def test_nan_logits_at_padding_take_the_careful_path_when_asked_and_leave_finite_gradients():
    logits = torch.randn(2, 4, 7, dtype=torch.float64)
    target = torch.tensor([[1, 2, 0, 0], [3, 4, 5, 6]])
    logits[0, 2:] = float("nan")  # what a fully masked row would give at padded positions
    logits.requires_grad_(True)
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=0, impossible_classes=True)
    taken = []
    careful_path = loss_fn._forward_with_impossible_classes
    loss_fn._forward_with_impossible_classes = lambda *args: taken.append(True) or careful_path(*args)
    loss = loss_fn(logits, target)
    loss.backward()
    assert taken == [True], "impossible_classes=True takes the careful path"
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()


def test_fit_refuses_a_generator_that_later_epochs_would_find_empty():
    set_seed(0)
    model = tiny_model()
    batches = copy_batches(3, seed=0)
    with pytest.raises(TypeError, match="one-shot iterator.*pass a list"):
        fit(model, (batch for batch in batches), make_optimizer(model), LabelSmoothingLoss(0.1), device=CPU,
            epochs=2, progress=False)
    with pytest.raises(TypeError, match="one-shot iterator"):
        fit(model, iter(batches), make_optimizer(model), LabelSmoothingLoss(0.1), device=CPU, progress=False)


@pytest.mark.parametrize("batches", [[], lambda epoch: copy_batches(2, seed=0) if epoch == 0 else []])
def test_fit_raises_on_an_epoch_without_batches(batches):
    set_seed(0)
    model = tiny_model()
    with pytest.raises(ValueError, match="batches is empty for epoch"):
        fit(model, batches, make_optimizer(model), LabelSmoothingLoss(0.1), device=CPU, epochs=2, progress=False)


def test_a_schedule_given_the_model_instead_of_its_optimizer_says_so():
    # The package review: WarmupSchedule(model, ...) failed with "'Linear' object has no attribute 'param_groups'".
    with pytest.raises(TypeError, match=r"optimizer must be a torch.optim.Optimizer \(the model's Adam, not the "
                                        r"model\); got Linear"):
        WarmupSchedule(nn.Linear(2, 2), d_model=8, warmup_steps=4)


def test_an_interrupted_epoch_closes_its_progress_bar_before_the_interrupt_goes_on(capsys):
    # The package review: the command line's Ctrl-C message was printed inside the bar's line.
    def interrupt(state):
        raise KeyboardInterrupt

    set_seed(0)
    model = tiny_model()
    capsys.readouterr()
    try:
        fit(model, copy_batches(3, seed=0), make_optimizer(model, lr=1e-3), LabelSmoothingLoss(0.1), device=CPU,
            on_step_end=interrupt, progress=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)  # as the command line says it, while the traceback is alive
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[-1] == "interrupted" and "epoch 1/1" in lines[-2], repr(err)  # the bar's last line, then it


# ---------------------------------------------------------------- host reads in a training step


def host_reads_per_step(steps: int = 8) -> list[Counter]:
    """The host reads (item, bool, tolist, boolean indexing...: tests/hostreads.py) of each training step of
    `fit`, by line, from one step's end to the next's (PyTorch's own reads of Adam's CPU step counters aside),
    with the progress bar on as a reader runs it: the bar formats the loss at every step."""
    batches = copy_batches(steps, seed=0)
    set_seed(0)
    model = tiny_model()
    optimizer = make_optimizer(model)
    scheduler = WarmupSchedule(optimizer, 16, warmup_steps=4)
    per_step = []

    def step_done(state):
        per_step.append(reads.by_place())
        reads.clear()

    with count_host_reads() as reads:
        state = fit(model, batches, optimizer, LabelSmoothingLoss(0.1), device=CPU, scheduler=scheduler,
                    on_step_end=step_done, progress=True)
    assert state.step == steps == len(per_step)
    return per_step


def test_fit_reads_back_at_most_five_things_per_step():
    # Measured before issue 46 (5 per step, all in the package): the id range of src and of tgt_in
    # (checks.py's id_range, .tolist(), called from model.encode and model.decode), the loss's finiteness test
    # (training.py, `if not torch.isfinite(total).all()` in LabelSmoothingLoss.forward), its boolean index
    # (`loss[keep]` in LabelSmoothingLoss._combine) and the loss value (`loss.item()` in train_step). Each one
    # makes the host wait for the GPU. This bound only keeps new ones out; the next test holds the target.
    for step, places in enumerate(host_reads_per_step(), start=1):
        assert places.total() <= 5, f"step {step}: {places}"


def test_fit_reads_nothing_back_inside_a_step():
    # Issue 46's target: no read inside a training step, at most one per logging interval (the losses are read
    # back every read_every steps, 50 by default, and at the end of the epoch, after the last step here).
    per_step = host_reads_per_step(8)
    assert sum(places.total() for places in per_step) <= 1, per_step


@pytest.mark.parametrize("dtype", [torch.long, torch.int32, torch.bool])
def test_label_smoothing_refuses_logits_that_are_not_floating_point(dtype):
    # before: integer logits were turned into float32 and gave a loss that nothing could learn from
    logits, target = torch.ones(2, 3, 5, dtype=dtype), torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(TypeError, match=rf"logits must be floating-point scores .*; got dtype {dtype}"):
        LabelSmoothingLoss()(logits, target)
