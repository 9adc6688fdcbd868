"""Shared pytest settings for tests/.

The browser test of the built book (tests/browser/test_book.py) runs only when it is given the built
HTML with `--book-dir` (as `make test-book` does); `pytest tests/` leaves it out.
"""

import os
from pathlib import Path

import pytest
import torch

# The tests use tiny models, for which one thread is fastest. It also keeps them quick when something else
# runs on the machine: with two threads on two busy cores, PyTorch's threads wait for each other and a step
# can take ten times longer (measured on the book's 2-core machine).
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")  # for the command-line tests' subprocesses


# Tests that read the real Multi30k files (CI: TRANSFORMER_BOOK_DATA=../shared/data) use this mark.
DATA = os.environ.get("TRANSFORMER_BOOK_DATA")
needs_data = pytest.mark.skipif(
    not DATA or not (Path(DATA) / "multi30k").is_dir(),
    reason="set TRANSFORMER_BOOK_DATA to a folder holding multi30k/ (CI uses ../shared/data)",
)


def pytest_addoption(parser):
    parser.addoption(
        "--book-dir",
        default=None,
        help="built HTML book to open in the browser (for example _build/html); enables tests/browser/test_book.py",
    )
    parser.addoption(
        "--book-config",
        default=None,
        help="the book's _config.yml (default: the one at the repository root)",
    )


def pytest_ignore_collect(collection_path: Path, config):
    if collection_path.name == "test_book.py" and collection_path.parent.name == "browser":
        return config.getoption("--book-dir") is None or None
    return None
