"""Sphinx extension: the book's page shows the code a reader would write, not the tooling around it.

What it does to every notebook page, at build time (the notebooks are never changed):

- Drops nbdev's directive lines (`#| export`, `#| default_exp model`, `#| public`, ...) from the code a code cell
  shows. They tell nbdev where a cell's code goes in the package (`make export`); in their place a cell whose
  code is exported carries a small label naming the module, "exported to transformer_book.model". A cell left
  with no code at all (`#| default_exp x` alone) loses its source box, and with no output, the cell.
- Leaves out the set-up cell, the first code cell of every chapter (written by tools/bootstrap.py): it installs the
  package on Colab and defines `glue` with its fallback for plain Jupyter. The page runs nothing and needs none
  of it; Jupyter and Colab still show and run it.
- Links every image of a page (a cell's figure, a glued figure) to the image file itself, so that on a phone a
  figure too small to read opens full size on tap (as Sphinx already does for images given a width).

nbval's markers are cell tags, not comment lines (tests/test_nbval_markers.py), so they never reach the page either.
Loaded through `sphinx.local_extensions` in _config.yml; tests/test_sphinx_clean_cells.py and the browser test
(no `#|` in any rendered code) check it.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from docutils import nodes

# How the set-up cell's template begins (tools/bootstrap.py; tests/test_sphinx_clean_cells.py keeps them equal).
SETUP_FIRST_LINE = "#@title Set-up: run this cell first"
# An nbdev directive: a comment line that starts with `#|` (nbdev reads only such lines at the top of a cell,
# but a directive line anywhere is tooling, so all are dropped).
DIRECTIVE = re.compile(r"^[ \t]*#\|.*(?:\n|$)", re.MULTILINE)
# nbdev's export directives (`#| export`, `#| exports`, `#| exporti`, optionally naming a module) and the
# notebook's default module (`#| default_exp name`).
EXPORT = re.compile(r"^[ \t]*#\|[ \t]*export[si]?(?:[ \t]+([\w.]+))?[ \t]*$", re.MULTILINE)
DEFAULT_EXP = re.compile(r"^[ \t]*#\|[ \t]*default_exp[ \t]+([\w.]+)", re.MULTILINE)
PACKAGE = "transformer_book"


def strip_directives(code: str) -> str:
    """`code` without its nbdev directive lines and without the blank lines they leave at the top."""
    return DIRECTIVE.sub("", code).lstrip("\n")


def _is_cell(node: nodes.Node) -> bool:
    return isinstance(node, nodes.container) and node.get("nb_element") == "cell_code"


def _is_cell_source(node: nodes.Node) -> bool:
    return isinstance(node, nodes.container) and node.get("nb_element") == "cell_code_source"


def drop_setup_cells(doctree: nodes.document) -> int:
    """Remove every code cell whose source is the set-up cell's; return how many were removed."""
    removed = 0
    for cell in list(doctree.findall(_is_cell)):
        blocks = list(cell.findall(nodes.literal_block))
        if blocks and blocks[0].astext().startswith(SETUP_FIRST_LINE) and cell.parent is not None:
            cell.parent.remove(cell)
            removed += 1
    return removed


def export_label(module: str) -> nodes.paragraph:
    """The line shown above an exported cell's code: which module of the package it goes to."""
    label = nodes.paragraph("", "", classes=["cell-export-label"])
    label += nodes.Text("exported to ")
    label += nodes.literal(text=f"{PACKAGE}.{module}")
    return label


def clean_cell_sources(doctree: nodes.document) -> int:
    """Strip directive lines from every code cell's source box; return how many boxes changed."""
    changed = 0
    sources = list(doctree.findall(_is_cell_source))
    default = next((m.group(1) for source in sources for block in source.findall(nodes.literal_block)
                    for m in DEFAULT_EXP.finditer(block.astext())), None)
    for source in sources:
        for block in list(source.findall(nodes.literal_block)):
            code = block.astext()
            export = EXPORT.search(code)
            module = export and (export.group(1) or default)
            clean = strip_directives(code)
            if clean == code:
                continue
            changed += 1
            if not clean.strip():
                # Nothing left to show (a cell that only names nbdev's module): drop the source box, and the
                # cell too when it has no output either.
                cell = source.parent
                cell.remove(source)
                if not cell.children and cell.parent is not None:
                    cell.parent.remove(cell)
                break
            block.rawsource = clean
            block.children = []
            block += nodes.Text(clean)
            if module:
                source.insert(0, export_label(module))
    return changed


def _on_doctree_read(app: Any, doctree: nodes.document) -> None:
    drop_setup_cells(doctree)
    clean_cell_sources(doctree)


def link_images(app: Any, doctree: nodes.document, docname: str) -> None:
    """Wrap each image of the page (a cell's figure, a glued figure) in a link to its file: full size on tap."""
    builder = app.builder
    if builder.format != "html":
        return
    from sphinx.util.osutil import relative_uri

    imgpath = relative_uri(builder.get_target_uri(docname), builder.imagedir)
    for image in list(doctree.findall(nodes.image)):
        uri = image["uri"]
        if isinstance(image.parent, nodes.reference) or uri not in app.env.images:
            continue
        reference = nodes.reference("", "", internal=True, classes=["output-image-link"])
        reference["refuri"] = posixpath.join(imgpath, app.env.images[uri][1])
        image.replace_self(reference)
        reference.append(image)


def setup(app: Any) -> dict:
    app.connect("doctree-read", _on_doctree_read)
    app.connect("doctree-resolved", link_images)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
