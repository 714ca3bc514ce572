"""Baselines and the Scepsy expert for ``servegym/Allocation-v0``.

Every policy here acts one LLM at a time through the env's menu, reading only
``info["decision_context"]`` (:class:`envs.allocation.AllocationContext`). A policy that plans a
whole allocation at a period's first step emits its per-LLM options in the env's order; if an
option is masked (the env's placement check can be stricter than the policy's), it takes the
nearest legal option (:func:`nearest_legal`) and counts it in ``fallbacks``.

===========================  ================================================================
name                         rule (source)
===========================  ================================================================
``scepsy``                   APL + GPU scheduler at the period's target rate (Scepsy §4–§5)
``scepsy-parallelism-only``  Scepsy without fractional shares (whole GPUs; Fig. 10 ablation)
``scepsy-fractional-only``   Scepsy without tensor parallelism (TP 1; Fig. 10 ablation)
``scepsy-reactive``          Scepsy re-solved for the last period's *measured* rate, not the
                             upcoming scheduled one (no forecast; our own variant)
``scepsy-sticky``            Scepsy that keeps its allocation while the APL says it sustains
                             the new rate (no reconfiguration churn; our own variant)
``k8s-hpa``                  Kubernetes HPA per LLM, whole-GPU TP-1 replicas (§7.2)
``naive-equal``              equal GPU split, TP 1, fixed
``aegaeon-3p1d`` (``-2p2d``,  Aegaeon's pooled prefill/decode instances at a per-node P/D split,
``-1p3d``)                   non-LLM models on the prefill side, shares by phase work (§7.2;
                             SOSP'25, approximated: :class:`AegaeonPolicy`); ``-units``
                             suffix: packed into the most units rather than the largest shares
``ayo``                      Ayo's engine provisioning: whole-GPU instances, one per non-LLM
                             engine, the rest even over LLM engines (§7.2; ASPLOS'25,
                             :class:`AyoPolicy`)
``demand-proportional``      GPUs in proportion to each LLM's traced GPU-seconds per workflow,
                             TP 1 (our own strong simple reference)
``alloc:PATH``               a user-specified allocation from a YAML file (evaluate.py prefix)
===========================  ================================================================
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from envs.allocation import AllocationContext
from envs.sim.allocation import Allocation, AllocationError, LLMAllocation
from heuristics.base import register


def allocation_context(info: Mapping[str, Any]) -> AllocationContext:
    ctx = info.get("decision_context")
    if not isinstance(ctx, AllocationContext):
        raise ValueError(
            "this policy acts in servegym/Allocation-v0 and needs info['decision_context'] to be "
            f"an AllocationContext, got {type(ctx).__name__} (gym.make(id) leaves the context "
            "out: make the env with decision_context=True)"
        )
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
    for k in np.flatnonzero(ctx.mask):
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


def _tp1_replicas(model: str, units: int, F: int) -> LLMAllocation:
    """``units`` as TP-1 replicas of equal shares of at most one GPU (as many whole-GPU-sized
    shares as possible: ``d = ceil(units / F)``, share = ``units // d``)."""
    d = max(1, math.ceil(units / F))
    share = units // d
    return LLMAllocation(model, units=share * d, tp=1, replicas=d)


@register("naive-equal", env="allocation")
class NaiveEqual(PlanPolicy):
    """Equal split at TP 1: each of the M LLMs gets ``floor(G / M)`` whole GPUs as TP-1
    replicas (at least one replica; with fewer GPUs than LLMs, ``floor(G·F / M)`` units as one
    fractional replica); GPUs left over stay idle. The same allocation every period (a
    hand-deployed cluster: "user-specified allocations" without workflow knowledge)."""

    name = "naive-equal"

    def plan(self, ctx: AllocationContext) -> Allocation:
        F, G, M = ctx.units_per_gpu, ctx.topology.num_gpus, len(ctx.models)
        llms = []
        for m in ctx.models:
            if G >= M:
                llms.append(LLMAllocation(m, units=(G // M) * F, tp=1, replicas=G // M))
            else:
                llms.append(LLMAllocation(m, units=max(1, G * F // M), tp=1, replicas=1))
        return Allocation(tuple(llms), units_per_gpu=F)


@register("demand-proportional", env="allocation")
class DemandProportional(PlanPolicy):
    """GPU units in proportion to each LLM's GPU-seconds per workflow (``ctx.demand``: calls per
    workflow × their mean run-alone time on a whole GPU, from a traced sample), at least each
    LLM's minimum, as TP-1 replicas of up to one GPU each. What a reviewer would try first: it
    uses the same traced statistics as Scepsy, without profiles or a search."""

    name = "demand-proportional"

    def plan(self, ctx: AllocationContext) -> Allocation:
        F = ctx.units_per_gpu
        total = ctx.topology.num_gpus * F
        demand = np.array([max(ctx.demand.get(m, 0.0), 1e-9) for m in ctx.models])
        mins = np.array([ctx.min_units[m] for m in ctx.models])
        units = np.maximum(mins, np.floor(total * demand / demand.sum())).astype(int)
        while units.sum() > total:  # give back from the largest share above its minimum
            j = int(np.argmax(np.where(units > mins, units, -1)))
            units[j] -= 1
        return Allocation(
            tuple(_tp1_replicas(m, int(u), F) for m, u in zip(ctx.models, units, strict=True)),
            units_per_gpu=F,
        )


class FixedAllocation(PlanPolicy):
    """A user-specified allocation, the same every period.

    :param allocation: the allocation (its ``units_per_gpu`` must match the env's).
    :param name: label in result tables.
    """

    def __init__(self, allocation: Allocation, name: str = "fixed"):
        super().__init__()
        self.allocation = allocation
        self.name = name

    def plan(self, ctx: AllocationContext) -> Allocation:
        if self.allocation.units_per_gpu != ctx.units_per_gpu:
            raise AllocationError(
                f"allocation {self.name!r} is in units of 1/{self.allocation.units_per_gpu} GPU "
                f"but the env uses 1/{ctx.units_per_gpu}"
            )
        missing = set(ctx.models) - set(self.allocation.models)
        if missing:
            raise AllocationError(
                f"allocation {self.name!r} has no entry for {sorted(missing)} (the workload's "
                f"LLMs: {list(ctx.models)})"
            )
        return self.allocation

    @classmethod
    def from_yaml(cls, path: str | Path) -> FixedAllocation:
        """Read ``units_per_gpu: 4`` and ``llms: [{model, units, tp, replicas}, ...]``.

        :raises AllocationError: naming the file and entry on a malformed file.
        """
        p = Path(path)
        if not p.is_file():
            raise AllocationError(f"allocation file {str(p)!r} does not exist")
        try:
            data = yaml.safe_load(p.read_text())
        except yaml.YAMLError as exc:
            raise AllocationError(f"{p}: not valid YAML: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("llms"), list):
            raise AllocationError(f"{p}: expected a mapping with a list 'llms'")
        llms = []
        for k, e in enumerate(data["llms"]):
            if not isinstance(e, dict) or "model" not in e or "units" not in e:
                raise AllocationError(f"{p}: llms[{k}] needs 'model' and 'units', got {e!r}")
            unknown = set(e) - {"model", "units", "tp", "replicas"}
            if unknown:
                raise AllocationError(f"{p}: llms[{k}] has unknown keys {sorted(unknown)}")
            for key in ("units", "tp", "replicas"):
                v = e.get(key, 1)
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise AllocationError(
                        f"{p}: llms[{k}].{key} must be an integer >= 1, got {v!r}"
                    )
            llms.append(
                LLMAllocation(str(e["model"]), e["units"], e.get("tp", 1), e.get("replicas", 1))
            )
        F = data.get("units_per_gpu", 4)
        if isinstance(F, bool) or not isinstance(F, int) or F < 1:
            raise AllocationError(f"{p}: units_per_gpu must be an integer >= 1, got {F!r}")
        return cls(Allocation(tuple(llms), units_per_gpu=F), name=f"alloc:{p.name}")


@register("k8s-hpa", env="allocation")
class KubernetesHPA(PlanPolicy):
    """Kubernetes' Horizontal Pod Autoscaler, one Deployment per LLM (Scepsy §7.2's K8s baseline
    with the upstream HPA defaults; Scepsy names the baseline, Kubernetes documents the rule):

    * a pod is one replica on whole GPUs (``nvidia.com/gpu``: 1 GPU at TP 1, or the smallest TP
      that holds the model; K8s cannot share a GPU between pods without MPS, which is Scepsy's
      contribution);
    * every sync period (the env's ``period_seconds``; K8s default 15 s) per LLM:
      ``desired = ceil(current × metric / target)``, unchanged while ``|metric / target − 1| ≤
      tolerance`` (0.1);
    * scale-up at most ``max(2 × current, current + 4)`` per sync (K8s default scale-up policy);
      scale-down takes the highest recommendation of the last ``stabilization_s`` (300 s);
    * ``min_replicas`` 1 (the first period starts there);
    * running pods keep their GPUs; pods beyond the free GPUs stay Pending (the scheduler binds
      them in the env's LLM order as GPUs free up, never evicting another Deployment's pod);
    * new pods serve after the env's cold start (model load), as a real pod would.

    :param metric: ``utilisation`` (mean engine-busy fraction of the replicas: GPU utilisation
        as DCGM exports it; default) or ``in-flight`` (running + waiting calls per replica).
    :param target: target value of the metric (0.7 utilisation; 8 calls in flight).
    :param tolerance: HPA's tolerance.
    :param stabilization_s: scale-down stabilisation window, seconds.
    :param min_replicas: minimum replicas per LLM.
    """

    name = "k8s-hpa"

    def __init__(
        self,
        metric: str = "utilisation",
        target: float | None = None,
        tolerance: float = 0.1,
        stabilization_s: float = 300.0,
        min_replicas: int = 1,
    ):
        super().__init__()
        if metric not in ("utilisation", "in-flight"):
            raise ValueError(f"metric must be 'utilisation' or 'in-flight', got {metric!r}")
        self.metric = metric
        self.target = float(
            target if target is not None else (0.7 if metric == "utilisation" else 8)
        )
        if not self.target > 0:
            raise ValueError(f"target must be > 0, got {target}")
        self.tolerance = float(tolerance)
        self.stabilization_s = float(stabilization_s)
        self.min_replicas = int(min_replicas)
        self.reset()

    def reset(self) -> None:
        super().reset()
        self._history: dict[str, deque[tuple[float, int]]] = {}
        self.pending: dict[str, int] = {}

    def desired(self, current: int, value: float) -> int:
        """HPA's recommendation from ``current`` replicas and the measured ``value``."""
        ratio = value / self.target
        if abs(ratio - 1.0) <= self.tolerance:
            return current
        return max(self.min_replicas, math.ceil(current * ratio))

    def recommend(self, ctx: AllocationContext, model: str) -> int:
        prev = ctx.previous.get(model).replicas if ctx.previous is not None else self.min_replicas
        met = ctx.llm_metrics.get(model)
        if ctx.previous is None or met is None:
            return prev
        value = met.busy_fraction if self.metric == "utilisation" else met.in_flight
        want = self.desired(prev, value)
        want = min(want, max(2 * prev, prev + 4))  # scale-up rate limit
        hist = self._history.setdefault(model, deque())
        hist.append((ctx.time, want))
        while hist and hist[0][0] < ctx.time - self.stabilization_s:
            hist.popleft()
        if want < prev:  # scale down only as far as the window's highest recommendation
            want = min(prev, max(w for _, w in hist))
        return max(self.min_replicas, want)

    @staticmethod
    def pod_tp(ctx: AllocationContext, model: str) -> int:
        """GPUs per pod: 1, or the smallest TP whose whole GPUs hold the model."""
        if ctx.min_share.get((model, 1)):
            return 1
        return min(t for (m, t), s in ctx.min_share.items() if m == model and s)

    def plan(self, ctx: AllocationContext) -> Allocation:
        F, free = ctx.units_per_gpu, ctx.topology.num_gpus
        want = {m: min(self.recommend(ctx, m), ctx.max_replicas) for m in ctx.models}
        tp = {m: self.pod_tp(ctx, m) for m in ctx.models}
        running = {
            m: ctx.previous.get(m).replicas if ctx.previous is not None else 0 for m in ctx.models
        }
        pods = {m: min(running[m], want[m]) for m in ctx.models}  # running pods stay bound
        free -= sum(pods[m] * tp[m] for m in ctx.models)
        for m in ctx.models:  # Pending pods bind in order while GPUs are free
            grant = max(0, min(want[m] - pods[m], free // tp[m]))
            pods[m] += grant
            free -= grant * tp[m]
        for m in ctx.models:  # the first period starts every Deployment, if it can
            if pods[m] == 0 and free >= tp[m]:
                pods[m], free = 1, free - tp[m]
        self.pending = {m: want[m] - pods[m] for m in ctx.models if want[m] > pods[m]}
        return Allocation(
            tuple(
                LLMAllocation(m, F * tp[m] * max(pods[m], 1), tp[m], max(pods[m], 1))
                for m in ctx.models
            ),
            units_per_gpu=F,
        )


class ScepsyPolicy(PlanPolicy):
    """Scepsy (papers/004): at each period, the GPU scheduler (§5,
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
        from envs.sim.scepsy import pipelines_for
        from heuristics.allocation.scepsy.search import search, search_multi

        known = ctx.last_rate if self.reactive and ctx.previous is not None else ctx.target_rate
        rate = known
        if self.sticky and ctx.previous is not None:
            from envs.sim.scepsy import pipeline_for

            apl = pipeline_for(ctx.workload, ctx.topology.gpu, ctx.units_per_gpu, ctx.engine)
            if self.headroom * apl.predict(ctx.previous, rate, self.stat).throughput >= rate:
                return ctx.previous
        key = (ctx.workload, ctx.topology, ctx.units_per_gpu, round(rate, 6))
        if key not in self._solved:
            pipes = pipelines_for(ctx.workload, ctx.topology.gpu, ctx.units_per_gpu, ctx.engine)
            kwargs = {
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


# -- Aegaeon (SOSP 2025) and Ayo (ASPLOS 2025): the other baselines of Scepsy §7.2 ---------------


def _phase_work(workload: str, gpu: str, engine: str) -> dict[str, tuple[float, float]]:
    """Per model: (prefill, decode) seconds per workflow on a whole GPU at TP 1, batch 1, from
    the same traced sample the env's ``ctx.demand`` uses (50 workflows, seed 0). Prefill = the
    run-alone time of the call's prompt with its first token; decode = the rest of its run-alone
    time (0 for one-token outputs and for encoder-only models, whose whole call is prefill)."""
    key = (workload, gpu, engine)
    if key in _PHASE_WORK:
        return _PHASE_WORK[key]
    from envs.allocation.env import _spec_for
    from envs.common.run_alone import RunAloneLatency
    from envs.sim.engines import get_engine, resolve_token_budget
    from envs.sim.simulation import LatencyCache
    from traces.generators import GENERATORS
    from traces.schema import LLMNode

    eng = get_engine(engine)
    cache = LatencyCache()
    alone: dict[str, RunAloneLatency] = {}
    sample = GENERATORS[workload](seed=0, count=50)
    work: dict[str, list[float]] = {}
    for wf in sample:
        for n in wf.nodes:
            if not isinstance(n, LLMNode):
                continue
            if n.model not in alone:
                lat = cache.get(_spec_for(n.model, gpu, 1, 1.0), eng)
                alone[n.model] = RunAloneLatency(
                    lat, eng.scheduling, resolve_token_budget(eng, lat.gpu, None)
                )
            f = alone[n.model]
            pre = f(n.input_tokens, 1)
            total = f(n.input_tokens, n.output_tokens)
            w = work.setdefault(n.model, [0.0, 0.0])
            w[0] += pre
            w[1] += max(0.0, total - pre)
    _PHASE_WORK[key] = {m: (p / len(sample), d / len(sample)) for m, (p, d) in work.items()}
    return _PHASE_WORK[key]


_PHASE_WORK: dict[tuple[str, str, str], dict[str, tuple[float, float]]] = {}


def _apportion(targets: Mapping[str, float], mins: Mapping[str, int], total: int) -> dict[str, int]:
    """Integer units summing to ``total`` (or to the minimums, if larger — the caller checks)
    in proportion to ``targets``, each at least its minimum: models whose proportional share
    falls below their minimum are fixed there and the rest re-proportioned among the others
    (repeated until none falls below); then floors plus largest remainders (ties: the env's
    order)."""
    order = list(targets)
    fixed: dict[str, int] = {}
    while True:
        rest = [m for m in order if m not in fixed]
        free = total - sum(fixed.values())
        weight = sum(targets[m] for m in rest)
        ideal = {m: (free * targets[m] / weight if weight > 0 else free / len(rest)) for m in rest}
        low = [m for m in rest if ideal[m] < mins[m]]
        if not low or len(low) == len(rest):
            for m in low:
                fixed[m] = mins[m]
            break
        for m in low:
            fixed[m] = mins[m]
    units = dict(fixed)
    rest = [m for m in order if m not in fixed]
    if rest:
        free = total - sum(fixed.values())
        weight = sum(targets[m] for m in rest)
        ideal = {m: (free * targets[m] / weight if weight > 0 else free / len(rest)) for m in rest}
        for m in rest:
            units[m] = max(mins[m], math.floor(ideal[m]))
        left = total - sum(units.values())
        by_rem = sorted(rest, key=lambda m: (-(ideal[m] - math.floor(ideal[m])), order.index(m)))
        for m in by_rem[: max(0, left)]:
            units[m] += 1
    return {m: units[m] for m in order}


def _placeable_tp1(
    units: Mapping[str, int],
    mins: Mapping[str, int],
    F: int,
    R: int,
    topology: Any,
    prefer: str = "share",
) -> list[LLMAllocation]:
    """Each model's ``units`` as ``d`` identical TP-1 replicas of ``share`` units (the menu's
    form), ``mins[m] ≤ share ≤ F`` (weights + minimum KV, at most one GPU), ``share·d ≤
    units[m]`` and ``d ≤ R``, in ``units``' order: for each model the first candidate, by
    ``prefer``, such that it, the models before it and the minimum replica of every model after
    it still place on ``topology`` (the env's §6 placer, :func:`envs.sim.placement.try_place`:
    five 3/4-GPU shares do not pack on four GPUs, five 1/2-GPU ones do). ``prefer="share"``:
    the largest share (whole GPUs where possible), then the most units; ``"units"``: the most
    units, then the largest share. Units that make no placeable replica are left idle.

    :raises AllocationError: if even the minimum replicas do not place.
    """
    from envs.sim.placement import try_place

    if prefer not in ("share", "units"):
        raise ValueError(f"prefer must be 'share' or 'units', got {prefer!r}")
    order = list(units)
    chosen: list[LLMAllocation] = []
    for i, m in enumerate(order):
        rest = [LLMAllocation(n, mins[n], 1, 1) for n in order[i + 1 :]]
        cands = sorted(
            (
                (share, d)
                for share in range(mins[m], F + 1)
                for d in range(1, min(R, units[m] // share) + 1)
            ),
            key=(
                (lambda sd: (-sd[0], -sd[0] * sd[1]))
                if prefer == "share"
                else (lambda sd: (-sd[0] * sd[1], -sd[0]))
            ),
        )
        for share, d in cands or [(mins[m], 1)]:
            cand = LLMAllocation(m, share * d, 1, d)
            if try_place(Allocation((*chosen, cand, *rest), units_per_gpu=F), topology):
                chosen.append(cand)
                break
        else:
            raise AllocationError(
                f"no TP-1 replica of {m} of at least {mins[m]}/{F} GPU places beside "
                f"{[a.model for a in chosen]} on {topology.num_gpus} GPUs"
            )
    return chosen


#: Aegaeon per-node prefill/decode splits Scepsy §7.2 tests on its 4-GPU nodes ("3P/1D, 2P/2D,
#: and 1P/3D (four instances per node)"; the same per-node split on every node at 8 GPUs).
AEGAEON_SPLITS = ((3, 1), (2, 2), (1, 3))


class AegaeonPolicy(PlanPolicy):
    """Aegaeon (Xiang et al., SOSP 2025, papers/004 ref. [56]; artifact ref. [11]) as Scepsy §7.2
    deploys it, mapped onto Allocation-v0's menu.

    **What Aegaeon does** (from its abstract and public summaries of the paper, e.g.
    https://awesome-system-papers.pages.dev/papers/Aegaeon-SOSP25; we did not have the paper's
    text, so no section numbers): a pool of GPU *instances*
    serves many LLMs at once by *token-level auto-scaling* — between any two tokens an instance
    can preempt the model it runs and switch to another (explicit memory management, component
    reuse and fine-grained KV-cache sync cut the switch cost by 97 %). Serving is disaggregated:
    *prefill instances* schedule prompts with grouped FCFS (minimising TTFT), *decode instances*
    run per-model batches in weighted round-robin (meeting TBT SLOs). Which model an instance
    runs is thus decided by the scheduler, token by token, from the work queued for each model;
    how many instances are prefill vs decode is fixed by the operator.

    **How Scepsy set it up** (papers/004 §7.2, "LLM multiplexing"): one instance per GPU, a
    fixed per-node prefill/decode split — 3P/1D, 2P/2D or 1P/3D on 4-GPU nodes, the same split on
    every node at 8 GPUs — and the non-LLM models (rerankers, embedders) served on the prefill
    instances. Scepsy attributes Aegaeon's deficit to its lack of prefix caching (beam search)
    and the cost of prefill instances swapping models.

    **Mapping onto Allocation-v0** (the same allocation every period: the split is fixed and
    the per-model work is the traced sample's, not the period's measured load):

    1. The pools: ``N`` nodes × ``P`` prefill GPUs and ``N × D`` decode GPUs, i.e.
       ``U_p = N·P·F`` and ``U_d = N·D·F`` units.
    2. Token-level multiplexing is work-conserving: over a period, a pooled instance spends its
       time on each model in proportion to the work queued for it. So each model m gets, of the
       prefill pool, ``p_m = U_p · w_p(m) / Σ w_p`` and of the decode pool ``d_m = U_d · w_d(m)
       / Σ w_d``, where ``w_p`` / ``w_d`` are m's prefill / decode seconds per workflow on a
       whole GPU at batch 1 (:func:`_phase_work`, the traced sample behind ``ctx.demand``).
       Encoder-only (non-LLM) models and one-token outputs (the PRM verifier) have no decode
       work: they live on the prefill side only (``d_m = 0``), as in Scepsy's setup.
       :attr:`split` records ``(p_m, d_m)`` of the last plan.
    3. The env's replicas run both phases on one engine (no P/D disaggregation, no KV transfer),
       so m's replicas get ``p_m + d_m`` units, rounded by largest remainders with each model at
       least its minimum share (weights + minimum KV; the minimum comes out of the others'
       shares), as identical TP-1 replicas of up to one GPU that the env's placer can pack
       (:func:`_placeable_tp1`), by default the largest shares (``packing="share"``: whole GPUs
       where possible, as Aegaeon's instances are whole GPUs in Scepsy's setup; a model then
       runs at full-GPU speed, as it does in its time slots) at the cost of leaving a remainder
       of less than one replica idle; ``packing="units"`` uses the most units in smaller
       replicas instead. The choice moves measured latency by up to 2x (README). If the
       decode pool has no decode work at all (no model emits more than one token) it stays
       idle, as a decode instance with nothing to decode would.

    **What the simulator cannot express**, and the approximation:

    * *Time-multiplexing becomes space-sharing*: Aegaeon switches one GPU between models at
      token granularity; here each model holds a fixed MPS-style share of the pool for the period
      at the long-run time share the scheduler would give it. This loses burst multiplexing
      (a model cannot borrow an idle model's GPU within the period) and also loses the switching
      overhead Scepsy names (model swap on prefill instances: weights reload, KV swap).
    * *No P/D disaggregation*: a model's prefill and decode capacity are pooled into one set of
      colocated engines, so a mismatched split (too few decode GPUs for the decode work) does not
      bottleneck the phase as it would on disaggregated instances; the split only moves capacity
      between models. Both omissions favour our Aegaeon over the real one.
    * *Prefix caching*: Scepsy notes Aegaeon has none; the env's engines always keep vLLM's
      prefix cache (the action space cannot switch it off), which also favours our Aegaeon on
      beam search.
    * Placement (which GPUs are prefill, which decode) is the env's placer's; only each model's
      units, TP and replicas are the policy's.

    :param prefill_gpus: prefill instances (GPUs) per node, P.
    :param decode_gpus: decode instances (GPUs) per node, D; ``P + D`` must equal the node's GPUs.
    :param packing: ``share`` (default: largest replicas) or ``units`` (most units), step 3.
    :raises AllocationError: at planning, naming the culprit: a split that does not match the
        node size, no prefill GPU while the workload has non-LLM models or prompts, no decode GPU
        while an LLM decodes, or minimum shares that exceed the pool.
    """

    def __init__(
        self,
        prefill_gpus: int,
        decode_gpus: int,
        name: str | None = None,
        packing: str = "share",
    ):
        super().__init__()
        if packing not in ("share", "units"):
            raise ValueError(f"aegaeon: packing must be 'share' or 'units', got {packing!r}")
        self.packing = packing
        for label, v in (("prefill_gpus", prefill_gpus), ("decode_gpus", decode_gpus)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"aegaeon: {label} must be an integer >= 0, got {v!r}")
        self.P, self.D = prefill_gpus, decode_gpus
        self.name = name or f"aegaeon-{prefill_gpus}p{decode_gpus}d"
        self.split: dict[str, tuple[float, float]] = {}

    def plan(self, ctx: AllocationContext) -> Allocation:
        from envs.sim.catalog import get_model

        topo, F = ctx.topology, ctx.units_per_gpu
        if self.P + self.D != topo.gpus_per_node:
            raise AllocationError(
                f"{self.name}: the per-node split {self.P}P/{self.D}D has {self.P + self.D} "
                f"instances but a node of {topo.gpu} has {topo.gpus_per_node} GPUs (Scepsy "
                "§7.2 uses one instance per GPU)"
            )
        work = _phase_work(ctx.workload, topo.gpu, ctx.engine)
        wp = {m: work.get(m, (0.0, 0.0))[0] for m in ctx.models}
        wd = {
            m: 0.0 if get_model(m).encoder_only else work.get(m, (0.0, 0.0))[1] for m in ctx.models
        }
        non_llm = [m for m in ctx.models if get_model(m).encoder_only]
        if self.P == 0 and (non_llm or sum(wp.values()) > 0):
            raise AllocationError(
                f"{self.name}: no prefill instance, but "
                + (
                    f"the non-LLM models {non_llm} are served on prefill instances"
                    if non_llm
                    else f"{list(ctx.models)} have prompts to prefill"
                )
            )
        decoders = [m for m in ctx.models if wd[m] > 0]
        if self.D == 0 and decoders:
            raise AllocationError(
                f"{self.name}: no decode instance, but {decoders} generate more than one token"
            )
        Up, Ud = topo.num_nodes * self.P * F, topo.num_nodes * self.D * F
        sp, sd = sum(wp.values()), sum(wd.values())
        self.split = {
            m: (Up * wp[m] / sp if sp > 0 else 0.0, Ud * wd[m] / sd if sd > 0 else 0.0)
            for m in ctx.models
        }
        total = Up + (Ud if sd > 0 else 0)
        no_tp1 = [m for m in ctx.models if not ctx.min_share.get((m, 1))]
        if no_tp1:
            raise AllocationError(
                f"{self.name}: {no_tp1} do not fit on one {topo.gpu} (Aegaeon's instances are "
                "single GPUs in Scepsy's setup)"
            )
        mins = {m: int(ctx.min_share[(m, 1)]) for m in ctx.models}
        if sum(mins.values()) > total:
            raise AllocationError(
                f"{self.name}: the minimum shares {mins} (units of 1/{F} GPU) exceed the "
                f"{total} units of its {self.P}P/{self.D}D pools on {topo.num_gpus} GPUs"
            )
        if non_llm and sum(mins[m] for m in non_llm) > Up:
            raise AllocationError(
                f"{self.name}: the non-LLM models {non_llm} need {sum(mins[m] for m in non_llm)} "
                f"units but the prefill pool has {Up}"
            )
        units = _apportion({m: sum(self.split[m]) for m in ctx.models}, mins, total)
        return Allocation(
            tuple(_placeable_tp1(units, mins, F, ctx.max_replicas, topo, self.packing)),
            units_per_gpu=F,
        )


for _p, _d in AEGAEON_SPLITS:
    register(f"aegaeon-{_p}p{_d}d", env="allocation")(lambda p=_p, d=_d: AegaeonPolicy(p, d))
    # the packing sensitivity (README): the same pools in the replicas that use the most units
    register(f"aegaeon-{_p}p{_d}d-units", env="allocation")(
        lambda p=_p, d=_d: AegaeonPolicy(p, d, name=f"aegaeon-{p}p{d}d-units", packing="units")
    )


@register("ayo", env="allocation")
class AyoPolicy(PlanPolicy):
    """Ayo (Tan et al., ASPLOS 2025, papers/004 ref. [46]; artifact github.com/NetX-lab/Ayo,
    ref. [32]) as an allocation: the engines an Ayo deployment provisions for the workflow.

    **What Ayo does**: it rewrites an application into a graph of *task primitives* (embedding,
    vector search, reranking, LLM prefilling, LLM decoding, ...) and optimises the graph —
    dependency pruning, stage-decomposition parallelism, splitting an LLM's prefill over partial
    prompts, pipelining decoding into downstream primitives (Scepsy §2: "iteratively transforms
    the workflow graph") — then runs it with two-level scheduling: a graph scheduler per query
    and one engine scheduler per engine type (artifact README, "Distributed Two-level
    Scheduling"). It does **not** decide how many GPUs each engine gets: each engine is declared
    by the user with an ``EngineConfig`` of ``instances`` Ray actors of ``num_gpus`` whole GPUs
    each (the artifact's RAG examples, e.g.
    ``examples/optimized_embedding_ingestion_searching_reranking_llm.py``: embedder, reranker
    and LLM engines each ``num_gpus=1, instances=1``, the LLM at ``tensor_parallel_size=1``).
    Scepsy's Table 1 / §2 make the same point (these systems "leave the resource allocation
    decisions for each LLM agent to the user").

    **The allocation** (what maps onto Allocation-v0): one engine per model; every instance on
    whole GPUs (no sharing: Ray places each ``num_gpus=1`` actor on its own GPU); each LLM engine
    at the smallest TP whose GPUs hold the model (TP 1 for all of Scepsy's models). The
    artifact's examples give every non-LLM engine (encoder-only models: embedder, reranker) one
    instance; the GPUs left are split evenly among the LLM engines, the remainder going to the
    LLMs in the env's order (largest first). Scepsy §7.2 does not say how it sized Ayo's
    engines; the even split over LLM engines is our choice, the deployment a user would write
    without a profiler. The same allocation every period (Ayo has no autoscaler).

    **What the simulator cannot express**: Ayo's gains are request-level — primitive graph
    rewriting (partial-prompt prefill splitting, decode pipelining, parallel stages), graph-aware
    priorities in the engine schedulers and cross-query primitive batching. The env serves
    workflows as their traced DAGs on vLLM-style engines with the env's router, so this policy
    reproduces Ayo's *provisioning*, not its scheduling; Scepsy §7.2 finds the latter helps only
    at low load ("Ayo has comparable latencies to Scepsy in the low-throughput region", its
    throughput limit comes from the provisioning).

    :param non_llm_instances: whole-GPU instances per non-LLM engine (1, as in the artifact).
    :raises AllocationError: at planning, naming the engines left without GPUs when the pool
        has fewer GPUs than engines need.
    """

    name = "ayo"

    def __init__(self, non_llm_instances: int = 1):
        super().__init__()
        v = non_llm_instances
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"ayo: non_llm_instances must be an integer >= 1, got {v!r}")
        self.non_llm_instances = v

    def plan(self, ctx: AllocationContext) -> Allocation:
        from envs.sim.catalog import get_model

        F, G = ctx.units_per_gpu, ctx.topology.num_gpus
        tp = {m: KubernetesHPA.pod_tp(ctx, m) for m in ctx.models}
        non_llm = [m for m in ctx.models if get_model(m).encoder_only]
        llms = [m for m in ctx.models if m not in non_llm]
        inst = {m: self.non_llm_instances for m in non_llm}
        free = G - sum(inst[m] * tp[m] for m in non_llm)
        need = sum(tp[m] for m in llms)
        if free < need:
            raise AllocationError(
                f"ayo: {G} GPUs cannot give every engine a whole-GPU instance: the non-LLM "
                f"engines {non_llm} take {G - free} "
                f"({self.non_llm_instances} x TP-{'/'.join(str(tp[m]) for m in non_llm)}), "
                f"leaving {free} for the LLM engines {llms} which need {need} "
                f"({', '.join(f'{m}: TP {tp[m]}' for m in llms)})"
            )
        for m in llms:
            inst[m] = 1
        free -= need
        # even split of the rest: one more instance to each LLM in turn while it fits
        grew = True
        while grew:
            grew = False
            for m in llms:
                if free >= tp[m] and inst[m] < ctx.max_replicas:
                    inst[m] += 1
                    free -= tp[m]
                    grew = True
        return Allocation(
            tuple(
                LLMAllocation(m, units=F * tp[m] * inst[m], tp=tp[m], replicas=inst[m])
                for m in ctx.models
            ),
            units_per_gpu=F,
        )
