"""Where a training step's time goes, on any CUDA GPU (issue 47), rehearsed on the CPU with a small preset.

For a preset's model (default: gpu) and synthetic batches of about --tokens target tokens each (sentence lengths
drawn from 8 to 30 tokens, as most of Multi30k's are), each variant runs --warmup steps, then --steps measured
ones, and prints one line of JSON:
- ms_per_step: the median step, the device synchronised after each;
- host_ms_per_step: the median time the step's Python takes to return without synchronising. On a GPU the host
  only queues kernels; when this is close to ms_per_step, the host sets the pace and the GPU waits;
- kernels_per_step: kernels the GPU ran (the profiler's CUDA kernels), or on the CPU the ops dispatched;
- host_reads_per_step: values read back from the device (tests/hostreads.py), which make the host wait;
- tflops and peak_share: forward and backward FLOPs of one step (FlopCounterMode) over the median step, and that
  as a share of the card's dense bfloat16/float16 peak from its data sheet, for the cards named in PEAK_TFLOPS;
- first_steps_s (the warm-up, where compiling happens), shapes (distinct batch shapes) and graphs_compiled.

Variants, chosen with --variants:
- eager: the package's train_step as chapter 7's fit calls it (no host checks), chapter 10's arithmetic;
- compiled: the same with torch.compile of the model and of the loss (backward and Adam as they are), and every length
  padded up to a multiple of --pad-multiple, so that few distinct shapes reach the compiler; one line for each
  multiple given (1: no padding).

    python bench/step_breakdown.py                                   # on a GPU: gpu preset, 4,000 tokens
    python bench/step_breakdown.py --tokens 16000                    # larger batches
    python bench/step_breakdown.py --preset smoke --tokens 400 --steps 5 --warmup 2   # a rehearsal on a CPU
"""

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from hostreads import count_host_reads  # noqa: E402

from transformer_book.masking import Batch, make_batch  # noqa: E402
from transformer_book.model import Transformer  # noqa: E402
from transformer_book.run.precision import pick_amp_dtype, pick_device  # noqa: E402
from transformer_book.run.presets import PRESETS, model_config  # noqa: E402
from transformer_book.tokens import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from transformer_book.training import (  # noqa: E402
    LabelSmoothingLoss,
    WarmupSchedule,
    make_optimizer,
    set_seed,
    train_step,
)

