"""Open the built HTML book in a real browser, offline, and check what a reader sees.

Used by tests/browser/test_book.py (`make test-book`) and by the fixture tests in
tests/browser/test_bookcheck.py. It can also be run by hand:

    .venv/bin/python tests/browser/bookcheck.py _build/html

The browser is Debian's `chromium`, driven by Playwright (Playwright's own browser download needs the
internet). The book is served from 127.0.0.1 on a free port and every request to any other origin is
aborted, so a page that needs the network fails the check.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, sync_playwright

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
NAVIGATION_TIMEOUT_MS = 30_000
MATHJAX_TIMEOUT_MS = 20_000
TOGGLE_TIMEOUT_MS = 3_000
SEARCH_TIMEOUT_MS = 15_000
# Folders of a Sphinx build that hold assets, not pages.
ASSET_DIRS = {"_static", "_sources", "_images", "_downloads", "screenshots"}
# Raw TeX that MathJax should have replaced; looked for in the visible text outside code.
RAW_TEX = [
    (re.compile(r"\$\$"), "$$"),
    (re.compile(r"\\\(|\\\)"), "\\( or \\)"),
    (re.compile(r"\\\[|\\\]"), "\\[ or \\]"),
    (re.compile(r"\\(?:frac|sqrt|sum|prod|mathrm|mathbf|operatorname|text|left|right|top|cdot|alpha|beta|"
                r"theta|sigma|epsilon|partial|begin|end|log|exp|tanh|softmax)\b"), "a TeX command"),
    (re.compile(r"(?<![\w$])\$[^\s$][^$\n]{0,120}?[\\^_{}][^$\n]{0,120}?\$(?![\w$])"), "$...$"),
]
# A Markdown table that was not parsed (a cell's text/markdown output is CommonMark unless the cell asks for GFM):
# its separator row stays as text, with `---` turned into a dash by the smart quotes.
RAW_TABLE = re.compile(r"\|\s*(?::?-{3,}:?|:?[\u2013\u2014]:?)\s*\|")
SNIPPET_CHARS = 40
# axe-core findings that fail a page (its impacts are minor, moderate, serious and critical).
AXE_FAILING_IMPACTS = ("serious", "critical")
# Sphinx's generated search page has no <h1> in its article.
PAGES_WITHOUT_TITLE = {"search.html"}


class BrowserMissing(RuntimeError):
    """Raised when no `chromium` binary is on PATH."""


def find_chromium() -> str:
    """Return the path of Debian's chromium, or raise BrowserMissing with what to do."""
    exe = shutil.which("chromium")
    if exe is None:
        raise BrowserMissing(
            "chromium was not found on PATH. Run `make setup` (it installs Debian's chromium with apt-get) "
            "or install a Chromium whose binary is called `chromium`."
        )
    return exe


@dataclass
class Site:
    """What the checker needs to know about a built book.

    root: the folder served (for the book, _build/html).
    colab: page path relative to root (for example "chapters/01_rnn_limits.html") -> the launch link
        its Colab button must have. Pages not listed are not chapters and need no button.
    repository_url: the repository button's link, if the book has one.
    code_columns: the line length the code is written to (ruff's, in pyproject.toml); at desktop width every code
        cell's box must show that many columns. None: not checked.
    """

    root: Path
    colab: dict[str, str] = field(default_factory=dict)
    repository_url: str | None = None
    code_columns: int | None = None


