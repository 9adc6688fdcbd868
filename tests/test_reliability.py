"""Nothing lost, nothing silent: checkpoints under damage, concurrent readers and a second trainer, and the
command line's errors (issue: faults and bad input)."""

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from conftest import needs_data, read_info, write_info

from transformer_book import data
from transformer_book.model import Transformer
from transformer_book.run.checkpoint import load_checkpoint, save_checkpoint
from transformer_book.run.loop import train
from transformer_book.run.presets import PRESETS, model_config
from transformer_book.run.translate import Translator

REPO_ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
TINY = dataclasses.replace(PRESETS["smoke"], train_subset=160, epochs=1, val_bleu_sentences=8, max_tokens=400)


def small_model(seed: int, vocab_size: int) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(model_config(PRESETS["smoke"], vocab_size)).eval()


@pytest.fixture()
def saved(tmp_path):
    tokenizer = data.train_tokenizer(["ein hund läuft", "a dog runs"] * 40, vocab_size=60)
    data.save_tokenizer(tokenizer, tmp_path / "tok.json")
    model = small_model(0, tokenizer.get_vocab_size())
    path = save_checkpoint(tmp_path / "ckpt", model, None, None, tmp_path / "tok.json")
    return model, path, tmp_path / "tok.json"


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "transformer_book", *args], input=stdin, capture_output=True,
                          env=env, timeout=300)


def test_a_flipped_byte_in_the_weights_is_refused_with_the_file_named(saved):
    _, path, _ = saved
    weights = bytearray((path / "model.safetensors").read_bytes())
    weights[-1] ^= 0xFF
    (path / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(ValueError, match=r"model\.safetensors is not the file its checkpoint\.json records"):
        load_checkpoint(path)


def test_garbage_weights_give_an_error_naming_the_file(saved):
    _, path, _ = saved
    garbage = b"not a safetensors file".ljust((path / "model.safetensors").stat().st_size, b".")
    (path / "model.safetensors").write_bytes(garbage)
    info = read_info(path)
    info["files"]["model.safetensors"] = hashlib.sha256(garbage).hexdigest()
    info["sizes"]["model.safetensors"] = len(garbage)
    write_info(path, info)  # the garbage recorded as the weights: the parser itself must refuse it
    with pytest.raises(ValueError, match=r"model\.safetensors is not a readable safetensors file"):
        load_checkpoint(path)


def test_a_folder_left_only_as_old_still_translates(saved):
    _, path, _ = saved
    path.rename(path.with_name("ckpt.old"))  # a save interrupted between its two renames
    translator = Translator.from_checkpoint(path, CPU)
    assert isinstance(translator.translate("ein hund", beam_size=1, max_new_tokens=3), str)


def test_saved_files_take_the_modes_the_umask_gives(saved):
    _, path, _ = saved
    mask = os.umask(0)
    os.umask(mask)
    assert {f.stat().st_mode & 0o777 for f in path.iterdir()} == {0o666 & ~mask}
    assert path.stat().st_mode & 0o777 == 0o777 & ~mask


def test_a_reader_during_saves_never_sees_a_torn_checkpoint(saved):
    first, path, tokenizer_file = saved
    vocab = json.loads((path / "checkpoint.json").read_text())["config"]["src_vocab_size"]
    models = [small_model(seed, vocab) for seed in (1, 2)]
    probe = torch.tensor([[5, 6, 2]])
    expected = [m(probe, probe) for m in (first, *models)]  # whatever a load returns must be one of these
    stop, saves = threading.Event(), [0]

    def keep_saving():
        while not stop.is_set():
            save_checkpoint(path, models[saves[0] % 2], None, None, tokenizer_file)
            saves[0] += 1
            stop.wait(0.01)  # a training run saves every few minutes; here a hundred times a second

    writer = threading.Thread(target=keep_saving)
    writer.start()
    torn = loads = 0
    try:
        while loads < 150:
            model, _ = load_checkpoint(path)
            logits = model.eval()(probe, probe)
            torn += not any(torch.equal(logits, e) for e in expected)
            loads += 1
    finally:
        stop.set()
        writer.join()
    assert saves[0] > 10, "the writer should have replaced the checkpoint many times during the reads"
    assert torn == 0


def test_a_second_training_into_a_held_folder_fails_at_once(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "keep.txt").write_text("untouched")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"f = open({str(run / '.lock')!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX)\n"
         "f.seek(0); f.truncate(); f.write(str(os.getpid())); f.flush(); print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RuntimeError, match=rf"another process \(PID {holder.pid}\) is training in"):
            train(TINY, run, device=CPU, progress=False)
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in run.iterdir()) == [".lock", "keep.txt"]


