"""The command line and the chapters let PyTorch's idle threads sleep, before PyTorch loads.

OpenMP reads OMP_WAIT_POLICY once, when PyTorch loads; set later it does nothing. bench/throughput.py --busy
measures why it matters (a training step beside a busy core); these tests check that it is in place in time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import bootstrap  # noqa: E402  (tools/bootstrap.py: the first cell of every chapter)

REPORT = "import os, sys; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"


def run_python(code: str, policy: str | None) -> str:
    """Run `code` in a fresh Python with OMP_WAIT_POLICY set to `policy` (or unset); return what it printed."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("policy", "expected"), [(None, "PASSIVE True"), ("ACTIVE", "ACTIVE True")])
def test_the_command_line_sets_the_policy_before_torch_loads(policy, expected):
    # The `transformer-book` command as the installed package declares it (its console script), not a module
    # named here: the test follows the command wherever its entry point moves.
    code = (
        "import sys\n"
        "from importlib.metadata import entry_points\n"
        "(command,) = entry_points(group='console_scripts', name='transformer-book')\n"
        "main = command.load()\n"
        "assert 'torch' not in sys.modules, 'the entry point loaded torch before it could set the policy'\n"
        "sys.argv = ['transformer-book', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        + REPORT
    )
    assert run_python(code, policy) == expected


@pytest.mark.parametrize(("policy", "expected"), [(None, "PASSIVE False"), ("ACTIVE", "ACTIVE False")])
def test_every_chapter_sets_it_in_its_first_cell_before_torch_loads(policy, expected):
    cell = bootstrap.render(bootstrap.read_version(), bootstrap.read_repository())
    assert run_python(cell + "\n" + REPORT, policy) == expected
