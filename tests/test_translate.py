"""Chapter 10: presets, checkpoints (atomic, resumable), the Translator and the command line."""
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import needs_data, read_info, write_info

from transformer_book import data
from transformer_book.decoding import beam_search
from transformer_book.model import Transformer
from transformer_book.run import checkpoint, cli
from transformer_book.run import loop as run_module
from transformer_book.run.checkpoint import RunRecord, average_checkpoints, load_checkpoint, save_checkpoint
from transformer_book.run.cli import main as cli_main
from transformer_book.run.loop import train
from transformer_book.run.precision import pick_amp_dtype
from transformer_book.run.presets import (
    PRESETS,
    choose_preset,
    in_direction,
    model_config,
    preset_differences,
)
from transformer_book.run.translate import Translator, attention_weights, evaluate
from transformer_book.tokens import EOS_ID

CPU = torch.device("cpu")
TINY = dataclasses.replace(PRESETS["smoke"], train_subset=160, epochs=2, val_bleu_sentences=8, max_tokens=400)


def test_choose_preset_reads_the_environment(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_BOOK_PRESET", "smoke")
    assert choose_preset().name == "smoke"
    monkeypatch.delenv("TRANSFORMER_BOOK_PRESET")
    assert choose_preset(device=CPU).name == "cpu"
    assert choose_preset(device=torch.device("cuda")).name == "gpu"
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        choose_preset("huge")


@pytest.mark.parametrize("float32, bfloat16, expected", [
    (61.0, 48.0, None),  # an Intel Xeon with the AVX-512 BF16 flag and no AMX: bfloat16 measured slower
    (100.0, 110.0, None),  # a little faster is not enough: autocast's casts and float32 reductions eat it
    (100.0, 900.0, torch.bfloat16),  # AMX
    (200.0, 914.0, torch.bfloat16),  # Zen 5's AVX-512 BF16
])
def test_amp_auto_on_a_cpu_picks_what_the_probe_measured_faster(monkeypatch, float32, bfloat16, expected):
    # The flags are not asked: a CPU with the bfloat16 flag may still compute it more slowly than float32.
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert pick_amp_dtype(CPU, rates={"float32": float32, "bfloat16": bfloat16}) == expected


def test_the_cpu_probe_is_short_measures_both_and_leaves_the_random_state_alone():
    from transformer_book.run.precision import cpu_matmul_rates

    before = torch.get_rng_state()
    start = time.perf_counter()
    rates = cpu_matmul_rates(256, 1024)
    assert time.perf_counter() - start < 5.0  # well under a second unloaded; 2 shared cores here
    assert set(rates) == {"float32", "bfloat16"} and all(rate > 0 for rate in rates.values())
    assert torch.equal(torch.get_rng_state(), before)


def test_amp_dtype_rules():
    assert pick_amp_dtype(CPU, "off") is None
    assert pick_amp_dtype(CPU, "bfloat16") == torch.bfloat16
    assert pick_amp_dtype(CPU, "float16") == torch.float16
    with pytest.raises(ValueError, match="amp must be 'auto'"):
        pick_amp_dtype(CPU, "fp16")


@pytest.mark.parametrize("native_bf16, expected", [(True, torch.bfloat16), (False, torch.float16)])
def test_amp_dtype_on_a_gpu_ignores_emulated_bfloat16(monkeypatch, native_bf16, expected):
    # A T4 emulates bfloat16 (slowly): torch.cuda.is_bf16_supported() says True unless emulation is excluded.
    def is_bf16_supported(including_emulation=True):
        return native_bf16 or including_emulation

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    assert pick_amp_dtype(torch.device("cuda")) == expected


NOTE = RunRecord(preset={"name": "test"}, device="cpu", amp="None")


@pytest.fixture()
def small_checkpoint(tmp_path):
    torch.manual_seed(0)
    tokenizer = data.train_tokenizer(["ein hund läuft", "a dog runs"] * 40, vocab_size=60)
    data.save_tokenizer(tokenizer, tmp_path / "tok.json")
    model = Transformer(model_config(PRESETS["smoke"], tokenizer.get_vocab_size())).eval()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.tensor([[5, 6, 2]]), torch.tensor([[1, 5]])).sum().backward()
    optimizer.step()
    path = save_checkpoint(tmp_path / "ckpt", model, optimizer, NOTE, tmp_path / "tok.json")
    return model, path


