"""What the host does in one training step of chapter 7's `fit`, measured on the CPU (issue 46).

For the gpu preset's model (d_model 512, 6 + 6 layers, vocabulary 8000) it counts, per step of `fit`:
- the ops dispatched to PyTorch's kernels (a TorchDispatchMode), by kind;
- the reads from device to host (tests/hostreads.py: item, tolist, bool, int, float, index, nonzero, boolean
  indexing...), PyTorch's own reads of Adam's CPU step counters apart;
and it times a step at a tiny batch (2 sentences of 8 tokens), where the arithmetic is negligible and the time is
the host's. With --tokens-steps N it also times N steps of the cpu preset's model on synthetic batches of its
size (100 sentences of 30 tokens = 3,000 target tokens) and prints target tokens/s.

Run it on two checkouts to compare (the package is imported from PYTHONPATH when set, else from this checkout):
    PYTHONPATH=/path/to/other/src python bench/host_step.py
Timings depend on the machine's load: compare runs made back to back, and say so.
"""

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from hostreads import count_host_reads  # noqa: E402

import transformer_book  # noqa: E402
from transformer_book.masking import make_batch  # noqa: E402
from transformer_book.model import Transformer  # noqa: E402
from transformer_book.run.presets import PRESETS, model_config  # noqa: E402
from transformer_book.tokens import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from transformer_book.training import LabelSmoothingLoss, WarmupSchedule, fit, make_optimizer, set_seed  # noqa: E402

CPU = torch.device("cpu")


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def batches(count: int, sentences: int, length: int, vocab: int) -> list:
    gen = torch.Generator().manual_seed(0)
    made = []
    for _ in range(count):
        src = torch.randint(4, vocab, (sentences, length), generator=gen)
        tgt = torch.cat([torch.full((sentences, 1), BOS_ID), src, torch.full((sentences, 1), EOS_ID)], dim=1)
        made.append(make_batch(src, tgt, PAD_ID))
    return made


def setup(preset_name: str):
    preset = PRESETS[preset_name]
    set_seed(0)
    model = Transformer(model_config(preset, preset.vocab_size))
    optimizer = make_optimizer(model)
    scheduler = WarmupSchedule(optimizer, preset.d_model, preset.warmup_steps, preset.lr_factor)
    return preset, model, optimizer, scheduler, LabelSmoothingLoss(preset.label_smoothing, ignore_index=PAD_ID)


def train(model, data, optimizer, scheduler, loss_fn, on_step_end=None):
    return fit(model, data, optimizer, loss_fn, device=CPU, scheduler=scheduler, on_step_end=on_step_end,
               progress=False)


def count_one_step(steps: int = 3) -> tuple[float, float, Counter]:
    """Host reads and dispatched ops per step of fit (the gpu preset's model, a tiny batch), after one warm-up."""
    preset, model, optimizer, scheduler, loss_fn = setup("gpu")
    data = batches(1 + steps, 2, 8, preset.vocab_size)
    train(model, data[:1], optimizer, scheduler, loss_fn)  # warm-up: the first step allocates Adam's state
    counter = OpCounter()
    with count_host_reads() as reads, counter:
        train(model, data[1:], optimizer, scheduler, loss_fn)  # includes fit's read at the end of the epoch
    return len(reads) / steps, sum(counter.ops.values()) / steps, Counter(
        {name: count / steps for name, count in counter.ops.items()})


def ms_per_step(preset_name: str, sentences: int, length: int, steps: int) -> float:
    preset, model, optimizer, scheduler, loss_fn = setup(preset_name)
    data = batches(steps + 2, sentences, length, preset.vocab_size)
    train(model, data[:2], optimizer, scheduler, loss_fn)  # warm-up
    start = time.perf_counter()
    train(model, data[2:], optimizer, scheduler, loss_fn)
    return 1000 * (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps timed at the tiny batch")
    parser.add_argument("--tokens-steps", type=int, default=0, help="steps of the cpu preset's model to time")
    args = parser.parse_args()
    print(f"package: {Path(transformer_book.__file__).parent}; {torch.get_num_threads()} threads")
    reads, ops, by_kind = count_one_step()
    print(f"per step of fit (gpu preset's model): {reads:.1f} host reads, {ops:,.0f} dispatched ops")
    print("  most frequent ops: " + ", ".join(f"{name} {count:.0f}" for name, count in by_kind.most_common(8)))
    print(f"tiny batch (2 x 8 tokens), gpu preset's model: {ms_per_step('gpu', 2, 8, args.steps):.1f} ms per step")
    if args.tokens_steps:
        ms = ms_per_step("cpu", 100, 30, args.tokens_steps)
        print(f"cpu preset's model, 100 x 30 tokens: {ms:.0f} ms per step, {3000 / ms * 1000:,.0f} target tokens/s")


if __name__ == "__main__":
    main()
