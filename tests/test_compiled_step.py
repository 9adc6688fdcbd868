"""The training step compiled with torch.compile (`train(compile_step=True)`, `train --compile`): the same
run as the plain step, to float32's rounding."""

import dataclasses
import shutil

import pytest
import torch
from conftest import needs_data, random_pairs

from transformer_book.model import Transformer
from transformer_book.run import cli
from transformer_book.run.distributed import Processes
from transformer_book.run.loop import COMPILED_PAD_MULTIPLE, EpochBatches, train
from transformer_book.run.presets import PRESETS, model_config
from transformer_book.tokens import PAD_ID
from transformer_book.training import LabelSmoothingLoss

# No dropout: compiled code draws its random masks with a generator of its own, so with dropout the two runs
# would differ by design; without it they must agree to rounding.
PLAIN_SMOKE = dataclasses.replace(PRESETS["smoke"], dropout=0.0, epochs=1, amp="off")
# torch.compile builds C++ for a CPU
needs_compiler = pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                                    reason="torch.compile on a CPU needs a C++ compiler (g++ or clang++)")


@needs_data
@needs_compiler
def test_a_compiled_run_trains_and_scores_as_the_plain_one(tmp_path):
    plain = train(PLAIN_SMOKE, tmp_path / "plain", device="cpu", progress=False)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # only this run's graphs count
    compiled = train(PLAIN_SMOKE, tmp_path / "compiled", device="cpu", progress=False, compile_step=True)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert graphs >= 2, f"{graphs} graphs compiled: the model and the loss should each make one at least"
    steps = plain.train_state.step
    assert steps >= 5 and compiled.train_state.step == steps
    torch.testing.assert_close(torch.tensor(compiled.train_state.losses), torch.tensor(plain.train_state.losses),
                               rtol=1e-4, atol=1e-5)
    [plain_epoch], [compiled_epoch] = plain.history, compiled.history
    assert compiled_epoch["val_loss"] == pytest.approx(plain_epoch["val_loss"], rel=1e-4)
    assert (tmp_path / "compiled" / "best").is_dir() and (tmp_path / "compiled" / "last").is_dir()


@torch.no_grad()
def test_padded_batches_hold_the_same_pairs_and_give_the_same_loss():
    vocab_size, multiple = 60, COMPILED_PAD_MULTIPLE
    examples = random_pairs(300, vocab_size)
    preset = dataclasses.replace(PRESETS["smoke"], max_tokens=300)
    plain = EpochBatches(examples, preset, 0, Processes.current())
    padded = EpochBatches(examples, preset, 0, Processes.current(), pad_multiple=multiple)
    torch.manual_seed(0)
    model = Transformer(model_config(preset, vocab_size)).eval()
    loss_fn = LabelSmoothingLoss(preset.label_smoothing, ignore_index=PAD_ID)
    assert len(padded) == len(plain) > 5
    widened = 0
    for a, b in zip(plain, padded):
        for name in ("src", "tgt_in", "tgt_out"):
            short, wide = getattr(a, name), getattr(b, name)
            assert wide.size(1) % multiple == 0 and wide.size(1) - short.size(1) < multiple, name
            assert torch.equal(wide[:, : short.size(1)], short), name
            widened += wide.size(1) > short.size(1)
        # the new columns predict nothing (the decoder may read an EOS there, whose target is padding)
        assert (b.src[:, a.src.size(1):] == PAD_ID).all() and (b.tgt_out[:, a.tgt_out.size(1):] == PAD_ID).all()
        assert b.num_tokens == a.num_tokens
        losses = [loss_fn(model(x.src, x.tgt_in, x.src_mask, x.tgt_mask), x.tgt_out) for x in (a, b)]
        torch.testing.assert_close(losses[1], losses[0])
    assert widened > 0  # the padding was put to the test


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_compile_step_must_be_true_or_false(tmp_path, value):
    with pytest.raises(TypeError, match="compile_step must be True or False"):
        train("smoke", tmp_path / "run", compile_step=value)
    assert not (tmp_path / "run").exists()  # refused before the folder is made


def test_the_command_line_passes_compile_on(monkeypatch, tmp_path):
    asked = {}

    def fake_train(preset, out, **kwargs):
        asked.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(cli, "train", fake_train)
    for argv, expected in ((["train", "--preset", "smoke", "--out", str(tmp_path / "a"), "--compile"], True),
                           (["train", "--preset", "smoke", "--out", str(tmp_path / "b")], False)):
        asked.clear()
        with pytest.raises(SystemExit):
            cli.main(argv)
        assert asked["compile_step"] is expected
