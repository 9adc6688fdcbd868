"""Label smoothing, the warm-up schedule and the training loop (chapter 7)."""
import math
import random
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from .masking import Batch

__all__ = [
    "LabelSmoothingLoss", "noam_rate", "WarmupSchedule", "make_optimizer", "set_seed",
    "autocast", "TrainState", "train_step", "fit",
]


class LabelSmoothingLoss(nn.Module):
    """Cross-entropy against a smoothed target: 1 - eps on the right token, the rest spread over others.

    convention="uniform": eps/K to every class, the target included (PyTorch's label_smoothing).
    convention="others": eps/(K-1) to every class except the target (the seed text's formula).
    Positions whose target is ignore_index (padding) do not count. Returns the mean over counted tokens.
    """

    def __init__(self, smoothing: float = 0.1, ignore_index: int = 0, convention: str = "uniform"):
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1); got {smoothing}")
        if convention not in ("uniform", "others"):
            raise ValueError(f"convention must be 'uniform' or 'others'; got {convention!r}")
        self.smoothing, self.ignore_index, self.convention = smoothing, ignore_index, convention

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        """logits (..., V), target (...) integer ids -> scalar loss."""
        if logits.shape[:-1] != target.shape:
            raise ValueError(
                f"logits (..., V) and target (...) must agree on leading dims; got {tuple(logits.shape)} "
                f"and {tuple(target.shape)}"
            )
        log_probs = F.log_softmax(logits.float(), dim=-1)  # (..., V), in float32 even under autocast
        keep = target != self.ignore_index  # (...)
        nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (...): -log p(target)
        num_classes = logits.size(-1)
        if self.convention == "uniform":
            smooth = -log_probs.mean(dim=-1)  # (...): sum_k (1/K) * -log p_k
            loss = (1.0 - self.smoothing) * nll + self.smoothing * smooth
        else:
            others = -log_probs.sum(dim=-1) - nll  # (...): sum over k != target of -log p_k
            loss = (1.0 - self.smoothing) * nll + self.smoothing / (num_classes - 1) * others
        return loss[keep].sum() / keep.sum().clamp(min=1)


def noam_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), for step >= 1."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


class WarmupSchedule(torch.optim.lr_scheduler.LambdaLR):
    """The paper's schedule: linear warm-up for warmup_steps, then decay with 1/sqrt(step).

    The optimizer's own lr must be 1.0: LambdaLR multiplies it by noam_rate(step).
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, d_model: int, warmup_steps: int, factor: float = 1.0,
        last_epoch: int = -1,
    ):
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps must be at least 1; got {warmup_steps}")
        self.d_model, self.warmup_steps, self.factor = d_model, warmup_steps, factor
        # last_epoch = steps already taken - 1, to resume a run (the optimizer then holds "initial_lr")
        super().__init__(optimizer, self.rate, last_epoch=last_epoch)

    def rate(self, step: int) -> float:
        return noam_rate(step + 1, self.d_model, self.warmup_steps, self.factor)  # LambdaLR counts from 0


def make_optimizer(model: nn.Module, lr: float = 1.0) -> torch.optim.Adam:
    """Adam with the paper's settings: beta1 = 0.9, beta2 = 0.98, eps = 1e-9."""
    return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)


def set_seed(seed: int) -> None:
    """Seed Python and PyTorch so that a run repeats exactly on the same machine."""
    random.seed(seed)
    torch.manual_seed(seed)


def autocast(device: torch.device, amp_dtype: torch.dtype | None):
    """Mixed precision context: bfloat16 or float16 autocast on the device, or nothing."""
    if amp_dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=amp_dtype)


@dataclass
class TrainState:
    """Where training is: enough to resume exactly after an interruption."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # current epoch
    batch_in_epoch: int = 0  # batches of the current epoch already used
    losses: list[float] = field(default_factory=list)  # training loss per step
    tokens_seen: int = 0
    train_seconds: float = 0.0


def train_step(
    model: nn.Module,
    batch: Batch,
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    *,
    device: torch.device,
    scheduler=None,
    amp_dtype: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
    grad_clip: float | None = 1.0,
) -> float:
    """One optimizer step on one batch; returns the loss."""
    model.train()
    batch = batch.to(device)
    with autocast(device, amp_dtype):
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, T_tgt, V)
        loss = loss_fn(logits, batch.tgt_out)
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:  # float16: scale the loss so small gradients do not underflow
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    else:
        loss.backward()
    if grad_clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


def fit(
    model: nn.Module,
    batches: Iterable[Batch] | Callable[[int], Iterable[Batch]],
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    *,
    device: torch.device,
    epochs: int = 1,
    scheduler=None,
    amp_dtype: torch.dtype | None = None,
    grad_clip: float | None = 1.0,
    state: TrainState | None = None,
    on_step_end: Callable[[TrainState], bool | None] | None = None,
    on_epoch_end: Callable[[TrainState], None] | None = None,
    progress: bool = True,
) -> TrainState:
    """Train for `epochs` over `batches` (a list reused each epoch, or a function epoch -> batches).

    Returns the TrainState (loss per step for plotting). Pass a saved state to resume: finished epochs and
    batches are skipped. on_step_end may return True to stop early (for example to save and quit).
    """
    state = state if state is not None else TrainState()
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    while state.epoch < epochs:
        epoch_batches = list(batches(state.epoch) if callable(batches) else batches)
        bar = tqdm(
            total=len(epoch_batches), initial=state.batch_in_epoch, desc=f"epoch {state.epoch + 1}/{epochs}",
            disable=not progress, leave=True, mininterval=2.0,
        )
        for batch in epoch_batches[state.batch_in_epoch :]:
            start = time.perf_counter()
            loss = train_step(
                model, batch, optimizer, loss_fn, device=device, scheduler=scheduler,
                amp_dtype=amp_dtype, scaler=scaler, grad_clip=grad_clip,
            )
            seconds = time.perf_counter() - start
            if not math.isfinite(loss):
                raise FloatingPointError(
                    f"loss became {loss} at step {state.step + 1}; lower the learning rate or check the data"
                )
            state.step += 1
            state.batch_in_epoch += 1
            state.losses.append(loss)
            state.tokens_seen += batch.num_tokens
            state.train_seconds += seconds
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", tok_per_s=f"{batch.num_tokens / seconds:,.0f}")
            if on_step_end is not None and on_step_end(state):
                bar.close()
                return state
        bar.close()
        state.epoch += 1
        state.batch_in_epoch = 0
        if on_epoch_end is not None:
            on_epoch_end(state)
    return state
