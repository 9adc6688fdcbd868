"""tools/sphinx_light_pages.py: FontAwesome's script replaced after an HTML build, and MathJax's path put in place."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import sphinx_light_pages as ext  # noqa: E402  (tools/sphinx_light_pages.py)


def _app(outdir: Path, fmt: str = "html") -> SimpleNamespace:
    return SimpleNamespace(outdir=str(outdir), builder=SimpleNamespace(format=fmt))


def _built(tmp_path: Path) -> Path:
    scripts = tmp_path / "_static" / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "fontawesome.js").write_text("x" * 100_000)
    (scripts / "fontawesome.js.map").write_text("{}")
    return scripts


def test_fontawesome_script_becomes_a_comment_after_an_html_build(tmp_path):
    scripts = _built(tmp_path)
    ext._stub_fontawesome(_app(tmp_path), None)
    assert (scripts / "fontawesome.js").read_text() == ext.STUB
    assert not (scripts / "fontawesome.js.map").exists()


def test_a_failed_or_other_build_is_left_alone(tmp_path):
    scripts = _built(tmp_path)
    ext._stub_fontawesome(_app(tmp_path), RuntimeError("build failed"))
    ext._stub_fontawesome(_app(tmp_path, fmt="latex"), None)
    assert len((scripts / "fontawesome.js").read_text()) == 100_000


def test_mathjax_path_from_the_config_replaces_the_offline_extensions_choice():
    config = SimpleNamespace(mathjax_path="mathjax/tex-chtml.js", light_mathjax_path="mathjax/startup.js")
    ext._mathjax_path(None, config)
    assert config.mathjax_path == "mathjax/startup.js"
    unset = SimpleNamespace(mathjax_path="mathjax/tex-chtml.js", light_mathjax_path=None)
    ext._mathjax_path(None, unset)
    assert unset.mathjax_path == "mathjax/tex-chtml.js"


def test_the_book_loads_mathjax_components_that_exist():
    config = yaml.safe_load((REPO_ROOT / "_config.yml").read_text(encoding="utf-8"))["sphinx"]
    assert "sphinx_light_pages" in config["local_extensions"]
    settings = config["config"]
    import importlib.util

    mathjax = Path(importlib.util.find_spec("sphinx-mathjax-offline").origin).parent / "static" / "mathjax"
    assert (mathjax / settings["light_mathjax_path"].removeprefix("mathjax/")).is_file()
    for component in settings["mathjax3_config"]["loader"]["load"]:
        assert (mathjax / f"{component}.js").is_file(), component
