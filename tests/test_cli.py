"""The command line as a user meets it after the book (python -m transformer_book): what --help says, the folder
slips a user makes, --max-steps on a resumed run, and a train stopped by Ctrl-C or by SIGTERM.

Each test is a probe of the package review (a slip a user made, what the command answered) turned into a test;
each fails on the code before its fix."""

import dataclasses
import io
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import read_info, write_info

from transformer_book import data
from transformer_book.model import Transformer
from transformer_book.run import cli
from transformer_book.run.checkpoint import RunRecord, save_checkpoint
from transformer_book.run.loop import SAVE_EVERY_STEPS
from transformer_book.run.presets import PRESETS, model_config
from transformer_book.run.runfolder import snapshot_path
from transformer_book.training import TrainState

REPO_ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = data.train_tokenizer(["ein hund läuft", "a dog runs"] * 40, vocab_size=60)
RECORD = RunRecord(preset=dataclasses.asdict(PRESETS["smoke"]), device="cpu", amp="None",
                   train_state=TrainState(step=10, epoch=0, batch_in_epoch=10, losses=[3.5] * 10))


@pytest.fixture()
def run(tmp_path):
    """A run folder whose `last/` holds update 10 of 21 of the smoke preset's first epoch, and a best/."""
    data.save_tokenizer(TOKENIZER, tmp_path / "tok.json")
    torch.manual_seed(0)
    model = Transformer(model_config(PRESETS["smoke"], TOKENIZER.get_vocab_size())).eval()
    save_checkpoint(tmp_path / "run" / "last", model, torch.optim.Adam(model.parameters()), RECORD,
                    tmp_path / "tok.json")
    save_checkpoint(tmp_path / "run" / "best", model, None, RECORD, tmp_path / "tok.json")
    shutil.copy(tmp_path / "tok.json", tmp_path / "run" / "tokenizer.json")
    return tmp_path / "run"


def _help(capsys, *command: str) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.main([*command, "--help"])
    assert exited.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def _error(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


# --help says what each command does, what it writes and where --------------------------------------------------

def test_each_command_s_help_says_what_it_does_and_what_it_writes_where(capsys):
    top = _help(capsys)
    assert "examples: python -m transformer_book train --preset smoke" in top
    train = _help(capsys, "train")
    for said in ("resume the run in OUT", "OUT/tokenizer.json", "OUT/last", "OUT/best", "OUT/snapshots",
                 f"saved when the first epoch ends, every {SAVE_EVERY_STEPS} updates", "$TRANSFORMER_BOOK_DATA", "~/.cache/transformer_book",
                 "smoke: seconds", "updates in all, those of earlier calls included"):
        assert said in train, f"train --help does not say {said!r}"
    assert "one translation per line on standard output" in _help(capsys, "translate")
    assert "sacreBLEU" in _help(capsys, "evaluate") and "brevity penalty" in _help(capsys, "evaluate")


def test_usage_names_the_command_as_it_was_started(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/home/me/.venv/bin/transformer-book"])
    assert _help(capsys, "train").startswith("usage: transformer-book train")


# --checkpoint and --out slips -------------------------------------------------------------------------------------

def test_a_checkpoint_that_is_a_file_names_the_folder_to_pass(run, capsys):
    err = _error(capsys, ["translate", "--checkpoint", str(run / "best" / "checkpoint.json"), "ein hund"])
    assert f"is a file; a checkpoint is a folder, for example {run / 'best'}\n" in err
    err = _error(capsys, ["translate", "--checkpoint", str(run / "tokenizer.json"), "ein hund"])
    assert f"is a file; a checkpoint is a folder, for example {run / 'best'}\n" in err
    assert "Errno" not in err


def test_the_run_folder_as_checkpoint_names_its_best_and_last(run, capsys):
    err = _error(capsys, ["translate", "--checkpoint", str(run), "ein hund"])
    assert f"{run} is a run folder; pass one of its checkpoints: {run / 'best'}" in err and str(run / "last") in err


def test_a_snapshots_folder_without_average_says_to_add_it(run, capsys):
    shutil.copytree(run / "best", snapshot_path(run, 10))
    err = _error(capsys, ["evaluate", "--checkpoint", str(run / "snapshots")])
    assert "holds snapshots (step-* folders): add --average N" in err and str(snapshot_path(run, 10)) in err


def test_allow_fewer_without_average_is_refused(run, capsys):
    err = _error(capsys, ["translate", "--checkpoint", str(run / "best"), "--allow-fewer", "ein hund"])
    assert "--allow-fewer only goes with --average N" in err


def test_an_out_that_is_a_file_is_refused(run, capsys, monkeypatch):
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("trained into a file"))
    err = _error(capsys, ["train", "--preset", "smoke", "--out", str(run / "tokenizer.json")])
    assert "is a file; name a folder for the run" in err and "Errno" not in err


def test_an_out_that_is_a_checkpoint_folder_is_refused(run, capsys, monkeypatch):
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("trained a run inside a checkpoint"))
    err = _error(capsys, ["train", "--preset", "smoke", "--out", str(run / "best")])
    assert "is a checkpoint folder (it holds checkpoint.json); name a folder for the run" in err
    assert sorted(p.name for p in (run / "best").iterdir()) == ["checkpoint.json", "model.safetensors", "tokenizer.json"]


