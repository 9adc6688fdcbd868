"""Real code that readers bring, run through the checks of transformer_book.exercises (issue 50, item 7).

Each correct port passes (named where it follows another convention); each port with a mistake gets its diagnosis;
each new check's reference equals the implementation PyTorch or the tokenizers library ships, on the check's cases.
"""

import json
import math
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from torch import nn

from transformer_book.exercises import (
    check_adamw,
    check_attention,
    check_bpe_merges,
    check_cosine_schedule,
    check_greedy_decode,
    check_grouped_query_attention,
    check_label_smoothing,
    check_sampling,
    check_sliding_window_mask,
)
from transformer_book.exercises.bpe import bpe_variant, learn_merges
from transformer_book.exercises.generation import next_token_probs
from transformer_book.exercises.optim import _adamw_inputs, _trajectories
from transformer_book.generation import sample_next
from transformer_book.masking import padding_mask
from transformer_book.optim import AdamW, cosine_rate

# --- item 7, the three ports that misfired ------------------------------------------------------------------


def greedy_into_padded_buffer(model, src, max_len, bos_id, eos_id):
    """Greedy decoding into a (B, 1 + max_len) buffer of padding: correct tokens, padding after EOS to max_len."""
    pad_id = model.config.pad_id
    src_mask = padding_mask(src, pad_id)
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), max_len + 1), pad_id, dtype=torch.long)
    ys[:, 0] = bos_id
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for i in range(max_len):
        next_token = model.decode(ys[:, : i + 1], memory, src_mask)[:, -1].argmax(dim=-1)
        ys[:, i + 1] = torch.where(done, torch.full_like(next_token, pad_id), next_token)
        done |= ys[:, i + 1] == eos_id
    return ys


def greedy_one_sentence_at_a_time(model, src, max_len, bos_id, eos_id):
    """Greedy decoding sentence by sentence with Python lists, each padded to 1 + max_len at the end."""
    pad_id, rows = model.config.pad_id, []
    for b in range(src.size(0)):
        mask = padding_mask(src[b : b + 1], pad_id)
        memory, tokens = model.encode(src[b : b + 1], mask), [bos_id]
        while len(tokens) <= max_len and tokens[-1] != eos_id or len(tokens) == 1:
            tokens.append(int(model.decode(torch.tensor([tokens]), memory, mask)[0, -1].argmax()))
        rows.append(tokens + [pad_id] * (max_len + 1 - len(tokens)))
    return torch.tensor(rows)


@pytest.mark.parametrize("decode", [greedy_into_padded_buffer, greedy_one_sentence_at_a_time])
def test_a_greedy_decoder_that_pads_after_eos_up_to_max_len_passes(decode):
    result = check_greedy_decode(decode, verbose=False)
    assert result and result.diagnoses == [], str(result)
    assert result.conventions == ["every sentence padded up to max_len after its EOS (trailing padding)"]
    assert "never stops at EOS" not in str(result)


class AnnotatedLabelSmoothing(nn.Module):
    """The Annotated Transformer's LabelSmoothing as learners port it: KLDivLoss against a target distribution with
    smoothing / (K - 2) on the classes other than the target and padding, the padding column and padding rows zeroed;
    `divide_by_tokens` is its SimpleLossCompute's division by the number of tokens."""

    def __init__(self, smoothing, padding_idx, reduction="sum", divide_by_tokens=True, log_softmax=True):
        super().__init__()
        self.smoothing, self.padding_idx, self.log_softmax = smoothing, padding_idx, log_softmax
        self.divide_by_tokens = divide_by_tokens and reduction == "sum"
        self.criterion = nn.KLDivLoss(reduction=reduction)

    def forward(self, logits, target):
        x = logits.log_softmax(dim=-1) if self.log_softmax else logits
        true_dist = torch.full_like(x, self.smoothing / (x.size(1) - 2))
        true_dist.scatter_(1, target[:, None], 1.0 - self.smoothing)
        true_dist[:, self.padding_idx] = 0
        padded = torch.nonzero(target == self.padding_idx)
        if padded.numel():
            true_dist.index_fill_(0, padded.squeeze(1), 0.0)
        with warnings.catch_warnings():  # KLDivLoss's reduction="mean" warns that it is not batchmean
            warnings.simplefilter("ignore")
            loss = self.criterion(x, true_dist.detach())
        return loss / (target != self.padding_idx).sum() if self.divide_by_tokens else loss


ANNOTATED = "the Annotated Transformer's label smoothing (KLDivLoss, smoothing / (K - 2))"


