"""Ctrl-C and SIGTERM while `train` runs (chapter 10a's StopRequest): the run stops at the end of the update in
progress, saves it in `last/`, then interrupts, and the same command resumes from it exactly; a second signal
interrupts at once; the handlers there were are put back, in a notebook as on the command line; in two processes,
one process's Ctrl-C stops both at the same update, and so does a Ctrl-C typed in torchrun's terminal."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from conftest import needs_data

import transformer_book.run.loop
from transformer_book import data
from transformer_book.interrupts import signals_wait
from transformer_book.model import Transformer
from transformer_book.run import checkpoint
from transformer_book.run.checkpoint import load_checkpoint, save_checkpoint
from transformer_book.run.loop import train
from transformer_book.run.presets import PRESETS, model_config
from transformer_book.run.stopping import INTERRUPTED, StopRequest

REPO_ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
TINY = dataclasses.replace(PRESETS["smoke"], train_subset=160, epochs=1, val_bleu_sentences=8, max_tokens=400)
STEPS = "8"  # the command's --max-steps: the signal comes before, and no epoch ends (the smoke preset's has 21)

# The command line, signalled by the OS while update `at` ends (what Ctrl-C or `kill PID` does at a random
# moment, here at a known one); `times` signals in a row.
PROBE = """
import os, signal, sys
import transformer_book.run.loop
from transformer_book.run import cli

# Ctrl-C as in a terminal: a test runner's worker (pytest-xdist's) ignores SIGINT, and a child inherits that.
signal.signal(signal.SIGINT, signal.default_int_handler)

out, signum, at, times = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
after_step = transformer_book.run.loop.after_step

def signalled(run, max_steps, state):
    if state.step == at:
        for _ in range(times):
            os.kill(os.getpid(), signum)
    return after_step(run, max_steps, state)

if at:
    transformer_book.run.loop.after_step = signalled
sys.exit(cli.main(["train", "--preset", "smoke", "--out", out, "--max-steps", sys.argv[5]]))
"""


def command(out: Path, signum: int = 0, at: int = 0, times: int = 1) -> subprocess.CompletedProcess:
    """`python -m transformer_book train --preset smoke --out OUT --max-steps 8`, signalled at update `at`."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", PROBE, str(out), str(signum), str(at), str(times), STEPS],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def ctrl_c_as_in_a_terminal():
    """Python's own SIGINT handler for the test: pytest-xdist's workers ignore SIGINT, and StopRequest leaves an
    ignored signal alone."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def saved_state(out: Path) -> dict:
    record = json.loads((out / "last" / "checkpoint.json").read_text(encoding="utf-8"))
    return {**record["train_state"], "stopped": record["stopped"]}


@pytest.fixture(scope="module")
def never_stopped(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("whole") / "run"
    result = command(out)
    assert result.returncode == 0, result.stderr
    return saved_state(out)


@needs_data
@pytest.mark.parametrize("signum, what", [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "stopped by SIGTERM")])
def test_a_signal_stops_at_the_end_of_the_update_saves_it_and_the_same_command_resumes_exactly(
        tmp_path, never_stopped, signum, what):
    out = tmp_path / "run"
    stopped = command(out, signum, at=5)
    assert stopped.returncode == 128 + signum, stopped.stderr
    assert stopped.stderr.splitlines()[-1] == (f"{what}: {out}/last holds update 5; run the same command again to "
                                               f"resume from there")
    assert stopped.stdout.count("stopping at the end of update 5") == 1
    state = saved_state(out)
    assert state["step"] == 5 and state["stopped"] == INTERRUPTED
    resumed = command(out)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {out} at step 5" in resumed.stdout
    state = saved_state(out)
    assert state["step"] == never_stopped["step"] == int(STEPS)
    assert state["losses"] == never_stopped["losses"]  # exactly: the updates after 5 are those of a run never stopped


# The command line, signalled by the OS while the finished run's final save of `last/` is under way.
PROBE_FINAL_SAVE = """
import os, signal, sys
import transformer_book.run.loop
from transformer_book.run import cli

out, signum = sys.argv[1], int(sys.argv[2])
save = transformer_book.run.loop.save

def signalled_while_saving(run, name, copy_now=False):
    if name == "last" and run.record.is_complete():
        os.kill(os.getpid(), signum)  # lands in the save
    return save(run, name, copy_now)

