"""Run chapters as a reader on Colab would, on this machine (`make test-colab`, part of `make test`).

A throwaway virtual environment stands in for a Colab runtime:
- the package's runtime dependencies only, each at the lowest version pyproject.toml allows (torch excepted:
  2.13.0 is the only CPU build this machine's package mirror has), plus the kernel Colab runs (ipykernel,
  ipywidgets);
- a stub `google.colab` module, imported when the kernel starts, as Colab's kernel does;
- pip with no index: a local folder of wheels stands in for PyPI.

First the wheel from `make dist` is installed with runtime dependencies only, and the command line and the main
imports are tried; then `transformer-book[pretrained]` with the pretrained translator's wheel, whose `translate`
must work with the network cut off. Then two passes run chapters top to bottom with nbclient (chapter 10 with its smoke preset),
side by side, each in its own copy of the environment (chapter 1's longest cell uses one thread, which leaves a
core to the other pass); the check fails if any cell raises, or if the package did not come from where the pass
expects:
1. "pypi": the wheel folder holds the wheel, so the first cell installs from it; chapter 1 runs (the chapter a
   reader opens first);
2. "git": the wheel folder is empty (it holds only the build backend, setuptools, that pip needs to build from
   source), so the first cell must fall back to the repository's tag. The repository is a local bare one
   holding the working tree as it is (ignored files left out), tagged v<version>; its file:// address replaces
   the GitHub one in the copies of the notebooks run here, and only there. Chapter 10 runs: what this pass tests
   is the first cell's install, and chapter 10 uses the most of the package. It is not run in the pypi pass
   too: both passes install a wheel that the same build backend made from the same tree, into the same lowest
   versions, so a second run would check nothing new (it cost 46 s).

The lowest versions are read from pyproject.toml's lower bounds and installed with pip, not resolved by
`uv pip install --resolution lowest-direct`: uv does not read pip's configuration, so it took PyTorch's CUDA
build from PyPI (4.7 GB of nvidia-* packages, tried 2026-11-28) where pip takes the CPU wheel that this
machine's pip configuration names; and the chapters' own first cell installs with pip under the same pins.

    python tools/colab_check.py [--dist dist] [--work _build/colab-check] [--pypi-chapters 01_rnn_limits.ipynb ...]
                                [--git-chapters 10_training_on_gpu.ipynb ...]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bootstrap  # noqa: E402  (tools/bootstrap.py)

REPO_ROOT = Path(__file__).resolve().parents[1]
PYPI_CHAPTERS = ["01_rnn_limits.ipynb"]
GIT_CHAPTERS = ["10_training_on_gpu.ipynb"]
# The only CPU build of PyTorch on this machine's mirror; any other version would be a multi-GB CUDA download.
TORCH_HERE = "2.13.0"
# What Colab's kernel brings besides the book's dependencies (any version: they do not touch the book's code).
KERNEL_PACKAGES = ["ipykernel", "ipywidgets"]
KERNEL_NAME = "colab-like"
CELL_TIMEOUT_S = 15 * 60

STUB_COLAB = '''"""A stand-in for Colab's google.colab, for tools/colab_check.py: the chapters only test that it exists."""
'''


class ColabCheckError(RuntimeError):
    """The Colab-like run failed; the message says where."""


def lowest_pins(pyproject: Path) -> list[str]:
    """`name==lowest` for every runtime dependency: the lower bound pyproject.toml states, torch excepted."""
    dependencies = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    pins = []
    for requirement in dependencies:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([\w.]+)\s*", requirement.split(";")[0])
        if match is None:
            raise ColabCheckError(f"pyproject.toml: the dependency {requirement!r} has no plain lower bound (name>=x.y)")
        name, lowest = match.groups()
        pins.append(f"{name}=={TORCH_HERE if name == 'torch' else lowest}")
    return pins


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a command, raising with its output when it fails."""
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise ColabCheckError(f"failed ({result.returncode}): {' '.join(command)}\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


def make_runtime(work: Path, pins: list[str]) -> Path:
    """A new virtual environment with the pinned runtime dependencies; returns its python."""
    venv = work / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    constraints = work / "lowest.txt"
    constraints.write_text("\n".join(pins) + "\n", encoding="utf-8")
    run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    run([str(python), "-m", "pip", "install", "-q", "-c", str(constraints), *pins])
    return python


def same_version(found: str | None, wanted: str) -> bool:
    """Whether an installed version is the pinned one (1.24.0 is 1.24; torch's local label +cpu is ignored)."""
    return found is not None and Version(Version(found).public) == Version(wanted)


def installed(python: Path) -> dict[str, str]:
    """name -> version of every distribution in the environment of `python`."""
    listing = run([str(python), "-m", "pip", "list", "--format=json"]).stdout
    return {item["name"].lower(): item["version"] for item in json.loads(listing)}


def check_wheel(python: Path, dist: Path, version: str) -> str:
    """Install the wheel with runtime dependencies only; the command line and main imports must work. Returns
    the pretrained translator's English (check_pretrained)."""
    run([str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(dist), f"transformer-book=={version}"])
    run([str(python), "-m", "pip", "check"])
    run([str(python), "-m", "transformer_book", "--help"], cwd="/")
    run([str(python), "-c", "from transformer_book import Transformer, Translator"], cwd="/")
    english = check_pretrained(python, dist, version)
    run([str(python), "-m", "pip", "uninstall", "-q", "-y", "transformer-book"])
    return english


def check_pretrained(python: Path, dist: Path, version: str) -> str:
    """`pip install "transformer-book[pretrained]"` as a reader types it, at the lowest tokenizers the pretrained
    distribution allows (the book's 0.15 cannot read its tokenizer.json): `translate` with no checkpoint must
    translate, with the network cut off by an unreachable proxy. Then the runtime's own pins are put back."""
    pins = lowest_pins(REPO_ROOT / "pretrained" / "pyproject.toml")
    # the wheel named by its file: an index may hold another distribution of the same name
    wheel = next(dist.glob("transformer_book_pretrained-*.whl"))
    run([str(python), "-m", "pip", "install", "-q", f"transformer-book[pretrained]=={version}", str(wheel), *pins])
    run([str(python), "-m", "pip", "check"])
    offline = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    english = run([str(python), "-m", "transformer_book", "translate", "Ein Hund läuft über die Wiese."],
                  cwd="/", env=offline).stdout.strip()
    if not re.search(r"\bdog\b", english):
        raise ColabCheckError(f"the pretrained translator, installed from its wheel, gave {english!r} for "
                              "'Ein Hund läuft über die Wiese.'")
    run([str(python), "-m", "pip", "uninstall", "-q", "-y", "transformer-book-pretrained"])
    moved = {pin.split("==")[0] for pin in pins}
    run([str(python), "-m", "pip", "install", "-q",
         *[pin for pin in lowest_pins(REPO_ROOT / "pyproject.toml") if pin.split("==")[0] in moved]])
    return english


def make_kernel(work: Path, python: Path, wheels: Path, constraints: Path, name: str) -> Path:
    """A kernel spec for the runtime: google.colab stubbed and imported at start, pip offline on `wheels`.

    Each pass has its own (`name`): the two run at once, with different wheel folders.
    """
    stub = work / "stub" / "google" / "colab"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "__init__.py").write_text(STUB_COLAB, encoding="utf-8")
    kernel_dir = work / f"jupyter-{name}" / "kernels" / KERNEL_NAME
    kernel_dir.mkdir(parents=True, exist_ok=True)
    env = {
        "PYTHONPATH": str(work / "stub"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_CONSTRAINT": str(constraints),  # a pip install in the notebook may not move a dependency
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "TRANSFORMER_BOOK_PRESET": "smoke",
        # Chapter 10 keeps its runs on Google Drive on Colab; the stub has no Drive, so a local folder is named.
        "TRANSFORMER_BOOK_RUNS": str(work / f"runs-{name}"),
    }
    spec = {
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}",
                 "--IPKernelApp.exec_lines=import google.colab"],
        "display_name": "Python 3 (Colab-like)",
        "language": "python",
        "env": env,
    }
    (kernel_dir / "kernel.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
    return work / f"jupyter-{name}"


def bare_repository(work: Path, version: str) -> str:
    """A bare repository holding the working tree as it is, tagged v<version>; returns its file:// URL."""
    bare = work / "repository.git"
    shutil.rmtree(bare, ignore_errors=True)
    # A commit of the working tree (untracked files too, ignored ones not) made with a scratch index, so that
    # neither the repository's index nor its branches change.
    git_env = {**os.environ, "GIT_INDEX_FILE": str(work / "git-index"), "GIT_AUTHOR_NAME": "colab-check",
               "GIT_AUTHOR_EMAIL": "colab-check@localhost", "GIT_COMMITTER_NAME": "colab-check",
               "GIT_COMMITTER_EMAIL": "colab-check@localhost"}
    run(["git", "read-tree", "HEAD"], cwd=REPO_ROOT, env=git_env)
    run(["git", "add", "--all"], cwd=REPO_ROOT, env=git_env)
    tree = run(["git", "write-tree"], cwd=REPO_ROOT, env=git_env).stdout.strip()
    commit = run(["git", "commit-tree", tree, "-p", "HEAD", "-m", "the working tree, for tools/colab_check.py"],
                 cwd=REPO_ROOT, env=git_env).stdout.strip()
    run(["git", "init", "-q", "--bare", "--initial-branch=main", str(bare)])
    run(["git", "push", "-q", str(bare), f"{commit}:refs/heads/main", f"{commit}:refs/tags/v{version}"], cwd=REPO_ROOT)
    return bare.resolve().as_uri()


def run_chapter(source: Path, folder: Path, repository: str | None, kernels: Path) -> float:
    """Run a copy of the chapter in `folder` top to bottom; the repository address swapped when given."""
    nb = nbformat.read(source, as_version=nbformat.NO_CONVERT)
    if repository is not None:
        # Replaced where the template put it; a cell without the fallback runs as it is (and fails here).
        cell = bootstrap.first_code_cell(nb)
        cell.source = cell.source.replace(f"git+{bootstrap.read_repository()}@", f"git+{repository}@")
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["JUPYTER_PATH"] = str(kernels)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL_NAME,
                            resources={"metadata": {"path": str(folder)}})
    client.widget_registry = {}  # see tools/execute.py
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as err:
        raise ColabCheckError(f"{source.name}: a cell raised in the Colab-like kernel:\n{err}") from None
    finally:
        nbformat.write(nb, folder / source.name)  # what ran, for a look afterwards
    return time.perf_counter() - start


def origin(python: Path) -> str:
    """Where pip installed transformer-book from: 'git', 'wheel', or 'missing'."""
    probe = ("import importlib.metadata as m, json\n"
             "try: d = m.distribution('transformer-book')\n"
             "except m.PackageNotFoundError: print('missing')\n"
             "else: info = json.loads(d.read_text('direct_url.json') or '{}'); "
             "print('git' if 'vcs_info' in info else 'wheel')")
    return run([str(python), "-c", probe], cwd="/").stdout.strip()


def run_pass(name: str, python: Path, wheels: Path, url: str | None, expected: str, chapters: list[str],
             work: Path, version: str) -> list[str]:
    """One pass in the environment of `python`: its chapters top to bottom, then where the package came from.

    Runs in a process of its own (JUPYTER_PATH is per process); returns what to print.
    """
    said = []
    kernels = make_kernel(work, python, wheels, work / "lowest.txt", name)
    for chapter in chapters:
        seconds = run_chapter(REPO_ROOT / "chapters" / chapter, work / f"run-{name}", url, kernels)
        said.append(f"colab-check: pass {name}: {chapter} ran top to bottom in {seconds:.0f} s")
    if (found := origin(python)) != expected:
        raise ColabCheckError(f"pass {name}: transformer-book came from {found!r}, expected {expected!r}")
    said.append(f"colab-check: pass {name}: the first cell installed transformer-book {version} from "
                f"{'the wheel folder' if expected == 'wheel' else 'the tag v' + version + ' of ' + url}")
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, default=REPO_ROOT / "dist", help="folder with the wheel (make dist)")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "_build" / "colab-check", help="scratch folder")
    parser.add_argument("--pypi-chapters", nargs="+", default=PYPI_CHAPTERS,
                        help="chapter notebooks to run in the pypi pass (the package from the wheel)")
    parser.add_argument("--git-chapters", nargs="+", default=GIT_CHAPTERS,
                        help="chapter notebooks to run in the git pass (the package from the repository's tag)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    version = bootstrap.read_version()
    work = args.work.resolve()
    wheel = args.dist.resolve() / f"transformer_book-{version}-py3-none-any.whl"
    try:
        if not wheel.is_file():
            raise ColabCheckError(f"no wheel {wheel}: run `make dist` first")
        work.mkdir(parents=True, exist_ok=True)
        pins = lowest_pins(REPO_ROOT / "pyproject.toml")
        print(f"colab-check: runtime with the lowest allowed versions: {' '.join(pins)}", flush=True)
        python = make_runtime(work, pins)
        english = check_wheel(python, wheel.parent, version)
        print("colab-check: the wheel installs with runtime dependencies only; `python -m transformer_book --help` "
              "and `from transformer_book import Transformer, Translator` work; with [pretrained], `translate` "
              f"offline: 'Ein Hund läuft über die Wiese.' -> {english!r}", flush=True)
        run([str(python), "-m", "pip", "install", "-q", "-c", str(work / "lowest.txt"), *KERNEL_PACKAGES])
        versions = installed(python)
        wrong = [pin for pin in pins if not same_version(versions.get(pin.split("==")[0].lower()), pin.split("==")[1])]
        if wrong:
            raise ColabCheckError(f"the runtime does not hold the lowest versions {wrong}: {versions}")
        # The folders standing in for PyPI: the wheel; or nothing but the build backend pip needs for a git URL.
        pypi = work / "wheels-pypi"
        empty = work / "wheels-empty"
        for folder in (pypi, empty):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        shutil.copy(wheel, pypi)
        build_requires = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
        run([str(python), "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(empty),
             *build_requires])
        repository = bare_repository(work, version)
        # The git pass gets a copy of the environment (a venv finds its packages from where its python is).
        git_venv = work / "venv-git"
        shutil.rmtree(git_venv, ignore_errors=True)
        shutil.copytree(work / "venv", git_venv, symlinks=True)
        git_python = git_venv / "bin" / "python"
        passes = (("pypi", python, pypi, None, "wheel", args.pypi_chapters),
                  ("git", git_python, empty, repository, "git", args.git_chapters))
        with concurrent.futures.ProcessPoolExecutor(max_workers=len(passes)) as pool:
            running = [pool.submit(run_pass, *one_pass, work, version) for one_pass in passes]
            for future in running:
                print("\n".join(future.result()), flush=True)
    except ColabCheckError as err:
        print(f"colab-check: FAILED: {err}", file=sys.stderr)
        return 1
    print(f"colab-check: passed in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