@pytest.mark.parametrize(
    "settings",
    [{}, {"divide_by_tokens": False}, {"reduction": "batchmean"}, {"reduction": "mean"}],
    ids=["sum-over-tokens", "sum", "batchmean", "mean"],
)
def test_the_annotated_transformers_label_smoothing_is_a_convention_with_its_numbers(settings):
    result = check_label_smoothing(lambda s, pad: AnnotatedLabelSmoothing(s, pad, **settings), verbose=False)
    assert not result and result.diagnoses == [] and result.conventions == [ANNOTATED], str(result)
    report = str(result)
    assert "no mistake the check knows" not in report
    # its numbers: K = 6, smoothing 0.1: 0.1 / 4 on the other classes against the book's 0.1 / 6 everywhere
    assert "0.1 / 4 = 0.025" in report and "0.1 / 6 = 0.01667" in report and "0.9167 on the target" in report
    assert re.search(r"that loss is \d+\.\d{3} summed over the tokens and \d\.\d{3} per token, the book's \d\.\d{3}", report)


def test_the_annotated_label_smoothing_fed_logits_is_a_mistake():
    result = check_label_smoothing(lambda s, pad: AnnotatedLabelSmoothing(s, pad, log_softmax=False), verbose=False)
    assert not result and result.diagnoses == ["KLDivLoss is given the logits, not log-probabilities"], str(result)


def attention_over_the_query_axis(fill, zero_masked, nan_to_num=False):
    """Attention whose softmax runs over the queries (dim=-2), masked with `fill` (None: finfo.min)."""

    def attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min if fill is None else fill)
        weights = scores.softmax(dim=-2)
        if nan_to_num:
            weights = weights.nan_to_num(0.0)
        if mask is not None and zero_masked:
            weights = weights.masked_fill(~mask, 0.0)
        return weights @ v, weights

    return attention


@pytest.mark.parametrize("fill", [None, -math.inf, -1e9], ids=["finfo.min", "-inf", "-1e9"])
@pytest.mark.parametrize("zero_masked", [False, True], ids=["as-is", "masked-weights-zeroed"])
def test_softmax_over_the_query_axis_is_diagnosed_whatever_the_fill(fill, zero_masked):
    result = check_attention(attention_over_the_query_axis(fill, zero_masked), verbose=False)
    assert not result and result.diagnoses == [
        "the softmax is taken over the queries (dim=-2) instead of the keys"
    ], str(result)


def test_softmax_over_the_query_axis_with_nans_cleared_is_diagnosed():
    result = check_attention(attention_over_the_query_axis(-math.inf, False, nan_to_num=True), verbose=False)
    assert not result and result.diagnoses == ["the softmax is taken over the queries (dim=-2) instead of the keys"]


@pytest.mark.parametrize("fill", [-1e9, float("-1e9"), -1e4], ids=["-1e9", "float-1e9", "-1e4"])
def test_masking_with_a_large_negative_number_passes(fill):
    def attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, fill)
        return F.softmax(scores, dim=-1) @ v

    result = check_attention(attention, verbose=False)
    assert result and result.diagnoses == [], str(result)


# --- the new checks: each reference against the library's own implementation, and real ports ----------------


def library_merges(word_counts, num_merges):
    """The merges the tokenizers library's BPE trainer learns from the same counts (characters first)."""
    alphabet = sorted({ch for word in word_counts for ch in word})
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + num_merges, show_progress=False, special_tokens=[])
    tokenizer.train_from_iterator([" ".join([word] * count) for word, count in word_counts.items()], trainer)
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return [tuple(m.split(" ") if isinstance(m, str) else m) for m in merges]


def test_the_bpe_reference_learns_the_tokenizers_librarys_merges():
    for table in ({"erst": 9, "naabst": 3, "owowow": 81, "stwiwi": 27}, {"tow": 3, "tolo": 1, "oto": 9, "ows": 27}):
        ours = bpe_variant((table, 5))
        assert ours == ", ".join(f"{a}+{b}" for a, b in library_merges(table, 5)), (table, ours)
        assert learn_merges(table, 5) == library_merges(table, 5)
    assert check_bpe_merges(library_merges, verbose=False)


def test_the_sampling_reference_is_what_sample_next_draws_from():
    logits = torch.randn(4, 9, generator=torch.Generator().manual_seed(3)) * 2
    for temperature, top_k in ((1.0, None), (0.5, 3), (2.0, 5), (0.0, None)):
        drawn = sample_next(logits, temperature, top_k, generator=torch.Generator().manual_seed(11))
        if temperature == 0:
            assert torch.equal(drawn, logits.argmax(dim=-1))
            continue
        probs = next_token_probs(logits, temperature, top_k)
        expected = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(11)).squeeze(-1)
        assert torch.equal(drawn, expected)


def test_a_sampler_written_with_sort_and_cumulative_masks_passes():
    def probs(logits, temperature, top_k):
        if top_k is not None:
            kth = logits.sort(dim=-1, descending=True).values[:, top_k - 1 : top_k]
            logits = torch.where(logits < kth, torch.tensor(float("-inf")), logits)
        if temperature == 0:
            return F.one_hot(logits.argmax(-1), logits.size(-1)).float()
        return F.softmax(logits / temperature, dim=-1)

    assert check_sampling(probs, verbose=False)


