"""The layout holds (the design page, docs/design.md, "Layout"): no source file over 600 lines,
no import circle, imports only down the tower CLIs -> evaluation / training / agents /
benchmarks -> heuristics -> envs (problem packages) -> envs.common -> envs.sim -> traces, no env
package importing another env's, no simulator module importing its own package (``envs.sim``'s
``__init__`` only re-exports), the shared policy registry knowing no env, the runtime never
importing the offline fitting code (``envs.sim.calibration``), and no module importing
another module's ``_private`` name.

Imports are read with ``ast`` from every source file, including the ones inside functions and
under ``TYPE_CHECKING`` (a lazy import is still a dependency). ``from a.b import c`` depends on
``a.b``, and on ``a.b.c`` too when that is a module; a name is resolved to the longest module it
names. Every check runs once on a synthetic tree that breaks it, so none can pass vacuously.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Source packages and the command-line scripts (tests, examples and docs are not sources).
PACKAGES = (
    "traces", "envs", "heuristics", "agents", "evaluation", "training", "benchmarks", "checkpoints",
)  # fmt: skip
SCRIPTS = ("evaluate.py", "train.py", "_servegym_register.py")
MAX_LINES = 600
#: The tower, bottom first: a module may import its own floor and the floors below it.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("traces", "checkpoints"),
    ("envs.sim",),
    ("envs.common",),
    ("envs", "_servegym_register"),
    ("heuristics",),
    ("evaluation", "training", "agents", "benchmarks"),
    ("evaluate", "train"),
)
#: One package per problem under envs/: none imports another's.
ENV_PROBLEMS = ("pd_cluster", "routing", "allocation")
#: The offline fitting code, and the only packages allowed to import it (it, and the benchmarks
#: that replay its fits).
CALIBRATION = "envs.sim.calibration"
CALIBRATION_USERS = (CALIBRATION, "benchmarks")
#: Where no module may import another module's ``_private`` name.
PRIVATE_NAME_SCOPE = PACKAGES


def module_name(path: Path, root: Path) -> str:
    """``envs/sim/__init__.py`` -> ``envs.sim``; ``evaluate.py`` -> ``evaluate``."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files(root: Path) -> dict[str, Path]:
    """Module name -> file of every source file under ``root``."""
    files = [root / s for s in SCRIPTS if (root / s).is_file()]
    for package in PACKAGES:
        files += sorted((root / package).rglob("*.py"))
    return {module_name(p, root): p for p in files if "__pycache__" not in p.parts}


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterable[str]:
    """Every dotted name ``tree`` imports (relative imports made absolute), candidates for
    modules: ``from a.b import c`` gives ``a.b`` and ``a.b.c``."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join([*base, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            yield stem
            yield from (f"{stem}.{alias.name}" for alias in node.names)


@functools.cache
def import_graph(root: Path = ROOT) -> dict[str, frozenset[str]]:
    """Module -> the modules (of this project) it imports."""
    files = source_files(root)
    graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = set()
        for name in imported_names(tree, module, path.name == "__init__.py"):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = frozenset(targets)
    return graph


def private_imports(root: Path = ROOT, scope: tuple[str, ...] = PRIVATE_NAME_SCOPE) -> list[str]:
    """``a -> b._name`` for every ``from b import _name`` in a module of ``scope`` where ``b`` is
    a module of this project and ``b._name`` is not a module (make the name public or move it
    next to its user)."""
    files = source_files(root)
    tops = {m.split(".")[0] for m in files}
    out = []
    for module, path in sorted(files.items()):
        if not any(module == s or module.startswith(s + ".") for s in scope):
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join([*base, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            if stem.split(".")[0] not in tops:
                continue
            out += [
                f"{module} -> {stem}.{alias.name}"
                for alias in node.names
                if alias.name.startswith("_")
                and not alias.name.startswith("__")
                and f"{stem}.{alias.name}" not in files
            ]
    return out


def calibration_imports(graph: Mapping[str, frozenset[str]]) -> list[str]:
    """``a -> b`` for every import of the offline fitting code from outside its users."""

    def inside(module: str, prefixes: Iterable[str]) -> bool:
        return any(module == p or module.startswith(p + ".") for p in prefixes)

    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if inside(target, (CALIBRATION,)) and not inside(module, CALIBRATION_USERS)
    ]


def package_self_imports(graph: Mapping[str, frozenset[str]]) -> list[str]:
    """``a`` for every module inside ``envs.sim`` that imports the ``envs.sim`` package itself
    (its ``__init__`` re-exports; the modules import each other directly)."""
    return sorted(m for m, t in graph.items() if m.startswith("envs.sim.") and "envs.sim" in t)


def floor_of(module: str) -> int | None:
    """Index in :data:`FLOORS` of the most specific floor holding ``module`` (None: none)."""
    best: tuple[int, int] | None = None  # (prefix length, floor)
    for index, floor in enumerate(FLOORS):
        for prefix in floor:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), index)
    return None if best is None else best[1]


def long_files(root: Path = ROOT) -> list[str]:
    """``<lines> <file>`` of every source file over :data:`MAX_LINES` lines, longest first."""
    sized = [
        (len(p.read_text(encoding="utf-8").splitlines()), p) for p in source_files(root).values()
    ]
    return [f"{n} {p.relative_to(root)}" for n, p in sorted(sized, reverse=True) if n > MAX_LINES]


def cycles(graph: Mapping[str, frozenset[str]]) -> list[list[str]]:
    """The import circles of ``graph``: each group of modules that reach one another, sorted."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    groups = {
        tuple(sorted(m for m in reach[start] if start in reach[m])) for start in graph
    }  # a module on a circle reaches itself, so it is in its own group
    return sorted(list(g) for g in groups if g)


