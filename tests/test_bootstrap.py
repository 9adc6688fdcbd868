"""Every chapter's first cell: written from one template, and it cannot fail silently.

The cell is run here in a fresh Python each time, with the package present, missing, at another version, and
on a stand-in Colab whose pip fails, so every branch of it runs at least once. `make test-colab` runs it for
real, in a Colab-like environment where pip installs from a wheel folder and from a git tag.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import bootstrap  # noqa: E402  (tools/bootstrap.py)

NOTEBOOKS = sorted((REPO_ROOT / "chapters").glob("*.ipynb"))
VERSION = bootstrap.read_version()
CELL = bootstrap.render(VERSION, bootstrap.read_repository())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[nb.name for nb in NOTEBOOKS])
def test_first_code_cell_and_colab_metadata_come_from_the_template(path):
    problems = bootstrap.differences(path, CELL)
    assert not problems, f"{path.name}: {'; '.join(problems)}. Run `make bootstrap` (tools/bootstrap.py)."


def test_the_template_holds_the_version_and_all_three_sources_in_order():
    cell = bootstrap.render("9.8.7", "https://example.org/books/transformer")
    assert 'BOOK_VERSION = "9.8.7"' in cell
    sources = ['f"transformer-book=={BOOK_VERSION}"', 'f"git+https://example.org/books/transformer@v{BOOK_VERSION}"',
               '"git+https://example.org/books/transformer"),']
    at = [cell.index(source) for source in sources]
    assert at == sorted(at), "the first cell should try PyPI, then the tag, then the default branch"


def test_the_cell_shows_one_line_where_its_code_is_folded():
    """Colab shows a folded cell (cellView form, tools/colab.py) as its #@title line: the first line says what it is."""
    first = CELL.splitlines()[0]
    assert first.startswith("#@title ") and "run this cell first" in first


def test_only_chapter_10_asks_colab_for_a_gpu():
    for path in NOTEBOOKS:
        metadata = nbformat.read(path, as_version=nbformat.NO_CONVERT).metadata
        wants_gpu = path.name == "10_training_on_gpu.ipynb"
        assert (metadata.get("accelerator") == "GPU") == wants_gpu, path.name
        assert (metadata["colab"].get("gpuType") == "T4") == wants_gpu, path.name
        assert metadata["kernelspec"]["name"] == "python3", path.name


def _run_cell(tmp_path: Path, prelude: str = "", cell: str = CELL) -> subprocess.CompletedProcess:
    """Run the cell in a fresh Python after `prelude`; returns the finished process."""
    script = tmp_path / "cell.py"
    script.write_text(textwrap.dedent(prelude) + "\n" + cell + "\nprint('cell done')\n", encoding="utf-8")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_cell_is_silent_and_does_not_load_torch_when_the_right_version_imports(tmp_path):
    result = _run_cell(tmp_path, cell=CELL + "\nassert 'torch' not in sys.modules, 'the check loaded PyTorch'")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "cell done\n" and result.stderr == ""


def test_cell_explains_a_missing_package(tmp_path):
    prelude = """
        import sys
        class _NoBook:  # as if transformer_book were not installed
            def find_spec(self, name, path=None, target=None):
                if name == "transformer_book":
                    raise ModuleNotFoundError("No module named 'transformer_book'", name=name)
        sys.meta_path.insert(0, _NoBook())
    """
    result = _run_cell(tmp_path, prelude)
    assert result.returncode != 0
    assert "ImportError: This chapter needs transformer_book" in result.stderr
    assert "Python cannot import transformer_book" in result.stderr
    assert "make setup" in result.stderr and "pip install -e ." in result.stderr


def test_cell_explains_a_wrong_version(tmp_path):
    fake = tmp_path / "old" / "transformer_book"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "0.0.1"\n', encoding="utf-8")
    result = _run_cell(tmp_path, f"import sys; sys.path.insert(0, {str(fake.parent)!r})")
    assert result.returncode != 0
    assert f"Python imports transformer_book 0.0.1, not {VERSION}" in result.stderr


