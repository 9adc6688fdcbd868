"""Nothing lost, nothing silent, round 2: checkpoint.json sealed, snapshots that survive a kill and reach Drive,
reads checked before they start, the lock that follows no link, and the command line as a newcomer meets it.

Each test is one probe of the issue turned into a test; each fails on the code before the fix."""

import dataclasses
import http.server
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import needs_data, read_info, serve_http, write_info
from safetensors import SafetensorError

from transformer_book import data, multi30k
from transformer_book.model import Transformer
from transformer_book.run import checkpoint, cli, loop, runfolder
from transformer_book.run.checkpoint import RunRecord, load_checkpoint, save_checkpoint
from transformer_book.run.loop import train
from transformer_book.run.presets import PRESETS, model_config
from transformer_book.run.safefiles import SEAL_KEY, read_record
from transformer_book.training import TrainState

REPO_ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
TINY = dataclasses.replace(PRESETS["smoke"], train_subset=160, epochs=2, val_bleu_sentences=8, max_tokens=400,
                           average_last=2)
RECORD = RunRecord(preset=dataclasses.asdict(dataclasses.replace(PRESETS["smoke"], average_last=2)), device="cpu", amp="None",
                   history=[{"epoch": 1, "step": 10, "val_bleu": 1.5}],
                   train_state=TrainState(step=10, epoch=1, batch_in_epoch=0, losses=[3.5] * 10, tokens_seen=500,
                                          train_seconds=2.0))


TOKENIZER = data.train_tokenizer(["ein hund läuft", "a dog runs"] * 40, vocab_size=60)


def _tiny_model(vocab_size: int, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(model_config(PRESETS["smoke"], vocab_size)).eval()


@pytest.fixture()
def saved(tmp_path):
    """A checkpoint with Adam's state and a run record, as `last/` holds."""
    data.save_tokenizer(TOKENIZER, tmp_path / "tok.json")
    model = _tiny_model(TOKENIZER.get_vocab_size())
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.tensor([[5, 6, 2]]), torch.tensor([[1, 5]])).sum().backward()
    optimizer.step()
    return save_checkpoint(tmp_path / "run" / "last", model, optimizer, RECORD, tmp_path / "tok.json")


def cli_process(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "transformer_book", *args], capture_output=True, env=env,
                          timeout=300, **kwargs)


# 1. checkpoint.json protected ----------------------------------------------------------------------------------

def test_every_single_bit_flip_of_checkpoint_json_is_refused_or_changes_nothing(saved):
    raw = (saved / "checkpoint.json").read_bytes()
    original = read_record(saved)
    silent = []
    for position in range(len(raw)):
        for bit in {position % 8, (position + 3) % 8}:  # two of each byte's bits, every bit in turn across bytes
            flipped = bytearray(raw)
            flipped[position] ^= 1 << bit
            (saved / "checkpoint.json").write_bytes(bytes(flipped))
            try:
                info = read_record(saved)
            except ValueError as error:
                assert "checkpoint.json" in str(error)
                continue
            if info != original:
                silent.append((position, bit))
    assert not silent, f"{len(silent)} flips changed the record silently, e.g. {silent[:3]}"


def test_a_flipped_pad_id_or_step_is_refused_naming_the_file(saved):
    text = (saved / "checkpoint.json").read_text()
    for before, after in (('"pad_id": 0', '"pad_id": 1'), ('"step": 10', '"step": 11')):
        assert before in text
        (saved / "checkpoint.json").write_text(text.replace(before, after))
        with pytest.raises(ValueError, match=r"last/checkpoint\.json was changed after it was saved"):
            load_checkpoint(saved)


def test_a_record_without_its_list_of_files_is_an_error(saved):
    for key in ("files", "sizes"):
        info = read_info(saved)
        del info[key]
        write_info(saved, info)
        with pytest.raises(ValueError, match=r"checkpoint\.json does not list the folder's files"):
            load_checkpoint(saved)


