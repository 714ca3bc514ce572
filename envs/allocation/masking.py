"""Allocation-v0's action mask: which menu options of the LLM decided now can still be placed
(Scepsy §6's placer on the GPU pool, with the LLMs still to come at their smallest options), the
decision context built from it, and why a masked action is illegal.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from envs.allocation.context import AllocationContext
from envs.allocation.state import AllocationState
from envs.sim.allocation.allocations import (
    Allocation,
    AllocationError,
    LLMAllocation,
    Placement,
    PlacementError,
)
from envs.sim.allocation.placement import place


class MaskingMixin(AllocationState):
    """The masking methods of :class:`envs.allocation.env.AllocationEnv`."""

    # -- masking -----------------------------------------------------------------------------
    def _placeable(self, llms: Sequence[LLMAllocation]) -> bool:
        alloc = Allocation(tuple(llms), units_per_gpu=self.F)
        key = tuple((a.model, a.units, a.tp, a.replicas) for a in llms)
        hit = self._place_memo.get(key)
        if hit is None:
            hit = self._try_place(alloc) is not None
            self._place_memo[key] = hit
        return hit

    def _try_place(self, alloc: Allocation) -> Placement | None:
        if self.placement is not None:
            try:
                return place(alloc, self.topology, keep=self.placement)
            except PlacementError:
                pass
        try:
            return place(alloc, self.topology)
        except PlacementError:
            return None

    def _compute_mask(self) -> np.ndarray:
        i = len(self._chosen)
        model = self.models[i]
        rest = [self._minimal_option(m) for m in self.models[i + 1 :]]
        budget = (
            self.topology.num_gpus * self.F
            - sum(a.units for a in self._chosen)
            - sum(a.units for a in rest)
        )
        self._place_memo: dict[tuple, bool] = {}
        mask = np.zeros(len(self.options), dtype=bool)
        for k, (s, t, d) in enumerate(self.options):
            need = self.min_share[(model, t)]
            if need is None or s < need or s * t * d > budget:
                continue
            opt = LLMAllocation(model, units=s * t * d, tp=t, replicas=d)
            mask[k] = self._placeable([*self._chosen, opt, *rest])
        if not mask.any():  # guaranteed not to happen (see the module docstring)
            raise AllocationError(
                f"no legal option for {model} after {[a.describe(self.F) for a in self._chosen]}"
            )
        return mask

    def _build_context(self) -> None:
        self._mask = self._compute_mask()
        now = 0.0 if self.sim is None else self.sim.now
        self._ctx = AllocationContext(
            time=now,
            period=self.period,
            periods=self.periods,
            period_seconds=self.period_seconds,
            target_rate=self.rates[self.period],
            last_rate=self._last_rate,
            workload=self.workload,
            models=self.models,
            current=len(self._chosen),
            chosen=tuple(self._chosen),
            previous=self.allocation,
            topology=self.topology,
            units_per_gpu=self.F,
            max_replicas=self.R,
            options=self.options,
            mask=self._mask.copy(),
            llm_metrics=dict(self._llm_metrics),
            min_share=dict(self.min_share),
            min_units=dict(self.min_units),
            demand=dict(self.demand),
            engine=self.engine.name,
            memory_utilization=self.engine.memory_utilization,
            min_kv_tokens=self.min_kv_tokens,
            slo_scale=self.slo_scale,
            latency_calibration=self.latency_calibration,
        )

    def _explain_invalid(self, action: int) -> str:
        n = len(self.options)
        if not 0 <= action < n:
            return f"action {action} is outside Discrete({n})"
        s, t, d = self.options[action]
        model = self.models[len(self._chosen)]
        need = self.min_share[(model, t)]
        if need is None:
            why = (
                f"{model} cannot run at TP{t} here (TP beyond the {self.max_tp}-GPU NVLink "
                "domain, TP not dividing its heads, or weights + KV above a whole GPU)"
            )
        elif s < need:
            why = f"a share of {s}/{self.F} GPU is below {model}'s minimum {need}/{self.F} at TP{t}"
        else:
            why = (
                f"{s * t * d} units do not fit: the pool has {self.topology.num_gpus * self.F}, "
                f"{sum(a.units for a in self._chosen)} are taken this period and the LLMs still "
                "to come need their minimums, or the replicas cannot be placed on the topology"
            )
        return (
            f"masked action {action} = ({s}/{self.F} GPU share, TP{t}, {d} replicas) for {model}: "
            f"{why}. Use env.action_masks() or make the env with invalid_action='penalize'."
        )