def test_checkpoint_round_trip_gives_identical_logits(small_checkpoint):
    model, path = small_checkpoint
    reloaded, info = load_checkpoint(path)
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    torch.testing.assert_close(reloaded.eval()(src, tgt), model(src, tgt), rtol=0, atol=0)
    assert info.record == NOTE and not (path.parent / "ckpt.tmp").exists()


def test_checkpoint_from_another_config_is_refused(small_checkpoint):
    _, path = small_checkpoint
    info = read_info(path)
    info["config"]["d_ff"] = 128
    write_info(path, info)  # sealed again, as a deliberate edit would be
    with pytest.raises(ValueError, match="do not fit the configuration"):
        load_checkpoint(path)


def test_checkpoint_with_another_tokenizer_is_refused(small_checkpoint):
    _, path = small_checkpoint
    (path / "tokenizer.json").write_text((path / "tokenizer.json").read_text().replace("hund", "katze"))
    with pytest.raises(ValueError, match="not the tokenizer this model was trained with"):
        load_checkpoint(path)


def test_missing_checkpoint_says_what_to_pass(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nothing")


def test_checkpoint_json_without_its_keys_or_cut_short_is_refused(small_checkpoint):
    _, path = small_checkpoint
    info_file = path / "checkpoint.json"
    text = info_file.read_text()
    info_file.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match="not valid JSON"):
        load_checkpoint(path)
    info_file.write_text(text)
    info = read_info(path)
    del info["config"]
    write_info(path, info)
    with pytest.raises(ValueError, match=r"has no \['config', 'tokenizer_sha256'\]"):
        load_checkpoint(path)


def test_save_that_fails_half_way_keeps_the_previous_checkpoint(small_checkpoint, monkeypatch):
    model, path = small_checkpoint
    before = (path / "model.safetensors").read_bytes()
    calls = []

    def save_file_then_crash(tensors, filename):
        calls.append(filename)
        if len(calls) == 2:  # the optimizer file: the process "dies" after the weights were written
            raise OSError("disk full")
        return real_save_file(tensors, filename)

    real_save_file = checkpoint.save_file
    monkeypatch.setattr(checkpoint, "save_file", save_file_then_crash)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the new checkpoint would hold other weights
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, torch.optim.Adam(model.parameters()), None, path / "tokenizer.json")
    assert (path / "model.safetensors").read_bytes() == before
    reloaded, info = load_checkpoint(path)
    assert info.record == NOTE


def test_translator_checks_its_arguments_and_moves_the_model(small_checkpoint):
    _, path = small_checkpoint
    translator = Translator.from_checkpoint(path, "cpu")
    assert next(translator.model.parameters()).device == CPU
    with pytest.raises(ValueError, match="beam_size must be an int from 1 to"):
        translator.translate("ein hund", beam_size=0)
    with pytest.raises(ValueError, match="max_new_tokens must be between 1 and"):
        translator.translate("ein hund", max_new_tokens=10_000)
    assert isinstance(translator.translate("ein hund", beam_size=2, max_new_tokens=3), str)
    with pytest.raises(TypeError, match="max_new_tokens must be an int; got 2.5"):
        translator.translate("ein hund", beam_size=1, max_new_tokens=2.5)
    model = translator.model
    with pytest.raises(ValueError, match="batch_size must be an int >= 1; got 0"):
        Translator(model, translator.tokenizer, batch_size=0)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        Translator(model, translator.tokenizer, batch_size=8.0)


def test_evaluate_help_shows_the_default_split(capsys):
    with pytest.raises(SystemExit):
        cli_main(["evaluate", "--help"])
    assert "(default: test2016)" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("beam_size", [1, 2])
