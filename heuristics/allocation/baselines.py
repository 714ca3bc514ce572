"""Allocation-v0's simple baselines: the equal split (``naive-equal``), GPUs in proportion to
traced demand (``demand-proportional``, our own reference), a user-specified allocation
(:class:`FixedAllocation`, ``alloc:PATH``) and Kubernetes HPA per LLM (``k8s-hpa``, Scepsy §7.2).
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path

import numpy as np
import yaml

from envs.allocation import AllocationContext
from envs.sim.allocation.allocations import Allocation, AllocationError, LLMAllocation
from heuristics.allocation.base import PlanPolicy, tp1_replicas
from heuristics.base import register


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
            tuple(tp1_replicas(m, int(u), F) for m, u in zip(ctx.models, units, strict=True)),
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
