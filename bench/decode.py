"""Greedy decoding with and without the key/value cache, base configuration, 64 new tokens.

Prints the time of each and the speed-up ratio, measured alternately in one process.
Run: .venv/bin/python bench/decode.py [--repeats 3]
"""
import argparse
import time

import torch

from transformer_book.decoding import greedy_decode
from transformer_book.model import Transformer, TransformerConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = TransformerConfig(8000, 8000)  # the paper's base sizes: d_model 512, 6 + 6 layers
    model = Transformer(config).eval()
    src = torch.randint(4, 8000, (args.batch, 32))
    eos = -1  # never produced: every run generates exactly new_tokens tokens
    times = {True: [], False: []}
    outputs = {}
    for _ in range(args.repeats):
        for use_cache in (True, False):
            start = time.perf_counter()
            outputs[use_cache] = greedy_decode(model, src, args.new_tokens, 1, eos, use_cache=use_cache)
            times[use_cache].append(time.perf_counter() - start)
    same = torch.equal(outputs[True], outputs[False])
    cached, uncached = min(times[True]), min(times[False])
    print(f"base model, batch {args.batch}, {args.new_tokens} new tokens, best of {args.repeats}")
    print(f"with cache {cached:.2f} s, without {uncached:.2f} s: speed-up {uncached / cached:.1f}x; "
          f"identical tokens: {same}")


if __name__ == "__main__":
    main()
