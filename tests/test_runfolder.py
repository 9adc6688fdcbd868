"""The run folder and the run's record: RunRecord in checkpoint.json (old files included), the verified tokenizer,
amp passed down from the command line, the beam width from the preset, and the size of chapter 10's modules."""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch
from conftest import needs_data, read_info, write_info
from safetensors.torch import load_file, save_file

from transformer_book import data
from transformer_book.hashing import file_sha256
from transformer_book.model import Transformer
from transformer_book.run import cli, runfolder
from transformer_book.run.checkpoint import RunRecord, load_checkpoint, load_optimizer_state, save_checkpoint
from transformer_book.run.loop import train
from transformer_book.run.presets import PRESETS, choose_preset, model_config, preset_differences
from transformer_book.run.translate import Translator
from transformer_book.training import TrainState

REPO_ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
TINY = dataclasses.replace(PRESETS["smoke"], train_subset=160, epochs=1, val_bleu_sentences=8, max_tokens=400)

# checkpoint.json of `last/` as the version before RunRecord wrote it (a smoke run stopped by --max-steps 3);
# Adam's param_groups and the losses shortened.
OLD_CHECKPOINT_JSON = """{"preset": {"name": "smoke", "d_model": 32, "num_heads": 2, "num_layers": 1, "d_ff": 64,
 "dropout": 0.1, "vocab_size": 500, "max_tokens": 600, "epochs": 2, "warmup_steps": 10, "lr_factor": 2.0,
 "label_smoothing": 0.1, "max_sentence_tokens": 128, "norm_first": true, "train_subset": 400,
 "val_bleu_sentences": 20, "time_limit_minutes": null, "beam_size": 2, "average_last": 5, "seed": 0, "amp": "auto"},
 "history": [], "device": "cpu", "amp": "torch.bfloat16", "stopped": "max_steps=3",
 "train_state": {"step": 3, "epoch": 0, "batch_in_epoch": 3, "losses": [6.841833591461182, 6.440186500549316,
 6.272458553314209], "tokens_seen": 1110, "train_seconds": 0.19769534099941666, "skipped_steps": 0},
 "param_groups": [], "config": {"src_vocab_size": 500, "tgt_vocab_size": 500, "d_model": 32, "num_heads": 2,
 "num_encoder_layers": 1, "num_decoder_layers": 1, "d_ff": 64, "dropout": 0.1, "max_len": 130, "norm_first": true,
 "tie_embeddings": true, "pad_id": 0},
 "tokenizer_sha256": "05727d68b83541fdec3e3562049e56a7fe38f0ee7376cf2f69c12bd9149572d6",
 "files": {"tokenizer.json": "05727d68b83541fdec3e3562049e56a7fe38f0ee7376cf2f69c12bd9149572d6"}}"""
CHECKPOINT_KEYS = {"param_groups", "config", "tokenizer_sha256", "files", "sizes"}  # written by save_checkpoint, not the record


def test_run_record_round_trips_through_json():
    record = RunRecord(
        preset=dataclasses.asdict(TINY), device="cpu", amp="torch.float16", history=[{"epoch": 1.0, "val_bleu": 3.5}],
        train_state=TrainState(step=7, epoch=1, batch_in_epoch=2, losses=[2.5, 2.25], tokens_seen=99,
                               train_seconds=1.5, skipped_steps=1),
        scaler={"scale": 1024.0, "_growth_tracker": 3}, stopped="time limit", scored_partial=True,
    )
    text = json.dumps(record.to_json())
    assert RunRecord.from_json(json.loads(text), "run/last") == record
    bare = RunRecord(preset={"name": "x"}, device="cpu", amp="None")
    assert set(bare.to_json()) == {"preset", "history", "device", "amp", "train_state"}  # optional keys only when set
    assert RunRecord.from_json(bare.to_json(), "run/last") == bare