# Dense bfloat16 (float16 on the T4) tensor-core TFLOP/s from the data sheets, by a part of the card's name;
# the first match counts, so the PCIe H100 comes before the name every H100 shares. A card not listed gets no share
# of peak (AWS's A10G, for one: its tensor rate differs from the A10's 125, and no figure for it was checked here).
PEAK_TFLOPS = {"H100 PCIe": 756.0, "H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "T4": 65.0}
VARIANTS = ("eager", "compiled")


class DispatchCounter(TorchDispatchMode):
    """Counts the ops PyTorch dispatches to its kernels: on a CPU, the stand-in for kernel launches."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def synthetic_batches(count: int, tokens: int, vocab_size: int, pad_multiple: int, seed: int = 0) -> list[Batch]:
    """`count` batches of random sentence pairs, each of about `tokens` target tokens; every length (source, and
    decoder input) padded up to a multiple of `pad_multiple`."""
    gen = torch.Generator().manual_seed(seed)
    made = []
    for _ in range(count):
        pairs, target_tokens = [], 0
        while target_tokens < tokens:
            src_len, tgt_len = (int(n) for n in torch.randint(8, 31, (2,), generator=gen))
            pairs.append((torch.randint(4, vocab_size, (src_len,), generator=gen),
                          torch.randint(4, vocab_size, (tgt_len,), generator=gen)))
            target_tokens += tgt_len + 1  # and EOS
        src_width = pad_multiple * math.ceil(max(len(s) for s, _ in pairs) / pad_multiple)
        # the decoder reads BOS + sentence and predicts sentence + EOS: that length is the one to round up
        tgt_width = pad_multiple * math.ceil(max(len(t) + 1 for _, t in pairs) / pad_multiple) + 1
        src = torch.full((len(pairs), src_width), PAD_ID)
        tgt = torch.full((len(pairs), tgt_width), PAD_ID)
        for row, (s, t) in enumerate(pairs):
            src[row, : len(s)] = s
            tgt[row, : len(t) + 2] = torch.cat([torch.tensor([BOS_ID]), t, torch.tensor([EOS_ID])])
        made.append(make_batch(src, tgt, PAD_ID))
    return made


def peak_tflops(device: torch.device) -> float | None:
    """The card's dense bfloat16 peak from PEAK_TFLOPS, or None (a CPU, or a card not listed)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((value for key, value in PEAK_TFLOPS.items() if key in name), None)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(variant: str, args: argparse.Namespace, device: torch.device, pad_multiple: int = 1) -> dict:
    """One variant's line: times, kernels, host reads and FLOPs per step."""
    preset = PRESETS[args.preset]
    set_seed(0)
    model = Transformer(model_config(preset, preset.vocab_size)).to(device)
    optimizer = make_optimizer(model)  # fused Adam on a GPU
    scheduler = WarmupSchedule(optimizer, preset.d_model, preset.warmup_steps, preset.lr_factor)
    loss_fn = LabelSmoothingLoss(preset.label_smoothing, ignore_index=PAD_ID)
    amp_dtype = pick_amp_dtype(device) if args.amp == "auto" else None
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
    batches = synthetic_batches(args.warmup + args.steps, args.tokens, preset.vocab_size, pad_multiple)
    batches = [b.pin_memory() if device.type == "cuda" else b for b in batches]
    if variant == "compiled":
        torch._dynamo.reset()  # its counters too
    compiled = variant == "compiled"  # as train(compile_step=True) does: the model and the loss
    stepped_model, stepped_loss = (torch.compile(model), torch.compile(loss_fn)) if compiled else (model, loss_fn)

    def step(batch: Batch) -> None:
        train_step(stepped_model, batch, optimizer, stepped_loss, device=device, scheduler=scheduler,
                   amp_dtype=amp_dtype, scaler=scaler, host_checks=False)

    start = time.perf_counter()
    for batch in batches[: args.warmup]:
        step(batch)
    synchronize(device)
    first_steps_s = time.perf_counter() - start
    measured = batches[args.warmup:]
    whole, host = [], []
    for batch in measured:
        start = time.perf_counter()
        step(batch)
        host.append(time.perf_counter() - start)
        synchronize(device)
        whole.append(time.perf_counter() - start)
    kernels, reads = count_per_step(step, measured[: min(3, len(measured))], device, variant == "compiled")
    flop_counter = FlopCounterMode(display=False)
    with flop_counter:  # the eager model: the same arithmetic, counted op by op
        train_step(model, measured[0], optimizer, loss_fn, device=device, amp_dtype=amp_dtype, scaler=scaler,
                   host_checks=False)
    synchronize(device)
    ms = 1000 * statistics.median(whole)
    flops = flop_counter.get_total_flops()
    tflops = flops / (ms / 1000) / 1e12
    peak = peak_tflops(device)
    return {
        "variant": variant, "pad_multiple": pad_multiple,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "preset": args.preset, "amp": str(amp_dtype), "target_tokens": round(statistics.mean(
            b.num_tokens for b in measured)), "ms_per_step": round(ms, 2),
        "host_ms_per_step": round(1000 * statistics.median(host), 2),
        "target_tokens_per_s": round(statistics.mean(b.num_tokens for b in measured) / (ms / 1000)),
        "kernels_per_step": kernels, "host_reads_per_step": reads, "gflop_per_step": round(flops / 1e9, 3),
        "tflops": float(f"{tflops:.4g}"),
        "peak_share": None if peak is None else round(tflops / peak, 4), "first_steps_s": round(first_steps_s, 1),
        "shapes": len({(tuple(b.src.shape), tuple(b.tgt_in.shape)) for b in batches}),
        "graphs_compiled": torch._dynamo.utils.counters["stats"]["unique_graphs"] if variant == "compiled" else None,
        "torch": torch.__version__,
    }


def count_per_step(step: Callable[[Batch], None], batches: list[Batch], device: torch.device,
                   compiled: bool) -> tuple[float | None, float | None]:
    """Per step over `batches`: the kernels a GPU ran (the profiler), or on a CPU the ops dispatched; and the host
    reads. Compiled, only a GPU's kernels: compiled code runs kernels of its own, which no dispatch mode sees, and
    the mode that counts reads would break the compiled graph."""
    if device.type == "cuda":
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for batch in batches:
                step(batch)
            synchronize(device)
        kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) / len(batches)
    elif not compiled:
        counter = DispatchCounter()
        with counter:
            for batch in batches:
                step(batch)
        kernels = counter.ops / len(batches)
    else:
        kernels = None
    if compiled:
        return kernels, None
    with count_host_reads() as reads:
        for batch in batches:
            step(batch)
    return kernels, round(len(reads) / len(batches), 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="gpu", help="the model's size (default gpu)")
    parser.add_argument("--tokens", type=int, default=4000, help="target tokens a batch (default 4000)")
    parser.add_argument("--steps", type=int, default=60, help="steps measured (default 60)")
    parser.add_argument("--warmup", type=int, default=30, help="steps before them, compiling included (default 30)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--pad-multiple", type=int, nargs="+", default=[8],
                        help="compiled: lengths rounded up to this; several: a line for each (default 8)")
    parser.add_argument("--amp", choices=["auto", "off"], default="auto",
                        help="auto: chapter 10's choice for the device (bfloat16 or float16); off: float32")
    args = parser.parse_args(argv)
    for name in ("tokens", "steps", "warmup", "pad_multiple"):
        for value in getattr(args, name) if name == "pad_multiple" else [getattr(args, name)]:
            if value < 1:
                parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    device = pick_device()
    for variant in args.variants:
        for pad_multiple in args.pad_multiple if variant == "compiled" else [1]:
            print(json.dumps(measure(variant, args, device, pad_multiple)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
