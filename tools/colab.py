"""Write the chapters as Colab and plain Jupyter show them: a copy with no MyST markup left (`make colab`).

The book's markdown cells use MyST, which Jupyter Book renders and Jupyter does not: numbers glued in by the
cells (`{glue:text}`), boxes and folded solutions (`{admonition}`), citations (`{cite}`) and links between
pages. Opened as they are on Colab, the reader sees that source text. This tool writes a converted copy of every
chapter, with the same relative paths, that any notebook front end renders:

- a glued value is replaced by its value, formatted as the page shows it; myst-nb keeps the values in the
  outputs of the cells that call `glue`, so they are read from the notebook itself;
- a folded box (`:class: dropdown`, the exercise solutions) becomes a closed `<details>` element, any other box
  a block quote with its title in bold;
- a citation becomes "(Author et al., year)", linked to the paper;
- a link to another page of the book points at that page of the published book (html.baseurl in _config.yml).

A pipe table inside a box becomes an HTML table: Jupyter's Markdown (nbconvert's, at least) leaves a table inside a
block quote as a line of pipes.

Code cells keep their code without nbdev's directive lines (`#| export`, ...: tooling, not code a reader writes;
a cell left empty by that is dropped), and their outputs; the outputs that only carried glued values are dropped. A code
cell the page folds (tags hide-input, hide-cell, hide-output) is folded there too: its cell metadata gets Colab's
`cellView: form` (code hidden behind "Show code") and Jupyter's `source_hidden`/`outputs_hidden`, so the page's
"the folded cell" reads true on Colab and in JupyterLab.
Everything else a chapter reads from the repository (chapter 10's run records in chapters/records/) is copied
beside it. `.github/workflows/book.yml` publishes the copy to the branch that the Colab buttons open
(repository.branch in _config.yml); the notebooks in chapters/ stay the source.

    python tools/colab.py                  # writes _build/colab/
    python tools/colab.py --out DIR        # writes DIR/chapters/... instead

tests/test_colab_copy.py renders the copy as Jupyter does (nbconvert) and fails on any MyST left in it, on a
pipe table left as text and on a `#|` line.
"""

from __future__ import annotations

import argparse
import ast
import base64
import codecs
import html
import re
import shutil
import sys
from pathlib import Path

import latexcodec  # noqa: F401  (registers the "ulatex" codec used for authors' names)
import nbformat
import yaml
from pybtex.database import parse_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sphinx_clean_cells import strip_directives  # noqa: E402  (the book's page drops the same `#|` lines)

REPO_ROOT = Path(__file__).resolve().parents[1]
GLUE_PREFIX = "application/papermill.record/"
# The page's folding tags, and what each hides: the code, the output, or both.
FOLDS_SOURCE = {"hide-input", "hide-cell"}
FOLDS_OUTPUT = {"hide-output", "hide-cell"}
# What a chapter reads from the repository, relative to the repository's root: copied with the chapters.
DATA_FOLDERS = ("chapters/records",)
# The note at the top of the branch the Colab buttons open.
BRANCH_README = """\
# Building the Transformer: the chapters as Colab opens them

This branch is written by the book's workflow from the `{source}` branch, on every push: it holds the
chapters with their MyST markup converted to plain Markdown (`make colab`, tools/colab.py), so that Colab and
Jupyter show the text as the online book does. Do not edit it: change the notebooks on `{source}`.

The book: {baseurl}
"""

FENCE_OPEN = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}(?P<arg>.*)$")
CODE_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):\s*(?P<value>.*)$")
ROLE = re.compile(r"\{(?P<name>[a-z][\w:-]*)\}`(?P<content>[^`]+)`")
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
TABLE_RULE = re.compile(r"^\s*\|(\s*:?-{3,}:?\s*\|)+\s*$")


class ConversionError(ValueError):
    """The notebook holds markup this tool does not know how to convert."""


def glue_values(nb: nbformat.NotebookNode) -> dict[str, dict]:
    """name -> the mime bundle `glue(name, value)` stored in a cell's outputs (prefix removed)."""
    values = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            data = output.get("data", {})
            if name and any(key.startswith(GLUE_PREFIX) for key in data):
                values[name] = {key.removeprefix(GLUE_PREFIX): value for key, value in data.items()}
    return values


