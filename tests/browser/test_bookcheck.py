"""The browser checks catch what they claim to catch: small fixture pages, each with one known fault.

A clean page must pass, and each broken page must fail with a message naming the page and the fault:
broken math delimiters, a macro inside math's text, a Markdown table left as text, a wrong image path, dead
internal links, a wrong Colab path, a widget with no static figure, a solution that is not folded, a request that
needs the network, build tooling in a cell's code, a code box narrower than the code's line length, an equation or
figure cut off at phone width, and what axe-core finds serious or critical for accessibility.
"""

from __future__ import annotations

import base64
import importlib.util
import re
import shutil
from pathlib import Path

import pytest
import yaml
from bookcheck import BookChecker, PageReport, Site, format_problems, list_pages, site_from_book

REPO_ROOT = Path(__file__).resolve().parents[2]
COLAB = "https://colab.research.google.com/github/transformer-book/transformer-book/blob/main/chapters"
# A 2x2 red PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGP4z8AARAwQCgAf7gP9i18U1AAAAABJRU5ErkJggg=="
)

# The theme's rocket menu: a button that shows a hidden list of launch links.
LAUNCH = """<div class="dropdown-launch-buttons">
<button onclick="this.nextElementSibling.style.display = 'block'">launch</button>
<ul style="display: none"><li><a href="COLAB/{notebook}" title="Launch on Colab">Colab</a></li></ul></div>"""

HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<link rel="stylesheet" href="_static/togglebutton.css">
<script>let toggleHintShow = 'Click to show'; let toggleHintHide = 'Click to hide';
let toggleOpenOnPrint = 'true'; var togglebuttonSelector = '.toggle, .admonition.dropdown';</script>
<script src="_static/togglebutton.js"></script>
{mathjax}</head>
<body><article class="bd-article"><section id="{title}"><h1>{title}</h1>
"""
TAIL = "</section></article></body></html>\n"

PAGES = {
    # Everything right: rendered math, a loaded image, good links, the right Colab link, a folded solution.
    "good.html": r"""
<p>Inline math <span class="math notranslate nohighlight">\(a^2 + b^2\)</span> and display math:</p>
<div class="math notranslate nohighlight">\[\mathrm{softmax}\left(\frac{QK^\top}{\sqrt{d_k}}\right)V\]</div>
<img src="_images/figure.png" alt="a figure">
<p><a href="other.html#sec">a section</a>, <a href="#good">this page</a>, <a href="https://example.org/">outside</a></p>
LAUNCH(good.ipynb)
<div class="admonition dropdown"><p class="admonition-title">Solution</p><p>The answer.</p></div>
<details class="hide"><summary>Show code</summary><pre>y = 2</pre>
<details class="hide"><summary>Show more</summary><p>More.</p></details></details>
<details class="hide"><summary>Show code</summary><pre>z = 3</pre></details>
<div class="cell"><div class="cell_output"><script type="application/vnd.jupyter.widget-view+json">
{"model_id": "abc", "version_major": 2, "version_minor": 0}</script></div></div>
<p>In Jupyter the cell above is interactive; the page shows a few settings of it below.</p>
<div class="cell"><div class="cell_output"><img src="_images/figure.png" alt="static panels"></div></div>
<div class="cell"><div class="cell_input"><div class="highlight"><pre>x = 1  # code a reader would write</pre><button class="copybtn">copy</button></div></div></div>
<p>A long equation that scrolls in its own box on a phone:</p>
<div class="math notranslate nohighlight" style="overflow-x: auto">\[LONG_SUM\]</div>
""",
    # nbdev's and nbval's lines left in the code a cell shows (the first one folded away, as hide-input does).
    "tooling.html": """<div class="cell"><div class="cell_input" style="display: none"><div class="highlight"><pre>
#| export
def f(): pass</pre></div></div></div>
<div class="cell"><div class="cell_input"><div class="highlight"><pre># NBVAL_IGNORE_OUTPUT
print(1)</pre></div></div></div>
<div class="cell"><div class="cell_input"><div class="highlight"><pre># Set-up
try:
    from myst_nb import glue
