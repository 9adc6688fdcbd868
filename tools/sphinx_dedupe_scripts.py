"""Sphinx extension: drop the second copy of inline scripts that Sphinx 7.4 writes twice.

Why: an extension that calls `app.add_js_file(None, body=...)` after the HTML builder has started
(sphinx-thebe and sphinx-togglebutton do, on `env-before-read-docs` and `builder-inited`) registers the
script twice: once directly in the builder, with filename None, and once in the registry, which
`StandaloneHTMLBuilder.prepare_writing` adds again with filename ''. The two compare unequal, so every
page gets both. For sphinx-thebe that is a `const THEBE_JS_URL = ...` declared twice, which the browser
reports as "Identifier 'THEBE_JS_URL' has already been declared" on every page.

This keeps the first of each (filename or '', priority, attributes) on every page. Loaded through
`sphinx.local_extensions` in _config.yml.

When to delete it: Sphinx 8.2 fixed the bug (sphinx-doc/sphinx#13402), but Jupyter Book 1 requires Sphinx 7.
tests/test_sphinx_dedupe_scripts.py builds a page with the pinned Sphinx and fails once the bug is gone.
"""

from __future__ import annotations

from typing import Any

# Run after other html-page-context handlers, which may still add page-specific scripts.
LATE_PRIORITY = 900


def _dedupe(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen = set()
    unique = []
    for js in scripts:
        attributes = getattr(js, "attributes", {})
        key = (getattr(js, "filename", js) or "", getattr(js, "priority", 0), tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


def setup(app: Any) -> dict:
    app.connect("html-page-context", _dedupe, priority=LATE_PRIORITY)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
