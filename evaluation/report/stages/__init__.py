"""The report's stages, one module per documentation page (or group of pages).

Each module here defines ``STAGES``, a list of :class:`evaluation.report.stage.Stage`; this
package collects them in module-name order, so adding a page's tables is adding a module.
"""

from __future__ import annotations

import importlib
import pkgutil

from evaluation.report.stage import Stage


def all_stages() -> list[Stage]:
    """Every stage of every module in this package, in module order then listed order.

    :raises ValueError: if a module has no ``STAGES`` list or two stages share a name.
    """
    found: list[Stage] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        stages = getattr(module, "STAGES", None)
        if not isinstance(stages, list) or not all(isinstance(s, Stage) for s in stages):
            raise ValueError(f"{module.__name__} must define STAGES, a list of Stage")
        found.extend(stages)
    names = [s.name for s in found]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"stage names defined twice: {dupes}")
    return found
