"""Training-step throughput of transformer_book against PyTorch's own pieces, and against the machine's limit.

Ours: transformer_book's Transformer with its LabelSmoothingLoss. PyTorch's: torch.nn.Transformer with
torch.nn.CrossEntropyLoss(label_smoothing=0.1), given the same embeddings, positions and output layer as ours.
Both have the sizes of chapter 10's cpu preset (vocabulary 8000, d_model 256, 4 heads, 3 + 3 pre-norm layers,
d_ff 1024, dropout 0.1), see the same batch (by default 150 x 20 = 3000 target positions, the preset's token
budget) and take Adam steps at a small constant learning rate, BENCH_LR, so that neither diverges while it is
timed. The two alternate step by step in one process, so both see the same machine state.

Printed: target tokens per second of each and their ratio; the float32 rate of one 1024 x 1024 matrix product
at the same number of threads, the floating-point operations of one training step (counted by FlopCounterMode:
the matrix products of the forward and backward passes), and the share of that matrix-product rate each model
reaches; the loss alone, ours against PyTorch's, on the same logits. Then bfloat16 autocast, on CPUs that have
bfloat16 instructions. With --busy, another process keeps one core busy with a loop of Python arithmetic
while the steps are timed, as a browser or a Jupyter server does on a reader's laptop. Run:
.venv/bin/python bench/throughput.py [--threads 1] [--steps 20] [--busy]

OpenMP reads OMP_WAIT_POLICY when PyTorch loads, so it is set for the whole command:
OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/throughput.py --busy
"""
import argparse
import math
import multiprocessing
import os
import time
import warnings

import torch
from torch import nn

from transformer_book.data import PAD_ID, SPECIAL_TOKENS
from transformer_book.masking import causal_mask, make_batch
from transformer_book.model import Transformer, TransformerConfig
from transformer_book.run.loop import step_cost
from transformer_book.run.precision import cpu_has_bfloat16
from transformer_book.run.presets import PRESETS, model_config
from transformer_book.training import LabelSmoothingLoss, make_optimizer

FIRST_WORD_ID = len(SPECIAL_TOKENS)  # random "words" start after <pad>, <s>, </s>, <unk>
BENCH_LR = 1e-4  # constant: make_optimizer's default lr 1.0 expects WarmupSchedule and diverges without it
WARMUP_STEPS = 3  # untimed first steps: they allocate memory and pick kernels
MATMUL_SIZE = 1024


# nn.Transformer warns that pre-norm layers cannot use its nested-tensor fast path, which it does not use here.
warnings.filterwarnings("ignore", message="enable_nested_tensor is True")


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with embeddings, positions and output layer like ours (batch-first).

    In post-norm, nn.Transformer's final encoder and decoder LayerNorms become nn.Identity, as in ours; in
    pre-norm both models end each stack with a LayerNorm.
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


class TorchLoss(nn.Module):
    """torch.nn.CrossEntropyLoss with label smoothing, taking (B, T, V) logits like ours."""

    def __init__(self, smoothing: float):
        super().__init__()
        self.loss = nn.CrossEntropyLoss(ignore_index=PAD_ID, label_smoothing=smoothing)

    def forward(self, logits, target):
        return self.loss(logits.flatten(0, 1), target.flatten())


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


