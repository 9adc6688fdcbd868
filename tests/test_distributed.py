"""Chapter 10's training with DistributedDataParallel: two processes on the CPU (gloo), as torchrun starts them.

The same code runs one process per GPU with NCCL; here it runs where every machine can: the losses of two
processes must equal one process's on the same batches, two processes interrupted and resumed must end with the
weights of two that never stopped, and their checkpoint must resume in one process.
"""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from conftest import needs_data
from safetensors.torch import load_file

from transformer_book import data
from transformer_book.masking import make_batch
from transformer_book.run.checkpoint import load_checkpoint
from transformer_book.run.distributed import Processes, shard
from transformer_book.run.loop import train
from transformer_book.run.presets import PRESETS

REPO_ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
# No dropout and float32 (bfloat16 rounds the two runs differently), so that their losses can be compared.
PRESET = dataclasses.replace(PRESETS["smoke"], dropout=0.0, train_subset=160, max_tokens=400, epochs=1, amp="off")
STEPS = 4

WORKER = """
import json, sys
import torch.distributed as dist
from transformer_book.run.presets import PRESETS
from transformer_book.run.distributed import start_distributed
from transformer_book.run.loop import train
import dataclasses
import transformer_book.run.loop
transformer_book.run.loop.SAVE_EVERY_STEPS = 3  # last/ is saved before the end too: every process takes part in each save
dropout = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
preset = dataclasses.replace(PRESETS["smoke"], dropout=dropout, train_subset=160, max_tokens=400, epochs=1, amp="off")
device = start_distributed()
try:
    run = train(preset, sys.argv[1], device=device, max_steps=int(sys.argv[3]), progress=False)
    if dist.get_rank() == 0:
        json.dump(run.to_json()["train_state"], open(sys.argv[2], "w"))
finally:
    dist.destroy_process_group()  # a gloo group left to the interpreter's exit aborts the process (SIGABRT)
"""


def torchrun(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # PYTHONFAULTHANDLER: a process killed by a signal prints the Python line each of its threads was on.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def failed(result: subprocess.CompletedProcess) -> str:
    """All that the processes wrote: a worker's traceback comes before torchrun's long summary, so no tail will do."""
    return f"exit status {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


def test_shards_cover_the_batch_and_a_missing_row_adds_no_token():
    src = torch.tensor([[5, 6, 2], [7, 2, 0], [8, 9, 2]])
    batch = make_batch(src, torch.cat([torch.ones(3, 1, dtype=torch.long), src], dim=1), pad_id=data.PAD_ID)
    parts = [shard(batch, rank, 2) for rank in range(2)]
    assert torch.equal(torch.cat([p.src for p in parts]), batch.src)
    assert sum(p.num_tokens for p in parts) == batch.num_tokens
    lonely = [shard(batch, rank, 4) for rank in range(4)]
    assert lonely[3].src.shape[0] == 1 and lonely[3].num_tokens == 0
    assert bool((lonely[3].tgt_out == data.PAD_ID).all())
    assert sum(p.num_tokens for p in lonely) == batch.num_tokens


def test_a_process_reseeds_unless_it_took_back_its_own_generator():
    alone, second = Processes(), Processes(rank=1, world_size=2, distributed=True)
    with torch.random.fork_rng():
        assert not alone.seed(5)  # a new run in one process keeps the stream set_seed started
        assert not alone.seed(5, saved=1) and not second.seed(5, saved=2)  # each took back its own generator
        assert alone.seed(5, saved=2) and second.seed(5, saved=1)  # resumed in another number of processes
        assert second.seed(5)  # a new run in several processes: seed + 1000 * rank
        drawn = torch.rand(3)
        torch.manual_seed(1005)
        assert torch.equal(drawn, torch.rand(3))


@needs_data
def test_two_processes_match_one_and_their_checkpoint_resumes_in_one(tmp_path):
    (tmp_path / "worker.py").write_text(WORKER, encoding="utf-8")
    result = torchrun("worker.py", str(tmp_path / "ddp"), str(tmp_path / "ddp.json"), str(STEPS), cwd=tmp_path)
    assert result.returncode == 0, failed(result)
    two = json.loads((tmp_path / "ddp.json").read_text())
    one = train(PRESET, tmp_path / "single", device=CPU, max_steps=STEPS, progress=False).to_json()["train_state"]
    assert two["step"] == one["step"] == STEPS
    assert two["tokens_seen"] == one["tokens_seen"]  # the shards together saw every target token
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]), rtol=0, atol=1e-5)
    # Process 0 alone wrote the checkpoint, with both processes' random generators; one process resumes it, says that
    # it reseeds (there is no second process to take back the second generator), and goes on.
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == [".lock", "best", "last", "tokenizer.json"]
    generators = load_file(tmp_path / "ddp" / "last" / "optimizer.safetensors")["rng_states"]
    assert generators.shape[0] == 2 and not torch.equal(generators[0], generators[1])
    lines = []
    resumed = train(PRESET, tmp_path / "ddp", device=CPU, max_steps=STEPS + 2, progress=False, log=lines.append)
    assert resumed.train_state.step == STEPS + 2 and resumed.train_state.losses[:STEPS] == two["losses"]
    assert any("random generators of 2 process(es) and this run has 1: each reseeds" in line for line in lines), lines


@needs_data
def test_two_processes_interrupted_and_resumed_end_with_the_weights_of_a_run_that_never_stopped(tmp_path):
    # Dropout on: each process draws its own masks, and after the resume it must draw the ones it would have drawn.
    (tmp_path / "worker.py").write_text(WORKER, encoding="utf-8")
    for out, steps in (("whole", 2 * STEPS), ("split", STEPS), ("split", 2 * STEPS)):
        result = torchrun("worker.py", str(tmp_path / out), str(tmp_path / f"{out}.json"), str(steps), "0.1",
                          cwd=tmp_path)
        assert result.returncode == 0, failed(result)
    whole, split = (json.loads((tmp_path / f"{out}.json").read_text()) for out in ("whole", "split"))
    assert whole["step"] == split["step"] == 2 * STEPS
    weights = [load_checkpoint(tmp_path / out / "last")[0].state_dict() for out in ("whole", "split")]
    largest = max((weights[0][name] - weights[1][name]).abs().max().item() for name in weights[0])
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0]), f"differ by {largest:.3g}"
    assert split["losses"] == whole["losses"]


@needs_data
def test_command_line_under_torchrun_trains_and_writes_one_checkpoint(tmp_path):
    result = torchrun("-m", "transformer_book", "train", "--preset", "smoke", "--out", str(tmp_path / "run"),
                      "--max-steps", "3", cwd=tmp_path)
    assert result.returncode == 0, failed(result)
    assert result.stdout.count("stopped after 3 updates") == 1  # printed by process 0 only
    saved = json.loads((tmp_path / "run" / "last" / "checkpoint.json").read_text())
    assert saved["train_state"]["step"] == 3
    assert not list((tmp_path / "run").glob("*.tmp"))
