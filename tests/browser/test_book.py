"""The built book, opened in headless Chromium with the network blocked (`make test-book`).

One test per page, named after the page; each lists every problem found on that page. Screenshots at
desktop and phone width are written to _build/screenshots/ (next to the built html).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bookcheck import BookChecker, format_problems, list_pages, site_from_book

REPO_ROOT = Path(__file__).resolve().parents[2]
SEARCH_QUERY = "attention"


def _book_dir(config) -> Path:
    return Path(config.getoption("--book-dir")).resolve()


def _config_file(config) -> Path:
    return Path(config.getoption("--book-config") or REPO_ROOT / "_config.yml").resolve()


def pytest_generate_tests(metafunc):
    if "page" in metafunc.fixturenames:
        pages = list_pages(_book_dir(metafunc.config))
        metafunc.parametrize("page", pages, ids=pages)


@pytest.fixture(scope="module")
def checker(request):
    build = _book_dir(request.config)
    if not (build / "index.html").is_file():
        pytest.fail(f"no built book in {build}: run `make book` first")
    site = site_from_book(build, _config_file(request.config))
    with BookChecker(site, screenshots=build.parent / "screenshots") as bc:
        yield bc


def test_page(checker, page):
    report = checker.check_page(page)
    assert not report.problems, format_problems(report)


def test_every_chapter_is_in_the_book(request):
    build = _book_dir(request.config)
    repo = _config_file(request.config).parent
    missing = [nb.relative_to(repo).as_posix() for nb in sorted((repo / "chapters").glob("*.ipynb"))
               if not (build / "chapters" / nb.with_suffix(".html").name).is_file()]
    assert not missing, f"chapters with no page in the book (add them to _toc.yml): {missing}"


def test_search_works_offline(checker):
    results, problems = checker.search(SEARCH_QUERY)
    assert not problems, f"search.html: {problems}"
    assert results, f"search.html: searching {SEARCH_QUERY!r} listed no pages"
    expected = sorted(page for page in checker.site.colab if SEARCH_QUERY in page)
    missing = [page for page in expected if page not in results]
    assert not missing, f"search.html: searching {SEARCH_QUERY!r} did not list {missing}; it listed {results}"