def site_from_book(build_dir: Path, config_file: Path) -> Site:
    """Describe the book built in `build_dir` from its Jupyter Book `_config.yml`.

    Chapter pages are the pages built from a notebook (their source under _sources/ is an .ipynb). The
    expected Colab link is made from the repository and branch in the config and the notebook's path in
    the repository, and that notebook must exist in the repository checkout next to the config.
    """
    import yaml

    config = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    repo = config["repository"]
    repo_url = repo["url"].rstrip("/")
    branch = repo.get("branch", "main")
    book_path = (repo.get("path_to_book") or "").strip("/")
    colab_url = config["launch_buttons"]["colab_url"].rstrip("/")
    owner_repo = urlsplit(repo_url).path.strip("/")
    repo_root = config_file.parent
    colab: dict[str, str] = {}
    for source in sorted((build_dir / "_sources").rglob("*.ipynb")):
        rel_nb = source.relative_to(build_dir / "_sources").as_posix()
        in_repo = f"{book_path}/{rel_nb}" if book_path else rel_nb
        if not (repo_root / in_repo).is_file():
            raise FileNotFoundError(f"{in_repo} is built into the book but not in the repository")
        colab[rel_nb.removesuffix(".ipynb") + ".html"] = f"{colab_url}/github/{owner_repo}/blob/{branch}/{in_repo}"
    use_repo_button = bool(config.get("html", {}).get("use_repository_button"))
    return Site(root=build_dir, colab=colab, repository_url=repo_url if use_repo_button else None,
                code_columns=ruff_line_length(repo_root / "pyproject.toml"))


def ruff_line_length(pyproject: Path) -> int | None:
    """`[tool.ruff] line-length` of a pyproject.toml, or None when there is none."""
    import tomllib

    if not pyproject.is_file():
        return None
    return tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("ruff", {}).get("line-length")


def list_pages(root: Path) -> list[str]:
    """All HTML pages of a build, as paths relative to root (assets and screenshots excluded)."""
    pages = []
    for path in sorted(root.rglob("*.html")):
        rel = path.relative_to(root)
        if rel.parts[0] in ASSET_DIRS:
            continue
        pages.append(rel.as_posix())
    return pages


