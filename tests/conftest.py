"""Shared pytest settings for tests/.

The browser test of the built book (tests/browser/test_book.py) runs only when it is given the built
HTML with `--book-dir` (as `make test-book` does); `pytest tests/` leaves it out.
"""

import os
from pathlib import Path

import pytest
import torch

from transformer_book.tokens import BOS_ID, EOS_ID

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


def read_info(folder: Path) -> dict:
    """checkpoint.json of a checkpoint folder, without its seal (what a test edits)."""
    import json

    from transformer_book.run.safefiles import SEAL_KEY

    info = json.loads((Path(folder) / "checkpoint.json").read_text())
    info.pop(SEAL_KEY, None)
    return info


def write_info(folder: Path, info: dict) -> None:
    """Write an edited checkpoint.json sealed again, as a deliberate edit would be (a test of the later checks)."""
    from transformer_book.run.safefiles import seal

    (Path(folder) / "checkpoint.json").write_text(seal(info))


def serve_http(handler):
    """Serve `handler` (an http.server request handler class) on a free local port, in a thread; yields the URL.

    Use as a fixture body: `yield from serve_http(MyHandler)`.
    """
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def random_pairs(count: int, vocab_size: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Encoded pairs as a run holds them: source ids, and BOS + target ids + EOS, of 1 to 30 tokens each."""
    gen = torch.Generator().manual_seed(seed)

    def sentence() -> list[int]:
        return torch.randint(4, vocab_size, (int(torch.randint(1, 31, (), generator=gen)),), generator=gen).tolist()

    return [(sentence(), [BOS_ID, *sentence(), EOS_ID]) for _ in range(count)]
