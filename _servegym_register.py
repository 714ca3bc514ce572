"""Registers the servegym environments with Gymnasium as soon as Gymnasium is imported, so that
``gymnasium.make("servegym/Routing-v0")`` works in an installed servegym without ``import envs``.

Gymnasium 1.x no longer loads ``gymnasium.envs`` entry points (its 0.x plugin system is gone:
``gymnasium.make`` only imports a module named in a ``"module:id"`` string), so the installed
package carries ``servegym-gymnasium.pth`` (``setup.py`` puts it in the wheel), whose one line
calls :func:`install` at interpreter start. :func:`install` adds an import hook and nothing
else: it imports neither Gymnasium nor servegym. When Gymnasium's own ``__init__`` has run, the
hook imports :mod:`envs`, whose ``__init__`` registers every id (it imports only Gymnasium's
registration module). A failure there is a warning, never an error in Gymnasium's import.
In a source checkout (``pip install -e .``) no ``.pth`` is installed: import :mod:`envs`, or
use ``gymnasium.make("envs:servegym/Routing-v0")``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

#: The module whose completed import triggers the registration.
TRIGGER = "gymnasium"


class _RegisterAfter(importlib.abc.Loader):
    """Runs the real loader of :data:`TRIGGER`, then registers the servegym ids."""

    def __init__(self, loader: Any):
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        try:
            import envs  # noqa: F401  (its __init__ registers the servegym ids)
        except Exception as exc:  # a broken servegym must not break Gymnasium
            import warnings

            warnings.warn(f"servegym environments not registered: {exc!r}", stacklevel=2)


class _GymnasiumFinder(importlib.abc.MetaPathFinder):
    """Finds :data:`TRIGGER` with the other finders and wraps its loader, once."""

    def find_spec(
        self, name: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != TRIGGER:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _RegisterAfter(spec.loader)
                return spec
        return None


def install() -> None:
    """Register the servegym ids when Gymnasium is imported (at once if it already is)."""
    if TRIGGER in sys.modules:
        import envs  # noqa: F401

        return
    if not any(isinstance(f, _GymnasiumFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _GymnasiumFinder())
