"""Greedy decoding with and without the key/value cache, and beam search, base configuration, 64 new tokens.

The model has the paper's base sizes (d_model 512, 8 heads, 6 + 6 layers, d_ff 2048) with a vocabulary of
8000 (chapter 10's joint subword vocabulary; the paper's 37000 would make the output layer a larger share
of each step), random weights and batch-first sources of 32 tokens. Prints the time of each and the speed-up
ratio, measured alternately in one process, then the time of beam search (--beam hypotheses, cached).
To compare two versions of the package, run the script alternately with PYTHONPATH=<other checkout>/src.
On a GPU (--device cuda, the default when there is one) each timing waits for the GPU to finish.
Run: .venv/bin/python bench/decode.py [--repeats 3] [--beam 4] [--device cpu|cuda]
"""
import argparse
import time

import torch

from transformer_book.data import BOS_ID, SPECIAL_TOKENS
from transformer_book.decoding import beam_search, greedy_decode
from transformer_book.model import Transformer, TransformerConfig

VOCAB = 8000  # chapter 10's joint subword vocabulary
FIRST_WORD_ID = len(SPECIAL_TOKENS)  # random "words" start after <pad>, <s>, </s>, <unk>
SOURCE_LEN = 32
NEVER = -1  # an eos_id no model produces: every run generates exactly new_tokens tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--beam", type=int, default=4, help="beam size of the beam-search timing")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    config = TransformerConfig(VOCAB, VOCAB)  # the paper's base sizes otherwise
    model = Transformer(config).eval().to(device)
    src = torch.randint(FIRST_WORD_ID, VOCAB, (args.batch, SOURCE_LEN), device=device)  # (B, T_src)
    times = {True: [], False: []}
    outputs = {}
    greedy_decode(model, src, 2, BOS_ID, NEVER)  # warm-up: a GPU loads its kernels on first use
    for _ in range(args.repeats):
        for use_cache in (True, False):
            start = _clock(device)
            outputs[use_cache] = greedy_decode(model, src, args.new_tokens, BOS_ID, NEVER, use_cache=use_cache)
            times[use_cache].append(_clock(device) - start)
    same = torch.equal(outputs[True], outputs[False])
    cached, uncached = min(times[True]), min(times[False])
    print(f"base model (d_model 512, 6 + 6 layers) on {device}, vocabulary {VOCAB}, batch {args.batch} x {SOURCE_LEN} source "
          f"tokens, {args.new_tokens} new tokens, best of {args.repeats}")
    print(f"with cache {cached:.2f} s, without {uncached:.2f} s: speed-up {uncached / cached:.1f}x; "
          f"identical tokens: {same}")
    beam_times = []
    for _ in range(args.repeats):
        start = _clock(device)
        beam_search(model, src, args.beam, args.new_tokens, BOS_ID, NEVER)
        beam_times.append(_clock(device) - start)
    print(f"beam search, {args.beam} hypotheses, cached: {min(beam_times):.2f} s")


def _clock(device: torch.device) -> float:
    """The time in seconds, once the device has finished the work given to it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


if __name__ == "__main__":
    main()