def test_a_sentence_gets_the_same_length_limit_whatever_its_batch_neighbours(small_checkpoint, beam_size):
    _, path = small_checkpoint
    translator = Translator.from_checkpoint(path, "cpu")

    def never_eos(module, inputs, logits):  # a model that never ends: every output runs to its limit
        return logits.index_fill(-1, torch.tensor([EOS_ID]), float("-inf"))

    translator.model.generator.register_forward_hook(never_eos)
    short, long = "ein hund", " ".join(["ein hund läuft"] * 12)
    alone = translator.translate(short, beam_size=beam_size)
    beside_long = translator.translate([short, long], beam_size=beam_size)
    own_limit, long_limit = len(translator._encode(short)) + 50, len(translator._encode(long)) + 50
    assert alone == translator.translate(short, beam_size=beam_size, max_new_tokens=own_limit)
    assert alone != translator.translate(short, beam_size=beam_size, max_new_tokens=long_limit)  # the limit matters
    assert beside_long[0] == alone


def test_attention_weights_restore_the_training_mode(small_checkpoint):
    model, _ = small_checkpoint
    model.train()
    src, tgt = torch.tensor([[5, 6, 2]]), torch.tensor([[1, 5]])
    weights = attention_weights(model, src, tgt, "decoder.layers.0.cross_attn")
    assert model.training
    assert weights.shape == (1, model.config.num_heads, 2, 3)
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, model.config.num_heads, 2))


def test_interrupted_save_falls_back_to_the_old_checkpoint(small_checkpoint):
    model, path = small_checkpoint
    path.rename(path.with_name("ckpt.old"))  # as if the process died between the two renames
    reloaded, _ = load_checkpoint(path)
    src = torch.tensor([[5, 6, 2]])
    torch.testing.assert_close(reloaded.eval()(src, src), model(src, src), rtol=0, atol=0)


