"""Allocation-v0's observation (per-LLM and global features, tabled in the
:class:`envs.allocation.env.AllocationEnv` docstring), its step and episode ``info`` and
metrics, and the documented "sustainable" rule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from envs.allocation.context import LLMPeriodMetrics
from envs.allocation.state import AllocationState
from envs.sim.core import metrics as sim_metrics
from envs.sim.hardware.catalog import get_model

LLM_FEATURES = 16
#: "Sustainable" (``info["metrics"]["sustainable"]``): this share of the measured workflows
#: finished, and the achieved throughput reached this share of the offered rate.
SUSTAINABLE_COMPLETED = 0.99
SUSTAINABLE_THROUGHPUT = 0.9
GLOBAL_FEATURES = 10


class ObservationMixin(AllocationState):
    """The observation, metric and ``info`` methods of
    :class:`envs.allocation.env.AllocationEnv`."""

    # -- info & observation ------------------------------------------------------------------
    def _info(self, final: bool = False) -> dict[str, Any]:
        info = self._common_info()
        info["steps"] = self._steps
        info.update(self._period_info)
        if final:
            info.update(self._episode_info())
        else:
            info["metrics"] = self._metrics_so_far()
        return info

    def _metrics_key(self) -> Any:
        return (self.period, None if self.sim is None else self.sim.now)

    def _metrics_now(self) -> dict[str, float]:
        """The episode-end metrics (the env class docstring) as if the episode ended now: workflows
        not finished yet count as misses; ``num_unfinished``, ``num_not_arrived``."""
        return self._episode_info()["metrics"]

    def _episode_info(self) -> dict[str, Any]:
        sim = self.sim
        idx = [i for i in range(len(self.workflows)) if self._measured[i]]
        lat = (
            np.array([self._latency(i) for i in idx])
            if sim is not None
            else np.full(len(idx), math.inf)
        )
        slos = self._slo[idx]
        horizon = self.periods * self.period_seconds - self.warmup_seconds
        metrics = sim_metrics.summarize_requests(lat, slos, horizon)
        metrics["num_workflows"] = metrics.pop("num_requests")
        metrics["offered_rate"] = len(idx) / horizon
        # Achieved throughput as a load generator measures it: workflows completed inside the
        # measured window (whenever they arrived) per second of it.
        lo, hi = self.warmup_seconds, self.periods * self.period_seconds
        done = 0
        if sim is not None:
            done = sum(1 for run in sim.completed if lo <= run.finish_time < hi)
        metrics["throughput"] = done / horizon
        metrics["reconfigurations"] = float(self._reconfigurations)
        util = self._gpu_utilisation()
        metrics["gpu_utilisation"] = util
        metrics["sustainable"] = float(self._sustainable(metrics))
        if self._apl_periods:
            weights = np.array([max(n, 0) for n, _ in self._apl_periods], dtype=float)
            preds = np.array([p["latency"] for _, p in self._apl_periods])
            w = weights if weights.sum() > 0 else np.ones_like(weights)
            used = w > 0  # a period nobody was measured in has no say (inf x 0 would be NaN)
            metrics["apl_latency"] = float(np.dot(w[used], preds[used]) / w[used].sum())
            metrics["apl_throughput"] = min(p["throughput"] for _, p in self._apl_periods)
        now = 0.0 if sim is None else sim.now
        arrivals = np.array([self.workflows[i].arrival for i in idx])
        metrics["num_unfinished"] = float(np.sum(~np.isfinite(lat) & (arrivals <= now)))
        metrics["num_not_arrived"] = float(np.sum(arrivals > now))
        ratios = lat / slos
        alphas, curve = sim_metrics.attainment_curve(ratios)
        return {
            "metrics": metrics,
            "utilisation": {"gpu": util},
            "attainment_curve": {"alpha": alphas.tolist(), "attainment": curve.tolist()},
            "latencies": lat.tolist(),
            "slos": slos.tolist(),
            "allocations": list(self._history),
            "simulated_seconds": 0.0 if sim is None else sim.now,
            "workload_seed": self._workload_seed,
            "invocations": 0 if sim is None else sim.invocation_count,
        }

    @staticmethod
    def _sustainable(metrics: dict[str, float]) -> bool:
        """The documented "sustainable" rule (``SUSTAINABLE_*``): at least 99 % of the measured
        workflows finished, and the achieved throughput is at least 90 % of the offered rate."""
        n = metrics["num_workflows"]
        if not n or metrics["num_completed"] < SUSTAINABLE_COMPLETED * n:
            return False
        return metrics["throughput"] >= SUSTAINABLE_THROUGHPUT * metrics["offered_rate"]

    def _gpu_utilisation(self) -> float:
        sim = self.sim
        if sim is None or sim.now <= 0:
            return 0.0
        busy = sum(m.busy_time * m.spec.tp * m.spec.fraction for m in sim.monolithic)
        return float(busy / (self.topology.num_gpus * sim.now))

    def _observation(self) -> dict[str, np.ndarray]:
        ctx = self._ctx
        assert ctx is not None
        F, R = self.F, self.R
        llms = np.zeros((self.max_llms, LLM_FEATURES), dtype=np.float32)
        prev = {a.model: a for a in ctx.previous.llms} if ctx.previous else {}
        chosen = {a.model: a for a in ctx.chosen}
        for j, m in enumerate(self.models):
            n_m, p_m = self._structure.get(m, (0.0, 1.0))
            met = ctx.llm_metrics.get(m, LLMPeriodMetrics())
            row = llms[j]
            row[0] = 1.0
            row[1] = j == ctx.current
            row[2] = m in chosen
            row[3] = np.log1p(get_model(m).total_params / 1e9)
            row[4] = n_m / 100
            row[5] = p_m / 10
            row[6] = self.min_units[m] / F
            if m in prev:
                row[7] = prev[m].units / F
                row[8] = prev[m].tp / 4
                row[9] = prev[m].replicas / R
            if m in chosen:
                row[10] = chosen[m].units / F
            row[11] = np.log1p(met.call_rate)
            row[12] = np.log1p(met.mean_latency)
            row[13] = met.busy_fraction
            row[14] = np.log1p(met.in_flight)
            row[15] = np.log1p(met.completed_rate)
        total = self.topology.num_gpus * F
        used = sum(a.units for a in ctx.chosen)
        reserved = sum(self.min_units[m] for m in self.models[ctx.current + 1 :])
        g = np.zeros(GLOBAL_FEATURES, dtype=np.float32)
        g[0] = (total - used) / total
        g[1] = reserved / total
        g[2] = ctx.period / self.periods
        g[3] = np.log1p(ctx.target_rate)
        g[4] = np.log1p(ctx.last_rate)
        g[5] = self._last_attainment
        g[6] = min(self._last_ratio, 10.0)
        g[7] = self.topology.num_gpus / 64
        g[8] = ctx.period == 0
        g[9] = ctx.time / (self.periods * self.period_seconds)
        np.clip(llms, 0.0, 10.0, out=llms)
        np.clip(g, 0.0, 10.0, out=g)
        return {"llms": llms, "global": g}