def upward_imports(graph: Mapping[str, frozenset[str]]) -> list[str]:
    """``a -> b`` for every import of a module on a higher floor of the tower."""
    out = []
    for module, targets in sorted(graph.items()):
        here = floor_of(module)
        for target in sorted(targets):
            there = floor_of(target)
            if here is not None and there is not None and there > here:
                out.append(f"{module} -> {target}")
    return out


def env_to_env_imports(graph: Mapping[str, frozenset[str]]) -> list[str]:
    """``a -> b`` for every import from one env problem's package into another's."""

    def problem(module: str) -> str | None:
        parts = module.split(".")
        return (
            parts[1] if len(parts) > 1 and parts[0] == "envs" and parts[1] in ENV_PROBLEMS else None
        )

    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if problem(module) and problem(target) and problem(module) != problem(target)
    ]


def test_no_source_file_is_over_600_lines() -> None:
    found = long_files()
    assert not found, "source files over 600 lines:\n" + "\n".join(found)


def test_the_import_graph_has_no_circle() -> None:
    found = [" <-> ".join(group) for group in cycles(import_graph())]
    assert not found, "import circles:\n" + "\n".join(found)


def test_imports_only_go_down_the_tower() -> None:
    found = upward_imports(import_graph())
    assert not found, "imports up the tower:\n" + "\n".join(found)


def test_no_env_package_imports_another_env() -> None:
    found = env_to_env_imports(import_graph())
    assert not found, "env packages importing another env's:\n" + "\n".join(found)


def test_no_simulator_module_imports_its_own_package() -> None:
    found = package_self_imports(import_graph())
    assert not found, "import the module, not the envs.sim package:\n" + "\n".join(found)


def test_the_shared_policy_registry_knows_no_env() -> None:
    found = sorted(t for t in import_graph()["heuristics.base"] if t.startswith("envs"))
    assert not found, f"heuristics.base must stay env-agnostic, imports {found}"


def test_the_runtime_never_imports_the_offline_fitting_code() -> None:
    found = calibration_imports(import_graph())
    assert not found, f"imports of {CALIBRATION} from the runtime:\n" + "\n".join(found)


def test_no_module_imports_another_modules_private_name() -> None:
    found = private_imports()
    assert not found, "imports of a _private name (make it public):\n" + "\n".join(found)


def test_the_graph_sees_the_packages_it_checks() -> None:
    """A guard for the checks above: the graph holds every problem package, its policies, the
    simulator's subpackages and the edges the checks read."""
    graph = import_graph()
    for problem in ENV_PROBLEMS:
        assert f"envs.{problem}.env" in graph and f"heuristics.{problem}" in graph
    for package in ("core", "engines", "latency", "hardware", "allocation", "calibration"):
        assert f"envs.sim.{package}" in graph
    assert "envs.sim.core.protocol" in graph["envs.sim.core.simulation"]
    assert floor_of("envs.common.base") < floor_of("envs.routing.env")


def test_the_checks_catch_what_they_forbid(tmp_path: Path) -> None:
    files = {
        "traces/__init__.py": "",
        "traces/a.py": "def f():\n    from traces import b  # a lazy import counts\n",
        "traces/b.py": "from . import a\nfrom envs.sim import core\n",
        "envs/__init__.py": "",
        "envs/common/__init__.py": "from envs.routing import x\n",
        "envs/sim/__init__.py": "",
        "envs/sim/core.py": "from envs.sim.calibration.fit import _private, public\n",
        "envs/sim/engines.py": "import envs.sim as sim\n",
        "envs/sim/calibration/__init__.py": "",
        "envs/sim/calibration/fit.py": "_private = public = 1\n",
        "envs/routing/__init__.py": "",
        "envs/routing/x.py": "",
        "envs/allocation/__init__.py": "from envs.routing import x\n",
        "heuristics/__init__.py": "",
        "heuristics/base.py": "from envs.routing import x\n",
        "benchmarks/__init__.py": "from envs.sim.calibration import fit\nfrom traces.a import _f\n",
        "evaluate.py": "\n" * (MAX_LINES + 1),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert cycles(graph) == [["traces.a", "traces.b"]]
    assert upward_imports(graph) == [
        "envs.common -> envs.routing",
        "envs.common -> envs.routing.x",
        "traces.b -> envs.sim",
        "traces.b -> envs.sim.core",
    ]
    assert env_to_env_imports(graph) == [
        "envs.allocation -> envs.routing",
        "envs.allocation -> envs.routing.x",
    ]
    assert long_files(tmp_path) == [f"{MAX_LINES + 1} evaluate.py"]
    assert package_self_imports(graph) == ["envs.sim.engines"]
    assert sorted(t for t in graph["heuristics.base"] if t.startswith("envs")) == [
        "envs.routing",
        "envs.routing.x",
    ]
    assert calibration_imports(graph) == [
        "envs.sim.core -> envs.sim.calibration.fit",
    ]
    assert private_imports(tmp_path) == [
        "benchmarks -> traces.a._f",
        "envs.sim.core -> envs.sim.calibration.fit._private",
    ]
    assert private_imports(tmp_path, scope=("benchmarks",)) == ["benchmarks -> traces.a._f"]
