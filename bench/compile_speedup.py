"""The training step plain and compiled (`train --compile`), interleaved in rounds, on this machine's CPU or GPU.

Builds the same model twice (a preset's sizes), compiles one of them as `train(compile_step=True)` does (the model
and the loss, lengths padded to a multiple of 8), times the first steps of each (compiling included), then runs
--rounds rounds of --steps steps of each in turn, so that a machine whose speed drifts slows both alike. Prints
each round's median milliseconds a step, then one line of JSON with the medians over all rounds and their ratio.

    python bench/compile_speedup.py --preset cpu --tokens 3000            # chapter 10's cpu preset
    python bench/compile_speedup.py --preset cpu --tokens 3000 --amp off  # in float32
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_breakdown import synthetic_batches  # noqa: E402

from transformer_book.model import Transformer  # noqa: E402
from transformer_book.run.loop import COMPILED_PAD_MULTIPLE  # noqa: E402
from transformer_book.run.precision import pick_amp_dtype, pick_device  # noqa: E402
from transformer_book.run.presets import PRESETS, model_config  # noqa: E402
from transformer_book.tokens import PAD_ID  # noqa: E402
from transformer_book.training import LabelSmoothingLoss, WarmupSchedule, make_optimizer, set_seed, train_step  # noqa: E402,E501

FIRST_STEPS = 5


def stepper(args: argparse.Namespace, device: torch.device, compiled: bool):
    """A function that runs one training step on a batch, and the batches it is to time."""
    preset = PRESETS[args.preset]
    set_seed(0)
    model = Transformer(model_config(preset, preset.vocab_size)).to(device)
    optimizer = make_optimizer(model)
    scheduler = WarmupSchedule(optimizer, preset.d_model, preset.warmup_steps, preset.lr_factor)
    loss_fn = LabelSmoothingLoss(preset.label_smoothing, ignore_index=PAD_ID)
    amp_dtype = pick_amp_dtype(device) if args.amp == "auto" else None
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
    if compiled:
        model, loss_fn = torch.compile(model), torch.compile(loss_fn)
    batches = synthetic_batches(FIRST_STEPS + args.rounds * args.steps, args.tokens, preset.vocab_size,
                                COMPILED_PAD_MULTIPLE if compiled else 1)

    def step(batch) -> float:
        start = time.perf_counter()
        train_step(model, batch, optimizer, loss_fn, device=device, scheduler=scheduler, amp_dtype=amp_dtype,
                   scaler=scaler, host_checks=False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    return step, batches, amp_dtype


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="the model's size (default cpu)")
    parser.add_argument("--tokens", type=int, default=3000, help="target tokens a batch (default 3000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each (default 5)")
    parser.add_argument("--steps", type=int, default=8, help="steps of each a round (default 8)")
    parser.add_argument("--amp", choices=["auto", "off"], default="auto",
                        help="auto: chapter 10's choice for the device; off: float32")
    args = parser.parse_args(argv)
    for name in ("tokens", "rounds", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    device = pick_device()
    runs, first, times = {}, {}, {"plain": [], "compiled": []}
    for name in times:
        step, batches, amp_dtype = stepper(args, device, compiled=name == "compiled")
        first[name] = sum(step(batch) for batch in batches[:FIRST_STEPS])
        runs[name] = (step, batches[FIRST_STEPS:])
    for round_ in range(args.rounds):
        for name, (step, batches) in runs.items():
            times[name] += [step(b) for b in batches[round_ * args.steps: (round_ + 1) * args.steps]]
        print(f"round {round_ + 1}: " + ", ".join(f"{name} {1000 * statistics.median(t[-args.steps:]):.0f} ms"
                                                   for name, t in times.items()), file=sys.stderr, flush=True)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(json.dumps({
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "preset": args.preset,
        "amp": str(amp_dtype), "tokens": args.tokens, "steps_timed": len(times["plain"]),
        "plain_ms": round(1000 * median["plain"], 1), "compiled_ms": round(1000 * median["compiled"], 1),
        "speedup": round(median["plain"] / median["compiled"], 3),
        "first_steps_s": {name: round(seconds, 1) for name, seconds in first.items()}, "torch": torch.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