def format_plain_text(text: str, fmt: str) -> str:
    """A glued text/plain value formatted with `fmt`, as myst-nb's `{glue:text}` role formats it."""
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if not fmt:
        return str(value)
    kind = fmt[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, fmt)


def _plain_name(latex: str) -> str:
    """A name from BibTeX (`Kaiser, {\\L}ukasz`) as text (Łukasz)."""
    return codecs.decode(latex, "ulatex").replace("{", "").replace("}", "")


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def _inline_html(text: str) -> str:
    """A table cell's Markdown as HTML: `code`, **bold**, *italic* and [links](url); math ($...$) stays for MathJax."""
    parts = re.split(r"(`[^`]+`)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", part)
        part = re.sub(r"(?<![*\w])\*(?!\s)(.+?)(?<!\s)\*(?![*\w])", r"<em>\1</em>", part)
        part = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', part)
        out.append(part)
    return "".join(out)


def _html_row(cells: list[str], tag: str, aligns: list[str]) -> str:
    styled = [f' style="text-align: {a}"' if a else "" for a in aligns + [""] * len(cells)]
    return "<tr>" + "".join(f"<{tag}{style}>{_inline_html(c)}</{tag}>" for c, style in zip(cells, styled)) + "</tr>"


def pipe_tables_as_html(markdown: str) -> str:
    """`markdown` with each pipe table (a head row, a rule row, body rows) written as one HTML table, no blank line in it."""
    lines, out, i = markdown.split("\n"), [], 0
    while i < len(lines):
        if i + 1 < len(lines) and TABLE_ROW.match(lines[i]) and TABLE_RULE.match(lines[i + 1]):
            aligns = []
            for rule in _cells(lines[i + 1]):
                aligns.append("center" if rule.startswith(":") and rule.endswith(":")
                              else "right" if rule.endswith(":") else "left" if rule.startswith(":") else "")
            end = i + 2
            while end < len(lines) and TABLE_ROW.match(lines[end]):
                end += 1

            out.append("<table>")
            out.append(f"<thead>{_html_row(_cells(lines[i]), 'th', aligns)}</thead>")
            out.append("<tbody>")
            out.extend(_html_row(_cells(line), "td", aligns) for line in lines[i + 2:end])
            out.append("</tbody>")
            out.append("</table>")
            i = end
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def load_citations(bib_file: Path) -> dict[str, tuple[str, str, str]]:
    """key -> (authors as the book cites them, year, URL or "") for every entry of the bibliography."""
    citations = {}
    for key, entry in parse_file(str(bib_file)).entries.items():
        last = [_plain_name(" ".join(person.last_names)) for person in entry.persons.get("author", [])]
        if len(last) == 1:
            authors = last[0]
        elif len(last) == 2:
            authors = f"{last[0]} and {last[1]}"
        else:
            authors = f"{last[0]} et al." if last else _plain_name(entry.fields.get("title", key))
        url = entry.fields.get("url") or (f"https://doi.org/{entry.fields['doi']}" if "doi" in entry.fields else "")
        citations[key] = (authors, entry.fields.get("year", "n.d."), url)
    return citations


