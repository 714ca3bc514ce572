"""An Allocation episode's workflows: the per-period arrival-rate schedule (constant, a ramp or
a rate trace's window), the workload drawn for a seed, and each workflow's run-alone latency (the
base of its SLO: the critical path of its DAG with each call alone on a reference replica).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, cast

import numpy as np

from envs.allocation.state import AllocationState
from envs.allocation.workloads import (
    default_rate,
)
from traces.schema import ToolNode, Workflow


def check_ramp(ramp: Any, rate_trace: str | None, periods: int) -> tuple[float, float]:
    """``rate_ramp`` as ``(lo, hi)``, checked against the other episode options.

    :raises ValueError: naming the bad value: not two finite numbers > 0, set together with a
        rate trace, or fewer than two periods to ramp over.
    """
    if rate_trace is not None:
        raise ValueError(
            f"rate_ramp={ramp!r} and rate_trace={rate_trace!r} both set the period rates; give "
            "one (servegym/Allocation-v1 ramps by default: pass rate_ramp=None with a rate trace)"
        )
    try:
        lo, hi = (float(x) for x in ramp)
    except (TypeError, ValueError):
        raise ValueError(
            f"rate_ramp must be two numbers (first and last period's rate / workflow_rate), "
            f"got {ramp!r}"
        ) from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo > 0 and hi > 0):
        raise ValueError(f"rate_ramp must be two finite numbers > 0, got {ramp!r}")
    if periods < 2:
        raise ValueError(f"rate_ramp needs periods >= 2 to ramp over, got periods={periods}")
    return lo, hi


class EpisodeMixin(AllocationState):
    """The episode-building methods of :class:`envs.allocation.env.AllocationEnv`."""

    def _schedule(self) -> list[float]:
        from traces.generators import GENERATORS
        from traces.rates import HELDOUT_BINS, TRAIN_BINS, rate_schedule

        base = self.workflow_rate
        if base is None:
            base = default_rate(self.workload, GENERATORS)
        self.rates_start = 0
        if self.rate_ramp is not None:
            lo, hi = self.rate_ramp
            return [float(base * x) for x in np.linspace(lo, hi, self.periods)]
        if self.rate_trace is None:
            return [float(base)] * self.periods
        window = self.rate_window
        if isinstance(window, int):
            start = window
        else:
            bins = (TRAIN_BINS if window == "train" else HELDOUT_BINS)[self.rate_trace]
            span = len(bins) - self.periods
            start = bins.start + (int(self.np_random.integers(0, span + 1)) if span > 0 else 0)
        self.rates_start = start
        return rate_schedule(self.rate_trace, base, self.periods, start)

    def _make_workload(self, seed: int) -> list[Workflow]:
        """Workflows with piecewise-Poisson arrivals following the period rates."""
        from traces.generators import GENERATORS

        rng = np.random.default_rng(seed)
        times: list[float] = []
        for k, rate in enumerate(self.rates):
            if rate <= 0:
                continue
            t, end = k * self.period_seconds, (k + 1) * self.period_seconds
            while True:
                t += float(rng.exponential(1.0 / rate))
                if t >= end:
                    break
                times.append(round(t, 6))
        if not times:
            return []
        # check_workload admits only Allocation's WORKLOADS: workflow generators
        wfs = cast("list[Workflow]", GENERATORS[self.workload](seed=seed, count=len(times)))
        return [dataclasses.replace(w, arrival=a) for w, a in zip(wfs, times, strict=True)]

    def _run_alone(self, wf: Workflow) -> float:
        """Critical path of ``wf`` with every call alone on a whole GPU at TP 1 (the SLO base)."""
        by_id = {n.id: n for n in wf.nodes}
        end: dict[str, float] = {}

        def finish(nid: str) -> float:
            if nid in end:
                return end[nid]
            n = by_id[nid]
            start = max((finish(p) for p in n.parents), default=0.0)
            if isinstance(n, ToolNode):
                dur = n.latency
            else:
                dur = self._alone[n.model](n.input_tokens, n.output_tokens)
            end[nid] = start + dur
            return end[nid]

        return max(finish(n.id) for n in wf.nodes)
