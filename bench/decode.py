"""Greedy decoding with and without the key/value cache, and beam search, base configuration, 64 new tokens.

The model has the paper's base sizes (d_model 512, 8 heads, 6 + 6 layers, d_ff 2048) with a vocabulary of
8000 (chapter 10's joint subword vocabulary; the paper's 37000 would make the output layer a larger share
of each step), random weights and batch-first sources of 32 tokens. Prints the time of each and the speed-up
ratio, measured alternately in one process, then the time of beam search (--beam hypotheses, cached).
To compare two versions of the package, run the script alternately with PYTHONPATH=<other checkout>/src.
Run: .venv/bin/python bench/decode.py [--repeats 3] [--beam 4]
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
    args = parser.parse_args()
    torch.manual_seed(0)
    config = TransformerConfig(VOCAB, VOCAB)  # the paper's base sizes otherwise
    model = Transformer(config).eval()
    src = torch.randint(FIRST_WORD_ID, VOCAB, (args.batch, SOURCE_LEN))  # (B, T_src)
    times = {True: [], False: []}
    outputs = {}
    for _ in range(args.repeats):
        for use_cache in (True, False):
            start = time.perf_counter()
            outputs[use_cache] = greedy_decode(model, src, args.new_tokens, BOS_ID, NEVER, use_cache=use_cache)
            times[use_cache].append(time.perf_counter() - start)
    same = torch.equal(outputs[True], outputs[False])
    cached, uncached = min(times[True]), min(times[False])
    print(f"base model (d_model 512, 6 + 6 layers), vocabulary {VOCAB}, batch {args.batch} x {SOURCE_LEN} source "
          f"tokens, {args.new_tokens} new tokens, best of {args.repeats}")
    print(f"with cache {cached:.2f} s, without {uncached:.2f} s: speed-up {uncached / cached:.1f}x; "
          f"identical tokens: {same}")
    beam_times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        beam_search(model, src, args.beam, args.new_tokens, BOS_ID, NEVER)
        beam_times.append(time.perf_counter() - start)
    print(f"beam search, {args.beam} hypotheses, cached: {min(beam_times):.2f} s")


if __name__ == "__main__":
    main()
