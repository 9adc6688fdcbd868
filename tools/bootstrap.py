"""Write every chapter's first code cell, and its Colab metadata, from one template (`make bootstrap`).

The first code cell of every chapter is the same: on Colab it installs this book's package at the book's
version, trying in order PyPI, the release's tag in the repository, then the repository's default branch (the
code the Colab copy was made from), and names what stopped each (no network, no release on PyPI, no tag).
Everywhere it stops with advice when Python cannot import that version. Its first line is a Colab form title:
the Colab copy folds the cell's code (tools/colab.py), so a reader there sees that one line. The version comes from pyproject.toml and the repository's address from
_config.yml, so `make bump VERSION=x.y.z` and a new repository address reach every chapter in one step.

    python tools/bootstrap.py          # rewrite the cells and metadata that differ
    python tools/bootstrap.py --check  # change nothing; exit 1 and list the chapters that differ

tests/test_bootstrap.py fails when a chapter's first cell differs from the rendered template.
"""

from __future__ import annotations

import argparse
import re
import string
import sys
from pathlib import Path

import nbformat
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
CHAPTERS_DIR = REPO_ROOT / "chapters"
# Chapter 10 trains the full model: Colab should offer it a GPU runtime.
GPU_CHAPTERS = {"10_training_on_gpu.ipynb"}
# The HTML book folds the cell (a reader of the page needs none of it); Jupyter and Colab show it.
CELL_TAGS = ["hide-input"]

# `$version` and `$repository` are filled in; the braces belong to the cell's own f-strings.
TEMPLATE = string.Template('''\
#@title Set-up: run this cell first (on Colab it installs the book's package)
# The same first cell in every chapter. On Colab it installs this book's package at the book's version;
# anywhere, it stops here with advice when Python cannot import that version.
import importlib
import numbers
import os
import subprocess
import sys

# PyTorch's idle threads sleep instead of spinning, so that a busy core (a browser, the notebook's own server)
# slows training less (chapter 10). OpenMP reads this when PyTorch loads: it must come first. Yours is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

BOOK_VERSION = "$version"
ON_COLAB = "google.colab" in sys.modules


def _imported_book_version() -> str | None:
    """The version of transformer_book that Python imports; None when it cannot import it."""
    try:
        import transformer_book
    except ImportError:
        return None
    return transformer_book.__version__


_pip_errors, _installed, _causes = "", None, []
_OFFLINE = ("Could not resolve", "Failed to establish", "Network is unreachable", "Temporary failure in name")


def _why_failed(where: str, pip_said: str) -> str:
    """What stopped pip at one source, as its messages tell: no network, no such release, no tag, or pip's words."""
    if any(sign in pip_said for sign in _OFFLINE):
        return f"no network connection (trying {where})"
    if "No matching distribution" in pip_said or "Could not find a version" in pip_said:
        return f"PyPI has no transformer-book {BOOK_VERSION}"
    if "did not match any" in pip_said or "not found in upstream" in pip_said:
        return f"the repository has no tag v{BOOK_VERSION}"
    if "Repository not found" in pip_said or "could not read Username" in pip_said:
        return "the repository cannot be read (is it public?)"
    return f"{where}: pip failed (its message is below)"


if ON_COLAB and _imported_book_version() != BOOK_VERSION:
    for _where, _source in (  # in order: the release on PyPI, the same release from its tag, the newest code
        ("PyPI", f"transformer-book=={BOOK_VERSION}"),
        (f"the tag v{BOOK_VERSION}", f"git+$repository@v{BOOK_VERSION}"),
        ("the default branch", "git+$repository"),
    ):
        _pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", _source], capture_output=True, text=True
        )
        if _pip.returncode == 0:
            _installed = _where
            break
        _pip_errors += _pip.stderr
        _causes.append(_why_failed(_where, _pip.stderr))
        if "no network" in _causes[-1]:
            break  # the other sources need the network too
    importlib.invalidate_caches()
    if _installed and _causes:
        print(f"Installed transformer-book from {_installed} ({'; '.join(_causes)}).")

if (_found := _imported_book_version()) != BOOK_VERSION:
    _problem = (
        "Python cannot import transformer_book" if _found is None
        else f"Python imports transformer_book {_found}, not {BOOK_VERSION}"
    )
    if not ON_COLAB:
        _fix = "In the book's folder run `make setup` and use the kernel of .venv, or run `pip install -e .` there."
    elif _installed or not _causes:  # installed, but an older copy is already loaded
        _fix = "Runtime -> Restart session, then run this cell again."
    elif any("no network" in cause for cause in _causes):
        _fix = (f"It could not be installed ({'; '.join(_causes)}): Runtime -> Disconnect and delete runtime, "
                "then run this cell again.")
    else:
        _fix = f"It could not be installed ({'; '.join(_causes)})."
    _pip_said = f"\\npip said:\\n{_pip_errors[-2000:]}" if _pip_errors else ""
    raise ImportError(f"This chapter needs transformer_book {BOOK_VERSION}: {_problem}. {_fix}{_pip_said}")

# `glue` hands a number computed in a cell to the book's build, which writes it into the page's text.
# Colab and plain Jupyter have no build (the cells print the same numbers), so there it does nothing.
try:
    from myst_nb import glue as _glue_into_page
except ImportError:
    _glue_into_page = None


def _as_shown(value: float, fmt: str) -> float | int:
    """`value` rounded to what the format `fmt` (".3f", ".1%", ".2g", ",.0f", ...) shows of it."""
    spec = fmt.replace(",", "").replace("_", "")
    digits = int(spec.split(".")[1][:-1]) if "." in spec else 6
    if spec.endswith("f"):
        return round(value, digits) if digits else round(value)  # ".0f": a whole number
    if spec.endswith("%"):
        return round(value, digits + 2)
    if spec[-1:] in ("e", "E", "g", "G"):
        return float(format(value, spec))
    raise ValueError(f"glue: cannot round a number to the format {fmt!r}; use one ending in f, %, e or g")


def glue(name: str, value, fmt: str = "") -> None:
    """Keep `value` for the page's text under `name`; a float is kept at the precision `fmt` shows.

    Digits beyond that precision change with the CPU and the thread count, so they are not kept.
    """
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        if not fmt:
            raise TypeError(f"glue({name!r}, {value!r}): give the format the page shows it with, such as '.3f'")
        value = _as_shown(float(value), fmt)
    if _glue_into_page is not None:
        _glue_into_page(name, value, display=False)
''')