@functools.cache
def _anchors(path: Path) -> frozenset[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return frozenset(re.findall(r"""\s(?:id|name)=["']([^"']+)["']""", text))


def _redirect_target(path: Path) -> str | None:
    match = re.search(r"""http-equiv=["']refresh["'][^>]*content=["'][^"']*url=([^"']+)["']""",
                      path.read_text(encoding="utf-8", errors="replace"), re.IGNORECASE)
    return match.group(1) if match else None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


class LocalServer:
    """Serve a folder on 127.0.0.1 at a free port, in a background thread."""

    def __init__(self, root: Path):
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LocalServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# Runs in the page after MathJax finished. Collects everything the Python side judges.
_COLLECT_JS = r"""
() => {
  const visible = (el) => {
    if (!el.isConnected) return false;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || style.display === 'none') return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const mathEls = Array.from(document.querySelectorAll('span.math, div.math'));
  const unrendered = mathEls.filter(el => !el.querySelector('mjx-container'))
                            .map(el => el.textContent.trim().slice(0, 60));
  const mathErrors = Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'))
                          .map(el => (el.getAttribute('data-mjx-error') || el.textContent).slice(0, 80));
  // A backslash drawn inside \\text{...}: MathJax does not read macros in text mode, so \\_ shows as written.
  const mathItems = (window.MathJax && MathJax.startup && MathJax.startup.document)
    ? Array.from(MathJax.startup.document.math) : [];
  const textMacros = mathItems.filter(item => item.typesetRoot && item.typesetRoot.querySelector('mjx-mtext mjx-c.mjx-c5C'))
                              .map(item => item.math.trim().slice(0, 60));
  const clone = document.body.cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, textarea, mjx-container, .highlight, .MathJax_Preview')
       .forEach(el => el.remove());
  const text = clone.textContent.replace(/\s+/g, ' ');
  const images = Array.from(document.images).map(img => ({
    src: img.getAttribute('src') || '', ok: img.complete && img.naturalWidth > 0}));
  const links = Array.from(document.querySelectorAll('a[href]')).map(a => ({
    href: a.href, raw: a.getAttribute('href'), text: a.textContent.trim().slice(0, 40)}));
  const launch = Array.from(document.querySelectorAll('a[href*="colab.research.google.com"]'))
                      .map(a => a.getAttribute('href'));
  const repoButtons = Array.from(document.querySelectorAll('a[href]'))
                           .filter(a => a.closest('.article-header-buttons, .header-article-items'))
                           .map(a => a.getAttribute('href'));
  const codeBlocks = document.querySelectorAll('div.highlight pre').length;
  // Build tooling in the code a cell shows (folded cells included): nbdev directives, nbval markers.
  const firstLine = (pre) => pre.textContent.trim().split('\n')[0].slice(0, 60);
  const cellCode = Array.from(document.querySelectorAll('.cell_input pre'));
  const directives = cellCode.filter(pre => /^[ \t]*#\|/m.test(pre.textContent)).map(firstLine);
  const nbvalMarkers = cellCode.filter(pre => /NBVAL_/.test(pre.textContent)).map(firstLine);
  const glueImports = cellCode.filter(pre => /from myst_nb import/.test(pre.textContent)).map(firstLine);
  // How many monospace columns each visible code cell's box shows, and whether it scrolls sideways.
  const codeBoxes = cellCode.filter(visible).map(pre => {
    const style = getComputedStyle(pre);
    const probe = document.createElement('span');
    probe.textContent = 'x'.repeat(100);
    probe.style.whiteSpace = 'pre';
    pre.appendChild(probe);
    const column = probe.getBoundingClientRect().width / 100;
    probe.remove();
    const inner = pre.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const longest = Math.max(0, ...pre.textContent.replace(/\n$/, '').split('\n').map(line => line.length));
    return {columns: Math.floor(inner / column), longest, scrolls: pre.scrollWidth > pre.clientWidth + 1,
            where: firstLine(pre)};
  });
  // Text outputs (printed tables, logs) whose lines run past their box.
  const wideOutputs = Array.from(document.querySelectorAll('.cell_output pre')).filter(visible)
    .filter(pre => pre.scrollWidth > pre.clientWidth + 1).map(firstLine);
  const copyButtons = document.querySelectorAll('button.copybtn').length;
  // Widgets: an output that only a live Jupyter can draw, or the manager's placeholder text.
  const widgetMarkers = [];
  document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"], .jupyter-widgets, .widget-subarea')
          .forEach(el => widgetMarkers.push(el));
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    if (/Loading widget/i.test(walker.currentNode.textContent) && visible(walker.currentNode.parentElement))
      widgetMarkers.push(walker.currentNode.parentElement);
  }
  const hasFigure = (el) => el && Array.from(el.querySelectorAll('img')).some(i => i.complete && i.naturalWidth > 0);
  const widgets = widgetMarkers.map(el => {
    const cell = el.closest('.cell') || el.parentElement;
    let ok = hasFigure(cell);
    let sib = cell.nextElementSibling;
    for (let i = 0; i < 4 && sib && !ok; i++, sib = sib.nextElementSibling) {
      if (sib.matches('section, h1, h2, h3')) break;
      ok = hasFigure(sib);
    }
    const source = cell.querySelector('.cell_input pre');
    return {ok, where: source ? source.textContent.trim().split('\n')[0].slice(0, 60) : el.tagName};
  });
  return {unrendered, mathErrors, textMacros, mathCount: mathEls.length, text, images, links, launch, repoButtons,
          codeBlocks, copyButtons, widgets, directives, nbvalMarkers, glueImports, codeBoxes, wideOutputs, hasMathJax: !!(window.MathJax && window.MathJax.startup),
          title: document.title, h1: document.querySelectorAll('article h1').length,
          overflow: document.documentElement.scrollWidth - window.innerWidth};
}
"""

# Opens every folded solution and hidden cell, as a reader who taps them does.
_OPEN_FOLDED_JS = """
() => {
  for (const box of document.querySelectorAll('article details')) box.open = true;
  for (const box of document.querySelectorAll('article .admonition.toggle.toggle-hidden')) {
    const button = box.querySelector('button.toggle-button');
    if (button) button.click();
  }
}
"""

# Runs at phone width: what sticks out of the screen or is cut off by a box that does not scroll.
_PHONE_JS = r"""
() => {
  const SVG_MIN_SCALE = 0.78;
  const clippedMath = [];
  for (const m of document.querySelectorAll('article mjx-container[display="true"]')) {
    if (!m.getClientRects().length) continue;
    const math = m.querySelector('mjx-math') || m;
    const r = math.getBoundingClientRect();
    let el = m, verdict = null;
    while (el && el !== document.body && !verdict) {
      const style = getComputedStyle(el), box = el.getBoundingClientRect();
      if (r.right > box.right + 1 || r.left < box.left - 1) {
        if (['auto', 'scroll'].includes(style.overflowX)) verdict = 'scrolls';
        else if (['hidden', 'clip'].includes(style.overflowX)) verdict = 'clipped';
      }
      el = el.parentElement;
    }
    if (!verdict && (r.right > window.innerWidth + 1 || r.left < -1)) verdict = 'clipped';
    if (verdict === 'clipped') clippedMath.push((m.closest('.math') || m).textContent.trim().slice(0, 50));
  }
  // An image wider than the screen is fine only inside a box that scrolls sideways and itself fits the screen.
  const inScrollingBox = img => {
    for (let el = img.parentElement; el && el !== document.body; el = el.parentElement) {
      const box = el.getBoundingClientRect();
      if (['auto', 'scroll'].includes(getComputedStyle(el).overflowX))
        return box.right <= window.innerWidth + 1 && box.left >= -1;
    }
    return false;
  };
  const wideFigures = Array.from(document.querySelectorAll('article img'))
    .filter(img => { const r = img.getBoundingClientRect(); return r.width > 0 && (r.right > window.innerWidth + 1 || r.left < -1); })
    .filter(img => !inScrollingBox(img))
    .map(img => img.getAttribute('src'));
  // A drawing (SVG) shown at less than SVG_MIN_SCALE of its own size: the book's drawings set their smallest labels
  // at 11.5 px, which then fall under 9 px.
  const smallDrawings = Array.from(document.querySelectorAll('article figure img'))
    .filter(img => /\.svg$/.test(img.getAttribute('src') || '') && img.naturalWidth > 0)
    .filter(img => img.getBoundingClientRect().width / img.naturalWidth < SVG_MIN_SCALE)
    .map(img => img.getAttribute('src'));
  // A table wider than its box by more than a border's width: its last columns are off the screen.
  const wideTables = Array.from(document.querySelectorAll('article table'))
    .filter(t => t.scrollWidth > t.parentElement.clientWidth + 2)
    .map(t => [(t.querySelector('th, td') || t).textContent.trim().slice(0, 40), Boolean(t.closest('.cards-on-phone'))]);
  return {overflow: document.documentElement.scrollWidth - window.innerWidth, clippedMath, wideFigures, wideTables,
          smallDrawings};
}
"""

# axe-core (its axe.min.js, shipped by the axe-playwright-python package) on the page as a reader first sees it.
# Only violations are collected, and axe does not fetch the stylesheets again (preload). Colour contrast is the
# slow rule (half a minute on a chapter, nearly all of it in the syntax-highlighted code's thousands of spans):
# it runs on all of a page's text, except the highlighted code, which it checks on the first page that has some
# (every page uses the same highlighting styles). Every other rule runs on the whole page.
_AXE_RUN_JS = """
async (withCode) => {
  const options = {resultTypes: ['violations'], preload: false};
  const rest = await axe.run(document, {...options, rules: {'color-contrast': {enabled: false}}});
  const contrast = await axe.run(withCode ? document : {exclude: [['.highlight']]},
                                 {...options, runOnly: ['color-contrast']});
  return [...rest.violations, ...contrast.violations].map(v => ({
    id: v.id, impact: v.impact, help: v.help, count: v.nodes.length,
    target: v.nodes.length ? v.nodes[0].target.join(' ') : ''}));
}
"""


# Each <details> of the article: where it is among them, whether a reader sees it, its summary, open or not.
_DETAILS_JS = """els => els.map((el, index) => ({
  index, open: el.open, kind: el.className,
  shown: el.checkVisibility({visibilityProperty: true}),  // false inside a closed <details>, which keeps a box
  name: (el.querySelector('summary')?.innerText || '').trim(),
}))"""


def axe_script() -> str:
    """The axe-core script; raises ImportError with what to install when the package is missing."""
    try:
        from axe_playwright_python.base import AXE_FILE_PATH
    except ImportError as err:
        raise ImportError("axe-playwright-python (it ships axe-core's axe.min.js) is not installed: "
                          "run `make setup`") from err
    return AXE_FILE_PATH.read_text(encoding="utf-8")


_WAIT_MATHJAX_JS = """
async () => {
  if (!document.querySelector('span.math, div.math')) return 'no math';
  if (!(window.MathJax && window.MathJax.startup && window.MathJax.startup.promise)) return 'no mathjax';
  await window.MathJax.startup.promise;
  return 'done';
}
"""


@dataclass
class PageReport:
    page: str
    problems: list[str]
    checks: int


class BookChecker:
    """A browser and a local server for one site; `check_page` returns the problems of one page."""

    def __init__(self, site: Site, screenshots: Path | None = None):
        self.site = site
        self.screenshots = screenshots
        self._server = LocalServer(site.root)
        self._tmp = tempfile.TemporaryDirectory(prefix="bookcheck-profile-")
        self._pw = None
        self.context = None
        self.blocked: list[str] = []
        self._axe = axe_script()
        self._code_contrast_checked = False

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> BookChecker:
        exe = find_chromium()
        self._server.__enter__()
        self._pw = sync_playwright().start()
        try:
            self.context = self._pw.chromium.launch_persistent_context(
                user_data_dir=self._tmp.name,
                executable_path=exe,
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport=DESKTOP,
                service_workers="block",
            )
        except Exception:
            self.__exit__(None, None, None)
            raise
        self.context.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        self.context.route("**/*", self._route)
        return self

    def __exit__(self, *exc) -> None:
        if self.context is not None:
            self.context.close()
        if self._pw is not None:
            self._pw.stop()
        self._server.__exit__()
        self._tmp.cleanup()

    @property
    def origin(self) -> str:
        return self._server.origin

    def _route(self, route, request) -> None:
        url = request.url
        if url.startswith(self.origin + "/") or url.startswith("data:") or url.startswith("blob:"):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()

    def url_of(self, page: str) -> str:
        return f"{self.origin}/{page}"

    # -- one page ----------------------------------------------------------------------------------
    def check_page(self, page: str) -> PageReport:
        """Open `page` (relative to the site root) and return every problem found on it."""
        problems: list[str] = []
        checks = 0
        path = self.site.root / page
        redirect = _redirect_target(path)
        if redirect is not None:
            target = (path.parent / unquote(urlsplit(redirect).path)).resolve()
            checks += 1
            if not target.is_file():
                problems.append(f"redirects to {redirect}, which does not exist")
            return PageReport(page, problems, checks)

        console: list[str] = []
        failed: list[str] = []
        blocked_before = len(self.blocked)
        tab = self._open(DESKTOP, console, failed)
        try:
            tab.goto(self.url_of(page), wait_until="load")
            state = tab.evaluate(_WAIT_MATHJAX_JS)
            data = tab.evaluate(_COLLECT_JS)
            checks += 9
            if state == "no mathjax":
                problems.append("the page has math but MathJax did not load")
            self._judge_math(data, problems)
            self._judge_images(data, problems)
            self._judge_links(page, data, problems)
            self._judge_buttons(page, data, problems)
            self._judge_code(data, problems)
            for widget in data["widgets"]:
                if not widget["ok"]:
                    problems.append(f"widget output with no static figure next to it (cell `{widget['where']}`)")
            if page not in PAGES_WITHOUT_TITLE and data["h1"] != 1:
                problems.append(f"expected one <h1> title, found {data['h1']}")
            checks += 1
            problems += self._axe_problems(tab)
            # Screenshots show the page as a reader first sees it: solutions still folded.
            if self.screenshots is not None:
                self._screenshot(tab, page, "desktop")
            checks += self._check_launch_menu(tab, page, problems)
            checks += self._check_toggles(tab, problems)
        except PlaywrightError as err:
            problems.append(f"browser error: {err}")
        finally:
            tab.close()
        # The phone view gets its own tab, loaded at that width (resizing a loaded page catches the
        # theme's sidebars mid-animation).
        tab = self._open(PHONE, console, failed)
        try:
            tab.goto(self.url_of(page), wait_until="load")
            tab.evaluate(_WAIT_MATHJAX_JS)
            if self.screenshots is not None:
                self._screenshot(tab, page, "phone")
            # What the folded solutions and cells hold must fit a phone too, once a reader opens them.
            tab.evaluate(_OPEN_FOLDED_JS)
            phone = tab.evaluate(_PHONE_JS)
            checks += 5
            if phone["overflow"] > 1:
                problems.append(f"at phone width ({PHONE['width']} px) the page scrolls sideways by {phone['overflow']} px")
            for tex in phone["clippedMath"]:
                problems.append(f"at phone width a display equation is cut off instead of scrolling in its box: {tex!r}")
            for src in phone["wideFigures"]:
                problems.append(f"at phone width a figure sticks out of the screen: {src}")
            for src in phone["smallDrawings"]:
                problems.append(f"at phone width a drawing is shrunk until its labels cannot be read: {src} (give its "
                                f"figure `:figclass: scroll-on-phone`, book.css)")
            for head, carded in phone["wideTables"]:
                if carded:
                    problems.append(f"at phone width a cards-on-phone table scrolls sideways instead of showing a "
                                    f"card per row (book.css, book.js): the table starting {head!r}")
                else:
                    problems.append(f"at phone width a table scrolls sideways and hides its last columns: narrow it or "
                                    f"put it in a {{container}} cards-on-phone (CONTRIBUTING.md, 'Tables on a "
                                    f"phone'): the table starting {head!r}")
        except PlaywrightError as err:
            problems.append(f"browser error at phone width: {err}")
        finally:
            tab.close()
        checks += 3
        problems += [f"console error: {text}" for text in console]
        problems += [f"failed local request: {text}" for text in failed]
        problems += [f"request to another origin (blocked: the page needs the network): {url}"
                     for url in self.blocked[blocked_before:]]
        return PageReport(page, list(dict.fromkeys(problems)), checks)

    def _open(self, viewport: dict, console: list[str], failed: list[str]) -> Page:
        """A new tab of the given size that records console errors and failed local requests."""
        tab = self.context.new_page()
        tab.set_viewport_size(viewport)
        tab.on("console", lambda msg: console.append(msg.text) if msg.type == "error" else None)
        tab.on("pageerror", lambda err: console.append(f"uncaught {err}"))
        tab.on("requestfailed", lambda req: failed.append(f"{req.url} ({req.failure})")
               if req.url.startswith(self.origin) else None)
        tab.on("response", lambda resp: failed.append(f"{resp.url} (HTTP {resp.status})")
               if resp.status >= 400 and resp.url.startswith(self.origin) else None)
        return tab

    def _axe_problems(self, tab: Page) -> list[str]:
        """axe-core's serious and critical accessibility violations on the open page."""
        tab.evaluate(self._axe)
        with_code = not self._code_contrast_checked and tab.locator(".highlight").count() > 0
        violations = tab.evaluate(_AXE_RUN_JS, with_code)
        self._code_contrast_checked |= with_code
        return [f"axe-core {v['impact']}: {v['id']} ({v['help']}), {v['count']} element(s), first `{v['target']}`"
                for v in violations if v["impact"] in AXE_FAILING_IMPACTS]

    def _judge_math(self, data: dict, problems: list[str]) -> None:
        for tex in data["unrendered"]:
            problems.append(f"math not rendered by MathJax: {tex!r}")
        for err in data["mathErrors"]:
            problems.append(f"MathJax error: {err!r}")
        for tex in data["textMacros"]:
            problems.append(f"a backslash shown as text in math (\\text{{}} reads no macros; write \\mathrm{{a\\_b}} "
                            f"instead of \\text{{a\\_b}}): {tex!r}")
        text = data["text"]
        for pattern, name in RAW_TEX:
            for match in list(pattern.finditer(text))[:3]:
                lo, hi = max(0, match.start() - SNIPPET_CHARS), match.end() + SNIPPET_CHARS
                problems.append(f"raw TeX ({name}) in the visible text: ...{text[lo:hi]}...")
        for match in list(RAW_TABLE.finditer(text))[:1]:
            lo, hi = max(0, match.start() - SNIPPET_CHARS), match.end() + SNIPPET_CHARS
            problems.append(f"a Markdown table shown as text, not as a table: ...{text[lo:hi]}...")

    def _judge_images(self, data: dict, problems: list[str]) -> None:
        for img in data["images"]:
            if not img["ok"]:
                problems.append(f"image did not load: {img['src']}")

    def _judge_links(self, page: str, data: dict, problems: list[str]) -> None:
        seen = set()
        for link in data["links"]:
            href = link["href"]
            if href in seen:
                continue
            seen.add(href)
            parts = urlsplit(href)
            if parts.scheme == "file":
                problems.append(f"link to a local file path: {link['raw']}")
                continue
            if f"{parts.scheme}://{parts.netloc}" != self.origin:
                continue  # external: `make linkcheck` checks those where there is internet
            target = self.site.root / unquote(parts.path).lstrip("/")
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                problems.append(f"internal link to a missing page: {link['raw']} (text {link['text']!r})")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html" and fragment not in _anchors(target):
                problems.append(f"internal link to a missing anchor: {link['raw']} (text {link['text']!r})")

    def _judge_code(self, data: dict, problems: list[str]) -> None:
        """The code a cell shows: no build tooling, and a box as wide as the line length it is written to."""
        for where in data["directives"]:
            problems.append(f"nbdev directive (#|) in the code a cell shows: `{where}`")
        for where in data["nbvalMarkers"]:
            problems.append(f"nbval marker (NBVAL_...) in the code a cell shows: `{where}` (use the cell tag)")
        for where in data["glueImports"]:
            problems.append(f"the book's set-up (`from myst_nb import ...`) in the code a cell shows: `{where}`")
        columns = self.site.code_columns
        if columns:
            narrow = [box for box in data["codeBoxes"] if box["columns"] < columns]
            if narrow:
                problems.append(f"at {DESKTOP['width']} px {len(narrow)} code box(es) show fewer than the {columns} "
                                f"columns the code is written to (narrowest: {min(b['columns'] for b in narrow)}, "
                                f"`{narrow[0]['where']}`)")
        for where in data["wideOutputs"]:
            problems.append(f"at {DESKTOP['width']} px a text output is wider than its box: `{where}`")
        for box in data["codeBoxes"]:
            if box["scrolls"] and box["longest"] <= box["columns"]:
                problems.append(f"code box scrolls sideways though its longest line ({box['longest']} columns) "
                                f"fits its {box['columns']} columns: `{box['where']}`")

    def _judge_buttons(self, page: str, data: dict, problems: list[str]) -> None:
        expected = self.site.colab.get(page)
        if expected is not None:
            if not data["launch"]:
                problems.append(f"no Colab launch link (expected {expected})")
            for href in data["launch"]:
                if href != expected:
                    problems.append(f"Colab launch link points at {href}, expected {expected}")
        if self.site.repository_url and self.site.repository_url not in data["repoButtons"]:
            problems.append(f"no repository button linking to {self.site.repository_url}")
        if data["copyButtons"] < data["codeBlocks"]:
            problems.append(f"{data['codeBlocks'] - data['copyButtons']} code blocks without a copy button")

    def _check_launch_menu(self, tab: Page, page: str, problems: list[str]) -> int:
        """On a chapter page, the rocket menu opens and shows the Colab link."""
        if page not in self.site.colab:
            return 0
        button = tab.locator(".dropdown-launch-buttons button").first
        if button.count() == 0:
            problems.append("no launch (rocket) button")
            return 1
        button.click()
        link = tab.locator('.dropdown-launch-buttons a[href*="colab.research.google.com"]').first
        try:
            link.wait_for(state="visible", timeout=TOGGLE_TIMEOUT_MS)
        except PlaywrightError:
            problems.append("the launch (rocket) menu does not show a Colab link when clicked")
        tab.keyboard.press("Escape")
        return 1

    def _check_toggles(self, tab: Page, problems: list[str]) -> int:
        """Solutions (dropdown admonitions, <details>) must be collapsed and open when clicked."""
        checks = 0
        dropdowns = tab.locator(".admonition.dropdown")
        for i in range(dropdowns.count()):
            box = dropdowns.nth(i)
            title = box.locator(".admonition-title").first
            name = title.inner_text().strip() or f"dropdown {i + 1}"
            body = box.locator(":scope > :not(.admonition-title)")
            checks += 1
            if body.count() == 0:
                problems.append(f"dropdown {name!r} #{i + 1} has no content")
                continue
            if body.first.is_visible():
                problems.append(f"dropdown {name!r} #{i + 1} is open before it is clicked")
                continue
            title.click()
            try:
                body.first.wait_for(state="visible", timeout=TOGGLE_TIMEOUT_MS)
            except PlaywrightError:
                problems.append(f"dropdown {name!r} #{i + 1} does not open when its title is clicked")
        # <details>: read in one call, clicked for real on the first of each kind (class) and by script on the
        # rest (a real click costs a quarter of a second, and a page has up to 60 of them); nested ones show up
        # once their parent is open, so the rounds go on until no closed one is left in view.
        details = tab.locator("article details:not(.toggle-details)")
        checked: set[int] = set()
        kinds_clicked: set[str] = set()
        while True:
            boxes = details.evaluate_all(_DETAILS_JS)
            todo = [box for box in boxes if box["shown"] and box["index"] not in checked]
            if not todo:
                return checks
            by_script = []
            for box in todo:
                checked.add(box["index"])
                checks += 1
                if box["open"]:
                    problems.append(f"collapsible {box['name']!r} is open before it is clicked")
                elif box["kind"] in kinds_clicked:
                    by_script.append(box["index"])
                else:
                    kinds_clicked.add(box["kind"])
                    details.nth(box["index"]).locator("summary").first.click()
            details.evaluate_all("(els, todo) => todo.forEach(i => els[i].querySelector('summary').click())", by_script)
            opened = details.evaluate_all("els => els.map(el => el.open)")
            problems += [f"collapsible {box['name']!r} does not open when clicked" for box in todo
                         if not box["open"] and not opened[box["index"]]]

    def _screenshot(self, tab: Page, page: str, kind: str) -> None:
        out = self.screenshots / kind / Path(page).with_suffix(".png")
        out.parent.mkdir(parents=True, exist_ok=True)
        tab.evaluate("() => { window.scrollTo(0, 0); if (document.activeElement) document.activeElement.blur(); }")
        tab.screenshot(path=str(out), full_page=True)

    # -- search --------------------------------------------------------------------------------------
    def search(self, query: str) -> tuple[list[str], list[str]]:
        """Search the book with its own search page; return (result pages, problems)."""
        tab = self.context.new_page()
        errors: list[str] = []
        tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        try:
            tab.goto(f"{self.origin}/search.html?q={query}", wait_until="load")
            tab.locator("#search-results .search-summary").wait_for(timeout=SEARCH_TIMEOUT_MS)
            hrefs = tab.evaluate("""() => Array.from(document.querySelectorAll('#search-results ul.search li a'))
                                      .map(a => a.href)""")
        finally:
            tab.close()
        pages = sorted({urlsplit(h).path.lstrip("/") for h in hrefs})
        return pages, [f"console error: {e}" for e in errors]


def format_problems(report: PageReport) -> str:
    return f"{report.page}: {len(report.problems)} problem(s)\n" + "\n".join(
        f"  - {report.page}: {p}" for p in report.problems)


def main(argv: list[str]) -> int:
    build = Path(argv[1] if len(argv) > 1 else "_build/html")
    site = site_from_book(build, Path("_config.yml"))
    bad = 0
    with BookChecker(site, screenshots=build.parent / "screenshots") as checker:
        for page in list_pages(build):
            report = checker.check_page(page)
            print(format_problems(report) if report.problems else f"{page}: ok ({report.checks} checks)")
            bad += bool(report.problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
