"""The notebooks are the source: src/transformer_book/ must be exactly what they export, and every
chapter must be stored ready to read and to run (ids on every cell, outputs stored; tests/test_bootstrap.py checks
the first cell).
"""

from __future__ import annotations

import json
import sys
from importlib import import_module
from pathlib import Path

import nbformat
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import export  # noqa: E402  (tools/export.py)

NOTEBOOKS = sorted((REPO_ROOT / "chapters").glob("*.ipynb"))
NB_IDS = [nb.name for nb in NOTEBOOKS]
VERSION = export.read_version(REPO_ROOT / "pyproject.toml")


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=nbformat.NO_CONVERT)


def _code_cells(nb) -> list:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def _first_different_line(a: bytes, b: bytes) -> int:
    lines_a, lines_b = a.splitlines(keepends=True), b.splitlines(keepends=True)
    for number, (line_a, line_b) in enumerate(zip(lines_a, lines_b, strict=False), start=1):
        if line_a != line_b:
            return number
    return min(len(lines_a), len(lines_b)) + 1


def test_src_is_exactly_what_the_notebooks_export(tmp_path):
    generated = export.build_package(REPO_ROOT, tmp_path)
    expected = export.package_files(generated)
    actual = export.package_files(REPO_ROOT / export.PACKAGE_DIR)
    problems = []
    for rel in sorted(expected.keys() | actual.keys()):
        path = export.PACKAGE_DIR / rel
        if rel not in actual:
            problems.append(f"{path}: missing (a chapter exports it)")
        elif rel not in expected:
            origin = "generated earlier" if actual[rel].startswith(export.GENERATED_HEADERS) else "not generated"
            problems.append(f"{path}: no chapter exports this file ({origin})")
        elif actual[rel] != expected[rel]:
            line = _first_different_line(actual[rel], expected[rel])
            problems.append(f"{path}: differs from the export of the notebooks (first difference at line {line})")
    assert not problems, (
        "src/transformer_book/ is out of sync with chapters/ (edit the notebook, then run `make export`; "
        "never edit src/ by hand):\n  " + "\n  ".join(problems)
    )


def test_export_is_deterministic(tmp_path):
    first = export.package_files(export.build_package(REPO_ROOT, tmp_path / "a"))
    second = export.package_files(export.build_package(REPO_ROOT, tmp_path / "b"))
    assert first == second


def test_init_lists_only_existing_modules(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "recurrent.py").write_text("__all__ = ['RNNCell', 'LSTMCell', 'GRUCell', 'helper']\n", encoding="utf-8")
    wanted = {"recurrent": ["RNNCell", "LSTMCell", "GRUCell"], "attention": ["scaled_dot_product_attention"]}
    init = export.render_init(package, "9.9.9", wanted)
    assert '__version__ = "9.9.9"' in init
    assert "from .recurrent import GRUCell, LSTMCell, RNNCell" in init
    assert "attention" not in init
    (package / "attention.py").write_text("__all__ = ['something_else']\n", encoding="utf-8")
    with pytest.raises(export.ExportError, match="does not export scaled_dot_product_attention"):
        export.render_init(package, "9.9.9", wanted)


def test_public_names_are_read_from_the_notebooks(tmp_path):
    def cell(text):
        return {"cell_type": "code", "source": text.splitlines(keepends=True)}

    cells = [cell("#| default_exp model\nimport torch"), cell("#| export\n#| public Transformer, TransformerConfig\nx = 1"),
             cell("#| export interop\n#| public to_torch_transformer\ny = 2"), cell("#| public in a comment only")]
    (tmp_path / "06_x.ipynb").write_text(json.dumps({"cells": cells}), encoding="utf-8")
    assert export.public_names(tmp_path) == {
        "model": ["Transformer", "TransformerConfig"],  # the last cell exports nothing: its line declares nothing
        "interop": ["to_torch_transformer"],
    }


def test_init_wraps_an_import_longer_than_a_line_and_every_main_name_imports():
    init = (REPO_ROOT / "src" / "transformer_book" / "__init__.py").read_text(encoding="utf-8")
    assert max(len(line) for line in init.splitlines()) <= export.LINE_LENGTH
    assert "    from .efficient import (\n        GroupedQueryAttention,\n" in init  # too long for one line
    import transformer_book

    for module, names in export.public_names(REPO_ROOT / "chapters").items():
        for name in names:
            assert getattr(transformer_book, name) is getattr(import_module(f"transformer_book.{module}"), name)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NB_IDS)
def test_cells_have_ids_and_code_was_run_in_order(path):
    nb = _read(path)
    nbformat.validate(nb)
    assert (nb.nbformat, nb.nbformat_minor) >= (4, 5), f"{path.name}: nbformat {nb.nbformat}.{nb.nbformat_minor} has no cell ids"
    missing = [i for i, cell in enumerate(nb.cells) if not cell.get("id")]
    assert not missing, f"{path.name}: cells without an id: {missing}"
    counts = [cell.execution_count for cell in _code_cells(nb) if cell.source.strip()]
    not_run = [i for i, cell in enumerate(nb.cells)
               if cell.cell_type == "code" and cell.source.strip() and cell.execution_count is None]
    assert not not_run, f"{path.name}: code cells never executed (run `make execute NB=chapters/{path.name}`): {not_run}"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), (
        f"{path.name}: cells were not run top to bottom in one session (execution counts {counts}); "
        f"run `make execute NB=chapters/{path.name}`"
    )


def test_every_module_opens_with_a_docstring_naming_its_chapter():
    import ast

    problems = []
    for module in sorted((REPO_ROOT / export.PACKAGE_DIR).rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(module.read_text(encoding="utf-8")))
        if not docstring:
            problems.append(f"{module.name}: no module docstring")
        elif "chapter" not in docstring.lower():
            problems.append(f"{module.name}: the docstring does not say which chapter explains it: {docstring!r}")
    assert not problems, "\n".join(problems)


def test_hoist_docstring_moves_the_first_cell_docstring_above_all():
    text = ('# AUTOGENERATED! header\n\n# %% auto #0\n__all__ = [\'f\']\n\n'
            '# %% ../../chapters/x.ipynb #abc123\n"""What this holds (chapter 1)."""\nimport os\n')
    hoisted = export.hoist_docstring(text)
    assert hoisted.startswith('# AUTOGENERATED! header\n"""What this holds (chapter 1)."""\n')
    assert hoisted.count('"""What this holds') == 1 and "import os" in hoisted
    no_docstring = text.replace('"""What this holds (chapter 1)."""\n', "")
    assert export.hoist_docstring(no_docstring) == no_docstring