def _fake_python(tmp_path: Path, script: str) -> Path:
    """A stand-in for Colab's Python that runs pip: `script` (sh) gets pip's arguments; each call is logged."""
    log = tmp_path / "pip.log"
    fake_python = tmp_path / "fake-python"
    fake_python.write_text(f'#!/bin/sh\necho "$@" >> {log}\n{script}\n')
    fake_python.chmod(0o755)
    return fake_python


def test_cell_on_colab_tries_pypi_then_the_tag_then_the_default_branch_and_names_each_cause(tmp_path):
    # No release on PyPI, no tag, and the repository cannot be read: every source fails, each for its reason.
    fake_python = _fake_python(tmp_path, """case "$*" in
  *git+*@v*) echo "error: pathspec 'v0' did not match any file(s) known to git" >&2 ;;
  *git+*) echo "remote: Repository not found." >&2 ;;
  *) echo "ERROR: No matching distribution found for transformer-book" >&2 ;;
esac
exit 1""")
    result = _run_cell(tmp_path, _colab_with(fake_python))
    assert result.returncode != 0
    repository = bootstrap.read_repository()
    assert (tmp_path / "pip.log").read_text().splitlines() == [
        f"-m pip install -q transformer-book=={VERSION}",
        f"-m pip install -q git+{repository}@v{VERSION}",
        f"-m pip install -q git+{repository}",
    ]
    assert "Runtime -> Restart session" not in result.stderr  # a restart cannot help: no source has it
    assert (f"It could not be installed (PyPI has no transformer-book {VERSION}; the repository has no tag "
            f"v{VERSION}; the repository cannot be read (is it public?))") in result.stderr
    assert "no network" not in result.stderr
    assert "pip said:" in result.stderr and "No matching distribution" in result.stderr


def test_cell_on_colab_falls_back_to_the_default_branch_and_says_why(tmp_path):
    fake_python = _fake_python(tmp_path, """case "$*" in
  *git+*@v*) echo "fatal: Remote branch v0 not found in upstream origin" >&2; exit 1 ;;
  *git+*) exit 0 ;;
  *) echo "ERROR: Could not find a version that satisfies the requirement" >&2; exit 1 ;;
esac""")
    result = _run_cell(tmp_path, _colab_with(fake_python))
    assert len((tmp_path / "pip.log").read_text().splitlines()) == 3
    assert (f"Installed transformer-book from the default branch (PyPI has no transformer-book {VERSION}; "
            f"the repository has no tag v{VERSION}).") in result.stdout
    # The stand-in installed nothing, so the package still does not import: the advice is a restart.
    assert result.returncode != 0 and "Runtime -> Restart session" in result.stderr


def test_cell_on_colab_without_network_stops_after_the_first_try_and_says_so(tmp_path):
    fake_python = _fake_python(
        tmp_path, 'echo "Failed to establish a new connection: [Errno 101] Network is unreachable" >&2; exit 1')
    result = _run_cell(tmp_path, _colab_with(fake_python))
    assert len((tmp_path / "pip.log").read_text().splitlines()) == 1
    assert result.returncode != 0
    assert "no network connection (trying PyPI)" in result.stderr and "Disconnect and delete runtime" in result.stderr
    assert "PyPI has no" not in result.stderr


def _colab_whose_pip_says(tmp_path: Path, message: str, status: int) -> str:
    """A prelude: Colab, transformer_book not importable, and a pip that prints `message` and exits `status`."""
    fake_python = tmp_path / "fake-python"
    fake_python.write_text(f"#!/bin/sh\necho {message!r} >&2\nexit {status}\n")
    fake_python.chmod(0o755)
    return _colab_with(fake_python)


def _colab_with(fake_python: Path) -> str:
    """A prelude: Colab, transformer_book not importable, and `fake_python` as the Python that runs pip."""
    return f"""
        import sys, types
        sys.modules["google.colab"] = types.ModuleType("google.colab")
        class _NoBook:
            def find_spec(self, name, path=None, target=None):
                if name == "transformer_book":
                    raise ModuleNotFoundError("No module named 'transformer_book'", name=name)
        sys.meta_path.insert(0, _NoBook())
        sys.executable = {str(fake_python)!r}
    """