@needs_data
def test_resume_with_another_tokenizer_is_refused(tmp_path):
    train(TINY, tmp_path / "run", device=CPU, progress=False, max_steps=2)
    other = data.train_tokenizer(["ganz andere saetze", "other sentences"] * 50, vocab_size=TINY.vocab_size)
    data.save_tokenizer(other, tmp_path / "run" / "tokenizer.json")
    with pytest.raises(ValueError, match="is not the tokenizer the run in"):
        train(TINY, tmp_path / "run", device=CPU, progress=False)


def test_command_line_errors_are_one_line_with_status_2(tmp_path):
    result = cli("translate", "--checkpoint", str(tmp_path / "nothing"), "ein hund")
    assert result.returncode == 2
    assert result.stderr.decode().startswith("error: no checkpoint at") and b"Traceback" not in result.stderr
    debug = cli("--debug", "translate", "--checkpoint", str(tmp_path / "nothing"), "ein hund")
    assert debug.returncode != 0 and b"Traceback" in debug.stderr
    zero = cli("train", "--preset", "smoke", "--out", str(tmp_path / "run"), "--max-steps", "0")
    assert zero.returncode == 2 and b"must be at least 1, got 0" in zero.stderr


def test_a_line_that_is_not_utf8_is_reported_and_the_others_translated(saved):
    _, path, _ = saved
    result = cli("translate", "--checkpoint", str(path), "--beam-size", "1", stdin=b"ein hund\n\xff\xfe kaputt\nein hund\n")
    assert result.returncode == 2
    assert b"error: line 2 is not UTF-8 text" in result.stderr
    lines = result.stdout.decode().split("\n")[:3]
    assert lines[1] == "" and lines[0] == lines[2]


@pytest.mark.parametrize("make, error, message", [
    (lambda: __import__("transformer_book").positional.sinusoidal_encoding(2.5, 8), TypeError, "max_len must be an int"),
    (lambda: __import__("transformer_book").positional.sinusoidal_encoding(4, 8.0), TypeError, "d_model must be an int"),
    (lambda: __import__("transformer_book").multihead.MultiHeadAttention(32.0, 4), TypeError, "d_model must be an int"),
    (lambda: __import__("transformer_book").multihead.MultiHeadAttention(32, 4.0), TypeError, "num_heads must be an int"),
    (lambda: __import__("transformer_book").multihead.MultiHeadAttention(32, 4, dropout=1.5), ValueError, "dropout"),
    (lambda: dataclasses.replace(model_config(PRESETS["smoke"], 60), norm_first="no"), TypeError,
     "norm_first must be True or False"),
    (lambda: dataclasses.replace(model_config(PRESETS["smoke"], 60), num_heads=2.0), TypeError, "num_heads must be an int"),
])
def test_constructors_refuse_wrong_types(make, error, message):
    import transformer_book.multihead  # noqa: F401  (the lambdas reach the submodules through the package)
    import transformer_book.positional  # noqa: F401

    with pytest.raises(error, match=message):
        make()


def test_attention_refuses_mixed_or_integer_dtypes():
    from transformer_book.attention import scaled_dot_product_attention

    q = torch.randn(1, 3, 4)
    with pytest.raises(TypeError, match="must share one floating-point dtype"):
        scaled_dot_product_attention(q.double(), q, q)
    with pytest.raises(TypeError, match="must share one floating-point dtype"):
        scaled_dot_product_attention(q.long(), q.long(), q.long())


def test_an_empty_batch_is_refused_by_name():
    model = small_model(0, 60)
    empty = torch.zeros(0, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"src is empty, shape \(0, 3\)"):
        model(empty, empty)


@pytest.mark.parametrize("bad", [None, b"ein hund", 42, ["ein hund", None]])
def test_translator_refuses_what_is_not_text(saved, bad):
    _, path, _ = saved
    translator = Translator.from_checkpoint(path, CPU)
    with pytest.raises(TypeError, match="sentences must be a str or a list of str"):
        translator.translate(bad)


@needs_data
def test_resume_from_a_record_without_its_training_state_names_the_file(tmp_path):
    train(TINY, tmp_path / "run", device=CPU, progress=False, max_steps=2)
    info = read_info(tmp_path / "run" / "last")
    del info["train_state"]
    write_info(tmp_path / "run" / "last", info)
    with pytest.raises(ValueError, match=r"last/checkpoint\.json has no \['train_state'\]"):
        train(TINY, tmp_path / "run", device=CPU, progress=False)
