"""Sphinx extension: lighter pages. The theme's icons from FontAwesome's web font, not from its 1.5 MB script;
MathJax from its components, not from its combined file.

pydata-sphinx-theme puts `<script src="_static/scripts/fontawesome.js">` in every page's head (its template
writes the tag; no option removes it). That script, 1.49 MB, swaps every `<i class="fa-...">` for an inline SVG.
The theme's stylesheet already holds FontAwesome's web-font rules and the theme ships the fonts
(`_static/vendor/fontawesome/.../webfonts/`), so without the script the same icons are drawn by the font: a
chapter page then loads one or two woff2 files (about 160 KB for the solid face) instead of the script.

After the build this replaces the script in the output with a one-line comment, and drops its source map.

MathJax: sphinx-mathjax-offline sets `mathjax_path` to its combined `tex-chtml.js` (1.16 MB, the right-click menu
included) in its own setup, over any value in _config.yml. `light_mathjax_path` (set in _config.yml) replaces it
once the configuration is read; `mathjax3_config` there names the components the loader fetches.

CONTRIBUTING.md records the bytes a chapter page loads before and after. Loaded through `sphinx.local_extensions`
in _config.yml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STUB = "/* Not used: the theme CSS draws the icons with the FontAwesome web font (tools/sphinx_light_pages.py). */\n"


def _stub_fontawesome(app: Any, exception: Exception | None) -> None:
    if exception is not None or getattr(app.builder, "format", "") != "html":
        return
    script = Path(app.outdir) / "_static" / "scripts" / "fontawesome.js"
    if script.is_file():
        script.write_text(STUB, encoding="utf-8")
    script.with_name("fontawesome.js.map").unlink(missing_ok=True)


def _mathjax_path(app: Any, config: Any) -> None:
    if config.light_mathjax_path:
        config.mathjax_path = config.light_mathjax_path


def setup(app: Any) -> dict:
    app.add_config_value("light_mathjax_path", None, "html")
    app.connect("config-inited", _mathjax_path, priority=900)
    app.connect("build-finished", _stub_fontawesome)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
