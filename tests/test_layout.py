"""The package's shape: no import cycles between modules, no module over 500 lines.

The layer rules themselves are import-linter contracts (``[tool.importlinter]`` in
pyproject.toml, run by ``lint-imports`` in CI); these two rules are not layer rules.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "streamdp"
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Every streamdp module ``name`` imports, at any depth of its code (TYPE_CHECKING blocks included)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in mods}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                if f"{base}.{a.name}" in mods:
                    out.add(f"{base}.{a.name}")
                elif base in mods:
                    out.add(base)
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _without_package_reexports(graph: dict[str, set[str]], mods: dict[str, Path]) -> dict[str, set[str]]:
    # A package's __init__ re-exporting its own modules is not a cycle of the code: a module that
    # imports a name through its package depends on the module defining it.
    return {
        m: {d for d in deps if not (mods[m].name == "__init__.py" and d.startswith(m + "."))}
        for m, deps in graph.items()
    }


def test_no_module_imports_itself_through_others():
    mods = _modules()
    graph = _without_package_reexports({m: _imports(m, p, mods) for m, p in mods.items()}, mods)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_over_500_lines():
    long = {
        str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py") if len(p.read_text().splitlines()) > MAX_LINES
    }
    assert long == set()


def test_the_service_table_names_every_service_module():
    """docs/service.md's module table is how a new engineer finds a service concept: it left out 15 modules."""
    table = (PACKAGE.parent / "docs" / "service.md").read_text()
    modules = sorted(p.name for p in (PACKAGE / "service").glob("*.py") if p.name != "__init__.py")
    assert [m for m in modules if f"| `{m}` |" not in table] == []
