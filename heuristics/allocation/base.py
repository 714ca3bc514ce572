"""What every ``servegym/Allocation-v0`` allocator shares: the decision context read from
``info`` (:func:`allocation_context`), the nearest legal menu option (:func:`nearest_legal`) and
:class:`PlanPolicy`, the base of a policy that plans a whole allocation at a period's first step
and emits it one LLM at a time through the env's menu.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from envs.allocation import AllocationContext
from envs.sim.allocation.allocations import Allocation, LLMAllocation
from heuristics.context import context_error


def allocation_context(info: Mapping[str, Any]) -> AllocationContext:
    ctx = info.get("decision_context") if isinstance(info, Mapping) else None
    if not isinstance(ctx, AllocationContext):
        raise context_error(info, AllocationContext, "allocation")
    return ctx


def nearest_legal(ctx: AllocationContext, want: LLMAllocation) -> int:
    """The legal option closest to ``want``: exact if legal; else the fewest units away, then
    the same TP, then the same replica count, then the smaller."""
    F = ctx.units_per_gpu
    target = (want.share_units, want.tp, want.replicas)
    if target in ctx.options:
        k = ctx.options.index(target)
        if ctx.mask[k]:
            return k
    best, best_key = -1, None
    for k in map(int, np.flatnonzero(ctx.mask)):
        s, t, d = ctx.options[k]
        key = (abs(s * t * d - want.units), t != want.tp, abs(d - want.replicas), s * t * d)
        if best_key is None or key < best_key:
            best, best_key = int(k), key
    if best < 0:
        raise RuntimeError(f"no legal option for {ctx.model} (units_per_gpu {F})")
    return best


class PlanPolicy:
    """Base: ``plan(ctx)`` gives a whole :class:`Allocation` at each period's first step; the
    steps emit its entries."""

    name = "plan"

    def __init__(self) -> None:
        self.fallbacks = 0
        self._plan: Allocation | None = None

    def reset(self) -> None:
        self.fallbacks = 0
        self._plan = None

    def plan(self, ctx: AllocationContext) -> Allocation:
        raise NotImplementedError

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        ctx = allocation_context(info)
        if ctx.current == 0 or self._plan is None:
            self._plan = self.plan(ctx)
        want = self._plan.get(ctx.model)
        k = nearest_legal(ctx, want)
        if ctx.options[k] != (want.share_units, want.tp, want.replicas):
            self.fallbacks += 1
        return k


def tp1_replicas(model: str, units: int, F: int) -> LLMAllocation:
    """``units`` as TP-1 replicas of equal shares of at most one GPU (as many whole-GPU-sized
    shares as possible: ``d = ceil(units / F)``, share = ``units // d``)."""
    d = max(1, math.ceil(units / F))
    share = units // d
    return LLMAllocation(model, units=share * d, tp=1, replicas=d)
