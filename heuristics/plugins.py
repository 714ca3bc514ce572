"""Outside policies by reference: ``py:MODULE:FACTORY`` and ``py:path/to/file.py:FACTORY``.

A policy spec of this form is accepted wherever a policy name is (``evaluate.py --policies``,
``train.py --bc-expert`` and ``--baselines``), for every env family, and is written verbatim into
the "regenerate:" line, so the printed command reruns as it stands::

    python evaluate.py --policies py:my_scheduler.py:make,hexagent
    python evaluate.py --policies py:mypackage.schedulers:SRCP,hexagent

``MODULE`` is imported like any Python module (the current directory is searched after
``sys.path``); a ``FILE`` (a path ending in ``.py``, relative to the current directory) is loaded
from that file. ``FACTORY`` is a callable in it — a class or a function — called with no
arguments, or with the env as its only argument if it takes one, and must return an object of
the policy protocol (:class:`heuristics.base.Policy`): ``reset()`` at episode start and
``act(obs, info) -> int`` at every step. Each run gets a fresh object from the factory.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

PREFIX = "py"


class PluginError(ValueError):
    """A ``py:`` spec that cannot be loaded; the message names the spec and what is wrong."""


def split_spec(argument: str) -> tuple[str, str]:
    """``MODULE:FACTORY`` or ``FILE.py:FACTORY`` (the part after ``py:``) -> (target, factory).

    :raises PluginError: if either part is missing.
    """
    target, sep, factory = argument.rpartition(":")
    if not sep or not target or not factory:
        raise PluginError(
            f"policy 'py:{argument}': expected py:MODULE:FACTORY or py:path/to/file.py:FACTORY"
        )
    return target, factory


def _load_file(path: str, spec: str) -> ModuleType:
    file = Path(path).expanduser()
    if not file.is_file():
        raise PluginError(f"policy {spec!r}: no such file {str(file)!r} (from {os.getcwd()})")
    resolved = file.resolve()
    # One module per file, named after its absolute path: loading the same file twice (one per
    # run) reuses the module, and two files with the same stem do not collide.
    name = f"servegym_plugin_{resolved.stem}_{hashlib.sha1(str(resolved).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise PluginError(f"policy {spec!r}: cannot load {str(file)!r} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise PluginError(f"policy {spec!r}: importing {str(file)!r} failed: {exc!r}") from exc
    return module


def _load_module(target: str, spec: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is not None and target.startswith(exc.name):
            raise PluginError(
                f"policy {spec!r}: no module {target!r} on sys.path or in {cwd} (a file is "
                "named with its .py suffix: py:path/to/file.py:FACTORY)"
            ) from exc
        raise PluginError(f"policy {spec!r}: importing {target!r} failed: {exc!r}") from exc
    except Exception as exc:
        raise PluginError(f"policy {spec!r}: importing {target!r} failed: {exc!r}") from exc


def load_factory(argument: str) -> Callable[..., Any]:
    """The callable named by ``argument`` (a spec without its ``py:`` prefix).

    :raises PluginError: the module or file cannot be imported, or has no such callable.
    """
    spec = f"{PREFIX}:{argument}"
    target, name = split_spec(argument)
    module = _load_file(target, spec) if target.endswith(".py") else _load_module(target, spec)
    factory = getattr(module, name, None)
    if factory is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise PluginError(
            f"policy {spec!r}: {target!r} has no {name!r}; its callables: "
            f"{', '.join(public) or 'none'}"
        )
    if not callable(factory):
        raise PluginError(f"policy {spec!r}: {name!r} is a {type(factory).__name__}, not callable")
    return factory


def _takes_env(factory: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return len(required) == 1


def make_plugin_policy(argument: str, env: Any = None) -> Any:
    """A fresh policy from ``py:<argument>``: the factory's result, checked against the policy
    protocol, named by its spec if it has no ``name`` of its own.

    :param argument: ``MODULE:FACTORY`` or ``FILE.py:FACTORY``.
    :param env: passed to a factory that takes one argument.
    :raises PluginError: loading fails, the factory raises, or its result lacks ``act`` or
        ``reset``.
    """
    spec = f"{PREFIX}:{argument}"
    factory = load_factory(argument)
    try:
        policy = factory(env) if _takes_env(factory) else factory()
    except Exception as exc:
        raise PluginError(f"policy {spec!r}: calling the factory raised {exc!r}") from exc
    missing = [m for m in ("act", "reset") if not callable(getattr(policy, m, None))]
    if missing:
        raise PluginError(
            f"policy {spec!r}: the factory returned a {type(policy).__name__} without "
            f"{' and '.join(missing)}(); a policy has reset() and act(obs, info) -> int "
            "(heuristics.base.Policy)"
        )
    if not isinstance(getattr(policy, "name", None), str):
        try:
            policy.name = spec
        except AttributeError as exc:
            raise PluginError(f"policy {spec!r}: cannot set a name on {policy!r}") from exc
    return policy
