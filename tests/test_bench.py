"""The benchmark scripts of bench/ start and refuse bad arguments (their measurements are not tests)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import needs_data

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_bench(*args: str, script: str = "gpu_check.py") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "bench" / script), *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the script measures for real")
def test_gpu_check_without_a_gpu_says_so_and_succeeds():
    result = run_bench("--steps", "3", "--warmup", "1")
    assert result.returncode == 0, result.stderr
    assert "PyTorch sees no CUDA GPU here" in result.stdout


@needs_data
def test_gpu_check_rehearses_on_the_cpu_and_splits_the_wall_time(tmp_path):
    record = tmp_path / "record.json"
    result = run_bench("--device", "cpu", "--preset", "smoke", "--epochs", "1", "--warmup", "2", "--amp", "off",
                       "--record", str(record))
    assert result.returncode == 0, result.stderr
    line = json.loads(result.stdout)
    assert line["device"] == "cpu" and line["preset"] == "smoke" and line["compiled"] is False
    assert line["wall_seconds"] >= line["train_seconds"] + line["eval_seconds"] > line["train_seconds"] > 0
    saved = json.loads(record.read_text())
    assert saved["epochs"] == 1 and len(saved["val_loss"]) == 1 and saved["wall_seconds"] == line["wall_seconds"]


def test_gpu_check_refuses_fewer_steps_than_warm_up_steps():
    result = run_bench("--steps", "5", "--warmup", "10")
    assert result.returncode == 2
    assert "must be larger than --warmup" in result.stderr


def test_gpu_check_refuses_no_epochs_and_an_unknown_arithmetic():
    result = run_bench("--epochs", "0")
    assert result.returncode == 2 and "--epochs must be at least 1, got 0" in result.stderr
    result = run_bench("--amp", "float8")
    assert result.returncode == 2 and "invalid choice: 'float8'" in result.stderr



def test_step_breakdown_measures_a_step_that_reads_nothing_back():
    result = run_bench("--preset", "smoke", "--tokens", "200", "--steps", "3", "--warmup", "1", "--variants", "eager",
                       "--amp", "off", script="step_breakdown.py")
    assert result.returncode == 0, result.stderr
    line = json.loads(result.stdout)
    assert line["variant"] == "eager" and line["ms_per_step"] > 0 and line["target_tokens"] >= 200
    assert line["kernels_per_step"] > 100 and line["gflop_per_step"] > 0 and line["tflops"] > 0
    assert line["host_reads_per_step"] == 0  # fit's step leaves every value on the device


def test_compile_speedup_refuses_a_count_below_one():
    result = run_bench("--rounds", "0", script="compile_speedup.py")
    assert result.returncode == 2 and "--rounds must be at least 1, got 0" in result.stderr


def test_step_breakdown_refuses_a_count_below_one():
    result = run_bench("--steps", "0", script="step_breakdown.py")
    assert result.returncode == 2 and "--steps must be at least 1, got 0" in result.stderr
