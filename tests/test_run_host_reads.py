"""Reads from the device back to the host in chapter 10's run outside the training step (tests/hostreads.py
counts them; the step itself is tests/test_training.py's): each one makes the host wait for a GPU."""

import dataclasses
import types

import torch
from conftest import random_pairs
from hostreads import count_host_reads

from transformer_book import data
from transformer_book.model import Transformer
from transformer_book.run.loop import validation_loss
from transformer_book.run.precision import Precision
from transformer_book.run.presets import PRESETS, model_config
from transformer_book.tokens import PAD_ID
from transformer_book.training import LabelSmoothingLoss


def test_the_validation_loss_reads_back_once_and_weighs_each_batch_by_its_tokens():
    vocab_size, max_tokens = 60, 200
    examples = random_pairs(120, vocab_size, seed=1)
    torch.manual_seed(0)
    model = Transformer(model_config(dataclasses.replace(PRESETS["smoke"], dropout=0.0), vocab_size))
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=PAD_ID)
    learner = types.SimpleNamespace(model=model, loss_fn=loss_fn, precision=Precision(None, None))
    batches = list(data.batch_by_tokens(examples, max_tokens, shuffle=False))
    assert len(batches) > 3
    with count_host_reads() as reads:
        loss = validation_loss(learner, examples, max_tokens, torch.device("cpu"))
    # make_batch counts each batch's tokens (int) while the batch is still on the host: no wait for a GPU
    on_device = {place: n for place, n in reads.by_place().items() if not place.startswith("transformer_book/masking.py")}
    assert sum(on_device.values()) == 1, on_device
    with torch.no_grad():  # the mean over every target token, whatever batch it falls in
        expected = sum(loss_fn(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask), b.tgt_out).item() * b.num_tokens
                       for b in batches) / sum(b.num_tokens for b in batches)
    assert abs(loss - expected) < 1e-5 * expected
