"""MkDocs hooks of the docs site (mkdocs.yml: ``hooks``).

The repository's markdown is written to read on GitHub: links are relative paths between repository files
(``../benchmarks/results/service.md``, ``docs/service.md``). The site is built from ``docs/``, so these
things happen here, at build time, to keep one copy of every text:

- ``PUBLISHED`` repository files outside ``docs/`` (the deploy guide, the benchmark results) are added to the
  site at their repository paths (README.md and benchmarks/README.md are included whole by the pages in ``INCLUDED``);
- ``<!-- include: PATH[#section] -->`` (optionally followed on its line by a ``[link](...)`` for readers of the raw
  file) in a page is replaced by that file, or by one section of it (the
  heading whose anchor is ``section`` down to the next heading of the same or a higher level);
- every relative link is resolved as a repository path and rewritten to the page that carries it on the site;
  a link to a repository file the site does not carry (source code) keeps its text and loses the link;
- ``<!-- results-index -->`` is replaced by a list of the benchmark result pages;
- ``<!-- cli-help -->`` is replaced by the ``--help`` of ``streamdp`` and of every subcommand.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import posixpath
import re
import sys
from pathlib import Path

from markdown.extensions.toc import slugify
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parent.parent
DOCS = "docs"
PUBLISHED = ["deploy/README.md", "benchmarks/results/*"]
# repository files that pages include whole, by the page that carries them
INCLUDED = {"README.md": "index.md", "benchmarks/README.md": "benchmarks.md"}

_LINK = re.compile(r"(!?\[(?:[^\[\]]|\[[^\]]*\])*\])\(([^)\s]+)((?:\s+\"[^\"]*\")?)\)")
# (an optional link after the marker is what a reader of the raw file sees instead: the site drops it)
_INCLUDE = re.compile(r"^<!-- include: (\S+?)(?:#(\S+))? -->(?: \[[^\]\n]*\]\([^)\n]*\))?$", re.M)
_HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")
_FENCE = re.compile(r"^ *(```|~~~)")

# repository path of every page built from a file outside docs/, by its site path
_repo_path_of: dict[str, str] = {}


def site_path(repo_path: str) -> str | None:
    """Where the site carries a repository file, or None."""
    if repo_path in INCLUDED:
        return INCLUDED[repo_path]
    if repo_path.startswith(DOCS + "/"):
        return repo_path[len(DOCS) + 1 :]
    if any(fnmatch.fnmatch(repo_path, p) for p in PUBLISHED):
        return repo_path
    return None


def on_files(files: Files, config) -> Files:
    for pattern in PUBLISHED:
        for path in sorted(glob.glob(str(REPO / pattern))):
            rel = Path(path).relative_to(REPO).as_posix()
            if not Path(path).is_file() or files.get_file_from_path(rel):
                continue
            files.append(File.generated(config, rel, abs_src_path=path))
            _repo_path_of[rel] = rel
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    src = page.file.src_uri
    repo_path = _repo_path_of.get(src, f"{DOCS}/{src}")
    markdown = rewrite_links(markdown, repo_path, src)  # the page's own links, then each include's
    markdown = _INCLUDE.sub(lambda m: _include(m.group(1), m.group(2), src), markdown)
    if "<!-- results-index -->" in markdown:
        markdown = markdown.replace("<!-- results-index -->", results_index(src))
    if "<!-- cli-help -->" in markdown:
        markdown = markdown.replace("<!-- cli-help -->", cli_help())
    return markdown


def _include(path: str, section: str | None, page_site: str) -> str:
    text = (REPO / path).read_text(encoding="utf-8")
    if section:
        text = _section(text, section, path)
    return rewrite_links(_shift_headings(text, 2), path, page_site)


def _shift_headings(text: str, top: int) -> str:
    """Headings moved so that the highest is at level ``top`` (an included file's title becomes a section)."""
    lines, in_code, levels = text.splitlines(), False, []
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            in_code = not in_code
        elif not in_code and _HEADING.match(line):
            levels.append(i)
    if not levels:
        return text
    shift = top - min(len(_HEADING.match(lines[i]).group(1)) for i in levels)
    for i in levels:
        hashes = _HEADING.match(lines[i]).group(1)
        lines[i] = "#" * min(6, max(1, len(hashes) + shift)) + lines[i][len(hashes) :]
    return "\n".join(lines) + "\n"


def results_index(page_site: str) -> str:
    """A list of the result pages of ``benchmarks/results/``, each by its title."""
    rows = []
    for path in sorted((REPO / "benchmarks/results").glob("*.md")):
        title = next(
            (m.group(2) for line in path.read_text(encoding="utf-8").splitlines() if (m := _HEADING.match(line))),
            path.stem,
        )
        rel = posixpath.relpath(f"benchmarks/results/{path.name}", posixpath.dirname(page_site) or ".")
        rows.append(f"- [{title}]({rel}) (`{path.name}`)")
    return "\n".join(rows) + "\n"


def _section(text: str, anchor: str, path: str) -> str:
    lines, start, level = text.splitlines(), None, 0
    in_code = False
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            in_code = not in_code
        m = None if in_code else _HEADING.match(line)
        if not m:
            continue
        if start is None and slugify(m.group(2), "-") == anchor:
            start, level = i, len(m.group(1))
        elif start is not None and len(m.group(1)) <= level:
            return "\n".join(lines[start:i]) + "\n"
    if start is None:
        raise ValueError(f"include: {path} has no section #{anchor}")
    return "\n".join(lines[start:]) + "\n"


def rewrite_links(text: str, repo_path: str, page_site: str) -> str:
    """Relative links of ``text`` (written at ``repo_path``) rewritten for the page at ``page_site``."""
    out, in_code = [], False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            in_code = not in_code
        out.append(line if in_code else _LINK.sub(lambda m: _relink(m, repo_path, page_site), line))
    return "".join(out)


def _relink(m: re.Match, repo_path: str, page_site: str) -> str:
    label, target, title = m.groups()
    if re.match(r"^[a-z][a-z0-9+.-]*:|^/", target):
        return m.group(0)
    path, _, fragment = target.partition("#")
    if not path and f"{DOCS}/{page_site}" == repo_path:
        return m.group(0)  # an anchor on the page itself
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(repo_path), path)) if path else repo_path
    site = site_path(resolved)
    if site is not None:
        new = posixpath.relpath(site, posixpath.dirname(page_site) or ".")
        return f"{label}({new}{'#' + fragment if fragment else ''}{title})"
    if (REPO / resolved).exists() and not label.startswith("!"):
        return label[1:-1]  # a source file: the text stays, the site has no page for it
    return m.group(0)  # left for mkdocs to report


def cli_help() -> str:
    """``streamdp --help`` and every subcommand's, as markdown sections."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # this checkout's parser, not another install's
    from streamdp.cli import _below, build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width; fixed, so the page is stable
    try:
        parser = build_parser()
        parts = []
        for p in (parser, *_below(parser)):
            level = "#" * min(2 + p.prog.count(" "), 4)
            parts.append(f"{level} `{p.prog}`\n\n```text\n{p.format_help().rstrip()}\n```\n")
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(parts)
