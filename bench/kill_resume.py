"""Kill-and-resume, many times: the smoke preset's run, stopped by SIGINT (or killed by SIGKILL) at random updates
and resumed by the same command, must end with the losses and the weights of a run never stopped, bit for bit
(issues 46 and 51). SIGINT saves the update it stops at; SIGKILL loses the updates since the last save of `last/`.

    TRANSFORMER_BOOK_DATA=... python bench/kill_resume.py --runs 10 --kills 2   # 20 random Ctrl-C
    TRANSFORMER_BOOK_DATA=... python bench/kill_resume.py --signal KILL         # 20 random kill -9
"""

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import os, signal, sys
import transformer_book.run.loop
from transformer_book.run import cli

signal.signal(signal.SIGINT, signal.default_int_handler)
out, at, signum = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
after_step = transformer_book.run.loop.after_step

def signalled(run, max_steps, state):
    if state.step == at:
        os.kill(os.getpid(), signum)
    return after_step(run, max_steps, state)

if at:
    transformer_book.run.loop.after_step = signalled
sys.exit(cli.main(["train", "--preset", "smoke", "--out", out]))
"""


def command(out: Path, at: int = 0, signum: int = signal.SIGINT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", PROBE, str(out), str(at), str(int(signum))], capture_output=True,
                          text=True, env=env, timeout=600)


def outcome(out: Path) -> tuple[list, str]:
    record = json.loads((out / "last" / "checkpoint.json").read_text(encoding="utf-8"))
    weights = hashlib.sha256((out / "last" / "model.safetensors").read_bytes()).hexdigest()
    return record["train_state"]["losses"], weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--kills", type=int, default=2, help="signals per run, at increasing random updates")
    parser.add_argument("--signal", choices=["INT", "KILL"], default="INT",
                        help="INT: Ctrl-C, which saves; KILL: kill -9, which saves nothing")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    signum = signal.Signals[f"SIG{args.signal}"]
    expected = 128 + signum if signum == signal.SIGINT else -signum  # Python's status, or killed
    with tempfile.TemporaryDirectory() as tmp:
        whole = Path(tmp) / "whole"
        assert command(whole).returncode == 0
        losses, weights = outcome(whole)
        steps = len(losses)
        print(f"never stopped: {steps} updates", flush=True)
        same = 0
        for run in range(args.runs):
            out = Path(tmp) / f"run{run}"
            kills = sorted(rng.sample(range(1, steps), args.kills))
            for at in kills:
                result = command(out, at, signum)
                assert result.returncode == expected, result.stderr[-2000:]
            assert command(out).returncode == 0
            ok = outcome(out) == (losses, weights)
            same += ok
            print(f"run {run}: SIG{args.signal} at updates {kills}, resumed: {'identical' if ok else 'DIFFERENT'}",
                  flush=True)
        print(f"{same} of {args.runs} runs ({args.runs * args.kills} SIG{args.signal}) end bit-identical to the run "
              "never stopped")
        sys.exit(0 if same == args.runs else 1)


if __name__ == "__main__":
    main()
