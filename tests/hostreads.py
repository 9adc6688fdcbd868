"""Count the reads from device to host that a piece of code makes, on CPU tensors (shared by the tests).

On a GPU every such read makes the host wait until the device has finished all the work queued before it; on the
CPU the same call costs nothing, so a test run on the CPU counts the calls instead of timing them. The count sees
every kind of read, wherever it is written (the package's own code included):

- a value turned into a Python object: `Tensor.item`, `.tolist`, `.numpy`, `bool(t)` (an `if t:`), `int(t)`,
  `float(t)`, `operator.index(t)` (a tensor as a size or in `range`), `f"{t}"`, `repr(t)`, `x in t`, `.cpu()`;
- an operation whose output size depends on the values, so PyTorch reads them before it can allocate:
  `torch.nonzero`, `argwhere`, `masked_select`, `unique`, `bincount`, the one-argument `torch.where`,
  `repeat_interleave` with tensor repeats, indexing with a boolean tensor (`t[mask]`, and `t[mask] = values`
  unless the value is a scalar, which PyTorch turns into masked_fill);
- a comparison that answers in Python: `torch.equal`, `torch.allclose`, `torch.is_nonzero`.

`.to(device)` is not counted: on a CPU run the copy toward the run's device and a copy back to the host look the same.

It listens with a TorchFunctionMode, through which PyTorch passes every call of its Python API. Two limits: a mode
sees the current thread only, and it does not see calls made while PyTorch runs a call it already saw (code that
PyTorch calls back, an autograd Function's backward for example); the book's package has no such code in its
training step or its decoders.

Each read is recorded with the line that makes it. Reads written in PyTorch's own Python code (Adam's `.item()` on
its step counter, which lives on the CPU even when the weights are on a GPU) are kept apart in `in_torch`.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

TORCH_DIR = Path(torch.__file__).resolve().parent
OVERRIDES = TORCH_DIR / "overrides.py"  # handle_torch_function: how a Python-level function reaches the mode
# Wrappers that some of those functions pass through first (torch.unique's boolean dispatch, Tensor's operators).
WRAPPER_FILES = {TORCH_DIR / "functional.py", TORCH_DIR / "_jit_internal.py", TORCH_DIR / "_tensor.py"}

Tensor = torch.Tensor
ALWAYS = {
    Tensor.item: "item",
    Tensor.tolist: "tolist",
    Tensor.numpy: "numpy",
    Tensor.__array__: "numpy",
    Tensor.__bool__: "bool",
    Tensor.__int__: "int",
    Tensor.__float__: "float",
    Tensor.__index__: "index",
    Tensor.__format__: "format",
    Tensor.__repr__: "format",
    Tensor.__contains__: "contains",
    Tensor.cpu: "cpu",
    torch.nonzero: "nonzero",
    Tensor.nonzero: "nonzero",
    torch.argwhere: "nonzero",
    Tensor.argwhere: "nonzero",
    torch.masked_select: "nonzero",
    Tensor.masked_select: "nonzero",
    torch.unique: "nonzero",
    Tensor.unique: "nonzero",
    torch.unique_consecutive: "nonzero",
    Tensor.unique_consecutive: "nonzero",
    torch.bincount: "nonzero",
    Tensor.bincount: "nonzero",
    torch.equal: "compare",
    Tensor.equal: "compare",
    torch.allclose: "compare",
    Tensor.allclose: "compare",
    torch.is_nonzero: "compare",
    Tensor.is_nonzero: "compare",
}


def _has_mask(index) -> bool:
    parts = index if isinstance(index, (tuple, list)) else (index,)
    return any(isinstance(p, Tensor) and p.dtype in (torch.bool, torch.uint8) for p in parts)


def _kind(func, args, kwargs) -> str | None:
    """Which kind of host read a call is, or None for a call that leaves the values on the device."""
    try:
        kind = ALWAYS.get(func)
    except TypeError:  # an unhashable callable is none of the above
        return None
    if kind is not None:
        return kind
    if func is Tensor.__getitem__ and _has_mask(args[1]):
        return "mask index"
    if func is Tensor.__setitem__ and _has_mask(args[1]):
        value = args[2]
        scalar = isinstance(value, (int, float, bool)) or isinstance(value, Tensor) and value.numel() == 1
        return None if scalar else "mask index"
    if func is torch.where and len(args) + len(kwargs) == 1:
        return "nonzero"
    if func in (torch.repeat_interleave, Tensor.repeat_interleave):
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        if repeats is None and func is torch.repeat_interleave:  # the one-argument form: the input is the repeats
            repeats = args[0]
        if isinstance(repeats, Tensor) and kwargs.get("output_size") is None:
            return "nonzero"
    return None


def _place() -> tuple[str, bool]:
    """The line that made the read ("file:line", the file relative to the package or the tests) and whether it
    is written in PyTorch's own code."""
    frame = sys._getframe(2)  # a method written in C (item, __bool__...) calls the mode from its caller's line
    if Path(frame.f_code.co_filename).resolve() == OVERRIDES:
        # A function written in Python (torch.unique, Tensor.__format__) passed its call on: its caller asked.
        while Path(frame.f_code.co_filename).resolve() == OVERRIDES:
            frame = frame.f_back
        frame = frame.f_back
        while Path(frame.f_code.co_filename).resolve() in WRAPPER_FILES and (
            frame.f_code.co_name.startswith("_") or frame.f_code.co_name in ("fn", "wrapped")
        ):
            frame = frame.f_back
    path = Path(frame.f_code.co_filename).resolve()
    in_torch = path.is_relative_to(TORCH_DIR)
    parts = path.parts
    for anchor in ("transformer_book", "tests", "torch"):
        if anchor in parts:
            path = Path(*parts[len(parts) - parts[::-1].index(anchor) - 1 :])
            break
    return f"{path.as_posix()}:{frame.f_lineno}", in_torch