@pytest.mark.parametrize("optimizer", [AdamW, torch.optim.AdamW], ids=["book", "torch"])
def test_adamw_the_book_and_torch_pass_and_agree(optimizer):
    assert check_adamw(optimizer, verbose=False)
    inputs = _adamw_inputs(600, 5, 1.0, lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    for ours, theirs in zip(_trajectories(AdamW, inputs), _trajectories(torch.optim.AdamW, inputs)):
        torch.testing.assert_close(ours, theirs)


def test_torch_adam_with_weight_decay_is_named_as_l2():
    result = check_adamw(torch.optim.Adam, verbose=False)
    assert not result and result.diagnoses == [
        "the weight decay is added to the gradient (Adam with L2), not applied to the weights"
    ], str(result)


def torch_schedule_rates(warmup, total, min_ratio, steps):
    """The multipliers of PyTorch's own schedulers: LinearLR for the warm-up, then CosineAnnealingLR."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    schedule = torch.optim.lr_scheduler.SequentialLR(
        optimizer,
        [
            torch.optim.lr_scheduler.LinearLR(optimizer, 1 / warmup, 1.0, total_iters=warmup - 1),
            torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total - warmup, eta_min=min_ratio),
        ],
        milestones=[warmup],
    )
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return rates


@pytest.mark.parametrize(("warmup", "total", "min_ratio"), [(4, 12, 0.0), (3, 10, 0.1), (5, 40, 0.05)])
def test_cosine_rate_equals_pytorchs_schedulers_up_to_total_steps(warmup, total, min_ratio):
    expected = torch_schedule_rates(warmup, total, min_ratio, total + 1)
    ours = [cosine_rate(step, warmup, total, min_ratio) for step in range(total + 1)]
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(expected))


def test_a_window_mask_from_tril_and_triu_passes_and_mistrals_is_named():
    def from_bands(length, window, causal):
        ones = torch.ones(length, length, dtype=torch.bool)
        below = ones.tril().triu(-window)
        return below if causal else below | below.T

    assert check_sliding_window_mask(from_bands, verbose=False)

    def mistral(length, window, causal):  # sliding_window = the number of keys seen, the query's own included
        i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
        return (i - j < window) & ((j <= i) if causal else (j - i < window))

    result = check_sliding_window_mask(mistral, verbose=False)
    assert not result and result.diagnoses == [] and len(result.conventions) == 1, str(result)
    assert "Mistral" in result.conventions[0]


class SdpaGroupedQueryAttention(nn.Module):
    """Grouped-query attention written on F.scaled_dot_product_attention(enable_gqa=True)."""

    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        self.h, self.h_kv, self.d_head = num_heads, num_kv_heads, d_model // num_heads
        self.q_proj, self.out_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.d_head)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.d_head)

    def forward(self, query, key, value, mask=None):
        b, t = query.shape[:2]
        q = self.q_proj(query).view(b, t, self.h, self.d_head).transpose(1, 2)
        k = self.k_proj(key).view(b, key.size(1), self.h_kv, self.d_head).transpose(1, 2)
        v = self.v_proj(value).view(b, value.size(1), self.h_kv, self.d_head).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, -1))


def test_grouped_query_attention_on_pytorchs_sdpa_passes():
    assert check_grouped_query_attention(SdpaGroupedQueryAttention, verbose=False)


def test_grouped_query_attention_that_tiles_the_heads_is_named():
    class Tiled(SdpaGroupedQueryAttention):
        def forward(self, query, key, value, mask=None):
            b, t = query.shape[:2]
            q = self.q_proj(query).view(b, t, self.h, self.d_head).transpose(1, 2)
            k, v = (
                proj(x).view(b, x.size(1), self.h_kv, self.d_head).transpose(1, 2).repeat(1, self.h // self.h_kv, 1, 1)
                for proj, x in ((self.k_proj, key), (self.v_proj, value))
            )
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return self.out_proj(out.transpose(1, 2).reshape(b, t, -1))

    result = check_grouped_query_attention(Tiled, verbose=False)
    assert not result and len(result.diagnoses) == 1 and "tiled" in result.diagnoses[0], str(result)


def test_a_schedule_read_off_pytorchs_schedulers_passes():
    def rate(step, warmup_steps, total_steps, min_ratio):
        if step > total_steps:  # CosineAnnealingLR turns back up after T_max; the book holds min_ratio
            return min_ratio
        return torch_schedule_rates(warmup_steps, total_steps, min_ratio, step + 1)[-1]

    assert check_cosine_schedule(rate, verbose=False)
