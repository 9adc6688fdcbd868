"""tests/hostreads.py, the host-read counter the decoding and training tests share: it sees every kind of read,
once each, wherever it is written, and counts nothing for work that stays on the device."""

import math
import operator

import pytest
import torch
from hostreads import count_host_reads, reads_with_steps

X = torch.tensor([1.0, -2.0, 3.0])
S = torch.tensor(2)
MASK = torch.tensor([True, False, True])

READS = {
    "item": lambda: S.item(),
    "tolist": lambda: X.tolist(),
    "numpy": lambda: X.numpy(),
    "numpy via __array__": lambda: __import__("numpy").asarray(X),
    "bool": lambda: bool(S),
    "if": lambda: 1 if (X > 0).all() else 0,
    "int": lambda: int(S),
    "float": lambda: float(S),
    "math": lambda: math.isfinite(S),
    "index": lambda: operator.index(S),
    "range": lambda: range(S),
    "format": lambda: f"{S:d}",
    "repr": lambda: repr(X),
    "contains": lambda: 3.0 in X,
    "cpu": lambda: X.cpu(),
    "torch.nonzero": lambda: torch.nonzero(MASK),
    "Tensor.nonzero": lambda: MASK.nonzero(),
    "argwhere": lambda: torch.argwhere(MASK),
    "masked_select": lambda: torch.masked_select(X, MASK),
    "Tensor.masked_select": lambda: X.masked_select(MASK),
    "unique": lambda: torch.unique(S),
    "bincount": lambda: torch.bincount(torch.tensor([0, 2])),
    "where with one argument": lambda: torch.where(MASK),
    "repeat_interleave with tensor repeats": lambda: X.repeat_interleave(torch.tensor([1, 2, 1])),
    "mask index": lambda: X[MASK],
    "mask index in a tuple": lambda: X.view(1, 3)[0, MASK],
    "mask assignment of several values": lambda: X.clone().__setitem__(MASK, torch.tensor([7.0, 8.0])),
    "torch.equal": lambda: torch.equal(X, X),
    "allclose": lambda: torch.allclose(X, X),
    "is_nonzero": lambda: torch.is_nonzero(S),
}


@pytest.mark.parametrize("name", READS)
def test_each_kind_of_read_counts_once(name):
    with count_host_reads() as reads:
        READS[name]()
    assert len(reads) == 1, f"{name}: {reads.all}"
    (read,) = reads.all
    assert read.place.startswith("tests/test_hostreads.py:") and not read.in_torch, read


def test_work_that_stays_on_the_device_counts_zero():
    with count_host_reads() as reads:
        y = (X * 2).softmax(-1) @ X  # arithmetic
        y = torch.where(MASK, X, 0.0) + X.masked_fill(~MASK, 0.0)  # masks used as masks, not as indices
        y = y[torch.tensor([0, 2])] + X[1:][:2].sum() + X.argmax() + X[S]  # indices that are tensors of ids
        z = X.clone()
        z[MASK] = 0.0  # one value under a mask: PyTorch makes it masked_fill
        z = X.repeat_interleave(2) + (MASK.all() & MASK.any()) + X.to("cpu").repeat(2)
        torch.isfinite(z).all()  # the answer stays a tensor
        _ = X.shape[0], len(X), X.dim(), X.numel(), X.dtype  # metadata, not values
    assert len(reads) == 0 and reads.all == [], reads.all
    assert y.shape == (2,) and z.shape == (6,)


def test_reads_inside_the_package_are_seen_with_their_line():
    from transformer_book.decoding import greedy_decode
    from transformer_book.model import Transformer, TransformerConfig

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(12, 12, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32))
    src = torch.tensor([[5, 6, 7, 2]])
    with count_host_reads() as reads:
        greedy_decode(model, src, 3, 1, 2)
    places = reads.by_place()
    assert places and all(p.startswith("transformer_book/") for p in places), places
    assert sum(places.values()) == len(reads) == sum(reads.by_kind().values())


def test_reads_written_in_pytorch_are_kept_apart():
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.Adam([weight], foreach=False)
    weight.grad = torch.ones(2)
    with count_host_reads() as reads:
        optimizer.step()  # Adam reads its step counter, a CPU tensor, with .item()
    assert len(reads) == 0, reads.all
    assert reads.in_torch and all(r.place.startswith("torch/") for r in reads.in_torch), reads.all


def test_the_counter_stops_listening_when_the_block_ends():
    with count_host_reads() as reads:
        S.item()
    S.item()
    assert len(reads) == 1


def test_reads_made_at_every_step_are_told_from_reads_made_once():
    def loop(steps):
        x = torch.zeros(2)
        bool(x.any())  # once
        for _ in range(steps):
            x = x + 1
            x.sum().item()  # at every step

    once, per_step = reads_with_steps(loop, few=3, many=8)
    assert once.total() == 1 + 3 and len(once) == 2
    ((place, extra),) = per_step.items()
    assert extra == 5 and place.startswith("tests/test_hostreads.py:") and place.endswith("(item)"), per_step