class Converter:
    """Converts the MyST of one notebook's markdown cells to Markdown that Jupyter and Colab render."""

    def __init__(self, glue: dict[str, dict], citations: dict, baseurl: str, page: str):
        self.glue, self.citations, self.baseurl, self.page = glue, citations, baseurl.rstrip("/") + "/", page

    # ---- inline: roles and links
    def _glued(self, key: str) -> dict:
        if key not in self.glue:
            raise ConversionError(f"{self.page}: no glued value named {key!r} in the notebook's outputs")
        return self.glue[key]

    def _cite(self, keys: str, textual: bool) -> str:
        parts = []
        for key in (k.strip() for k in keys.split(",")):
            if key not in self.citations:
                raise ConversionError(f"{self.page}: {{cite}} names {key!r}, which book/references.bib lacks")
            authors, year, url = self.citations[key]
            text = f"{authors} ({year})" if textual else f"{authors}, {year}"
            parts.append(f"[{text}]({url})" if url else text)
        return "; ".join(parts) if textual else f"({'; '.join(parts)})"

    def _role(self, match: re.Match) -> str:
        name, content = match.group("name"), match.group("content")
        if name == "glue:text":
            key, _, fmt = content.rpartition(":") if ":" in content else (content, "", "")
            data = self._glued(key)
            if "text/plain" not in data:
                raise ConversionError(f"{self.page}: glued value {key!r} has no text/plain form")
            return format_plain_text(data["text/plain"], fmt)
        if name in ("glue", "glue:any", "glue:md"):
            data = self._glued(content.rsplit(":", 1)[0] if name == "glue:md" else content)
            if "text/markdown" in data:
                return data["text/markdown"].strip()
            return format_plain_text(data.get("text/plain", ""), "")
        if name in ("cite", "cite:p", "cite:t"):
            return self._cite(content, textual=name == "cite:t")
        if name in ("ref", "numref", "doc", "term", "abbr"):
            # `text <target>` shows its text; a bare target shows itself (the page it names, for {doc}).
            text = re.sub(r"\s*<[^>]*>$", "", content)
            if name == "doc" and text == content:
                return f"[{content}]({self._page_url(content + '.md')})"
            return text
        if name == "math":
            return f"${content}$"
        if name == "eq":
            return f"({content})"
        raise ConversionError(f"{self.page}: the role {{{name}}} is not converted (add it to tools/colab.py)")

    def _page_url(self, target: str) -> str:
        """The published page of a link between the book's pages (`05_masking.ipynb#anchor`, `../book/x.md`)."""
        path, _, anchor = target.partition("#")
        resolved = (Path("/repo") / Path(self.page).parent / path).resolve().relative_to("/repo")
        html = resolved.with_suffix(".html").as_posix()
        return self.baseurl + html + (f"#{anchor}" if anchor else "")

    def _link(self, match: re.Match) -> str:
        target = match.group("target")
        path = target.partition("#")[0]
        if path.endswith((".ipynb", ".md")) and "://" not in target:
            return f"]({self._page_url(target)})"
        return match.group(0)

    def inline(self, text: str) -> str:
        return LINK.sub(self._link, ROLE.sub(self._role, text))

    # ---- blocks: directives
    def _directive(self, name: str, arg: str, options: dict, body: str) -> str:
        arg = arg.strip()
        if name == "admonition" or name in ("note", "tip", "warning", "important", "hint", "seealso", "caution"):
            title = arg or name.capitalize()
            inner = self.convert(body).strip("\n")
            if "dropdown" in options.get("class", "").split():
                return f"<details>\n<summary>{self.inline(title)}</summary>\n\n{inner}\n\n</details>"
            lines = [f"**{self.inline(title)}**", "", *pipe_tables_as_html(inner).splitlines()]
            return "\n".join(f"> {line}".rstrip() for line in lines)
        if name == "container":  # a class for the book's stylesheet (such as cards-on-phone): the body stays
            return self.convert(body).strip("\n")
        if name == "glue:md" or name == "glue":
            data = self._glued(arg)
            return (data.get("text/markdown") or format_plain_text(data.get("text/plain", ""), "")).strip()
        if name == "glue:figure":
            data = self._glued(arg)
            mime = next((m for m in ("image/svg+xml", "image/png", "image/jpeg") if m in data), None)
            if mime is None:
                raise ConversionError(f"{self.page}: the glued figure {arg!r} holds no image")
            payload = data[mime]
            if mime == "image/svg+xml":
                payload = base64.b64encode(payload.encode("utf-8")).decode("ascii")
            alt = options.get("alt", arg).replace('"', "&quot;")
            image = f'<img src="data:{mime};base64,{payload.strip()}" alt="{alt}" style="max-width: 100%">'
            caption = self.convert(body).strip("\n")
            return image + (f"\n\n*{caption}*" if caption and "\n\n" not in caption else f"\n\n{caption}")
        raise ConversionError(f"{self.page}: the directive {{{name}}} is not converted (add it to tools/colab.py)")

    def convert(self, source: str) -> str:
        """The markdown `source` with every directive and role converted."""
        lines, out, i = source.split("\n"), [], 0
        while i < len(lines):
            line = lines[i]
            opening = FENCE_OPEN.match(line)
            if opening is None and (code := CODE_FENCE.match(line)):
                # A plain code block: copied as it is, roles and all.
                fence = code.group(1)
                end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)
                            and set(lines[j].strip()) == {fence[0]}), len(lines) - 1)
                out.extend(lines[i:end + 1])
                i = end + 1
                continue
            if opening is None:
                out.append(self.inline(line))
                i += 1
                continue
            fence = opening.group("fence")
            end = next((j for j in range(i + 1, len(lines))
                        if set(lines[j].strip()) == {fence[0]} and len(lines[j].strip()) >= len(fence)), None)
            if end is None:
                raise ConversionError(f"{self.page}: the directive on {line!r} is never closed")
            body, options = lines[i + 1:end], {}
            while body and (option := OPTION.match(body[0])):
                options[option.group("key")] = option.group("value").strip()
                body = body[1:]
            converted = self._directive(opening.group("name"), opening.group("arg"), options, "\n".join(body))
            out.extend(opening.group("indent") + text if text else text for text in converted.split("\n"))
            i = end + 1
        return "\n".join(out)


