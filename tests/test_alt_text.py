"""Every figure of the book says what it shows to a reader who cannot see it (alt text).

A figure drawn by a code cell takes its alt text from the cell's metadata, as myst-nb reads it:

    "metadata": {"mystnb": {"image": {"alt": "Gradient norm against distance: ..."}}}

(myst-nb's `render_image_options`, set per cell under `mystnb.image`). Without it the page's <img> gets the image's
file path as alt text. A `{glue:figure}` or `{figure}` directive takes `:alt:`. Outputs glued with
`display=False` are shown where a `{glue:figure}` places them, so they are checked there.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import figure_alt  # noqa: E402  (tools/figure_alt.py)

NOTEBOOKS = sorted((REPO_ROOT / "chapters").glob("*.ipynb"))
PAGES = sorted((REPO_ROOT / "book").glob("*.md"))
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")
# Figures drawn by cells that have no alt text yet: none. The first test fails when a new figure comes without alt
# text (give it one in tools/figure_alt.yml, then run `python tools/figure_alt.py`).
KNOWN_MISSING = 0


def good_alt(alt: object) -> bool:
    """Alt text that describes: a few words, not a file name or path."""
    if not isinstance(alt, str) or len(alt.split()) < 3:
        return False
    return not re.search(r"\.(png|jpe?g|svg|gif)\b|_images/|jupyter_execute", alt)


def shown_images(path: Path):
    """(cell id, alt text or None) for every image output the page shows of the notebook at `path`."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        metadata = cell.get("metadata", {})
        if {"remove-output", "remove_output", "remove-cell"} & set(metadata.get("tags", [])):
            continue
        alt = metadata.get("mystnb", {}).get("image", {}).get("alt")
        for output in cell.get("outputs", []):
            if "scrapbook" in output.get("metadata", {}):
                continue  # glued: shown by a {glue:figure}, which has its own :alt:
            if any(kind in output.get("data", {}) for kind in IMAGE_TYPES):
                yield cell.get("id", "?"), alt


def figure_directives(text: str):
    """(first line, options) of every ```{figure} / ```{glue:figure} / ```{image} block in MyST text."""
    for match in re.finditer(r"^(`{3,}|:{3,})\{(figure|glue:figure|glue:|image)\}[^\n]*\n((?::[^\n]*\n)*)", text,
                             re.MULTILINE):
        yield match.group(0).splitlines()[0], match.group(3)


def alt_option(options: str) -> str | None:
    """The `:alt:` option's text among a directive's option lines, or None."""
    match = re.search(r"^:alt:(.*)$", options, re.MULTILINE)
    return match.group(1).strip() if match else None


def missing_alt() -> list[str]:
    missing = []
    for path in NOTEBOOKS:
        missing += [f"{path.name}: cell {cell_id}: {alt!r}" for cell_id, alt in shown_images(path) if not good_alt(alt)]
    return missing


def test_no_new_figure_comes_without_alt_text():
    missing = missing_alt()
    assert len(missing) <= KNOWN_MISSING, (
        f"{len(missing)} figures without alt text, {KNOWN_MISSING} known: give the new ones cell metadata "
        '{"mystnb": {"image": {"alt": "what the figure shows"}}}\n' + "\n".join(missing))


def test_every_figure_directive_has_alt_text():
    missing = []
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "markdown":
                source = "".join(cell["source"])
                missing += [f"{path.name}: cell {cell.get('id')}: {first}"
                            for first, options in figure_directives(source) if not good_alt(alt_option(options))]
    for path in PAGES:
        missing += [f"{path.name}: {first}" for first, options in figure_directives(path.read_text(encoding="utf-8"))
                    if not good_alt(alt_option(options))]
    assert not missing, "figures without :alt: text:\n" + "\n".join(missing)


def test_alt_text_is_told_from_a_file_name():
    assert good_alt("Gradient norm against distance, falling by ten orders of magnitude")
    assert not good_alt("../_images/9bd2eaf236b5fb53be6.png")
    assert not good_alt("figure")
    assert not good_alt(None)
    options = ":alt: A block diagram of the model\n:name: fig\n"
    assert list(figure_directives("```{glue:figure} ch6_architecture\n" + options + "\nCaption\n```\n")) == [
        ("```{glue:figure} ch6_architecture", options)]
    assert alt_option(options) == "A block diagram of the model"
    assert alt_option(":name: fig\n") is None


def test_the_notebooks_hold_the_alt_texts_of_figure_alt_yml(capsys):
    assert figure_alt.main(["--check"]) == 0, capsys.readouterr().out + "\nRun `python tools/figure_alt.py`."


def test_every_figure_drawn_by_a_cell_has_alt_text():
    missing = missing_alt()
    assert not missing, f"{len(missing)} figures without alt text:\n" + "\n".join(missing)
