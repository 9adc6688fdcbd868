"""A pytest plugin for the nbval runs (`make nbval` loads it with `-p tests.nbval_kernel_start`): a chapter's
kernel that dies while starting is started again, and what it printed is kept.

Why: in a full `.ci/run` (2026-11-29), chapter 3's 46 cells all errored at set-up with "Kernel died before
replying to kernel_info", and the same chapter then passed alone. nbval sends the kernel's stderr to /dev/null,
so the cause was lost. A known cause is a race between two kernels started at once (as `-n 2` does):
jupyter_client picks free ports, releases them, and the kernel binds them only once its start-up is done, by
which time another process may hold one. Only the start is retried; a kernel that dies while running cells still fails its chapter.
"""

from __future__ import annotations

import tempfile
import warnings

import nbval.kernel

ATTEMPTS = 3
# nbval's own function, even when this file is imported a second time under another name (as the tests do)
_start_new_kernel = getattr(nbval.kernel.start_new_kernel, "nbval_original", nbval.kernel.start_new_kernel)


def start_kernel_again_if_it_dies(*args, start=None, attempts: int = ATTEMPTS, **kwargs):
    """nbval's `start_new_kernel`, tried up to `attempts` times, with the kernel's stderr kept for the message."""
    start = start or _start_new_kernel
    failures = []
    for attempt in range(1, attempts + 1):
        # the kernel keeps its own handle open after ours closes; what it printed may not be UTF-8
        with tempfile.TemporaryFile("w+", errors="replace") as stderr:
            try:
                return start(*args, **{**kwargs, "stderr": stderr})
            except RuntimeError as error:
                stderr.seek(0)
                printed = stderr.read().strip()[-2000:] or "(nothing on stderr)"
                failures.append(f"attempt {attempt}: {error}\n{printed}")
        if attempt < attempts:
            warnings.warn(
                f"nbval: a kernel died while starting and is started again ({failures[-1]})", stacklevel=2
            )
    raise RuntimeError(f"nbval: the kernel did not start in {attempts} attempts:\n" + "\n".join(failures))


start_kernel_again_if_it_dies.nbval_original = _start_new_kernel
nbval.kernel.start_new_kernel = start_kernel_again_if_it_dies
