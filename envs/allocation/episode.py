"""An Allocation-v0 episode's workflows: the per-period arrival-rate schedule (constant or a
rate trace's window), the workload drawn for a seed, and each workflow's run-alone latency (the
base of its SLO: the critical path of its DAG with each call alone on a reference replica).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from envs.allocation.workloads import (
    default_rate,
)
from traces.schema import ToolNode, Workflow


class EpisodeMixin:
    """The episode-building methods of :class:`envs.allocation.env.AllocationEnv`."""

    def _schedule(self) -> list[float]:
        from traces.generators import GENERATORS
        from traces.rates import HELDOUT_BINS, TRAIN_BINS, rate_schedule

        base = self.workflow_rate
        if base is None:
            base = default_rate(self.workload, GENERATORS)
        self.rates_start = 0
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
        wfs = GENERATORS[self.workload](seed=seed, count=len(times))
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