@dataclass
class Read:
    kind: str  # item, tolist, bool, int, float, index, numpy, format, contains, cpu, nonzero, mask index, compare
    place: str  # "transformer_book/training.py:72"
    in_torch: bool  # written in PyTorch's own code


@dataclass
class HostReads:
    """The reads seen so far: `len(reads)` and `reads.by_kind()` / `reads.by_place()` count those written outside
    PyTorch (the package's, the test's); `reads.in_torch` lists PyTorch's own."""

    all: list[Read] = field(default_factory=list)

    @property
    def outside_torch(self) -> list[Read]:
        return [r for r in self.all if not r.in_torch]

    @property
    def in_torch(self) -> list[Read]:
        return [r for r in self.all if r.in_torch]

    def __len__(self) -> int:
        return len(self.outside_torch)

    def by_kind(self) -> Counter:
        return Counter(r.kind for r in self.outside_torch)

    def by_place(self) -> Counter:
        return Counter(f"{r.place} ({r.kind})" for r in self.outside_torch)

    def clear(self) -> None:
        self.all.clear()


class _Listener(TorchFunctionMode):
    def __init__(self, reads: HostReads):
        super().__init__()
        self.reads = reads

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _kind(func, args, kwargs)
        if kind is not None:
            self.reads.all.append(Read(kind, *_place()))
        return func(*args, **kwargs)


@contextmanager
def count_host_reads() -> Iterator[HostReads]:
    """`with count_host_reads() as reads: ...` records every host read the block makes (see the module's doc)."""
    reads = HostReads()
    with _Listener(reads):
        yield reads


def reads_with_steps(run: Callable[[int], object], few: int = 10, many: int = 20) -> tuple[Counter, dict[str, int]]:
    """Count the reads of `run(few)` and of `run(many)` (a loop of that many steps): the reads of the shorter run,
    by place, and the places read more often in the longer one, with how many more times (many - few for a read
    made once per step)."""
    with count_host_reads() as short:
        run(few)
    with count_host_reads() as long:
        run(many)
    fewer, more = short.by_place(), long.by_place()
    return fewer, {place: more[place] - fewer[place] for place in more if more[place] != fewer[place]}


__all__ = ["HostReads", "Read", "count_host_reads", "reads_with_steps"]