def convert_notebook(nb: nbformat.NotebookNode, citations: dict, baseurl: str, page: str) -> nbformat.NotebookNode:
    """A copy of `nb` whose markdown has no MyST left, and whose glue-only outputs are gone."""
    nb = nbformat.from_dict(nb)
    converter = Converter(glue_values(nb), citations, baseurl, page)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = converter.convert(cell.source)
        elif cell.cell_type == "code":
            cell.source = strip_directives(cell.source)
            cell.outputs = [o for o in cell.outputs
                            if not any(key.startswith(GLUE_PREFIX) for key in o.get("data", {}))]
            fold_as_the_page_does(cell)
    nb.cells = [cell for cell in nb.cells if cell.cell_type != "code" or cell.source.strip() or cell.outputs]
    return nb


def fold_as_the_page_does(cell: nbformat.NotebookNode) -> None:
    """Set the metadata with which Colab and JupyterLab fold what the page's hide-* tags fold."""
    tags = set(cell.metadata.get("tags", []))
    if tags & FOLDS_SOURCE:
        cell.metadata["cellView"] = "form"  # Colab: the code behind a "Show code" link
        cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    if tags & FOLDS_OUTPUT:
        cell.metadata.setdefault("jupyter", {})["outputs_hidden"] = True


def chapter_paths(repo_root: Path = REPO_ROOT) -> list[Path]:
    """Every notebook the book's table of contents lists: the pages that have a Colab button."""
    toc = yaml.safe_load((repo_root / "_toc.yml").read_text(encoding="utf-8"))
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("file"), str):
                found.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(toc)
    paths = [repo_root / (f if f.endswith(".ipynb") else f + ".ipynb") for f in found]
    return [p for p in paths if p.is_file()]


def read_config(repo_root: Path = REPO_ROOT) -> dict:
    return yaml.safe_load((repo_root / "_config.yml").read_text(encoding="utf-8"))


def write_copy(out: Path, repo_root: Path = REPO_ROOT) -> list[Path]:
    """Write the converted chapters, the data they read and a README into `out`; returns the notebooks."""
    config = read_config(repo_root)
    baseurl = config["html"]["baseurl"]
    citations = {}
    for bib in config.get("bibtex_bibfiles", []):
        citations.update(load_citations(repo_root / bib))
    if out.exists():
        shutil.rmtree(out)
    written = []
    for path in chapter_paths(repo_root):
        page = path.relative_to(repo_root).as_posix()
        nb = convert_notebook(nbformat.read(path, as_version=4), citations, baseurl, page)
        target = out / page
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    for folder in DATA_FOLDERS:
        if (repo_root / folder).is_dir():
            shutil.copytree(repo_root / folder, out / folder)
    shutil.copy(repo_root / "LICENSE", out / "LICENSE")
    (out / "README.md").write_text(BRANCH_README.format(source="main", baseurl=baseurl), encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "_build" / "colab", help="folder to write")
    args = parser.parse_args(argv)
    try:
        written = write_copy(args.out.resolve())
    except ConversionError as exc:
        print(f"colab: {exc}", file=sys.stderr)
        return 1
    print(f"colab: wrote {len(written)} chapters into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
