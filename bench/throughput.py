"""Training-step throughput of transformer_book's Transformer against torch.nn.Transformer.

Same configuration, batch and optimizer; the two models alternate step by step in one process, so both see
the same machine state. Prints target tokens per second and the ratio ours / PyTorch's, in float32 and in
bfloat16 autocast. Run: .venv/bin/python bench/throughput.py [--steps 30]
"""
import argparse
import math
import time

import torch
from torch import nn

from transformer_book.masking import causal_mask, make_batch
from transformer_book.model import Transformer, TransformerConfig
from transformer_book.training import LabelSmoothingLoss, make_optimizer


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with embeddings, positions and output layer like ours (post-norm, batch-first)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        ours = Transformer(config)  # borrow the embedding and positional modules
        self.embed, self.positional, self.generator = ours.src_embed, ours.positional, ours.generator
        self.d_model = config.d_model
        self.core = nn.Transformer(
            config.d_model, config.num_heads, config.num_encoder_layers, config.num_decoder_layers,
            config.d_ff, config.dropout, batch_first=True, norm_first=config.norm_first,
        )

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        scale = math.sqrt(self.d_model)
        src_x = self.positional(self.embed(src) * scale)
        tgt_x = self.positional(self.embed(tgt_in) * scale)
        t = tgt_in.size(1)
        out = self.core(
            src_x, tgt_x, tgt_mask=~causal_mask(t, src.device),
            src_key_padding_mask=~src_mask[:, 0, 0], memory_key_padding_mask=~src_mask[:, 0, 0],
            tgt_key_padding_mask=None,
        )
        return self.generator(out)


def time_step(model, optimizer, loss_fn, batch, amp_dtype) -> float:
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=amp_dtype, enabled=amp_dtype is not None):
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss = loss_fn(logits, batch.tgt_out)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=96)
    parser.add_argument("--length", type=int, default=24)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = TransformerConfig(8000, 8000, d_model=256, num_heads=4, num_encoder_layers=3,
                               num_decoder_layers=3, d_ff=1024, dropout=0.1)
    src = torch.randint(4, 8000, (args.batch, args.length))
    tgt = torch.randint(4, 8000, (args.batch, args.length + 1))
    batch = make_batch(src, tgt, pad_id=0)
    loss_fn = LabelSmoothingLoss(0.1)
    print(f"config d_model=256, 3+3 layers, batch {args.batch} x {args.length} tokens, {args.steps} steps each")
    for amp_dtype in (None, torch.bfloat16):
        models = {"ours": Transformer(config), "torch": TorchTransformer(config)}
        optimizers = {name: make_optimizer(m) for name, m in models.items()}
        for m in models.values():
            m.train()
        times = {name: [] for name in models}
        for step in range(args.steps + 3):
            for name, m in models.items():
                seconds = time_step(m, optimizers[name], loss_fn, batch, amp_dtype)
                if step >= 3:  # the first steps warm up allocators and kernels
                    times[name].append(seconds)
        rates = {name: batch.num_tokens / sorted(t)[len(t) // 2] for name, t in times.items()}
        label = "bfloat16 autocast" if amp_dtype else "float32"
        print(
            f"{label:18s} ours {rates['ours']:8.0f} tok/s   nn.Transformer {rates['torch']:8.0f} tok/s   "
            f"ratio ours/torch {rates['ours'] / rates['torch']:.2f}"
        )


if __name__ == "__main__":
    main()