def read_version(repo_root: Path = REPO_ROOT) -> str:
    """The `version` of the [project] table of pyproject.toml."""
    text = (repo_root / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^\[project\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.MULTILINE | re.DOTALL)
    if match is None:
        raise SystemExit(f"bootstrap: no version in the [project] table of {repo_root / 'pyproject.toml'}")
    return match.group(1)


def read_repository(repo_root: Path = REPO_ROOT) -> str:
    """The repository's address, as _config.yml gives it (without a trailing slash or .git)."""
    config = yaml.safe_load((repo_root / "_config.yml").read_text(encoding="utf-8"))
    url = (config.get("repository") or {}).get("url")
    if not url:
        raise SystemExit(f"bootstrap: _config.yml has no repository.url ({repo_root / '_config.yml'})")
    return re.sub(r"(\.git)?/*$", "", url)


def render(version: str, repository: str) -> str:
    """The text of the first code cell for this version and repository address."""
    return TEMPLATE.substitute(version=version, repository=repository).rstrip("\n")


def colab_metadata(notebook_name: str) -> dict:
    """The notebook metadata Colab reads: a Python 3 kernel, and a GPU runtime for chapter 10."""
    metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "colab": {"provenance": [], "toc_visible": True},
    }
    if notebook_name in GPU_CHAPTERS:
        metadata["accelerator"] = "GPU"
        metadata["colab"]["gpuType"] = "T4"
    return metadata


def first_code_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook's first code cell (the set-up cell)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            return cell
    raise SystemExit("bootstrap: a chapter has no code cell")


def differences(path: Path, cell_text: str) -> list[str]:
    """What in the notebook at `path` differs from the template and the Colab metadata."""
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    cell, problems = first_code_cell(nb), []
    if cell.source != cell_text:
        problems.append("its first code cell differs from the template")
    if cell.metadata.get("tags", []) != CELL_TAGS:
        problems.append(f"its first code cell's tags are {cell.metadata.get('tags', [])}, not {CELL_TAGS}")
    if cell.outputs:
        problems.append("its first code cell has outputs (the cell prints nothing when all is well)")
    for key, value in colab_metadata(path.name).items():
        if nb.metadata.get(key) != value:
            problems.append(f"its metadata {key!r} is {nb.metadata.get(key)!r}, not {value!r}")
    if path.name not in GPU_CHAPTERS and "accelerator" in nb.metadata:
        problems.append("its metadata asks Colab for an accelerator it does not need")
    return problems


def write(path: Path, cell_text: str) -> None:
    """Make the notebook's first code cell and Colab metadata what the template says."""
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    cell = first_code_cell(nb)
    cell.source = cell_text
    cell.metadata["tags"] = list(CELL_TAGS)
    cell.outputs = []
    nb.metadata.update(colab_metadata(path.name))
    if path.name not in GPU_CHAPTERS:
        nb.metadata.pop("accelerator", None)
    nbformat.validate(nb)
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a chapter differs")
    args = parser.parse_args(argv)
    cell_text = render(read_version(), read_repository())
    stale = {}
    for path in sorted(CHAPTERS_DIR.glob("*.ipynb")):
        if problems := differences(path, cell_text):
            stale[path] = problems
    if args.check:
        for path, problems in stale.items():
            print(f"bootstrap: {path.relative_to(REPO_ROOT)}: {'; '.join(problems)}", file=sys.stderr)
        if stale:
            print("bootstrap: run `make bootstrap` to rewrite them from the template", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        write(path, cell_text)
        print(f"bootstrap: wrote {path.relative_to(REPO_ROOT)}")
    if not stale:
        print("bootstrap: every chapter's set-up cell and metadata already match the template")
    return 0


if __name__ == "__main__":
    sys.exit(main())