def test_a_record_without_its_seal_is_refused_by_name(saved):
    info = json.loads((saved / "checkpoint.json").read_text())
    info["record_sha257"] = info.pop(SEAL_KEY)  # the key's name, one bit flipped
    (saved / "checkpoint.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match=r"checkpoint\.json has no 'record_sha256': an older version wrote it"):
        load_checkpoint(saved)


# 2. snapshots and leftovers after a kill ------------------------------------------------------------------------

@needs_data
def test_a_lost_snapshot_and_what_a_kill_leaves_are_repaired(tmp_path):
    out = tmp_path / "run"
    train(TINY, out, device=CPU, progress=False)
    snapshots = sorted((out / "snapshots").iterdir())
    assert len(snapshots) == 2
    newest = {f.name: f.read_bytes() for f in snapshots[-1].iterdir()}
    shutil.rmtree(snapshots[-1])  # lost, as when a copy stops between `last/` and `snapshots/`
    (out / "snapshots" / ".step-000099-abc.tmp").mkdir()  # a snapshot's save killed half-way
    (out / ".last-abc.tmp").mkdir()
    shutil.copytree(out / "last", out / "last.old")  # killed in the final save, between the renames
    with runfolder.hold_run_folder(out):
        pass
    assert sorted(p.name for p in out.iterdir()) == [".lock", "best", "last", "snapshots", "tokenizer.json"]
    assert sorted((out / "snapshots").iterdir()) == snapshots
    rebuilt = {f.name: f.read_bytes() for f in snapshots[-1].iterdir()}
    assert rebuilt.keys() == newest.keys()
    assert all(rebuilt[name] == newest[name] for name in rebuilt if name != "checkpoint.json")  # the same weights
    # The snapshot is written before the run's final save of `last/`, whose record adds that save's seconds: the
    # rebuilt record is the original one but for timings.
    assert _without_timings(rebuilt["checkpoint.json"]) == _without_timings(newest["checkpoint.json"])


def _without_timings(raw: bytes) -> dict:
    record = json.loads(raw)
    del record["record_sha256"]
    for row in record["history"]:
        del row["save_seconds"]
    return record


def test_a_snapshot_beyond_the_ones_kept_is_pruned_under_the_lock(saved):
    out = saved.parent
    for step in (2, 4, 6):
        shutil.copytree(saved, runfolder.snapshot_path(out, step))  # killed between a snapshot and pruning
    shutil.copy(saved / "tokenizer.json", out / "tokenizer.json")  # as train writes it before any checkpoint
    with runfolder.hold_run_folder(out):
        pass
    keep = RECORD.preset["average_last"]
    assert 0 < keep < 4
    everything = ["step-000002", "step-000004", "step-000006", "step-000010"]  # step 10's rebuilt from `last/`
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == everything[-keep:]


# 3. snapshots on Drive, and averaging that says what it took -----------------------------------------------------

def test_snapshots_are_copied_to_drive_and_back_only_when_new(tmp_path):
    run, drive = tmp_path / "run", tmp_path / "drive"
    for step in (1, 2):
        runfolder.snapshot_path(run, step).mkdir(parents=True)
        (runfolder.snapshot_path(run, step) / "model.safetensors").write_text(f"weights {step}")
    (run / "last").mkdir()
    (run / "last" / "checkpoint.json").write_text("{}")
    runfolder.copy_run(run, drive)
    assert sorted(p.name for p in (drive / "snapshots").iterdir()) == ["step-000001", "step-000002"]
    copied = (drive / "snapshots" / "step-000001" / "model.safetensors").stat().st_mtime_ns
    shutil.rmtree(runfolder.snapshot_path(run, 1))  # pruned
    runfolder.snapshot_path(run, 3).mkdir()
    runfolder.copy_run(run, drive)
    assert sorted(p.name for p in (drive / "snapshots").iterdir()) == ["step-000002", "step-000003"]
    assert (drive / "snapshots" / "step-000002" / "model.safetensors").stat().st_mtime_ns >= copied
    session = tmp_path / "new-session"
    assert runfolder.RunCopier(session, drive).restore()
    assert sorted(p.name for p in (session / "snapshots").iterdir()) == ["step-000002", "step-000003"]


def test_average_refuses_fewer_snapshots_than_asked_unless_told(saved, tmp_path, capsys):
    for step in (1, 2):
        shutil.copytree(saved, runfolder.snapshot_path(tmp_path / "run", step))
    snapshots = str(tmp_path / "run" / "snapshots")
    assert cli.main(["translate", "--checkpoint", snapshots, "--average", "5", "--beam-size", "1", "ein hund"]) == 2
    assert "holds 2 snapshots, fewer than --average 5" in capsys.readouterr().err
    assert cli.main(["translate", "--checkpoint", snapshots, "--average", "5", "--allow-fewer", "--beam-size", "1",
                     "ein hund"]) == 0
    assert "averaged 2 snapshots: step-000001, step-000002" in capsys.readouterr().err


# 4. saves into one folder take turns ---------------------------------------------------------------------------

def _save_many(args: tuple[Path, int]) -> str:
    folder, seed = args
    torch.set_num_threads(1)
    model = _tiny_model(60, seed)
    try:
        for _ in range(25):
            save_checkpoint(folder / "last", model, None, RECORD, folder / "tok.json")
    except Exception as error:  # what the other process's save did to this one
        return f"{type(error).__name__}: {error}"
    return ""


def test_two_processes_saving_into_one_folder_take_turns(saved, tmp_path):
    with multiprocessing.get_context("fork").Pool(2) as pool:
        errors = pool.map(_save_many, [(tmp_path, 1), (tmp_path, 2)])
    assert errors == ["", ""]
    load_checkpoint(tmp_path / "last")
    assert not list(tmp_path.glob(".*.tmp")) and not (tmp_path / "last.old").exists()


# 5. no tracebacks -----------------------------------------------------------------------------------------------

def test_ctrl_c_exits_130_with_one_line_saying_the_run_resumes(saved, monkeypatch, capsys, tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    info = read_info(saved)
    write_info(saved, info | {"preset": dataclasses.asdict(PRESETS["smoke"])})  # the preset the command resumes
    monkeypatch.setattr(cli, "train", interrupted)
    assert cli.main(["train", "--preset", "smoke", "--out", str(tmp_path / "run")]) == 130  # saved: run/last
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run the same command again to resume" in err


def test_a_nan_loss_is_one_error_line(monkeypatch, capsys, tmp_path):
    def diverged(*args, **kwargs):
        raise FloatingPointError("the loss is nan; the weights were not updated. Lower the learning rate")

    monkeypatch.setattr(cli, "train", diverged)
    assert cli.main(["train", "--preset", "smoke", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == "error: the loss is nan; the weights were not updated. Lower the learning rate\n"


def test_a_full_disk_inside_the_tokenizer_library_is_an_oserror_and_leaves_no_part_file(monkeypatch, tmp_path):
    def disk_full(tokenizer, path):
        Path(str(path) + ".part").write_text("{")
        raise Exception("No space left on device (os error 28)")  # what tokenizers raises

    monkeypatch.setattr(data, "save_tokenizer", disk_full)
    with pytest.raises(OSError, match=r"could not write .*tokenizer\.json \(No space left on device"):
        runfolder.run_tokenizer(tmp_path, ["ein hund", "a dog"] * 20, vocab_size=40)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_inside_safetensors_is_an_oserror_and_leaves_nothing(monkeypatch, saved):
    def disk_full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(No space left on device)")

    monkeypatch.setattr(checkpoint, "save_file", disk_full)
    before = sorted(p.name for p in saved.parent.iterdir())
    with pytest.raises(OSError, match=r"could not write the checkpoint .*free some disk space"):
        save_checkpoint(saved, _tiny_model(60), None, RECORD, saved / "tokenizer.json")
    assert sorted(p.name for p in saved.parent.iterdir()) == before
    load_checkpoint(saved)  # the previous checkpoint is untouched


def test_translate_with_stdin_closed_is_one_error_line(saved):
    result = cli_process("translate", "--checkpoint", str(saved), stdin=None, pass_fds=(),
                         preexec_fn=lambda: os.close(0))
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.decode().endswith("error: no sentences to translate and no standard input; pass them as "
                                           "arguments or on stdin\n")


def test_a_weights_file_larger_than_its_record_is_not_read(saved):
    with open(saved / "model.safetensors", "r+b") as f:
        f.truncate(1_500_000_000)  # sparse: no disk used
    with pytest.raises(ValueError, match=r"model\.safetensors holds 1,500,000,000 bytes, more than its checkpoint"):
        load_checkpoint(saved)


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_checkpoint_json_that_is_a_device_or_a_fifo_is_refused_at_once(saved, target):
    (saved / "checkpoint.json").unlink()
    if target == "fifo":
        os.mkfifo(saved / "checkpoint.json")
    else:
        (saved / "checkpoint.json").symlink_to(target)
    result = cli_process("translate", "--checkpoint", str(saved), "ein hund")
    assert result.returncode == 2
    assert "checkpoint.json is not a plain file (a folder, a FIFO or a device)" in result.stderr.decode()


# 6. messages that name the problem -----------------------------------------------------------------------------

@pytest.mark.parametrize("content, message", [
    (b"null", "holds a JSON null, not a checkpoint's record"),
    (b"42", "holds a JSON number, not a checkpoint's record"),
    (b"[" * 100_000 + b"]" * 100_000, "is not valid JSON (nested too deeply)"),
    (b'{"step": "\xff"}', "is not UTF-8 text"),
])
def test_a_checkpoint_json_that_is_not_a_record_is_named(saved, content, message):
    (saved / "checkpoint.json").write_bytes(content)
    with pytest.raises(ValueError, match=r"checkpoint\.json " + message.replace("(", r"\(").replace(")", r"\)")):
        load_checkpoint(saved)


def test_a_step_stored_as_text_is_refused_by_name(saved):
    info = read_info(saved)
    info["train_state"]["step"] = "10"
    write_info(saved, info)
    _, loaded = load_checkpoint(saved)
    with pytest.raises(ValueError, match=r"train_state has wrong fields \(step='10'\)"):
        _ = loaded.record


def test_a_configuration_too_large_for_its_weights_is_refused_before_allocating(saved):
    info = read_info(saved)
    info["config"]["d_model"] = info["config"]["d_ff"] = 1_000_000
    write_info(saved, info)
    with pytest.raises(ValueError, match=r"describes at least [\d,]+ bytes of weights, but model\.safetensors"):
        load_checkpoint(saved)


def test_a_lock_file_holding_bytes_that_are_not_text_still_names_the_holder(tmp_path):
    with runfolder.hold_run_folder(tmp_path):
        (tmp_path / ".lock").write_bytes(b"\xff\xfe\n")
        with pytest.raises(RuntimeError, match=r"another process \(PID \S+\) is training in"):
            with runfolder.hold_run_folder(tmp_path):
                pass


@pytest.mark.parametrize("out, message", [("", "is empty; name the run folder"),
                                          ("runs/\udcff", "is not UTF-8 text")])
def test_an_empty_or_unprintable_out_folder_is_one_error_line(capsys, out, message):
    with pytest.raises(SystemExit) as exited:
        cli.main(["train", "--out", out])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: argument --out: ") and message in err


def test_a_run_stopped_before_its_first_epoch_says_so(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "train", lambda *a, **k: RunRecord(preset={}, device="cpu", amp="None",
                                                               train_state=TrainState(step=1), stopped="max_steps=1"))
    assert cli.main(["train", "--preset", "smoke", "--out", str(tmp_path), "--max-steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out and "stopped after 1 updates (max_steps=1), before the first epoch ended" in out


# 7. values refused -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("penalty", ["inf", "nan", "-1"])
def test_a_length_penalty_that_is_not_a_finite_number_is_refused(capsys, penalty):
    with pytest.raises(SystemExit) as exited:
        cli.main(["translate", "--checkpoint", "x", f"--length-penalty={penalty}", "ein hund"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert err.startswith("error: argument --length-penalty: must be a finite number of at least 0")


# 9. the lock follows no link -----------------------------------------------------------------------------------

def test_a_lock_that_is_a_link_is_refused_and_its_target_left_alone(tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").symlink_to(victim)
    with pytest.raises(OSError, match=r"run/\.lock is a symbolic link; a lock file is never one: delete the link"):
        with runfolder.hold_run_folder(tmp_path / "run"):
            pass
    assert victim.read_text() == "keep me"


# 11. the command line as a newcomer meets it -----------------------------------------------------------------------

def test_version_and_defaults_in_help(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip().startswith("transformer_book 0.")
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert "(default: runs/multi30k)" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        cli.main(["translate", "--help"])
    assert "(default: 0.6)" in " ".join(capsys.readouterr().out.split())


@needs_data
def test_a_finished_run_says_it_is_complete_and_trains_nothing(monkeypatch, capsys, tmp_path):
    small = dataclasses.replace(TINY, epochs=1)
    train(small, tmp_path / "run", device=CPU, progress=False)
    monkeypatch.setattr(cli, "choose_preset", lambda *a, **k: small)
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("a complete run was trained again"))
    assert cli.main(["train", "--out", str(tmp_path / "run")]) == 0
    captured = capsys.readouterr()
    assert f"the run in {tmp_path / 'run'} is complete" in captured.err and "resuming" not in captured.out
    assert "best validation BLEU" in captured.out


def test_translate_with_no_sentence_on_a_terminal_says_what_to_do(saved, monkeypatch, capsys):
    class Terminal:
        buffer = type("Buffer", (), {"read": staticmethod(lambda: b"ein hund\n")})()

        @staticmethod
        def isatty():
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    assert cli.main(["translate", "--checkpoint", str(saved), "--beam-size", "1"]) == 0
    assert "Type German sentences, one per line, then Ctrl-D" in capsys.readouterr().err


# 8. hangs ---------------------------------------------------------------------------------------------------------

def test_a_stray_world_size_says_what_it_waits_for(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}
    env.pop("MASTER_ADDR", None)
    result = subprocess.run([sys.executable, "-m", "transformer_book", "train", "--out", str(tmp_path / "run")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    assert result.stderr == ("error: WORLD_SIZE=2 is set but MASTER_ADDR is not: start several processes with "
                             "torchrun, or unset WORLD_SIZE to train in this one\n")
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29581")
    with subprocess.Popen([sys.executable, "-m", "transformer_book", "train", "--out", str(tmp_path / "run")],
                          stderr=subprocess.PIPE, text=True, env=env) as waiting:
        try:
            line = waiting.stderr.readline()
        finally:
            waiting.kill()
    assert line.startswith("waiting up to 5 minutes for the 2 processes of WORLD_SIZE=2 to meet at 127.0.0.1:29581")


def test_a_partner_that_never_comes_ends_the_wait_with_a_message(monkeypatch):
    import socket
    from datetime import timedelta

    from transformer_book.run.distributed import start_distributed

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RuntimeError, match="did not all meet within 2 s.*start them together with torchrun"):
        start_distributed(timeout=timedelta(seconds=2))


# 10. downloads: capped at the file's size, bounded in time --------------------------------------------------------

class _Server(http.server.BaseHTTPRequestHandler):
    """/endless: a body that never ends; /abc: a length that is not a number; /burst: a burst, then a drip."""

    def do_GET(self):  # noqa: N802 (the name http.server calls)
        self.send_response(200)
        if self.path == "/abc":
            self.send_header("Content-Length", "abc")
        self.end_headers()
        try:
            if self.path == "/burst":
                self.wfile.write(b"x" * 50_000)
            for _ in range(10_000 if self.path != "/abc" else 1):
                self.wfile.write(b"x" * (65536 if self.path == "/endless" else 1))
                self.wfile.flush()
                time.sleep(0 if self.path == "/endless" else 0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    yield from serve_http(_Server)


def test_an_endless_body_is_cut_off_at_the_files_size(server, tmp_path):
    with pytest.raises(ConnectionError, match="the server sent more than the file's 637,044 bytes"):
        multi30k._fetch(f"{server}/endless", tmp_path / "f", multi30k.MULTI30K_SIZES["train.de.gz"])
    assert (tmp_path / "f").stat().st_size < 637_044 + 65_536


def test_a_length_that_is_not_a_number_is_named(server, tmp_path):
    with pytest.raises(ConnectionError, match=r"a length that is not a number \(Content-Length: 'abc'\)"):
        multi30k._fetch(f"{server}/abc", tmp_path / "f")


def test_all_attempts_of_a_file_share_one_deadline_well_under_200_s(server, tmp_path, monkeypatch):
    assert multi30k._DOWNLOAD_DEADLINE_S + multi30k._DOWNLOAD_TIMEOUT_S < 200
    monkeypatch.setattr(multi30k, "_DOWNLOAD_DEADLINE_S", 2)
    monkeypatch.setattr(multi30k, "MULTI30K_URL", f"{server}/burst?")
    monkeypatch.setattr(multi30k, "MULTI30K_FILES", {"x.gz": "0" * 64})
    monkeypatch.delenv(multi30k.DATA_ENV, raising=False)
    start = time.monotonic()
    with pytest.raises(data.DataError, match="took longer than 2 s in all"):
        multi30k.download_multi30k(tmp_path)
    assert time.monotonic() - start < 5  # one deadline for both attempts, not one each
    assert list((tmp_path / "multi30k").iterdir()) == []


# 7. ids the tokenizer does not have ------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [60, -1, 10**20])
def test_decoding_an_id_the_tokenizer_does_not_have_is_refused(bad):
    size = TOKENIZER.get_vocab_size()
    bad = size if bad == 60 else bad
    with pytest.raises(ValueError, match=rf"ids\[1\] must be an int from 0 to {size - 1} \(decode ids its model produced\); got {bad}"):
        data.decode(TOKENIZER, [5, bad, 6])


def test_a_nan_sampling_temperature_is_refused():
    from transformer_book.generation import sample_next

    with pytest.raises(ValueError, match="temperature must be a finite number >= 0 \\(0: greedy\\); got nan"):
        sample_next(torch.zeros(1, 5), temperature=float("nan"))


def test_a_run_folder_reached_through_a_link_still_saves(saved, tmp_path):
    (tmp_path / "link").symlink_to(saved.parent, target_is_directory=True)  # --out given as a link to a folder
    save_checkpoint(tmp_path / "link" / "best", _tiny_model(TOKENIZER.get_vocab_size()), None, RECORD,
                    saved / "tokenizer.json")
    load_checkpoint(saved.parent / "best")


@needs_data
def test_a_crash_after_the_first_epoch_and_before_any_periodic_save_resumes_where_the_epoch_ended(tmp_path,
                                                                                                  monkeypatch):
    # The first epoch ends long before update SAVE_EVERY_STEPS (here and in every preset), and best/ is written
    # then: the run dies in the second epoch, before any save of its own
    whole = train(TINY, tmp_path / "whole", device=CPU, progress=False)
    after_step = loop.after_step

    def machine_dies(run, max_steps, state):
        if state.epoch == 1 and state.batch_in_epoch == 2:
            raise RuntimeError("the machine died")
        return after_step(run, max_steps, state)

    monkeypatch.setattr(loop, "after_step", machine_dies)
    with pytest.raises(RuntimeError, match="the machine died"):
        train(TINY, tmp_path / "split", device=CPU, progress=False)
    monkeypatch.undo()
    assert whole.train_state.step < loop.SAVE_EVERY_STEPS
    # before: no last/ beside best/, and the same call refused the folder as one that "has lost last/"
    resumed = train(TINY, tmp_path / "split", device=CPU, progress=False)
    assert resumed.train_state.losses == whole.train_state.losses  # bit for bit
    scores = ("epoch", "step", "train_loss", "val_loss", "val_bleu")
    assert [[h[k] for k in scores] for h in resumed.history] == [[h[k] for k in scores] for h in whole.history]
