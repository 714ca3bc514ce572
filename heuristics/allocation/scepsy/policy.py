"""The Scepsy expert as an Allocation-v0 policy: the §5 GPU scheduler
(:mod:`heuristics.allocation.scepsy.search`) over the workload's Aggregate LLM Pipeline (§4) at
each period's target rate, and its ablations and our variants (registry ``scepsy``,
``scepsy-reactive``, ``scepsy-full-capacity``, ``scepsy-sticky``, ``scepsy-parallelism-only``,
``scepsy-fractional-only``).
"""

from __future__ import annotations

from typing import Any

from envs.allocation import AllocationContext
from envs.sim.allocation.allocations import Allocation
from heuristics.allocation.base import PlanPolicy
from heuristics.base import register


class ScepsyPolicy(PlanPolicy):
    """Scepsy: at each period, the GPU scheduler (§5,
    :func:`heuristics.allocation.scepsy.search.search`) over the workload's Aggregate LLM Pipeline
    (§4, built by tracing and replay profiling on the simulator, cached on disk) picks the
    allocation with the lowest predicted latency that sustains the period's target rate; the env
    places it (§6). Re-solved when the target rate changes.

    :param fractional: allow fractional GPU shares (False: the "parallelism-only" ablation).
    :param tensor_parallel: allow TP > 1 (False: the "fractional-only" ablation).
    :param stat: latency statistic the APL predicts (``mean``; or a percentile).
    :param headroom: plan on this share of the APL's predicted throughput (an allocation
        sustains the target iff ``headroom × T_w ≥ target``; default
        :data:`~heuristics.allocation.scepsy.search.DEFAULT_HEADROOM` = 0.9, Scepsy's prototype;
        1.0 plans on the full profiled capacity).
    :param reactive: plan for the rate *measured* in the last period instead of the upcoming
        period's scheduled rate (the first period uses the scheduled rate, as a deployment's
        initial plan would). Scepsy takes its target throughput as an input; the scheduled rate
        is a perfect forecast, the last measured rate is what an operator has without one.
    :param sticky: keep the last period's allocation while the APL predicts it sustains the new
        target rate (re-solve only when it does not): every re-solve that changes a replica pays
        its cold start, which Scepsy's static search does not weigh.
    """

    def __init__(
        self,
        name: str = "scepsy",
        fractional: bool = True,
        tensor_parallel: bool = True,
        stat: str = "mean",
        headroom: float | None = None,
        reactive: bool = False,
        sticky: bool = False,
    ):
        super().__init__()
        self.name = name
        self.reactive = reactive
        self.sticky = sticky
        self.fractional = fractional
        self.tensor_parallel = tensor_parallel
        self.stat = stat
        from heuristics.allocation.scepsy.search import DEFAULT_HEADROOM

        self.headroom = DEFAULT_HEADROOM if headroom is None else float(headroom)
        if not 0.0 < self.headroom <= 1.0:
            raise ValueError(f"{name}: headroom must be in (0, 1], got {headroom!r}")
        self._solved: dict[tuple, Allocation] = {}
        self.last_result: Any = None

    def plan(self, ctx: AllocationContext) -> Allocation:
        from envs.sim.allocation.scepsy import pipelines_for
        from heuristics.allocation.scepsy.multi import search_multi
        from heuristics.allocation.scepsy.search import search

        known = ctx.last_rate if self.reactive and ctx.previous is not None else ctx.target_rate
        rate = known
        if self.sticky and ctx.previous is not None:
            from envs.sim.allocation.scepsy import pipeline_for

            apl = pipeline_for(
                ctx.workload,
                ctx.topology.gpu,
                ctx.units_per_gpu,
                ctx.engine,
                calibration_variant=ctx.latency_calibration,
            )
            if self.headroom * apl.predict(ctx.previous, rate, self.stat).throughput >= rate:
                return ctx.previous
        key = (ctx.workload, ctx.topology, ctx.units_per_gpu, round(rate, 6))
        if key not in self._solved:
            pipes = pipelines_for(
                ctx.workload,
                ctx.topology.gpu,
                ctx.units_per_gpu,
                ctx.engine,
                calibration_variant=ctx.latency_calibration,
            )
            kwargs: dict[str, Any] = {
                "max_replicas": ctx.max_replicas,
                "fractional": self.fractional,
                "tensor_parallel": self.tensor_parallel,
                "memory_utilization": ctx.memory_utilization,
                "min_kv_tokens": ctx.min_kv_tokens,
                "stat": self.stat,
                "headroom": self.headroom,
            }
            if len(pipes) == 1:
                (apl,) = pipes.values()
                res: Any = search(
                    apl, rate, ctx.topology, units_per_gpu=ctx.units_per_gpu, **kwargs
                )
            else:  # several workflow families: one deployment each, egalitarian welfare (§5)
                share = 1.0 / len(pipes)  # rag_beam_combined: each arrival is either, 1/2
                res = search_multi(
                    [(apl, rate * share) for apl in pipes.values()],
                    ctx.topology,
                    units_per_gpu=ctx.units_per_gpu,
                    **kwargs,
                )
            self.last_result = res
            self._solved[key] = res.allocation
        return self._solved[key]


register("scepsy", env="allocation")(lambda: ScepsyPolicy("scepsy"))
register("scepsy-reactive", env="allocation")(
    lambda: ScepsyPolicy("scepsy-reactive", reactive=True)
)
register("scepsy-full-capacity", env="allocation")(
    lambda: ScepsyPolicy("scepsy-full-capacity", headroom=1.0)
)
register("scepsy-sticky", env="allocation")(lambda: ScepsyPolicy("scepsy-sticky", sticky=True))
register("scepsy-parallelism-only", env="allocation")(
    lambda: ScepsyPolicy("scepsy-parallelism-only", fractional=False)
)
register("scepsy-fractional-only", env="allocation")(
    lambda: ScepsyPolicy("scepsy-fractional-only", tensor_parallel=False)
)