except ImportError:
    glue = None</pre></div></div></div>""",
    "narrow_code.html": """<div class="cell"><div class="cell_input"><div class="highlight">
<pre style="width: 300px; overflow-x: auto">y = 2</pre></div></div></div>""",
    "wide_output.html": """<div class="cell"><div class="cell_output"><pre style="width: 300px; overflow-x: auto">
step  loss  accuracy  tokens/s  seconds  learning rate  gradient norm  skipped  memory</pre></div></div>""",
    "clipped_math.html": r'<div class="math notranslate nohighlight" style="overflow: hidden">\[LONG_SUM\]</div>',
    "wide_figure.html": '<img src="_images/figure.png" alt="a figure drawn wider than a phone" style="width: 600px">',
    # A wide drawing fitted to a phone's width (labels too small), and the same drawing scrolling in its box.
    "small_drawing.html": '<figure><img src="_images/drawing.svg" alt="a wide drawing" style="width: 100%"></figure>',
    "scrolling_drawing.html": '<figure><a style="display: block; overflow-x: auto"><img src="_images/drawing.svg" '
                              'alt="a wide drawing" style="width: 100%; min-width: 660px"></a></figure>',
    "uncarded_table.html": '<div class="cards-on-phone"><table><thead><tr><th>Family</th><th>What it changes</th></tr>'
                           '</thead><tbody><tr><td>Longformer</td><td style="white-space: nowrap">a sliding window, '
                           'plus a few global tokens that attend to every position</td></tr></tbody></table></div>',
    "wide_table.html": '<table><thead><tr><th>Layer type</th><th>Complexity per layer</th></tr></thead><tbody><tr>'
                       '<td>Self-attention</td><td style="white-space: nowrap">O(n^2 d) operations, every pair of '
                       'positions compared</td></tr></tbody></table>',
    "other.html": '<section id="sec"><h2>Section</h2><p>Text.</p></section>',
    # A display equation whose closing $$ was lost: MyST leaves the TeX as text.
    "broken_math.html": r"<p>$$ \frac{QK^\top}{\sqrt{d_k}}</p><p>More text.</p>",
    # A cell's Markdown table rendered as CommonMark, which has no tables: a paragraph of pipes.
    "raw_table.html": "<p>| check | compares with |\n| \u2014 | \u2014 |\n| <code>check_attention</code> | chapter 2 |</p>",
    # An underscore escaped inside \text{}: MathJax shows the backslash.
    "text_macro.html": r'<p>The rate peaks at <span class="math notranslate nohighlight">\(\text{warmup\_steps}\)</span>.</p>',
    "bad_image.html": '<img src="_images/missing.png" alt="a figure whose path is wrong">',
    "dead_link.html": '<p><a href="nowhere.html">gone</a> and <a href="other.html#no-such-anchor">no anchor</a></p>',
    "wrong_colab.html": "LAUNCH(02_attention.ipynb)",
    "widget.html": """<div class="cell"><div class="cell_output">
<script type="application/vnd.jupyter.widget-view+json">{"model_id": "abc"}</script></div></div>
<p>Nothing static follows.</p>""",
    # A button with no name (critical for axe-core) and grey text on white (serious: too little contrast).
    "inaccessible.html": '<button></button><p style="color: #bbb">Hard to read.</p>',
    "open_solution.html": '<details open><summary>Solution</summary><p>Shown before any click.</p></details>',
    # Folded boxes whose summary swallows the click: the first of its kind (clicked for real), a later one (clicked
    # by script), and one nested in a box that opens (seen only once its parent is open).
    "stuck_details.html": """
