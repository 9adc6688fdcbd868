"""tests/nbval_kernel_start.py: a kernel that dies while starting is started again, and its stderr is kept."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import nbval.kernel
import nbval_kernel_start as plugin
import pytest


def dies_first(times: int):
    """A stand-in for nbval's start that dies `times` times, printing to the stderr it is given, then starts."""
    calls = []

    def start(**kwargs):
        calls.append(kwargs)
        if len(calls) <= times:
            kwargs["stderr"].write(f"zmq.error.ZMQError: Address already in use (call {len(calls)})\n")
            kwargs["stderr"].flush()
            raise RuntimeError("Kernel died before replying to kernel_info")
        return "km", "kc"

    return start, calls


def test_a_kernel_that_dies_once_is_started_again_with_a_warning_that_shows_what_it_printed():
    start, calls = dies_first(1)
    with pytest.warns(UserWarning, match=r"(?s)died while starting.*Address already in use \(call 1\)"):
        assert plugin.start_kernel_again_if_it_dies(start=start, kernel_name="python3", cwd="x") == ("km", "kc")
    assert len(calls) == 2
    assert all(call["kernel_name"] == "python3" and call["cwd"] == "x" for call in calls)


def test_a_kernel_that_never_starts_fails_with_every_attempts_stderr():
    start, calls = dies_first(5)
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="did not start in 3 attempts") as raised:
        plugin.start_kernel_again_if_it_dies(start=start, stderr=sys.stderr)
    assert len(calls) == 3
    assert all(f"(call {n})" in str(raised.value) for n in (1, 2, 3))


def test_an_error_that_is_not_a_failed_start_is_not_retried():
    calls = []

    def start(**kwargs):
        calls.append(kwargs)
        raise FileNotFoundError("no such kernel")

    with pytest.raises(FileNotFoundError):
        plugin.start_kernel_again_if_it_dies(start=start)
    assert len(calls) == 1


def test_the_plugin_wraps_nbvals_own_start_even_when_imported_a_second_time_under_another_name():
    path = Path(plugin.__file__)
    spec = importlib.util.spec_from_file_location("tests.nbval_kernel_start_again", path)
    again = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(again)
    try:
        assert nbval.kernel.start_new_kernel is again.start_kernel_again_if_it_dies
        assert again._start_new_kernel is plugin._start_new_kernel  # not the first wrapper: no retries of retries
        assert again._start_new_kernel.__module__ == "nbval.kernel"
    finally:
        nbval.kernel.start_new_kernel = plugin.start_kernel_again_if_it_dies


def test_a_real_kernel_starts_through_the_plugin_and_runs_code():
    km, kc = plugin.start_kernel_again_if_it_dies(startup_timeout=60, kernel_name=nbval.kernel.CURRENT_ENV_KERNEL_NAME)
    try:
        reply = kc.execute_interactive("x = 6 * 7", timeout=60)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_both_nbval_passes_of_the_makefile_load_the_plugin():
    commands = subprocess.run(["make", "-n", "--no-print-directory", "nbval"], cwd=Path(__file__).parents[1],
                              capture_output=True, text=True, check=True).stdout
    runs = [line for line in commands.splitlines() if "pytest --nbval" in line]
    assert len(runs) == 2 and all("-p tests.nbval_kernel_start" in run for run in runs), commands