@pytest.mark.parametrize("pip_says, status, advice", [
    ("Failed to establish a new connection: [Errno 101] Network is unreachable", 1, "no network connection"),
    ("error: pathspec 'v0.0.0' did not match any file(s) known to git", 1, "the repository has no tag v"),
    ("ERROR: No matching distribution found", 1, "PyPI has no transformer-book"),
    ("Killed", 1, "the default branch: pip failed (its message is below)"),
    ("", 0, "Runtime -> Restart session, then run this cell again."),  # installed; the old copy is loaded
])
def test_cell_on_colab_names_why_the_version_is_missing(tmp_path, pip_says, status, advice):
    result = _run_cell(tmp_path, _colab_whose_pip_says(tmp_path, pip_says, status))
    assert result.returncode != 0 and advice in result.stderr


def test_cell_on_colab_installs_nothing_when_the_right_version_imports(tmp_path):
    log = tmp_path / "pip.log"
    prelude = f"""
        import subprocess, sys, types
        sys.modules["google.colab"] = types.ModuleType("google.colab")
        def _refuse(*args, **kwargs):
            open({str(log)!r}, "a").write(repr(args))
            raise AssertionError("pip was run although the right version imports")
        subprocess.run = _refuse
    """
    result = _run_cell(tmp_path, prelude)
    assert result.returncode == 0, result.stderr
    assert not log.exists()


def test_template_tool_reports_a_changed_cell(tmp_path, monkeypatch):
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    nb = nbformat.read(NOTEBOOKS[0], as_version=nbformat.NO_CONVERT)
    bootstrap.first_code_cell(nb).source = CELL.replace("transformer-book==", "transformer_book==")
    nbformat.write(nb, chapters / NOTEBOOKS[0].name)
    monkeypatch.setattr(bootstrap, "CHAPTERS_DIR", chapters)
    monkeypatch.setattr(bootstrap, "REPO_ROOT", tmp_path)
    repository = bootstrap.read_repository()
    monkeypatch.setattr(bootstrap, "read_version", lambda: VERSION)
    monkeypatch.setattr(bootstrap, "read_repository", lambda: repository)
    assert bootstrap.main(["--check"]) == 1
    assert bootstrap.main([]) == 0
    assert bootstrap.main(["--check"]) == 0


def _first_cell_namespace(monkeypatch) -> dict:
    """The names the first cell defines, run here with the package importable and myst_nb's glue recorded."""
    recorded: dict = {}
    fake_myst_nb = type(sys)("myst_nb")
    fake_myst_nb.glue = lambda name, value, display=True: recorded.__setitem__(name, value)
    monkeypatch.setitem(sys.modules, "myst_nb", fake_myst_nb)
    namespace: dict = {}
    exec(CELL, namespace)
    namespace["recorded"] = recorded
    return namespace


@pytest.mark.parametrize(
    ("value", "fmt", "kept"),
    [(0.9493332505226135, ".1%", 0.949), (1.2035442088598823e-06, ".2g", 1.2e-06), (2920.4193, ",.0f", 2920),
     (0.7751265442133224, ".3f", 0.775), (41.538613463555606, ".1f", 41.5), (3e-7, ".0e", 3e-7)],
)
def test_glue_keeps_a_float_at_the_precision_the_page_shows(monkeypatch, value, fmt, kept):
    cell = _first_cell_namespace(monkeypatch)
    cell["glue"]("x", value, fmt)
    assert cell["recorded"]["x"] == kept and format(cell["recorded"]["x"], fmt) == format(value, fmt)


def test_glue_refuses_a_float_without_the_page_format(monkeypatch):
    cell = _first_cell_namespace(monkeypatch)
    with pytest.raises(TypeError, match="format the page shows"):
        cell["glue"]("x", 0.5)
    cell["glue"]("n", 12)  # whole numbers and text are exact: no format needed
    cell["glue"]("s", "text")
    assert cell["recorded"] == {"n": 12, "s": "text"}