<details class="hide"><summary onclick="event.preventDefault()">Stuck first</summary><p>a</p></details>
<details class="hide"><summary>Opens</summary><p>b</p>
<details class="hide"><summary onclick="event.preventDefault()">Stuck nested</summary><p>c</p></details></details>
<details class="hide"><summary onclick="event.preventDefault()">Stuck later</summary><p>d</p></details>""",
    "needs_network.html": "<p>MathJax from a CDN: <span class=\"math\">\\(x\\)</span></p>",
}
LOCAL_MATHJAX = '<script defer src="_static/mathjax/tex-chtml.js"></script>'
# The page loads MathJax from its CDN, as Sphinx does by default.
MATHJAX = {
    "needs_network.html": '<script defer src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js"></script>',
}


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, f"{name} is not installed"
    return Path(spec.origin).parent


@pytest.fixture(scope="module")
def fixture_site(tmp_path_factory) -> Site:
    root = tmp_path_factory.mktemp("site")
    static = root / "_static"
    static.mkdir()
    (static / "mathjax").symlink_to(_package_dir("sphinx-mathjax-offline") / "static" / "mathjax")
    for asset in ("togglebutton.js", "togglebutton.css"):
        shutil.copy(_package_dir("sphinx_togglebutton") / "_static" / asset, static / asset)
    (root / "_images").mkdir()
    (root / "_images" / "figure.png").write_bytes(PNG)
    (root / "_images" / "drawing.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="820" height="200" viewBox="0 0 820 200">'
        '<text x="10" y="100" font-size="11.5">a label</text></svg>', encoding="utf-8")
    for name, body in PAGES.items():
        title = name.removesuffix(".html")
        body = re.sub(r"LAUNCH\(([^)]+)\)", lambda m: LAUNCH.format(notebook=m.group(1)), body)
        body = body.replace("LONG_SUM", " + ".join(f"a_{{{i}}}" for i in range(40)))
        html = HEAD.format(title=title, mathjax=MATHJAX.get(name, LOCAL_MATHJAX)) + body.replace("COLAB", COLAB) + TAIL
        (root / name).write_text(html, encoding="utf-8")
    colab = {"good.html": f"{COLAB}/good.ipynb", "wrong_colab.html": f"{COLAB}/wrong_colab.ipynb"}
    return Site(root=root, colab=colab, code_columns=110)


@pytest.fixture(scope="module")
def reports(fixture_site) -> dict[str, PageReport]:
    with BookChecker(fixture_site) as checker:
        return {page: checker.check_page(page) for page in list_pages(fixture_site.root)}


def _assert_caught(report: PageReport, *fragments: str) -> None:
    text = format_problems(report)
    for fragment in fragments:
        assert fragment in text, f"expected {fragment!r} among the problems of {report.page}:\n{text}"
    assert text.startswith(report.page), text


def test_clean_pages_pass(reports):
    for page in ("good.html", "other.html"):
        assert not reports[page].problems, format_problems(reports[page])
    assert reports["good.html"].checks >= 15


def test_text_output_wider_than_its_box_is_caught(reports):
    _assert_caught(reports["wide_output.html"], "wide_output.html: at 1280 px a text output is wider than its box: `step")


def test_accessibility_violations_are_caught(reports):
    _assert_caught(reports["inaccessible.html"], "axe-core critical: button-name", "axe-core serious: color-contrast")


def test_broken_math_delimiters_are_caught(reports):
    _assert_caught(reports["broken_math.html"], "broken_math.html: raw TeX ($$) in the visible text")


def test_markdown_table_left_as_text_is_caught(reports):
    _assert_caught(reports["raw_table.html"], "raw_table.html: a Markdown table shown as text, not as a table")


def test_macro_inside_text_in_math_is_caught(reports):
    _assert_caught(reports["text_macro.html"], "text_macro.html: a backslash shown as text in math",
                   r"'\\text{warmup\\_steps}'")


def test_wrong_image_path_is_caught(reports):
    _assert_caught(reports["bad_image.html"], "bad_image.html: image did not load: _images/missing.png",
                   "failed local request")


def test_dead_internal_links_are_caught(reports):
    _assert_caught(reports["dead_link.html"], "internal link to a missing page: nowhere.html",
                   "internal link to a missing anchor: other.html#no-such-anchor")


def test_wrong_colab_path_is_caught(reports):
    _assert_caught(reports["wrong_colab.html"],
                   f"Colab launch link points at {COLAB}/02_attention.ipynb, expected {COLAB}/wrong_colab.ipynb")


def test_widget_without_static_figure_is_caught(reports):
    _assert_caught(reports["widget.html"], "widget output with no static figure next to it")


def test_unfolded_solution_is_caught(reports):
    _assert_caught(reports["open_solution.html"], "collapsible 'Solution' is open before it is clicked")


def test_page_needing_the_network_is_caught(reports):
    _assert_caught(reports["needs_network.html"],
                   "request to another origin (blocked: the page needs the network): https://cdn.jsdelivr.net",
                   "the page has math but MathJax did not load", "math not rendered by MathJax")


def test_build_tooling_in_code_is_caught(reports):
    _assert_caught(reports["tooling.html"], "nbdev directive (#|) in the code a cell shows: `#| export`",
                   "nbval marker (NBVAL_...) in the code a cell shows: `# NBVAL_IGNORE_OUTPUT`",
                   "the book's set-up (`from myst_nb import ...`) in the code a cell shows: `# Set-up`")


def test_code_box_narrower_than_the_line_length_is_caught(reports):
    _assert_caught(reports["narrow_code.html"], "code box(es) show fewer than the 110 columns the code is written to")


def test_equation_cut_off_on_a_phone_is_caught(reports):
    _assert_caught(reports["clipped_math.html"], "at phone width a display equation is cut off", "a0+a1+a2")


def test_figure_wider_than_a_phone_is_caught(reports):
    _assert_caught(reports["wide_figure.html"], "at phone width a figure sticks out of the screen: _images/figure.png")


def test_drawing_too_small_to_read_on_a_phone_is_caught(reports):
    _assert_caught(reports["small_drawing.html"], "a drawing is shrunk until its labels cannot be read: _images/drawing.svg")


def test_drawing_scrolling_in_its_box_on_a_phone_passes(reports):
    assert not reports["scrolling_drawing.html"].problems, format_problems(reports["scrolling_drawing.html"])


def test_cards_on_phone_table_that_still_scrolls_is_caught(reports):
    _assert_caught(reports["uncarded_table.html"], "a cards-on-phone table scrolls sideways", "'Family'")


def test_a_table_wider_than_a_phone_is_caught(reports):
    _assert_caught(reports["wide_table.html"], "a table scrolls sideways and hides its last columns", "'Layer type'")


def test_the_line_length_comes_from_ruff(tmp_path):
    from bookcheck import ruff_line_length

    assert ruff_line_length(REPO_ROOT / "pyproject.toml") == 116
    assert ruff_line_length(tmp_path / "pyproject.toml") is None


def test_colab_links_come_from_the_config(tmp_path):
    """The expected launch link is built from _config.yml's repository and the notebook's path."""
    config = yaml.safe_load((REPO_ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["repository"]["url"] == "https://github.com/transformer-book/transformer-book"
    assert config["repository"]["branch"] == "colab"
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "01_rnn_limits.ipynb").write_text("{}", encoding="utf-8")
    build = tmp_path / "_build" / "html"
    (build / "_sources" / "chapters").mkdir(parents=True)
    (build / "_sources" / "chapters" / "01_rnn_limits.ipynb").write_text("{}", encoding="utf-8")
    site = site_from_book(build, tmp_path / "_config.yml")
    assert site.colab == {
        "chapters/01_rnn_limits.html": "https://colab.research.google.com/github/transformer-book/"
        "transformer-book/blob/colab/chapters/01_rnn_limits.ipynb"
    }
    (tmp_path / "chapters" / "01_rnn_limits.ipynb").unlink()
    with pytest.raises(FileNotFoundError, match="chapters/01_rnn_limits.ipynb"):
        site_from_book(build, tmp_path / "_config.yml")


def test_folded_boxes_that_do_not_open_are_caught_clicked_for_real_by_script_and_nested(reports):
    report = reports["stuck_details.html"]
    _assert_caught(report, *(f"collapsible {name!r} does not open when clicked"
                             for name in ("Stuck first", "Stuck nested", "Stuck later")))
    assert "'Opens'" not in format_problems(report) and len(report.problems) == 3, format_problems(report)
