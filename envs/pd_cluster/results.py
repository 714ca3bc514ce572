"""PDCluster-v0's rewards, metrics and ``info``: the per-step reward collected from the
simulator's finished workflows, the slowdown ratios C_w / H_w behind Req95 / Req99 (HexAgent
§7.3), and the step / episode ``info`` including asynchronous-planning statistics."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from envs.pd_cluster.state import PDClusterState
from envs.sim.core import metrics as sim_metrics
from envs.sim.core.metrics import slowdown_ratio


class ResultsMixin(PDClusterState):
    """The reward, metric and ``info`` methods of :class:`envs.pd_cluster.env.PDClusterEnv`."""

    # -- rewards and results -----------------------------------------------------------------
    def _collect_rewards(self) -> float:
        sim = self.sim
        assert sim is not None
        r = 0.0
        while self._completed_seen < len(sim.completed):
            run = sim.completed[self._completed_seen]
            self._completed_seen += 1
            h = sim.standalone_horizon(run)
            r += self._reward.on_complete(slowdown_ratio(run.finish_time - run.arrival, h))
        return r

    def _unfinished_ratios(self) -> np.ndarray:
        """Elapsed / H_w of the workflows that arrived and have not finished (truncation)."""
        sim = self.sim
        assert sim is not None
        now = sim.now
        return np.array(
            [
                slowdown_ratio(now - run.arrival, sim.standalone_horizon(run))
                for run in sim.runs
                if run.finish_time < 0 and run.arrival <= now
            ]
        )

    def _ratios(self) -> np.ndarray:
        """C_w / H_w of every workflow; an unfinished one is charged its elapsed time (inf if it
        has not arrived or arrived just now)."""
        sim = self.sim
        assert sim is not None
        out = []
        for run in sim.runs:
            if run.finish_time >= 0:
                ct = run.finish_time - run.arrival
            else:
                ct = sim.now - run.arrival if sim.now > run.arrival else math.inf
            out.append(slowdown_ratio(ct, sim.standalone_horizon(run)))
        return np.asarray(out, dtype=float)

    def _metrics_now(self) -> dict[str, float]:
        """Req95, Req99, ... (:func:`envs.sim.core.metrics.summarize_workflows`) over every
        workflow, an unfinished one with C_w = inf, as the episode-end metrics count them."""
        sim = self.sim
        assert sim is not None
        runs = sim.runs
        ct = [r.finish_time - r.arrival if r.finish_time >= 0 else math.inf for r in runs]
        # An unfinished workflow's ratio is inf whatever its H_w: no standalone run needed.
        h = [sim.standalone_horizon(r) if r.finish_time >= 0 else 1.0 for r in runs]
        return sim_metrics.summarize_workflows(ct, h)

    def _metrics_so_far(self) -> dict[str, float]:
        """:meth:`envs.common.base.ServegymEnv._metrics_so_far`, kept while neither the
        simulated time nor the completions change (true within an invocation: the simulator does
        not move between its picks); a fresh dict every step."""
        sim = self.sim
        assert sim is not None
        key = (sim.now, len(sim.completed))
        cached = self._step_metrics
        if cached is None or cached[0] != key:
            cached = self._step_metrics = (key, super()._metrics_so_far())
        return dict(cached[1])

    def _info(self, final: bool = False) -> dict[str, Any]:
        info = self._common_info()
        if self.sim is not None:
            info["metrics"] = self._metrics_so_far()
        if final:
            assert self.sim is not None
            res = self.sim.result()
            ratios = [w.completion_time / w.horizon for w in res.workflows]
            alphas, curve = sim_metrics.attainment_curve(ratios)
            info.update(
                metrics={**res.metrics, **info["metrics"]},
                attainment_curve={"alpha": alphas.tolist(), "attainment": curve.tolist()},
                completion_times=[w.completion_time for w in res.workflows],
                horizons=[w.horizon for w in res.workflows],
                arrivals=[w.arrival for w in res.workflows],
                invocations=res.invocations,
                utilisation=res.utilisation,
                simulated_seconds=res.end_time,
                workload_seed=self._workload_seed,
                steps=self._steps,
                planning=self._planning_info(res.extra["planning"]),
            )
        return info

    def _planning_info(self, sim_stats: dict[str, Any]) -> dict[str, Any]:
        """The episode's planning statistics: the option, the simulator's counters
        (:class:`envs.sim.core.simulation.PlanningStats`: delayed plans, mean/max delay in simulated
        seconds, calls that ran under the fallback plan because a plan was late, ...), and under
        ``"measured"`` the measured wall seconds per plan (mean, max) before scaling."""
        out: dict[str, Any] = {
            "planning_delay": self.planning_delay,
            "planning_delay_scale": self.planning_delay_scale,
            **sim_stats,
        }
        if self.planning_delay == "measured":
            wall = self._planning_wall
            out["measured_wall_mean"] = sum(wall) / len(wall) if wall else 0.0
            out["measured_wall_max"] = max(wall, default=0.0)
        return out