def test_a_checkpoint_json_of_the_previous_version_reads_as_a_record():
    old = json.loads(OLD_CHECKPOINT_JSON)
    record = RunRecord.from_json(old, "runs/old/last")
    assert "direction" not in record.preset  # written before Preset had the field; it resumes as de-en
    assert preset_differences(record.preset, PRESETS["smoke"]) == "" and record.amp == "torch.bfloat16"
    assert record.train_state == TrainState(**old["train_state"]) and record.stopped == "max_steps=3"
    assert record.scaler is None and not record.scored_partial and record.history == []
    assert record.to_json() == {k: v for k, v in old.items() if k not in CHECKPOINT_KEYS}  # the same keys back


def test_a_record_without_its_training_state_names_the_file_and_what_is_missing():
    old = json.loads(OLD_CHECKPOINT_JSON)
    del old["train_state"]
    with pytest.raises(ValueError, match=r"runs/old/last/checkpoint\.json has no \['train_state'\]"):
        RunRecord.from_json(old, "runs/old/last")


@needs_data
def test_a_run_folder_of_the_previous_version_is_refused_by_name(tmp_path):
    train(TINY, tmp_path / "old", device=CPU, progress=False, max_steps=3)
    info = read_info(tmp_path / "old" / "last")
    old = json.loads(OLD_CHECKPOINT_JSON)
    # the keys the previous version wrote, the sizes, the seal, and the CPU probe's rates (amp auto on a CPU)
    assert set(info) == set(old) | {"sizes", "amp_rates"}
    (tmp_path / "old" / "last" / "checkpoint.json").write_text(json.dumps({key: info[key] for key in old}))
    with pytest.raises(ValueError, match=r"last/checkpoint\.json has no 'record_sha256': an older version wrote it"):
        train(TINY, tmp_path / "old", device=CPU, progress=False)


@needs_data
def test_a_last_checkpoint_with_the_one_generator_the_previous_version_kept_resumes_exactly(tmp_path):
    # The previous version kept process 0's generator alone, as `rng_state`: it counts as one process's, which a run
    # in one process takes back.
    whole = train(TINY, tmp_path / "whole", device=CPU, progress=False, max_steps=6)
    train(TINY, tmp_path / "old", device=CPU, progress=False, max_steps=3)
    last = tmp_path / "old" / "last"
    tensors = load_file(last / "optimizer.safetensors")
    tensors["rng_state"] = tensors.pop("rng_states")[0].clone()
    save_file(tensors, last / "optimizer.safetensors")
    info = read_info(last)
    info["files"]["optimizer.safetensors"] = file_sha256(last / "optimizer.safetensors")
    info["sizes"]["optimizer.safetensors"] = (last / "optimizer.safetensors").stat().st_size
    write_info(last, info)
    lines = []
    resumed = train(TINY, tmp_path / "old", device=CPU, progress=False, max_steps=6, log=lines.append)
    assert resumed.train_state.step == whole.train_state.step == 6
    assert resumed.train_state.losses == whole.train_state.losses  # dropout drew the masks of the run that never stopped
    assert not any("reseeds" in line for line in lines), lines


