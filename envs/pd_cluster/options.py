"""Option checks of :class:`envs.pd_cluster.env.PDClusterEnv`: the constructor's
``prefix_cache`` and ``planning_delay`` and ``reset``'s per-episode ``options``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def episode_observations(
    options: dict[str, Any] | None, default: bool, known: tuple[str, ...]
) -> bool:
    """Whether an episode builds observations: ``options["observations"]`` if given, else the
    constructor's ``default``.

    :param options: ``reset``'s ``options`` (None or {}: the defaults).
    :param known: the option keys the env takes; any other key is an error.
    :raises ValueError: an unknown key, or ``observations`` not a bool.
    """
    if not options:
        return default
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"unknown reset option(s) {unknown}; PDCluster-v0 takes {list(known)}")
    value = options.get("observations", default)
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"reset option observations must be True or False, got {value!r}")
    return bool(value)


def _prefix_cache_blocks(prefix_cache: Any) -> int | str:
    """The simulation's ``prefix_cache_blocks`` for :class:`PDClusterEnv`'s ``prefix_cache``:
    False -> 0 (off), True or ``"kv"`` -> ``"kv"``, an integer >= 0 -> that many blocks."""
    if prefix_cache is True or prefix_cache == "kv":
        return "kv"
    if prefix_cache is False or prefix_cache is None:
        return 0
    if isinstance(prefix_cache, (int, np.integer)) and prefix_cache >= 0:
        return int(prefix_cache)
    raise ValueError(
        f"prefix_cache must be False, True, 'kv' or a number of blocks >= 0, got {prefix_cache!r}"
    )


def _check_planning_delay(delay: Any, scale: Any) -> tuple[float | str | None, float]:
    """Validated ``(planning_delay, planning_delay_scale)`` of :class:`PDClusterEnv`; a delay
    of 0 is None (the blocking default)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"planning_delay_scale must be a number > 0, got {scale!r}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"planning_delay_scale must be a finite number > 0, got {scale!r}")
    if delay is None or isinstance(delay, str):
        if delay not in (None, "measured"):
            raise ValueError(
                f"planning_delay must be None, a number of seconds >= 0 or 'measured', got "
                f"{delay!r}"
            )
    elif isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise ValueError(
            f"planning_delay must be None, a number of seconds >= 0 or 'measured', got {delay!r}"
        )
    elif not (math.isfinite(delay) and delay >= 0):
        raise ValueError(f"planning_delay must be a finite number of seconds >= 0, got {delay!r}")
    else:
        delay = float(delay) if delay > 0 else None
    if scale != 1.0 and delay != "measured":
        raise ValueError(
            f"planning_delay_scale={scale!r} scales measured planning time; it needs "
            f"planning_delay='measured' (got planning_delay={delay!r})"
        )
    return delay, float(scale)
