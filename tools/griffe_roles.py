"""Griffe extension of the docs site: the docstrings' reST markup as markdown.

The docstrings are written for reading in the source and with ``help()``: ``:func:`name``` roles and doctest
examples in the prose. mkdocstrings renders markdown, where a role would print as ``:func:`` followed by code,
and a doctest's output (``[1, 2]``) would read as a link. Roles become code, linked where the site renders the object they name; each run of doctest lines
becomes a ``pycon`` code block. Double-backquoted literals are code in markdown already.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|exc|obj|const):`(~?)([^`<>]+?)(?:\s*<[^>]+>)?`")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _roles(text: str, obj: Object) -> str:
    """Each role as code, linked (when the site has a page for it) to the object it names."""
    scope = obj.path if obj.is_class or obj.is_module else obj.parent.path if obj.parent else obj.path

    def replace(m: re.Match) -> str:
        name = m.group(2).strip().rstrip("()")
        shown = name.rsplit(".", 1)[-1] if m.group(1) else name
        target = name if name.startswith("streamdp.") else f"{scope}.{name}"
        # an optional autoref: a target the site does not render (a private or re-exported name) stays code
        return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'

    return _ROLE.sub(replace, text)


def fence_doctests(text: str) -> str:
    """Every doctest (a ``>>>`` line and what follows it up to a blank line) in a ``pycon`` fence."""
    out: list[str] = []
    in_fence = in_doctest = False
    for line in text.splitlines():
        stripped = line.strip()
        if not in_doctest and _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and not in_doctest and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            in_doctest = True
        elif in_doctest and not stripped:
            out.append(f"{indent}```")
            in_doctest = False
        out.append(line)
    if in_doctest:
        out.append(f"{indent}```")
    return "\n".join(out)


class RolesToMarkdown(Extension):
    """Rewrite reST roles and doctests of every docstring as markdown."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(_roles(obj.docstring.value, obj))
