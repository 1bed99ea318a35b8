"""The package layout: no import cycle among fa512's modules, and no module over 800 lines.

Imports are read from the source (every ``import`` / ``from ... import`` statement, inside
functions too: a lazy import that closes a cycle is still a cycle in the design), resolved to
fa512 modules; importing a name from a package counts as importing its submodule when one of
that name exists. A package's implicit import of its parents does not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "fa512"
MAX_LINES = 800


def _module_name(path: Path) -> str:
    parts = ("fa512",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(name: str, modules: dict):
    """The fa512 module ``name`` names, or its nearest enclosing module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict:
    """module -> set of fa512 modules it imports."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
            for t in targets:
                if t == "fa512" or t.startswith("fa512."):
                    r = _resolve(t, modules)
                    if r and r != name:
                        edges.add(r)
        graph[name] = edges
    return graph


def find_cycle(graph: dict):
    """One import cycle as a list of modules (first == last), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_relative_lazy_and_package_imports():
    graph = import_graph()
    assert "fa512.planning.validate" in graph["fa512.numerics.reference"]  # from ..planning.validate import
    assert "fa512.backends.triton_fwd" in graph["fa512.backends.triton"]  # a lazy `from . import triton_fwd`
    assert "fa512.api.attention" in graph["fa512"]


def test_no_import_cycle_among_fa512_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize("package", ["python/fa512", "cute_kernels"])
def test_no_module_over_800_lines(package):
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long