def test_an_out_that_cannot_be_made_names_the_folder_and_the_fix(tmp_path, capsys, monkeypatch):
    (tmp_path / "taken").write_text("a file where the run's parent folder would go")
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("trained into a folder it could not make"))
    err = _error(capsys, ["train", "--preset", "smoke", "--out", str(tmp_path / "taken" / "run")])
    assert f"cannot create {tmp_path / 'taken' / 'run'}: " in err and "choose an --out you can write to" in err
    assert "Errno" not in err


def test_another_preset_into_a_run_folder_names_the_run_s_preset_in_one_short_line(run, capsys, monkeypatch):
    # The package review: --preset cpu into a smoke run listed all fifteen sizes that differ.
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("trained another preset into the run"))
    err = _error(capsys, ["train", "--preset", "cpu", "--out", str(run)])
    assert err == (f"error: {run} holds a run of preset 'smoke', not 'cpu': resume it with --preset smoke, or give "
                   f"another --out to train anew\n")


# --max-steps counts the run's updates in all --------------------------------------------------------------------

def test_max_steps_a_run_already_reached_trains_nothing(run, capsys, monkeypatch):
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("trained past --max-steps"))
    for max_steps in ("10", "4"):
        assert cli.main(["train", "--preset", "smoke", "--out", str(run), "--max-steps", max_steps]) == 0
        err = capsys.readouterr().err
        assert f"already has 10 updates (--max-steps {max_steps} asks for no more); nothing to train" in err


# Ctrl-C and SIGTERM -------------------------------------------------------------------------------------------------

def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_before_the_first_checkpoint_says_the_run_starts_over(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "train", _interrupt)
    assert cli.main(["train", "--preset", "smoke", "--out", str(tmp_path / "run")]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted before the run's first checkpoint" in err
    assert "starts the run over" in err and "resume" not in err


def test_ctrl_c_says_which_update_the_next_run_resumes_from(run, capsys, monkeypatch):
    monkeypatch.setattr(cli, "train", _interrupt)
    assert cli.main(["train", "--preset", "smoke", "--out", str(run)]) == 130
    err = capsys.readouterr().err
    assert err == (f"interrupted: {run}/last holds update 10; run the same command again to resume from there\n")


SIGTERM_PROBE = """
import os, signal, sys, time
from transformer_book.run import cli

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # what `kill PID` or a batch scheduler sends
    time.sleep(30)  # the handler raises before this ends
    print("SIGTERM did not stop the command", file=sys.stderr)

before = signal.getsignal(signal.SIGTERM)
cli.train = killed
status = cli.main(["train", "--preset", "smoke", "--out", sys.argv[1]])
assert signal.getsignal(signal.SIGTERM) == before, "main left its SIGTERM handler in place"
sys.exit(status)
"""


def test_sigterm_stops_train_as_ctrl_c_does_and_the_handler_is_put_back(run):
    # In a child process: without the fix, SIGTERM would end the test session itself.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    result = subprocess.run([sys.executable, "-c", SIGTERM_PROBE, str(run)], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert result.stderr == (f"stopped by SIGTERM: {run}/last holds update 10; run the same command again to "
                             f"resume from there\n")


def test_an_abbreviated_option_is_refused_not_guessed(run, capsys):
    # argparse would read --beam as --beam-size: a later option named --beam... would silently change its meaning
    with pytest.raises(SystemExit) as exited:
        cli.main(["translate", "--checkpoint", str(run / "best"), "--beam", "3", "ein hund"])
    assert exited.value.code == 2 and "--beam" in capsys.readouterr().err


