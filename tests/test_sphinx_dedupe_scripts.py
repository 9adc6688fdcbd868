"""tools/sphinx_dedupe_scripts.py: a workaround for a Sphinx bug, kept only while the pinned Sphinx has the bug.

The bug: a script added with `app.add_js_file(None, body=...)` once the HTML builder exists (sphinx-thebe and
sphinx-togglebutton do so) is written twice on every page. Sphinx fixed it in 8.2 (sphinx-doc/sphinx#13402), but
Jupyter Book 1 requires Sphinx 7. A one-page project is built here with the Sphinx of this environment (the
version constraints.txt pins): without the extension the page must still hold the script twice; when it holds
it once, the bug is gone and the first test says to delete the workaround.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sphinx

TOOLS = Path(__file__).resolve().parents[1] / "tools"
BODY = "const LATE_SCRIPT = 1;"
# What sphinx-thebe does: an inline script added once the builder exists.
LATE_SCRIPT_EXTENSION = f'''
def _add(app):
    app.add_js_file(None, body={BODY!r})

def setup(app):
    app.connect("builder-inited", _add)
'''


def copies_on_the_page(tmp_path: Path, extensions: list[str]) -> int:
    """Build a one-page project with `extensions` and count the inline script on its page."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "late_script.py").write_text(LATE_SCRIPT_EXTENSION, encoding="utf-8")
    (source / "conf.py").write_text(
        f"import sys\nsys.path[:0] = [{str(source)!r}, {str(TOOLS)!r}]\nextensions = {extensions!r}\n",
        encoding="utf-8")
    (source / "index.rst").write_text("Page\n====\n\nText.\n", encoding="utf-8")
    out = tmp_path / "html"
    built = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", str(source), str(out)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return (out / "index.html").read_text(encoding="utf-8").count(BODY)


def test_the_pinned_sphinx_still_writes_the_script_twice(tmp_path):
    assert copies_on_the_page(tmp_path, ["late_script"]) == 2, (
        f"Sphinx {sphinx.__version__} writes a late inline script once: the bug is gone. Delete "
        "tools/sphinx_dedupe_scripts.py, its line in _config.yml, this test, and its line in CONTRIBUTING.md.")


def test_the_extension_leaves_one_copy(tmp_path):
    assert copies_on_the_page(tmp_path, ["late_script", "sphinx_dedupe_scripts"]) == 1
