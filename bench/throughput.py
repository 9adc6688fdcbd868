"""Training-step throughput of transformer_book's Transformer against torch.nn.Transformer.

Same configuration (the sizes of chapter 10's cpu preset: vocabulary 8000, d_model 256, 4 heads, 3 + 3
layers, d_ff 1024; in the paper's post-norm arrangement, where the preset trains pre-norm), batch, loss and
optimizer (Adam with the paper's betas at a small constant learning rate, BENCH_LR, so that neither model
diverges while it is timed). Both compute the same function of their weights: torch's post-norm
nn.Transformer ends its encoder and decoder with an extra LayerNorm that the paper's post-norm model (and
ours) does not have, so those two are replaced by nn.Identity here (chapter 6 checks the equivalence with
copied weights). The two models alternate step by step in one process, so both see the
same machine state. Prints target tokens per second and the ratio ours / PyTorch's, in float32 and in
bfloat16 autocast. Run: .venv/bin/python bench/throughput.py [--steps 30]
"""
import argparse
import math
import time

import torch
from torch import nn

from transformer_book.data import PAD_ID, SPECIAL_TOKENS
from transformer_book.masking import causal_mask, make_batch
from transformer_book.model import Transformer, TransformerConfig
from transformer_book.presets import cpu_has_bfloat16
from transformer_book.training import LabelSmoothingLoss, make_optimizer

VOCAB = 8000  # chapter 10's joint subword vocabulary
FIRST_WORD_ID = len(SPECIAL_TOKENS)  # random "words" start after <pad>, <s>, </s>, <unk>
BENCH_LR = 1e-4  # constant: make_optimizer's default lr 1.0 expects WarmupSchedule and diverges without it
WARMUP_STEPS = 3  # untimed first steps: they allocate memory and pick kernels


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with embeddings, positions and output layer like ours (batch-first).

    In post-norm, nn.Transformer's final encoder and decoder LayerNorms become nn.Identity, as in ours.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        ours = Transformer(config)  # borrow the embedding and positional modules
        self.embed, self.positional, self.generator = ours.src_embed, ours.positional, ours.generator
        self.d_model = config.d_model
        self.core = nn.Transformer(
            config.d_model, config.num_heads, config.num_encoder_layers, config.num_decoder_layers,
            config.d_ff, config.dropout, batch_first=True, norm_first=config.norm_first,
        )
        if not config.norm_first:  # the paper's post-norm stack ends with its last layer's own LayerNorm
            self.core.encoder.norm = nn.Identity()
            self.core.decoder.norm = nn.Identity()

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
    """Seconds for one training step on batch: forward (under CPU autocast to amp_dtype unless it is None),
    loss, backward and optimizer update."""
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
    config = TransformerConfig(VOCAB, VOCAB, d_model=256, num_heads=4, num_encoder_layers=3,
                               num_decoder_layers=3, d_ff=1024, dropout=0.1, pad_id=PAD_ID)
    src = torch.randint(FIRST_WORD_ID, VOCAB, (args.batch, args.length))  # (B, T_src)
    tgt = torch.randint(FIRST_WORD_ID, VOCAB, (args.batch, args.length + 1))  # (B, T_tgt + 1)
    batch = make_batch(src, tgt, pad_id=PAD_ID)
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=PAD_ID)
    print(f"config vocabulary {VOCAB}, d_model 256, 3+3 post-norm layers, d_ff 1024; batch {args.batch} x "
          f"{args.length} tokens; Adam at constant lr {BENCH_LR}; {args.steps} timed steps each")
    amp_dtypes: list[torch.dtype | None] = [None]
    if cpu_has_bfloat16():
        amp_dtypes.append(torch.bfloat16)
    else:  # emulated bfloat16 is ~80x slower than float32 (chapter 10): timing it would take hours
        print("bfloat16 autocast skipped: this CPU has no bfloat16 instructions (AVX-512 BF16 or AMX)")
    for amp_dtype in amp_dtypes:
        models = {"ours": Transformer(config), "torch": TorchTransformer(config)}
        optimizers = {name: make_optimizer(m, lr=BENCH_LR) for name, m in models.items()}
        for m in models.values():
            m.train()
        times = {name: [] for name in models}
        for step in range(WARMUP_STEPS + args.steps):
            for name, m in models.items():
                seconds = time_step(m, optimizers[name], loss_fn, batch, amp_dtype)
                if step >= WARMUP_STEPS:
                    times[name].append(seconds)
        rates = {name: batch.num_tokens / sorted(t)[len(t) // 2] for name, t in times.items()}
        label = "bfloat16 autocast" if amp_dtype else "float32"
        print(
            f"{label:18s} ours {rates['ours']:8.0f} tok/s   nn.Transformer {rates['torch']:8.0f} tok/s   "
            f"ratio ours/torch {rates['ours'] / rates['torch']:.2f}"
        )


if __name__ == "__main__":
    main()