transformer_book.run.loop.save = signalled_while_saving
sys.exit(cli.main(["train", "--preset", "smoke", "--out", out]))
"""


@needs_data
def test_a_signal_during_the_final_save_waits_for_it(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", PROBE_FINAL_SAVE, str(out), str(signal.SIGTERM)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    state = json.loads((out / "last" / "checkpoint.json").read_text(encoding="utf-8"))["train_state"]
    assert state["epoch"] == PRESETS["smoke"].epochs  # the save the signal landed in was finished, not abandoned
    assert "stopped by SIGTERM" in result.stderr.splitlines()[-1]


@needs_data
def test_a_second_ctrl_c_interrupts_at_once(tmp_path):
    out = tmp_path / "run"
    result = command(out, signal.SIGINT, at=5, times=2)
    assert result.returncode == 128 + signal.SIGINT, result.stderr
    assert "interrupted before the run's first checkpoint" in result.stderr.splitlines()[-1]
    assert not (out / "last").exists()  # the update in progress was not finished, and nothing was saved


def test_the_first_signal_is_noted_the_second_raises_and_the_handlers_are_put_back(ctrl_c_as_in_a_terminal):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with StopRequest() as request:
        assert not request.requested
        signal.raise_signal(signal.SIGINT)
        assert request.requested and request.signum == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    with StopRequest() as request:
        signal.raise_signal(signal.SIGTERM)  # noted: a second one would end this process, as SIGTERM does
        assert request.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before[1]


def test_interrupt_hands_the_signal_on_and_a_process_not_signalled_raises_keyboard_interrupt(ctrl_c_as_in_a_terminal):
    with StopRequest() as request:
        signal.raise_signal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        request.interrupt()  # Python's own SIGINT handler raises it
    with pytest.raises(KeyboardInterrupt):
        StopRequest().interrupt()


def test_an_ignored_signal_and_another_thread_are_left_alone():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopRequest():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(StopRequest().__enter__()._previous))
    thread.start()
    thread.join()
    assert seen == [{}]



def test_signals_wait_holds_ctrl_c_and_sigterm_then_hands_them_on_in_the_order_they_came():
    heard = []

    def hear(signum, frame):
        heard.append(signum)
    previous = {signum: signal.signal(signum, hear) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with signals_wait():
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
                signal.raise_signal(signum)
            assert heard == []  # nothing reached the handlers while the block ran
        assert heard == [signal.SIGINT, signal.SIGTERM, signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is hear and signal.getsignal(signal.SIGTERM) is hear
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_signals_wait_leaves_an_ignored_signal_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with signals_wait():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)  # ignored, as before: nothing to hand on
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_twice_while_writing(monkeypatch) -> None:
    """Make save_checkpoint receive two Ctrl-C just before it writes the weights."""
    write = checkpoint.save_file

    def interrupted_write(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        return write(*args, **kwargs)
    monkeypatch.setattr(checkpoint, "save_file", interrupted_write)


def _small_model_and_tokenizer(tmp_path: Path) -> tuple[Transformer, Path]:
    tokenizer = data.train_tokenizer(["ein hund läuft", "a dog runs"] * 40, vocab_size=60)
    data.save_tokenizer(tokenizer, tmp_path / "tok.json")
    torch.manual_seed(0)
    return Transformer(model_config(PRESETS["smoke"], tokenizer.get_vocab_size())), tmp_path / "tok.json"


def test_ctrl_c_twice_during_a_save_waits_for_the_save_then_interrupts(ctrl_c_as_in_a_terminal, monkeypatch,
                                                                       tmp_path):
    model, tokenizer = _small_model_and_tokenizer(tmp_path)
    _ctrl_c_twice_while_writing(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path / "best", model, None, None, tokenizer)
    reloaded, _ = load_checkpoint(tmp_path / "best")  # whole: the interruption came once it was in place
    assert all(torch.equal(a, b) for a, b in zip(reloaded.state_dict().values(), model.state_dict().values()))
    assert not list(tmp_path.glob(".best-*.tmp"))


def test_under_a_stop_request_the_first_ctrl_c_of_a_save_is_noted_and_the_second_interrupts_after_it(
        ctrl_c_as_in_a_terminal, monkeypatch, tmp_path):
    model, tokenizer = _small_model_and_tokenizer(tmp_path)
    _ctrl_c_twice_while_writing(monkeypatch)
    with StopRequest() as request, pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path / "last", model, torch.optim.Adam(model.parameters()), None, tokenizer)
    assert request.signum == signal.SIGINT
    load_checkpoint(tmp_path / "last")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

@needs_data
def test_train_puts_the_handlers_back_when_it_returns_and_when_it_raises(tmp_path, monkeypatch,
                                                                        ctrl_c_as_in_a_terminal):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    train(TINY, tmp_path / "done", device=CPU, progress=False, max_steps=2)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    during = []

    def failing_fit(*args, **kwargs):
        during.append(signal.getsignal(signal.SIGINT))
        raise RuntimeError("a bug in the loop")

    monkeypatch.setattr(transformer_book.run.loop, "fit", failing_fit)
    with pytest.raises(RuntimeError, match="a bug in the loop"):
        train(TINY, tmp_path / "failed", device=CPU, progress=False, max_steps=2)
    assert during and during[0] != before[0]  # while training, the request held Ctrl-C
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


# Two processes (gloo), started by torchrun: at update 2, process @RANK@ sends Ctrl-C by @SEND@; each process records
# how it ended, at which update, and whether it leads a session of its own.
WORKER = """
import dataclasses, json, os, signal, sys
import torch.distributed as dist
import transformer_book.run.loop
from transformer_book.run.distributed import start_distributed
from transformer_book.run.presets import PRESETS

signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal (see PROBE)
preset = dataclasses.replace(PRESETS["smoke"], train_subset=160, max_tokens=400, epochs=@EPOCHS@, amp="off")
device = start_distributed()
after_step = transformer_book.run.loop.after_step
last_step = None  # the update this process finished last

def signalled(run, max_steps, state):
    global last_step
    last_step = state.step
    if state.step == 2 and dist.get_rank() == @RANK@:
        @SEND@
    return after_step(run, max_steps, state)

transformer_book.run.loop.after_step = signalled
try:
    transformer_book.run.loop.train(preset, sys.argv[1], device=device, max_steps=@MAX_STEPS@, progress=False)
    stopped = None
except KeyboardInterrupt:
    stopped = "interrupted"
finally:
    dist.destroy_process_group()
json.dump({"stopped": stopped, "step": last_step, "own_session": os.getsid(0) == os.getpid()},
          open(f"{sys.argv[1]}-{os.environ['RANK']}.json", "w"))
"""


def torchrun(tmp_path: Path, rank: int, send: str, epochs: int, max_steps: str, **run) -> tuple[object, list[dict]]:
    """torchrun's result, and what each of its two workers recorded, for WORKER filled in."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}
    script = WORKER
    for name, value in (("@EPOCHS@", str(epochs)), ("@RANK@", str(rank)), ("@SEND@", send), ("@MAX_STEPS@", max_steps)):
        script = script.replace(name, value)
    (tmp_path / "worker.py").write_text(script, encoding="utf-8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "worker.py",
               str(tmp_path / "run")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, **run)
    workers = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("run-*.json"))]
    assert len(workers) == 2, f"{result.stdout}\n{result.stderr}"
    return result, workers


@needs_data
def test_one_process_s_ctrl_c_stops_both_at_the_same_update(tmp_path):
    # process 1 alone is sent Ctrl-C at update 2; both stop there, and `last/` holds it
    result, workers = torchrun(tmp_path, 1, "os.kill(os.getpid(), signal.SIGINT)", epochs=1, max_steps="6")
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert [(w["stopped"], w["step"]) for w in workers] == [("interrupted", 2)] * 2
    state = saved_state(tmp_path / "run")
    assert state["step"] == 2 and state["stopped"] == INTERRUPTED


# Ctrl-C in the terminal that started torchrun: the terminal sends SIGINT to torchrun's process group. torchrun
# starts each worker in a session of its own, so the workers get one SIGINT each, the one torchrun passes on, and
# stop as after a single Ctrl-C; torchrun waits for them (30 s by default) before it kills them. Were the workers in
# torchrun's group, each would get two at once, and the second could interrupt them in the middle of an update or a
# save.
@needs_data
def test_ctrl_c_in_torchrun_s_terminal_stops_every_worker_at_one_update_and_saves_it(tmp_path):
    # torchrun in a process group of its own, as a terminal's foreground job is (and away from pytest's)
    result, workers = torchrun(tmp_path, 0, "os.killpg(os.getpgid(os.getppid()), signal.SIGINT)", epochs=2,
                               max_steps="None", start_new_session=True)
    assert "SIGINT" in result.stderr or "signal: 2" in result.stderr, result.stderr  # torchrun itself was stopped
    state = saved_state(tmp_path / "run")
    assert state["stopped"] == INTERRUPTED and state["step"] >= 2, state
    # both at the update `last/` holds: the one after which torchrun's SIGINT reached them
    assert workers == [{"stopped": "interrupted", "step": state["step"], "own_session": True}] * 2, \
        f"{result.stdout}\n{result.stderr}"
    assert len(state["losses"]) == state["step"]