def test_random_states_and_ranks_that_cannot_be_right_are_refused_by_name(tmp_path):
    model, path = _tiny_checkpoint(tmp_path)
    optimizer = torch.optim.Adam(model.parameters())
    for states in ({"rng_state": torch.get_rng_state()}, [torch.get_rng_state()]):
        with pytest.raises(TypeError, match="random_states must be a list holding random_state"):
            save_checkpoint(tmp_path / "last", model, optimizer, None, tmp_path / "tok.json", random_states=states)
    with pytest.raises(ValueError, match="random_states is empty"):
        save_checkpoint(tmp_path / "last", model, optimizer, None, tmp_path / "tok.json", random_states=[])
    with pytest.raises(ValueError, match=r"rank must be below world_size=2 \(ranks count from 0\); got rank=2"):
        load_optimizer_state(optimizer, path, CPU, rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size must be an int >= 1; got 0"):
        load_optimizer_state(optimizer, path, CPU, rank=0, world_size=0)
    with pytest.raises(TypeError, match="rank must be an int"):
        load_optimizer_state(optimizer, path, CPU, rank="0", world_size=1)


def _tiny_checkpoint(folder: Path) -> tuple[Transformer, Path]:
    torch.manual_seed(0)
    tokenizer = data.train_tokenizer(["ein hund läuft", "a dog runs"] * 40, vocab_size=60)
    data.save_tokenizer(tokenizer, folder / "tok.json")
    model = Transformer(model_config(PRESETS["smoke"], tokenizer.get_vocab_size())).eval()
    record = RunRecord(preset=dataclasses.asdict(PRESETS["smoke"]), device="cpu", amp="None")
    return model, save_checkpoint(folder / "ckpt", model, None, record, folder / "tok.json")


def test_the_loader_returns_the_verified_tokenizer_and_nobody_reads_it_again(tmp_path, monkeypatch):
    _, path = _tiny_checkpoint(tmp_path)
    reads = []
    real_read = runfolder.read_tokenizer
    monkeypatch.setattr(runfolder, "read_tokenizer", lambda *args: (reads.append(args), real_read(*args))[1])
    from transformer_book.run import checkpoint

    monkeypatch.setattr(checkpoint, "read_tokenizer", runfolder.read_tokenizer)

    def no_second_read(*args, **kwargs):
        raise AssertionError("tokenizer.json was read again after the loader checked it")

    monkeypatch.setattr(data, "load_tokenizer", no_second_read)
    _, saved = load_checkpoint(path)
    assert len(reads) == 1 and reads[0][1] == saved.tokenizer_sha256
    expected = data.train_tokenizer(["ein hund läuft", "a dog runs"] * 40, vocab_size=60)
    assert saved.tokenizer.encode("ein hund").ids == expected.encode("ein hund").ids
    translator = Translator.from_checkpoint(path, CPU)  # the loader's tokenizer, not another read of the file
    assert isinstance(translator.translate("ein hund", beam_size=1, max_new_tokens=3), str)
    assert len(reads) == 2  # one read per load


def test_read_tokenizer_checks_the_bytes_it_builds_from(tmp_path):
    data.save_tokenizer(data.train_tokenizer(["ein hund", "a dog"] * 40, vocab_size=40), tmp_path / "tokenizer.json")
    first = runfolder.read_tokenizer(tmp_path / "tokenizer.json")
    assert runfolder.read_tokenizer(tmp_path / "tokenizer.json", first.sha256).sha256 == first.sha256
    with pytest.raises(runfolder.ChangedDuringRead, match="not the tokenizer this model was trained with"):
        runfolder.read_tokenizer(tmp_path / "tokenizer.json", "0" * 64)
    with pytest.raises(FileNotFoundError, match="copy the checkpoint folder whole"):
        runfolder.read_tokenizer(tmp_path / "missing.json")


def test_snapshots_are_named_by_step_and_pruned_to_the_last_ones(tmp_path):
    for step in (5, 40, 300, 2000):
        runfolder.snapshot_path(tmp_path, step).mkdir(parents=True)
    runfolder.prune_snapshots(tmp_path, keep=3)
    assert [p.name for p in runfolder.last_snapshots(tmp_path / "snapshots", 2)] == ["step-000300", "step-002000"]
    assert len(runfolder.last_snapshots(tmp_path / "snapshots", 10)) == 3
    assert runfolder.last_snapshots(tmp_path / "snapshots", 0) == []


def test_amp_is_an_argument_and_the_command_line_writes_no_environment(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # train makes its --out folder, "unused"
    monkeypatch.delenv("TRANSFORMER_BOOK_AMP", raising=False)
    assert choose_preset("cpu", amp="off").amp == "off"
    with pytest.raises(ValueError, match="amp must be one of"):
        choose_preset("cpu", amp="fp8")
    monkeypatch.setenv("TRANSFORMER_BOOK_AMP", "bfloat16")
    assert choose_preset("cpu", amp="off").amp == "off"  # the argument wins over the environment's default
    monkeypatch.delenv("TRANSFORMER_BOOK_AMP")
    seen = {}

    def fake_train(preset, out, **kwargs):
        seen.update(kwargs, preset=preset)
        return RunRecord(preset={}, device="cpu", amp="None")

    monkeypatch.setattr(cli, "train", fake_train)
    before = dict(os.environ)
    assert cli.main(["train", "--preset", "smoke", "--out", "unused", "--amp", "off"]) == 0
    assert seen["preset"].amp == "off" and seen["preset"].direction == "de-en" and dict(os.environ) == before
    assert cli.main(["train", "--preset", "smoke", "--out", "unused", "--direction", "en-de"]) == 0
    assert seen["preset"] == dataclasses.replace(PRESETS["smoke"], direction="en-de")


def test_the_command_line_decodes_with_the_presets_beam_unless_told(tmp_path, monkeypatch, capsys):
    _, path = _tiny_checkpoint(tmp_path)
    beams = []
    real = Translator.translate
    monkeypatch.setattr(Translator, "translate", lambda self, s, beam_size=4, *a, **k: (
        beams.append(beam_size), real(self, s, 1, 3))[1])
    assert cli.main(["translate", "--checkpoint", str(path), "ein hund"]) == 0
    assert cli.main(["translate", "--checkpoint", str(path), "--beam-size", "3", "ein hund"]) == 0
    assert beams == [PRESETS["smoke"].beam_size, 3]
    without = copy.deepcopy(read_info(path))
    del without["preset"], without["train_state"]  # a checkpoint saved by hand records no preset
    write_info(path, without)
    assert cli.main(["translate", "--checkpoint", str(path), "ein hund"]) == 0
    assert beams[-1] == PRESETS["cpu"].beam_size


def test_train_reads_as_named_steps_of_at_most_60_lines():
    tree = ast.parse((REPO_ROOT / "src" / "transformer_book" / "run" / "loop.py").read_text(encoding="utf-8"))
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    for name in ("train", "prepare_data", "build_or_resume", "train_epochs", "evaluate_and_save", "finish"):
        assert functions[name].end_lineno - functions[name].lineno + 1 <= 60, name


def test_an_epochs_batches_are_made_lazily_and_equal_chapter_9s():
    # Resume depends on it: the lazy batches of an epoch are batch_by_tokens's, in order, tensor for tensor.
    import random

    from transformer_book.run.distributed import Processes
    from transformer_book.run.loop import EpochBatches

    rng = random.Random(0)
    examples = [([rng.randrange(3, 50) for _ in range(rng.randrange(1, 20))],
                 [1] + [rng.randrange(3, 50) for _ in range(rng.randrange(1, 20))] + [2]) for _ in range(300)]
    preset = PRESETS["smoke"]
    for epoch in (0, 1, 5):
        lazy = EpochBatches(examples, preset, epoch, Processes.current())
        eager = data.batch_by_tokens(examples, preset.max_tokens, shuffle=True, seed=preset.seed, epoch=epoch)
        assert len(lazy) == len(eager)
        assert [b.num_tokens for b in lazy[1:4]] == [b.num_tokens for b in eager[1:4]]
        for made, expected in zip(lazy, eager, strict=True):
            assert made.num_tokens == expected.num_tokens
            for name in ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask"):
                assert torch.equal(getattr(made, name), getattr(expected, name)), (epoch, name)


def test_a_log_that_is_not_a_function_is_refused_before_anything_is_made(tmp_path):
    # before: train(log='print') prepared the data and built the model, then failed at the first line it logged
    with pytest.raises(TypeError, match=r"log must be a function that receives each line, such as print "
                                        r"\(pass print itself, not its name\); got 'print' of type str"):
        train("smoke", tmp_path / "run", log="print")
    assert not (tmp_path / "run").exists()