def test_an_empty_checkpoint_is_named_as_empty(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["translate", "--checkpoint", "", "ein hund"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "is empty" in err and "runs/multi30k/best" in err and "PosixPath" not in err


@pytest.mark.parametrize("text, lines", [
    (b"ein hund\nzwei katzen\n", [b"ein hund", b"zwei katzen"]),
    (b"ein\rhund\r\nzwei", [b"ein hund", b"zwei"]),  # a lone \r is a space; \r\n ends a line
    (b"\n\n", [b"", b""]),  # empty lines stay lines: one output line for each
])
def test_stdin_gives_one_sentence_per_line(text, lines):
    assert cli._lines(text) == lines


@pytest.mark.parametrize("error, expected", [
    (MemoryError(), "error: out of memory; translate fewer sentences"),
    (OSError(28, "No space left on device", "runs/x"), "error: No space left on device (runs/x); the disk is full"),
    (OSError(36, "File name too long"), "error: File name too long; a name in the path is too long"),
    (OSError("cannot create runs/x: Permission denied; choose an --out you can write to"), "error: cannot create"),
    (RuntimeError(), "error: RuntimeError"),
])
def test_every_error_line_names_a_cause(error, expected):
    assert cli.error_line(error).startswith(expected)


def test_a_memory_error_reaches_the_user_as_one_line_with_a_fix(run, capsys, monkeypatch):
    def out_of_memory(args):
        raise MemoryError

    monkeypatch.setattr(cli, "_run", out_of_memory)
    assert cli.main(["translate", "--checkpoint", str(run / "best"), "ein hund"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: out of memory; ")


def test_a_closed_pipe_ends_quietly_with_status_0(tmp_path):
    # `translate ... | head -1`: the reader leaves after the first line; Unix tools then stop without a word
    script = ("import sys\nfrom transformer_book.run import cli\n"
              "def many_lines(args):\n    for i in range(200000):\n        print('a translated sentence', i)\n"
              "    return 0\ncli._run = many_lines\nsys.exit(cli.main(['translate', '--checkpoint', 'x', 'y']))\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")})
    assert child.stdout.readline().startswith(b"a translated sentence 0")
    child.stdout.close()
    assert child.wait(timeout=60) == 0
    assert child.stderr.read() == b""


def test_an_out_inside_a_checkpoint_folder_is_refused_before_anything_is_written(run, capsys):
    inner = run / "best" / "inner"  # the next save of best/ would delete it, and the run inside
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert cli.main(["train", "--preset", "smoke", "--out", str(inner)]) == 2
    assert "inside the checkpoint folder" in capsys.readouterr().err
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # nothing made, nothing changed


def test_ctrl_c_while_the_command_starts_prints_one_line_and_no_traceback(monkeypatch, capsys):
    # The imports (PyTorch) take about half a second after Python itself has started: a Ctrl-C that lands in them
    # is one line, as at any later moment. Here the import of the command line is what the Ctrl-C interrupts.
    import importlib.abc

    import transformer_book.__main__ as entry

    class CtrlCDuringImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "transformer_book.run.cli":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "transformer_book.run.cli")
    monkeypatch.setattr(sys, "meta_path", [CtrlCDuringImport(), *sys.meta_path])
    assert entry.main() == 128 + signal.SIGINT
    assert capsys.readouterr().err == "interrupted\n"


@pytest.mark.parametrize("lost", ["last/checkpoint.json", "tokenizer.json", "last"])
def test_a_run_folder_that_lost_a_file_is_refused_and_left_as_it_is(run, capsys, lost):
    # training there would start afresh and replace best/, the earlier run's best weights
    shutil.rmtree(run / lost) if (run / lost).is_dir() else (run / lost).unlink()
    before = {p.relative_to(run): p.stat().st_mtime_ns for p in run.rglob("*")}
    err = _error(capsys, ["train", "--preset", "smoke", "--out", str(run)])
    assert f"has lost {lost.rstrip('/') if lost != 'last' else 'last/'}" in err and "another --out" in err
    assert {p.relative_to(run): p.stat().st_mtime_ns for p in run.rglob("*")} == before  # nothing written


@pytest.mark.parametrize("option", [["--amp", "off"], ["--direction", "en-de"]])
def test_a_run_of_other_settings_is_refused_before_the_folder_is_touched(run, capsys, option):
    before = {p.relative_to(run): p.stat().st_mtime_ns for p in run.rglob("*")}
    err = _error(capsys, ["train", "--preset", "smoke", "--out", str(run), *option])
    assert "with other settings" in err and option[0].removeprefix("--") in err
    assert {p.relative_to(run): p.stat().st_mtime_ns for p in run.rglob("*")} == before  # no lock file, no repair


@pytest.mark.parametrize("edit", [
    {"train_state": {"step": 10**19}},  # beyond any run, and beyond a 64-bit integer
    {"preset": {"beam_size": 1_000_000}},
    {"preset": {"unknown_field": 1}},
    {"preset": {"dropout": "0.1"}},
])
def test_a_record_edited_beyond_what_train_writes_is_refused_by_field(run, capsys, edit):
    info = read_info(run / "last")
    for key, fields_edited in edit.items():
        info[key] = info[key] | fields_edited
    write_info(run / "last", info)  # resealed, as an editor would
    err = _error(capsys, ["train", "--preset", "smoke", "--out", str(run)])
    assert next(iter(next(iter(edit.values())))) in err  # the field, by name


def test_a_record_without_a_preset_translates_with_the_default_beam(run, capsys):
    info = read_info(run / "best")
    info["preset"] = None
    write_info(run / "best", info)  # a weights-only checkpoint needs no preset: it was a traceback
    assert cli.main(["translate", "--checkpoint", str(run / "best"), "ein hund"]) == 0
    assert capsys.readouterr().out.count("\n") == 1


@pytest.mark.parametrize("beam", ["100000", "65"])
def test_a_beam_wider_than_the_vocabulary_or_the_bound_is_refused_at_once(run, capsys, beam):
    # before: --beam-size 100000 (vocabulary 60 here) ran on past 90 s and toward gigabytes
    err = _error(capsys, ["translate", "--checkpoint", str(run / "best"), "--beam-size", beam, "ein hund"])
    assert "beam_size must be an int from 1 to" in err and beam in err


def _read_only(monkeypatch, folder: Path) -> None:
    """Make `folder` refuse new, removed and renamed entries, as mode 555 does for a user (root ignores the
    mode bits, so the tests running as root simulate it); files already there can still be written."""
    folder = folder.resolve()

    def refuse(path, dir_fd=None):
        where = Path(os.readlink(f"/proc/self/fd/{dir_fd}")) / path if dir_fd is not None else Path(path)
        if Path(os.path.abspath(where)).parent == folder:
            raise PermissionError(13, "Permission denied", str(where))

    def guard(call, *paths):
        def guarded(*args, dir_fd=None, **kwargs):
            for index in paths:
                refuse(args[index], dir_fd)
            return call(*args, dir_fd=dir_fd, **kwargs) if dir_fd is not None else call(*args, **kwargs)
        return guarded

    real_open = os.open

    def opened(path, flags, *args, dir_fd=None, **kwargs):
        where = Path(os.readlink(f"/proc/self/fd/{dir_fd}")) / path if dir_fd is not None else Path(path)
        if flags & os.O_CREAT and not where.exists():
            refuse(path, dir_fd)
        return real_open(path, flags, *args, dir_fd=dir_fd, **kwargs)

    monkeypatch.setattr(os, "open", opened)
    for name in ("mkdir", "unlink", "remove", "rmdir"):
        monkeypatch.setattr(os, name, guard(getattr(os, name), 0))
    for name in ("rename", "replace"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda a, b, *, _real=real, **k: (refuse(a), refuse(b), _real(a, b, **k))[2])


@pytest.mark.parametrize("folder", [".", "last", "best"])
def test_a_read_only_run_folder_is_refused_before_anything_is_trained_or_renamed(run, capsys, monkeypatch, folder):
    # before: train resumed, trained a whole epoch, and left last.old or best.old behind (or failed at the first save)
    (run / ".lock").touch()  # a run trained there before
    before = {p.relative_to(run): p.stat().st_mtime_ns for p in run.rglob("*")}
    _read_only(monkeypatch, run / folder)
    err = _error(capsys, ["train", "--preset", "smoke", "--out", str(run)])
    assert f"cannot write in {(run / folder).resolve()}" in err and "give that as --out" in err, err
    monkeypatch.undo()
    assert {p.relative_to(run): p.stat().st_mtime_ns for p in run.rglob("*")} == before  # nothing written


class _Writes(io.RawIOBase):
    """A raw stream that keeps each write it receives, as the operating system would see them."""

    def __init__(self):
        self.calls: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, chunk) -> int:
        self.calls.append(bytes(chunk))
        return len(chunk)


def test_an_error_line_reaches_stderr_in_one_write(monkeypatch, tmp_path):
    # Python's stderr is unbuffered and writes through: print sent the text and its newline in two writes, and
    # the two lines of torchrun's two processes, which share a terminal, came out as one run-on line
    raw = _Writes()
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw, encoding="utf-8", write_through=True))
    assert cli.main(["translate", "--checkpoint", str(tmp_path / "nowhere"), "Ein Hund."]) == 2
    sys.stderr.flush()
    assert len(raw.calls) == 1 and raw.calls[0].startswith(b"error: ") and raw.calls[0].endswith(b"\n"), raw.calls
