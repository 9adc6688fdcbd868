"""Greedy decoding with a key/value cache, beam search, and BLEU (chapter 8)."""
import math
from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor

from .masking import padding_mask

__all__ = ["greedy_decode", "beam_search", "length_penalty", "corpus_bleu"]


def _check_src(src: Tensor, max_len: int) -> None:
    if src.dim() != 2 or src.size(1) == 0:
        raise ValueError(f"src must be token ids of shape (B, T_src) with T_src >= 1; got {tuple(src.shape)}")
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1; got {max_len}")


@torch.no_grad()
def greedy_decode(
    model, src: Tensor, max_len: int, bos_id: int, eos_id: int, use_cache: bool = True
) -> Tensor:
    """Pick the most likely next token until EOS or max_len new tokens, for a whole batch at once.

    src (B, T_src) -> (B, 1 + T_out) starting with BOS; after a sequence's EOS come pad ids.
    use_cache=False recomputes the whole prefix at every step (same tokens, slower).
    """
    _check_src(src, max_len)
    pad_id = model.config.pad_id
    src_mask = padding_mask(src, pad_id)  # (B, 1, 1, T_src)
    memory = model.encode(src, src_mask)  # (B, T_src, D)
    tokens = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (B,)
    cache = model.new_cache() if use_cache else None
    for _ in range(max_len):
        step_input = tokens[:, -1:] if use_cache else tokens  # (B, 1) or (B, t)
        logits = model.decode(step_input, memory, src_mask, cache=cache)[:, -1]  # (B, V)
        next_token = logits.argmax(dim=-1)  # (B,)
        next_token = next_token.masked_fill(finished, pad_id)  # finished sequences only pad
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)  # (B, t + 1)
        finished |= next_token == eos_id
        if finished.all():
            break
    return tokens


def length_penalty(length: Tensor, alpha: float) -> Tensor:
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016); scores are divided by it."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model,
    src: Tensor,
    beam_size: int,
    max_len: int,
    bos_id: int,
    eos_id: int,
    length_penalty_alpha: float = 0.6,
) -> Tensor:
    """Keep the beam_size best partial translations per sentence; return the best finished one.

    Hypotheses are ranked by log p(Y | X) / lp(Y). src (B, T_src) -> (B, 1 + T_out) starting with BOS,
    padded after EOS. beam_size=1 gives exactly greedy_decode's output.
    """
    _check_src(src, max_len)
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1; got {beam_size}")
    pad_id = model.config.pad_id
    batch, k = src.size(0), beam_size
    device = src.device
    src = src.repeat_interleave(k, dim=0)  # (B*K, T_src): every hypothesis has its own copy
    src_mask = padding_mask(src, pad_id)  # (B*K, 1, 1, T_src)
    memory = model.encode(src, src_mask)  # (B*K, T_src, D)
    cache = model.new_cache()
    tokens = torch.full((batch * k, 1), bos_id, dtype=torch.long, device=device)  # (B*K, 1)
    scores = torch.full((batch, k), float("-inf"), device=device)  # (B, K): log p of each hypothesis
    scores[:, 0] = 0.0  # start from a single hypothesis, BOS
    lengths = torch.zeros(batch, k, device=device)  # (B, K): tokens generated, EOS included
    finished = torch.zeros(batch, k, dtype=torch.bool, device=device)  # (B, K)
    for step in range(max_len):
        logits = model.decode(tokens[:, -1:], memory, src_mask, cache=cache)[:, -1]  # (B*K, V)
        log_probs = torch.log_softmax(logits.float(), dim=-1).view(batch, k, -1)  # (B, K, V)
        vocab = log_probs.size(-1)
        # A finished hypothesis may only be extended by padding, at no cost: it stays as it is.
        done_row = torch.full((vocab,), float("-inf"), device=device)
        done_row[pad_id] = 0.0
        log_probs = torch.where(finished[..., None], done_row, log_probs)
        candidates = scores[..., None] + log_probs  # (B, K, V)
        cand_lengths = torch.where(finished, lengths, lengths + 1)[..., None].expand(-1, -1, vocab)  # (B, K, V)
        ranking = candidates / length_penalty(cand_lengths, length_penalty_alpha)  # (B, K, V)
        top = ranking.view(batch, -1).topk(k, dim=-1).indices  # (B, K) into K*V
        beam_origin, next_token = top // vocab, top % vocab  # (B, K) each
        scores = candidates.view(batch, -1).gather(1, top)  # (B, K)
        lengths = cand_lengths.reshape(batch, -1).gather(1, top)  # (B, K)
        finished = finished.gather(1, beam_origin) | (next_token == eos_id)  # (B, K)
        flat_origin = (beam_origin + torch.arange(batch, device=device)[:, None] * k).view(-1)  # (B*K,)
        tokens = torch.cat([tokens[flat_origin], next_token.view(-1, 1)], dim=1)  # (B*K, t + 1)
        for layer_cache in cache:
            layer_cache.self_attn.select(flat_origin)
        if finished.all():
            break
    best = (scores / length_penalty(lengths, length_penalty_alpha)).argmax(dim=-1)  # (B,)
    chosen = tokens.view(batch, k, -1)[torch.arange(batch, device=device), best]  # (B, 1 + T_out)
    return chosen


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], max_n: int = 4) -> float:
    """Corpus BLEU (Papineni et al. 2002) on whitespace-split tokens, one reference per sentence, 0-100.

    BLEU = BP * exp(mean_n log p_n), p_n = clipped n-gram matches / hypothesis n-grams (summed over the
    corpus), BP = min(1, exp(1 - ref_len / hyp_len)). Equals sacrebleu.corpus_bleu(..., tokenize="none").
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"need one reference per hypothesis; got {len(hypotheses)} and {len(references)}")
    matches, totals = [0] * max_n, [0] * max_n
    hyp_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references):
        hyp_tokens, ref_tokens = hyp.split(), ref.split()
        hyp_len, ref_len = hyp_len + len(hyp_tokens), ref_len + len(ref_tokens)
        for n in range(1, max_n + 1):
            hyp_counts, ref_counts = _ngrams(hyp_tokens, n), _ngrams(ref_tokens, n)
            matches[n - 1] += sum(min(c, ref_counts[g]) for g, c in hyp_counts.items())  # clipped counts
            totals[n - 1] += max(len(hyp_tokens) - n + 1, 0)
    if hyp_len == 0 or min(matches) == 0:
        return 0.0
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n
    brevity = min(0.0, 1.0 - ref_len / hyp_len)  # log BP
    return 100.0 * math.exp(brevity + log_precision)
