"""Measure chapter 10's `gpu` preset on the GPU of this machine, to check the chapter's estimate.

Trains `--steps` steps of the gpu preset on Multi30k (downloaded once, or read from TRANSFORMER_BOOK_DATA) in a
temporary run folder, with the precision chapter 10 picks for the GPU (bfloat16 where the GPU computes it,
float16 with a gradient scaler elsewhere), and prints one line of JSON: the device, the precision, target tokens
per second, the peak memory PyTorch allocated, the updates float16's scaler skipped, and the seconds one epoch
would take at the measured speed (evaluations not included). The first steps allocate memory and pick kernels
for every new batch shape, so the speed is measured over the steps after `--warmup`. Measured on an H200: 40 steps
after 10 gave 22,000 target tokens/s, while the whole 30-epoch run of chapter 10 averaged 62,000; hence the
default of 400 steps, the first 200 left out.

Without a CUDA GPU it says so and exits 0: there is nothing to measure.

With `--epochs N` it trains the preset's first N epochs instead (each scored as chapter 10 scores it), and with
`--record FILE` it also writes the line, the versions and the epochs' validation BLEU to FILE as a run record
(chapters/records/ keeps the book's). `--amp float16` forces float16 with a gradient scaler: the path a T4 takes.
`--compile` compiles the training step (torch.compile; the first steps then wait for the compiler, and the measured
call compiles its own model again, from the cache the warm-up call filled: its seconds include that). The line also
gives the wall time of the whole call's training, evaluations and saves included, and those two apart.

`--device cpu --preset smoke` rehearses a GPU session's commands on a machine without one.

Run: python bench/gpu_check.py [--steps 400] [--warmup 200] [--epochs N] [--amp float16] [--compile] [--record FILE]
"""

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from transformer_book import data
from transformer_book.run.loop import train
from transformer_book.run.precision import AMP_CHOICES, pick_amp_dtype
from transformer_book.run.presets import PRESETS


def say(line: str) -> None:
    """A run's line per epoch, on stderr: a run stopped part-way still leaves them."""
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="training steps to run (default 400)")
    parser.add_argument("--warmup", type=int, default=200, help="first steps left out of the speed (default 200)")
    parser.add_argument("--epochs", type=int, default=None, help="train this many whole epochs instead of --steps")
    parser.add_argument("--amp", choices=AMP_CHOICES, default=None, help="arithmetic (default: the preset's, auto)")
    parser.add_argument("--record", type=Path, default=None, help="also write a JSON run record to this file")
    parser.add_argument("--compile", action="store_true", help="compile the training step (torch.compile)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="gpu", help="the sizes (default gpu)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: rehearse the commands on a machine without a GPU (default cuda)")
    args = parser.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        parser.error(f"--epochs must be at least 1, got {args.epochs}")
    if args.epochs is None and args.steps <= args.warmup:
        parser.error(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup})")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: PyTorch sees no CUDA GPU here, so there is nothing to measure "
              f"(PyTorch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}).")
        return 0
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    preset = PRESETS[args.preset]
    if args.amp is not None:
        preset = dataclasses.replace(preset, amp=args.amp)
    if args.epochs is not None:
        preset = dataclasses.replace(preset, epochs=args.epochs)  # the schedule does not depend on the epochs
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        started = time.perf_counter()
        warm = train(preset, Path(tmp), device=device, max_steps=args.warmup, progress=False,
                     compile_step=args.compile, log=say)
        if cuda:
            torch.cuda.synchronize(device)
        steps = None if args.epochs is not None else args.steps
        done = train(preset, Path(tmp), device=device, max_steps=steps, progress=False, compile_step=args.compile,
                     log=say)
        if cuda:
            torch.cuda.synchronize(device)
        wall_seconds = time.perf_counter() - started  # both calls: start-up, steps, evaluations and saves
        state, before = done.to_json()["train_state"], warm.to_json()["train_state"]
        seconds = state["train_seconds"] - before["train_seconds"]
        tokens = state["tokens_seen"] - before["tokens_seen"]
        tokenizer = data.load_tokenizer(Path(tmp) / "tokenizer.json")
        pairs = data.load_multi30k("train")[: preset.train_subset]  # the smoke preset's subset; None: all
        examples = data.encode_pairs(pairs, tokenizer, max_len=preset.max_sentence_tokens)
        steps_per_epoch = len(data.batch_by_tokens(examples, preset.max_tokens, shuffle=True, seed=preset.seed))
    seconds_per_step = seconds / (state["step"] - before["step"])
    line = {
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "preset": preset.name,
        "dtype": str(pick_amp_dtype(device, preset.amp)),
        "compiled": args.compile,
        "target_tokens_per_s": round(tokens / seconds),
        "max_memory_allocated_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if cuda else None,
        "skipped_steps": state["skipped_steps"],
        "steps_measured": state["step"] - before["step"],
        "seconds_per_epoch": round(seconds_per_step * steps_per_epoch, 1),
        # the whole call, the first steps (and any compiling) included: what a reader waits
        "wall_seconds": round(wall_seconds, 1),
        "train_seconds": round(state["train_seconds"], 1),
        "eval_seconds": round(sum(r["eval_seconds"] for r in done.history), 1),
        "save_seconds": round(done.history[-1]["save_seconds"], 1) if done.history else None,
    }
    print(json.dumps(line))
    if args.record is not None:
        dtype = pick_amp_dtype(device, preset.amp)
        args.record.write_text(json.dumps({
            "what": f"bench/gpu_check.py --amp {preset.amp} --epochs {args.epochs}"
                    f"{' --compile' if args.compile else ''}: the {preset.name} preset's first epochs",
            "preset": preset.name, "device_type": device.type, "device": line["device"], "compiled": args.compile,
            "arithmetic": "float32" if dtype is None else f"{str(dtype).removeprefix('torch.')} autocast",
            "torch": torch.__version__, "cuda": torch.version.cuda, "steps": state["step"],
            "wall_seconds": line["wall_seconds"], "train_seconds": line["train_seconds"],
            "eval_seconds": line["eval_seconds"], "save_seconds": line["save_seconds"],
            "epochs": done.history[-1]["epoch"] if done.history else 0, "skipped_steps": state["skipped_steps"],
            "target_tokens_per_s": line["target_tokens_per_s"], "peak_memory_gib": line["max_memory_allocated_gib"],
            "val_bleu": [round(r["val_bleu"], 2) for r in done.history],
            "val_loss": [round(r["val_loss"], 3) for r in done.history],
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
