"""The layout of ``envs/`` and ``heuristics/`` (docs/design.md, "Layout"): small modules, a one-way
import tower (heuristics -> envs -> envs.sim -> traces), no import circles, no env importing
another env, and a simulator core that never imports its own package. Every import counts,
including those inside functions and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("envs", "heuristics")
PROBLEMS = ("pd_cluster", "routing", "allocation")
MAX_LINES = 600


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    return {_module(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(path: Path, module: str) -> set[str]:
    """Every module name ``path`` imports (absolute, relative resolved; ``from a import b``
    yields ``a`` and ``a.b``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            out.add(stem)
            out.update(f"{stem}.{a.name}" for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> the modules of ``envs``/``heuristics`` it imports (names resolved to the
    longest known module), and the outside top-level packages it imports, prefixed ``ext:``."""
    sources = _sources()
    graph: dict[str, set[str]] = {}
    for mod, path in sources.items():
        edges = set()
        for name in _imports(path, mod):
            target = name
            while target and target not in sources:
                target = target.rpartition(".")[0]
            if target:
                if target != mod:
                    edges.add(target)
            else:
                edges.add("ext:" + name.split(".")[0])
        graph[mod] = edges
    return graph


GRAPH = _graph()


def test_the_graph_sees_the_packages_it_checks():
    """A guard for the checks below: the graph holds the three problem packages and the core."""
    for mod in ("envs.sim.simulation", "envs.sim.protocol", "heuristics.base", "envs.common.base"):
        assert mod in GRAPH
    for problem in PROBLEMS:
        assert f"envs.{problem}.env" in GRAPH and f"heuristics.{problem}" in GRAPH
    assert "envs.sim.protocol" in GRAPH["envs.sim.simulation"]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_source_file_is_longer_than_600_lines(package: str):
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / package).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these by concern (at most {MAX_LINES} lines each): {long}"


def test_the_import_graph_has_no_circles():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def _layer(mod: str) -> str:
    if mod.startswith("heuristics"):
        return "heuristics"
    if mod == "envs.sim" or mod.startswith("envs.sim."):
        return "sim"
    if mod.startswith("envs.common"):
        return "common"
    return "env"


def test_imports_only_go_down_the_tower():
    """heuristics -> envs (problem packages -> common) -> envs.sim -> traces; nothing in envs
    imports a policy, a learner or a CLI."""
    rank = {"heuristics": 3, "env": 2, "common": 1, "sim": 0}
    upward = [
        (a, b)
        for a, targets in GRAPH.items()
        for b in targets
        if b in GRAPH and rank[_layer(b)] > rank[_layer(a)]
    ]
    assert not upward, f"imports up the tower: {upward}"
    forbidden = {"ext:heuristics", "ext:agents", "ext:evaluation", "ext:evaluate", "ext:train"}
    leaks = [
        (a, sorted(t & forbidden))
        for a, t in GRAPH.items()
        if a.startswith("envs") and t & forbidden
    ]
    assert not leaks, f"envs importing above itself: {leaks}"


def test_no_env_imports_another_env():
    crossing = [
        (a, b)
        for a, targets in GRAPH.items()
        for b in targets
        if a.startswith("envs.") and b.startswith("envs.")
        and a.split(".")[1] in PROBLEMS and b.split(".")[1] in PROBLEMS
        and a.split(".")[1] != b.split(".")[1]
    ]  # fmt: skip
    assert not crossing, f"an env imports another env: {crossing}"


def test_simulator_core_never_imports_its_own_package():
    """``envs.sim``'s ``__init__`` re-exports; the modules inside import each other directly."""
    offenders = sorted(m for m, t in GRAPH.items() if m.startswith("envs.sim.") and "envs.sim" in t)
    assert not offenders, f"import the module, not the envs.sim package: {offenders}"


def test_the_shared_policy_registry_knows_no_env():
    env_edges = sorted(t for t in GRAPH["heuristics.base"] if t.startswith("envs"))
    assert not env_edges, f"heuristics.base must stay env-agnostic, imports {env_edges}"