@needs_data
def test_resume_after_interruption_gives_the_same_final_loss(tmp_path, capsys):
    whole = train(TINY, tmp_path / "whole", device=CPU, progress=False)
    assert capsys.readouterr().out == "", "the package prints nothing unless given log="
    steps = whole.train_state.step
    assert steps > 6
    first = train(TINY, tmp_path / "split", device=CPU, progress=False, log=lambda *_: None, max_steps=steps // 2 + 1)
    assert first.train_state.step == steps // 2 + 1
    resumed = train(TINY, tmp_path / "split", device=CPU, progress=False, log=lambda *_: None)
    assert resumed.train_state.step == steps
    assert resumed.train_state.losses == whole.train_state.losses  # bit for bit


@needs_data
def test_float16_resume_restores_the_gradient_scaler(tmp_path):
    fp16 = dataclasses.replace(TINY, amp="float16")
    whole = train(fp16, tmp_path / "whole", device=CPU, progress=False)
    steps = whole.train_state.step
    train(fp16, tmp_path / "split", device=CPU, progress=False, max_steps=steps // 2)
    saved = json.loads((tmp_path / "split" / "last" / "checkpoint.json").read_text())
    assert saved["scaler"]["scale"] > 0 and "_growth_tracker" in saved["scaler"]
    resumed = train(fp16, tmp_path / "split", device=CPU, progress=False)
    assert resumed.scaler == whole.scaler
    assert resumed.train_state.losses == whole.train_state.losses


@needs_data
def test_resume_with_another_preset_is_refused(tmp_path):
    train(TINY, tmp_path / "run", device=CPU, progress=False, log=lambda *_: None, max_steps=2)
    other = dataclasses.replace(TINY, dropout=0.2)
    with pytest.raises(ValueError, match="other settings"):
        train(other, tmp_path / "run", device=CPU, progress=False, log=lambda *_: None)


@needs_data
def test_train_takes_the_device_as_a_string(tmp_path):
    run = train(TINY, tmp_path / "run", device="cpu", progress=False, log=lambda *_: None, max_steps=1)
    assert run.train_state.step == 1


@needs_data
def test_gpu_code_path_with_float16_and_a_scaler_runs_on_cpu(tmp_path):
    # The gpu preset's widths (d_model 512, 8 heads, d_ff 2048) on a few pairs, with float16 autocast as an
    # older GPU would use, so the gradient-scaler branch of fit runs. 2 + 2 layers instead of 6 + 6: a CPU has no
    # fast float16 matrix product (the backward pass took 23 s an update at 6 + 6), and depth adds no branch.
    gpu = dataclasses.replace(PRESETS["gpu"], amp="float16", train_subset=64, max_tokens=300, vocab_size=400,
                              num_layers=2)
    run = train(gpu, tmp_path / "gpu", device=CPU, progress=False, log=lambda *_: None, max_steps=2)
    assert run.amp == "torch.float16" and run.train_state.step == 2
    assert all(torch.isfinite(torch.tensor(run.train_state.losses)))


@needs_data
def test_best_holds_weights_only_and_last_everything_to_resume(tmp_path):
    train(TINY, tmp_path / "run", device=CPU, progress=False)
    best, last = tmp_path / "run" / "best", tmp_path / "run" / "last"
    assert sorted(f.name for f in best.iterdir()) == ["checkpoint.json", "model.safetensors", "tokenizer.json"]
    assert (last / "optimizer.safetensors").is_file()
    assert "train_state" in json.loads((last / "checkpoint.json").read_text())


@needs_data
def test_command_line_trains_with_epoch_lines_and_resumes(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src"), "TRANSFORMER_BOOK_PRESET": "smoke"}
    command = [sys.executable, "-m", "transformer_book", "train", "--preset", "smoke", "--out", str(tmp_path / "run")]
    first = subprocess.run([*command, "--max-steps", "3"], capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "resuming" in second.stdout and "at step 3" in second.stdout
    epoch_lines = [line for line in second.stdout.splitlines() if line.startswith("epoch")]
    assert len(epoch_lines) == PRESETS["smoke"].epochs and "val BLEU" in epoch_lines[0]
    assert "best validation BLEU" in second.stdout


@needs_data
def test_translator_and_command_line(tmp_path):
    train(TINY, tmp_path / "run", device=CPU, progress=False, log=lambda *_: None)
    translator = Translator.from_checkpoint(tmp_path / "run" / "best", CPU)
    outputs = translator.translate(["Ein Mann fährt Fahrrad.", "", "Zwei Hunde."], beam_size=2)
    assert len(outputs) == 3 and outputs[1] == "" and all(isinstance(o, str) for o in outputs)
    assert translator.translate([]) == []
    with pytest.warns(UserWarning, match="truncated"):
        translator.translate("Hund " * 400, beam_size=1)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    result = subprocess.run(
        [sys.executable, "-m", "transformer_book", "translate", "--checkpoint", str(tmp_path / "run" / "best"),
         "--beam-size", "1", "Ein Hund."],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )
    assert len(result.stdout.strip().splitlines()) == 1


@needs_data
def test_copy_to_keeps_the_run_and_a_new_session_resumes_from_it(tmp_path, monkeypatch):
    from transformer_book.run import runfolder

    copies = []
    real_copy = runfolder.copy_run
    monkeypatch.setattr(runfolder, "copy_run", lambda *args: (copies.append(args), real_copy(*args)))
    lines = []
    first = train(TINY, tmp_path / "session1", device=CPU, progress=False, max_steps=3, copy_to=tmp_path / "drive")
    assert first.train_state.step == 3
    assert len(copies) == 2  # when the run stopped, and at its end; none between (every 20 minutes)
    assert sorted(p.name for p in (tmp_path / "drive").iterdir()) == ["best", "last", "tokenizer.json"]
    # A new session: the run's own folder is gone, the copy is not.
    resumed = train(TINY, tmp_path / "session2", device=CPU, progress=False, log=lines.append,
                    copy_to=tmp_path / "drive")
    assert any("copied the run saved in" in line for line in lines)
    assert any("resuming" in line and "at step 3" in line for line in lines)
    whole = train(TINY, tmp_path / "whole", device=CPU, progress=False)
    assert resumed.train_state.losses == whole.train_state.losses
    saved = json.loads((tmp_path / "drive" / "last" / "checkpoint.json").read_text())
    assert saved["train_state"]["step"] == whole.train_state.step


def test_copy_run_replaces_each_part_and_recovers_an_interrupted_save(tmp_path):
    from transformer_book.run.runfolder import copy_run

    source, target = tmp_path / "run", tmp_path / "copy"
    (source / "last.old").mkdir(parents=True)  # a save interrupted between its two renames
    (source / "last.old" / "checkpoint.json").write_text("{}")
    (source / "tokenizer.json").write_text("tok")
    copy_run(source, target)
    assert (target / "last" / "checkpoint.json").read_text() == "{}"
    (source / "last.old").rename(source / "last")
    (source / "last" / "checkpoint.json").write_text('{"step": 2}')
    copy_run(source, target)
    assert (target / "last" / "checkpoint.json").read_text() == '{"step": 2}'
    assert sorted(p.name for p in target.iterdir()) == ["last", "tokenizer.json"]  # no .tmp or .old left


def test_the_amp_variable_replaces_the_presets_arithmetic(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_BOOK_AMP", "off")
    preset = choose_preset("cpu")
    assert preset.amp == "off" and dataclasses.replace(preset, amp="auto") == PRESETS["cpu"]
    assert pick_amp_dtype(CPU, preset.amp, rates={"float32": 1.0, "bfloat16": 9.0}) is None  # even if faster
    monkeypatch.setenv("TRANSFORMER_BOOK_AMP", "fp8")
    with pytest.raises(ValueError, match="TRANSFORMER_BOOK_AMP must be one of"):
        choose_preset("cpu")
    monkeypatch.delenv("TRANSFORMER_BOOK_AMP")
    assert choose_preset("cpu") is PRESETS["cpu"]


def test_average_checkpoints_is_the_mean_of_every_weight(small_checkpoint, tmp_path):
    model, path = small_checkpoint
    other = Transformer(model.config)  # another initialisation, same configuration
    other_path = save_checkpoint(tmp_path / "other", other, None, None, path / "tokenizer.json")
    averaged, info = average_checkpoints([path, other_path])
    for name, weight in averaged.state_dict().items():
        torch.testing.assert_close(weight, (model.state_dict()[name] + other.state_dict()[name]) / 2)
    assert info.averaged == (str(path), str(other_path))
    alone, _ = average_checkpoints([path])
    assert all(torch.equal(w, model.state_dict()[n]) for n, w in alone.state_dict().items())
    with pytest.raises(ValueError, match="at least one checkpoint folder"):
        average_checkpoints([])


def test_average_checkpoints_refuses_checkpoints_of_different_runs(small_checkpoint, tmp_path):
    model, path = small_checkpoint
    wider = Transformer(dataclasses.replace(model.config, d_ff=model.config.d_ff * 2))
    wider_path = save_checkpoint(tmp_path / "wider", wider, None, None, path / "tokenizer.json")
    with pytest.raises(ValueError, match="another configuration or tokenizer"):
        average_checkpoints([path, wider_path])


def test_length_penalty_reaches_beam_search(small_checkpoint, monkeypatch):
    model, path = small_checkpoint
    translator = Translator.from_checkpoint(path, CPU)
    seen = []

    def spy(*args, **kwargs):
        seen.append(args[-1])  # beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty)
        return beam_search(*args, **kwargs)

    monkeypatch.setattr("transformer_book.run.translate.beam_search", spy)
    translator.translate(["ein hund läuft"], beam_size=2, length_penalty=1.4)
    assert seen == [1.4]


@needs_data
def test_evaluate_reports_the_brevity_penalty_of_its_length_ratio(small_checkpoint):
    model, path = small_checkpoint
    result = evaluate(Translator.from_checkpoint(path, CPU), data.load_multi30k("val")[:5], beam_size=1)
    ratio = result["length_ratio"]
    expected = 1.0 if ratio >= 1 else math.exp(1 - 1 / ratio) if ratio > 0 else 0.0
    assert result["brevity_penalty"] == pytest.approx(expected, abs=1e-6)


@needs_data
def test_train_keeps_the_last_snapshots_and_never_lets_last_get_ahead_of_best(tmp_path, monkeypatch):
    saved = []  # (kind, step, the best epoch's step in the record saved)
    original = run_module.save_checkpoint

    def recording_save(path, model, optimizer, record, *args):
        history = record.history if record is not None else []
        best_step = max(history, key=lambda r: (r["val_bleu"], r["step"]))["step"] if history else 0
        kind = "snapshot" if "snapshots" in str(path) else Path(path).name
        saved.append((kind, record.train_state.step, best_step))
        return original(path, model, optimizer, record, *args)

    monkeypatch.setattr(run_module, "save_checkpoint", recording_save)
    preset = dataclasses.replace(TINY, epochs=3, average_last=2)
    train(preset, tmp_path / "run", device=CPU, progress=False)
    snapshots = sorted(p.name for p in (tmp_path / "run" / "snapshots").iterdir())
    last_step = json.loads((tmp_path / "run" / "last" / "checkpoint.json").read_text())["train_state"]["step"]
    assert len(snapshots) == 2 and snapshots[-1] == f"step-{last_step:06d}"
    # Only the epochs that will be averaged get a snapshot. `last/` is written at the first epoch's last update,
    # before the first `best/` (a folder with `best/` and no `last/` is refused as damaged), and at the end.
    kinds = [kind for kind, _, _ in saved]
    assert kinds.count("snapshot") == 2
    assert kinds.count("last") == 2 and kinds[0] == "last" and kinds[-1] == "last" and saved[0][2] == 0
    # A kill between two saves must never leave `best/` or a snapshot behind what `last/` records: when `last/` is
    # written, the best epoch it records is already in `best/`, and every snapshot up to its step is on disk.
    for i, (kind, step, best_step) in enumerate(saved):
        if kind == "last" and i > 0:  # the first records no scored epoch yet
            assert any(k == "best" and s == best_step for k, s, _ in saved[:i]), saved
            epochs_done = [s for k, s, _ in saved[:i] if k == "snapshot"]
            assert len(epochs_done) == 2 and max(epochs_done) <= step, saved


@needs_data
def test_last_is_saved_by_steps_and_a_finished_run_says_it_is_complete(tmp_path, monkeypatch):
    monkeypatch.setattr(run_module, "SAVE_EVERY_STEPS", 3)
    saved_steps = []
    original = run_module.save_checkpoint

    def recording_save(path, model, optimizer, record, *args):
        if Path(path).name == "last":
            saved_steps.append(record.train_state.step)
        return original(path, model, optimizer, record, *args)

    monkeypatch.setattr(run_module, "save_checkpoint", recording_save)
    record = train(TINY, tmp_path / "run", device=CPU, progress=False)
    total = record.train_state.step
    # a save at the last update comes before that epoch is counted and scored: the end saves again
    assert saved_steps == [*range(3, total + 1, 3), total], saved_steps
    assert all(r["save_seconds"] > 0 for r in record.history)
    lines, saves = [], len(saved_steps)
    again = train(TINY, tmp_path / "run", device=CPU, progress=False, log=lines.append)
    assert again.train_state.step == total and len(saved_steps) == saves
    assert any("is complete" in line and "nothing left to train" in line for line in lines), lines


@needs_data
def test_a_periodic_save_at_the_last_update_still_leaves_a_complete_run(tmp_path, monkeypatch):
    total = train(TINY, tmp_path / "whole", device=CPU, progress=False).train_state.step
    # before: that save was taken for the final one, and `last/` held the last epoch as not yet finished
    monkeypatch.setattr(run_module, "SAVE_EVERY_STEPS", total)
    train(TINY, tmp_path / "run", device=CPU, progress=False)
    lines = []
    again = train(TINY, tmp_path / "run", device=CPU, progress=False, log=lines.append)
    assert any("is complete" in line for line in lines), lines
    assert len(again.history) == TINY.epochs  # no epoch scored twice


@needs_data
def test_command_line_translates_and_evaluates_the_average_of_the_last_snapshots(tmp_path, capsys):
    train(TINY, tmp_path / "run", device=CPU, progress=False)
    snapshots = tmp_path / "run" / "snapshots"
    assert cli_main(["evaluate", "--checkpoint", str(snapshots), "--average", "2", "--split", "val",
                     "--beam-size", "1"]) == 0
    assert capsys.readouterr().out.startswith("BLEU ")
    assert cli_main(["translate", "--checkpoint", str(snapshots), "--average", "2", "Ein Hund."]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 1
    assert cli_main(["translate", "--checkpoint", str(tmp_path / "run" / "best"), "--average", "2", "Ein Hund."]) == 2
    assert "holds no snapshots" in capsys.readouterr().err


def test_a_direction_turns_multi30ks_pairs_and_runs_from_before_the_field_still_resume():
    pairs = [("Ein Hund.", "A dog.")]
    assert in_direction(pairs, "de-en") == pairs
    assert in_direction(pairs, "en-de") == [("A dog.", "Ein Hund.")]
    with pytest.raises(ValueError, match="direction must be one of"):
        in_direction(pairs, "de-fr")
    with pytest.raises(ValueError, match="direction must be one of"):
        choose_preset("cpu", direction="english")
    recorded = dataclasses.asdict(PRESETS["cpu"])
    del recorded["direction"]  # a run written before Preset had the field
    assert preset_differences(recorded, PRESETS["cpu"]) == ""
    en_de = choose_preset("cpu", direction="en-de")
    assert preset_differences(recorded, en_de) == "direction 'de-en' there, 'en-de' asked"
    assert preset_differences({**recorded, "epochs": 3}, en_de).startswith("epochs 3 there, 15 asked, direction")


@needs_data
def test_a_run_trained_en_de_reads_english_and_refuses_to_resume_the_other_way(tmp_path, monkeypatch, capsys):
    en_de = dataclasses.replace(TINY, direction="en-de")
    train(en_de, tmp_path / "run", device=CPU, progress=False, max_steps=2)
    corpus = run_module.prepare_data(en_de, tmp_path / "run", run_module.Processes.current())
    assert corpus.val_pairs[:3] == [(en, de) for de, en in data.load_multi30k("val")[:3]]
    assert Translator.from_checkpoint(tmp_path / "run" / "last", CPU).direction == "en-de"
    with pytest.raises(ValueError, match="direction 'en-de' there, 'de-en' asked"):
        train(TINY, tmp_path / "run", device=CPU, progress=False)
    scored = []
    monkeypatch.setattr(cli, "evaluate", lambda translator, pairs, *args: scored.append(pairs) or {
        "bleu": 0.0, "bleu_lowercase": 0.0, "brevity_penalty": 1.0, "signature": "-"})
    assert cli_main(["evaluate", "--checkpoint", str(tmp_path / "run" / "last"), "--split", "val"]) == 0
    assert scored[0][:3] == corpus.val_pairs[:3]  # English sources, German references


def test_a_translator_of_the_wrong_objects_says_how_to_load_one(small_checkpoint):
    # The package review: Translator("m", tokenizer) failed with "'str' object has no attribute 'parameters'".
    model, path = small_checkpoint
    tokenizer = Translator.from_checkpoint(path, device="cpu").tokenizer
    for args in (("runs/multi30k/best", tokenizer), (model, "tok.json")):
        with pytest.raises(TypeError, match=r"must be a Transformer and a tokenizers.Tokenizer .*"
                                            r"Translator.from_checkpoint\(path\)"):
            Translator(*args)


@pytest.mark.parametrize("max_steps, error", [(0, ValueError), (-1, ValueError), (2.5, TypeError)])
def test_train_refuses_a_max_steps_that_is_not_a_positive_int_before_touching_its_folder(tmp_path, max_steps, error):
    # The package review: train("smoke", out, max_steps=0) trained one update and wrote a run folder.
    with pytest.raises(error, match="max_steps must be an int"):
        train("smoke", tmp_path / "run", device="cpu", max_steps=max_steps)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("change", [{"direction": "en-de"}, {"amp": "off"}, {"seed": 1}])
def test_average_checkpoints_refuses_runs_of_the_same_shape_but_another_preset(tmp_path, change):
    # the joint tokenizer and the model's shape are the same for de-en and en-de, for --amp off and on: only the
    # recorded preset tells the runs apart
    tokenizer = data.train_tokenizer(["ein hund läuft", "a dog runs"] * 40, vocab_size=60)
    data.save_tokenizer(tokenizer, tmp_path / "tok.json")
    model = Transformer(model_config(PRESETS["smoke"], tokenizer.get_vocab_size()))
    preset = dataclasses.asdict(PRESETS["smoke"])
    paths = [save_checkpoint(tmp_path / name, model, None, RunRecord(preset=p, device="cpu", amp="None"),
                             tmp_path / "tok.json") for name, p in (("a", preset), ("b", preset | change))]
    average_checkpoints(paths[:1] + paths[:1])  # the same run twice: fine
    with pytest.raises(ValueError, match=f"presets differ in {next(iter(change))}"):
        average_checkpoints(paths)