def matmul_gflops(dtype: torch.dtype, size: int = MATMUL_SIZE, repeats: int = 20) -> float:
    """The best rate of a size x size matrix product in `dtype`, in GFLOP/s, over `repeats` products."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    a @ b  # warm up
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def spin_forever() -> None:
    """Keep one core busy (the --busy load): plain Python arithmetic, no threads, no memory traffic."""
    x = 0
    while True:
        x = (x * 31 + 7) % 1_000_003


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=150)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="default: PyTorch's (one per core)")
    parser.add_argument("--busy", action="store_true", help="time the steps beside a process that keeps a core busy")
    parser.add_argument("--float32-only", action="store_true",
                        help="skip bfloat16, as on a CPU without bfloat16 instructions (with ATEN_CPU_CAPABILITY=avx2 "
                             "ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 this CPU stands in for an AVX2 one)")
    args = parser.parse_args()
    if args.busy:
        load = multiprocessing.get_context("spawn").Process(target=spin_forever, daemon=True)
        load.start()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    preset = PRESETS["cpu"]
    config = model_config(preset, preset.vocab_size)
    src = torch.randint(FIRST_WORD_ID, preset.vocab_size, (args.batch, args.length))  # (B, T_src)
    tgt = torch.randint(FIRST_WORD_ID, preset.vocab_size, (args.batch, args.length + 1))  # (B, T_tgt + 1)
    batch = make_batch(src, tgt, pad_id=PAD_ID)
    losses = {"ours": LabelSmoothingLoss(preset.label_smoothing, ignore_index=PAD_ID),
              "torch": TorchLoss(preset.label_smoothing)}
    flops = step_cost(Transformer(config), batch, losses["ours"])["flops"]
    matmul = matmul_gflops(torch.float32)
    print(f"cpu preset sizes (vocabulary {preset.vocab_size}, d_model {preset.d_model}, {preset.num_layers}+"
          f"{preset.num_layers} pre-norm layers, d_ff {preset.d_ff}); batch {args.batch} x {args.length} target "
          f"tokens; {torch.get_num_threads()} threads, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, "
          f"{'beside a busy core' if args.busy else 'nothing else running'}; Adam at constant lr {BENCH_LR}; {args.steps} timed steps each")
    print(f"float32 {MATMUL_SIZE}x{MATMUL_SIZE} matrix product: {matmul:.0f} GFLOP/s; one training step: "
          f"{flops / 1e9:.1f} GFLOP ({flops / batch.num_tokens / 1e6:.0f} MFLOP per target token)")
    amp_dtypes: list[torch.dtype | None] = [None]
    if args.float32_only:
        print("bfloat16 autocast skipped (--float32-only)")
    elif cpu_has_bfloat16():
        amp_dtypes.append(torch.bfloat16)
    else:  # emulated bfloat16 is ~80x slower than float32 (chapter 10): timing it would take hours
        print("bfloat16 autocast skipped: this CPU has no bfloat16 instructions (AVX-512 BF16 or AMX)")
    for amp_dtype in amp_dtypes:
        torch.manual_seed(0)
        models = {"ours": Transformer(config), "torch": TorchTransformer(config)}
        optimizers = {name: make_optimizer(m, lr=BENCH_LR) for name, m in models.items()}
        times: dict[str, list[float]] = {name: [] for name in models}
        for step in range(WARMUP_STEPS + args.steps):
            for name, m in models.items():
                seconds = time_step(m.train(), optimizers[name], losses[name], batch, amp_dtype)
                if step >= WARMUP_STEPS:
                    times[name].append(seconds)
        rates = {name: batch.num_tokens / median(t) for name, t in times.items()}
        label = "bfloat16 autocast" if amp_dtype else "float32"
        shares = {name: flops / median(t) / 1e9 / matmul for name, t in times.items()}
        print(
            f"{label:18s} ours {rates['ours']:6.0f} tok/s ({shares['ours']:4.0%} of the float32 matmul rate)   "
            f"PyTorch's {rates['torch']:6.0f} tok/s ({shares['torch']:4.0%})   ratio ours/PyTorch's "
            f"{rates['ours'] / rates['torch']:.2f}"
        )
    logits = torch.randn(args.batch, args.length, preset.vocab_size, requires_grad=True)  # (B, T_tgt, V)
    loss_times: dict[str, list[float]] = {name: [] for name in losses}
    for step in range(WARMUP_STEPS + args.steps):
        for name, loss_fn in losses.items():
            start = time.perf_counter()
            loss_fn(logits, batch.tgt_out).backward()
            if step >= WARMUP_STEPS:
                loss_times[name].append(time.perf_counter() - start)
    print(f"the loss alone, forward and backward on ({args.batch}, {args.length}, {preset.vocab_size}) float32 logits: "
          f"ours {median(loss_times['ours']) * 1e3:.0f} ms, nn.CrossEntropyLoss {median(loss_times['torch']) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
