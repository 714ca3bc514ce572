"""Routing-v0's rewards, metrics and ``info``: per-request latency over its SLO (goodput,
GoodServe §4), the rewards collected as requests finish, live and final metrics including the
migration and routing diagnosis.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from envs.routing.state import RoutingState
from envs.sim.core import metrics as sim_metrics


class ResultsMixin(RoutingState):
    """The reward, metric and ``info`` methods of :class:`envs.routing.env.RoutingEnv`."""

    # -- rewards and results -----------------------------------------------------------------
    def _latency(self, run: Any) -> float:
        return run.finish_time - run.arrival if run.finish_time >= 0 else math.inf

    def _collect_rewards(self) -> float:
        sim = self.sim
        assert sim is not None
        r = 0.0
        while self._completed_seen < len(sim.completed):
            run = sim.completed[self._completed_seen]
            self._completed_seen += 1
            self._latencies[run.index] = self._latency(run)
            r += self._reward.on_complete(self._latency(run) / self._slo[run.index])
        return r

    def _unfinished_ratios(self) -> np.ndarray:
        """Elapsed / SLO of the requests that arrived and have not finished (truncation)."""
        sim = self.sim
        assert sim is not None
        now = sim.now
        return np.array(
            [
                (now - run.arrival) / self._slo[run.index]
                for run in sim.runs
                if run.finish_time < 0 and run.arrival <= now
            ]
        )

    def _terminal_reward(self) -> float:
        sim = self.sim
        assert sim is not None
        ratios = np.array([self._latency(run) for run in sim.runs]) / self._slo
        return self._reward.terminal(ratios)

    def _info(self, final: bool = False) -> dict[str, Any]:
        info = self._common_info()
        if final:
            info.update(self._final_info())
        elif self.sim is not None:
            info["metrics"] = self._metrics_so_far()
        return info

    def _metrics_now(self) -> dict[str, float]:
        """Goodput, SLO violations, latency percentiles, ...
        (:func:`envs.sim.core.metrics.summarize_requests`) over every request, an unfinished one
        counted as a violation, as the episode-end metrics count them."""
        sim = self.sim
        assert sim is not None
        return sim_metrics.summarize_requests(self._latencies, self._slo, self._duration)

    def _live_metrics(self) -> dict[str, float]:
        """The base's counts, ``migrations`` started and ``migration_decisions`` so far."""
        sim = self.sim
        assert sim is not None
        # The base's counts change only with the time and the completions: a risk check's
        # decisions (one instant, nothing finishing) reuse them.
        key = (sim.now, len(sim.completed))
        if self._live_base is None or self._live_base[0] != key:
            self._live_base = (key, super()._live_metrics())
        return {
            **self._live_base[1],
            "migrations": float(self._migrations_started()),
            "migration_decisions": float(self._migration_decisions),
        }

    def _migrations_started(self) -> int:
        """Migrations the simulator started so far (Σ ``call.migrations``). Only a plan of this
        env migrates a call (``Simulation.apply`` at a migrate stage), so the sum runs over the
        calls it asked to move, and only after an apply, not over every call at every step."""
        if self._migrations is None:
            self._migrations = sum(c.migrations for c in self._moved.values())
        return self._migrations

    def _final_info(self) -> dict[str, Any]:
        sim = self.sim
        assert sim is not None
        runs = sim.runs
        lat = np.array([self._latency(run) for run in runs])
        metrics = self._metrics_so_far()
        metrics["risk_checks"] = float(self._checked)
        alphas, curve = sim_metrics.attainment_curve(lat / self._alone)
        end = sim.now
        busy = np.array([inst.busy_time for inst in sim.monolithic])
        per_instance = (busy / end).tolist() if end > 0 else [0.0] * self.M
        util = {"monolithic": float(np.mean(per_instance))}
        util.update(
            {
                f"{j}:{g}": u
                for j, (g, u) in enumerate(zip(self._gpu_names, per_instance, strict=True))
            }
        )
        return {
            "metrics": metrics,
            "attainment_curve": {"alpha": alphas.tolist(), "attainment": curve.tolist()},
            "latencies": lat.tolist(),
            "slos": self._slo.tolist(),
            "utilisation": util,
            "simulated_seconds": end,
            "workload_seed": self._workload_seed,
            "diagnosis": self._diag.summary(sim.calls, lat, self._slo),
            "steps": self._steps,
            "invocations": sim.invocation_count,
        }
