"""Scepsy's Aggregate LLM Pipeline (§4, Eq. 1–2): per-LLM profiles + workflow statistics →
predicted workflow latency and throughput of an allocation.

* :class:`WorkflowStats` — §4 step 2: per LLM ``m``, invocations per workflow ``n_m`` and
  request-level parallelism ``p_m`` (from :mod:`envs.sim.allocation.scepsy.tracing`).
* :class:`LLMProfile` — §4 step 3: one replica of ``m`` at a (TP, GPU share), its latency at
  swept LLM arrival rates up to saturation (from :mod:`envs.sim.allocation.scepsy.profiling`).
* :class:`AggregatePipeline` — §4 steps 4–5:

  - Eq. 1: ``L_w(λ_w) = Σ_m L_m(λ_w · n_m / d_m) · n_m / p_m`` (``d_m`` replicas share the
    LLM's arrivals, §4 step 5);
  - Eq. 2: ``T_w = min_m d_m · T_m / n_m`` (``T_m``: one replica's maximum throughput).

Example::

    apl = AggregatePipeline(stats, profiles)
    apl.predict(allocation, rate=8.0)   # Prediction(latency=..., throughput=..., per_llm=...)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.sim.allocation.allocations import Allocation

#: Latency statistics a profile point records (seconds per LLM call).
STATS = ("mean", "p50", "p90", "p95", "p99")


@dataclass(frozen=True)
class ProfilePoint:
    """One replay of an LLM at one offered arrival rate.

    :param rate: offered LLM call rate, calls/s.
    :param throughput: completed calls/s over the replay.
    :param mean: mean call latency, seconds (arrival to last token, queueing included).
    :param p50: median call latency; ``p90``, ``p95``, ``p99`` likewise.
    :param calls: calls replayed.
    :param completion: calls completed in the measurement window / calls offered there (the
        knee rule of :func:`envs.sim.allocation.scepsy.replay.knee_throughput` needs >= 0.99).
    :param censored: window calls still unfinished when the replay stopped.
    """

    rate: float
    throughput: float
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    calls: int = 0
    completion: float = 1.0
    censored: int = 0

    def stat(self, name: str) -> float:
        if name not in STATS:
            raise ValueError(f"unknown latency statistic {name!r}; expected one of {STATS}")
        return float(getattr(self, name))


@dataclass(frozen=True)
class LLMProfile:
    """Throughput–latency profile of one replica (§4 step 3).

    :param model: catalog model.
    :param gpu: catalog GPU type.
    :param tp: tensor-parallel degree.
    :param fraction: share of each of its ``tp`` GPUs (0, 1].
    :param points: replays sorted by offered rate, from low load to saturation.
    :param max_throughput: ``T_m``, the highest call rate one replica sustains, calls/s (read
        at the knee: :func:`envs.sim.allocation.scepsy.replay.knee_throughput`).
    :param unloaded_p50: median call latency with nothing queued (each projected workflow run
        alone on the replica), seconds; the knee's latency reference (0: not recorded).
    """

    model: str
    gpu: str
    tp: int
    fraction: float
    points: tuple[ProfilePoint, ...]
    max_throughput: float
    unloaded_p50: float = 0.0

    def __post_init__(self) -> None:
        pts = tuple(sorted(self.points, key=lambda p: p.rate))
        object.__setattr__(self, "points", pts)
        if not pts:
            raise ValueError(f"profile of {self.model} TP{self.tp} @ {self.fraction:g}: no points")
        if not self.max_throughput > 0:
            raise ValueError(
                f"profile of {self.model} TP{self.tp} @ {self.fraction:g}: max_throughput must be "
                f"> 0, got {self.max_throughput}"
            )

    def latency(self, rate: float, stat: str = "mean") -> float:
        """Per-call latency at LLM call rate ``rate`` (piecewise-linear over the sweep, flat below
        its first point); ``inf`` at or beyond saturation (``rate >= max_throughput``)."""
        if rate >= self.max_throughput:
            return math.inf
        xs = [p.rate for p in self.points if p.rate < self.max_throughput] or [0.0]
        ys = [p.stat(stat) for p in self.points if p.rate < self.max_throughput] or [
            self.points[0].stat(stat)
        ]
        if rate <= xs[-1] or len(xs) < 2:
            return float(np.interp(rate, xs, ys))
        # between the last measured point and saturation: continue the last segment's slope
        slope = (ys[-1] - ys[-2]) / max(xs[-1] - xs[-2], 1e-12)
        return float(ys[-1] + max(slope, 0.0) * (rate - xs[-1]))


def _fkey(fraction: float) -> float:
    return round(float(fraction), 6)


@dataclass
class ProfileSet:
    """Profiles by (model, TP, GPU share); what the APL looks up."""

    profiles: dict[tuple[str, int, float], LLMProfile] = field(default_factory=dict)

    def add(self, profile: LLMProfile) -> None:
        self.profiles[(profile.model, profile.tp, _fkey(profile.fraction))] = profile

    def get(self, model: str, tp: int, fraction: float) -> LLMProfile:
        key = (model, tp, _fkey(fraction))
        p = self.profiles.get(key)
        if p is None:
            have = sorted((t, f) for (m, t, f) in self.profiles if m == model)
            raise KeyError(
                f"no profile for {model} at TP{tp}, GPU share {fraction:g}; profiled (tp, share) "
                f"of {model}: {have or 'none'} (run envs.sim.allocation.scepsy.profiling for it)"
            )
        return p

    def has(self, model: str, tp: int, fraction: float) -> bool:
        return (model, tp, _fkey(fraction)) in self.profiles

    def __len__(self) -> int:
        return len(self.profiles)

    def update(self, other: ProfileSet | Iterable[LLMProfile]) -> None:
        for p in other.profiles.values() if isinstance(other, ProfileSet) else other:
            self.add(p)

    def to_json(self) -> list[dict[str, Any]]:
        return [asdict(p) for p in self.profiles.values()]

    @classmethod
    def from_json(cls, data: list[dict[str, Any]]) -> ProfileSet:
        out = cls()
        for d in data:
            pts = tuple(ProfilePoint(**p) for p in d["points"])
            out.add(LLMProfile(**{**d, "points": pts}))
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> ProfileSet:
        return cls.from_json(json.loads(Path(path).read_text()))


@dataclass(frozen=True)
class WorkflowStats:
    """Per-LLM statistics of one workflow (§4 step 2).

    :param name: workflow (workload) name.
    :param invocations: ``n_m``, mean calls to each LLM per workflow.
    :param parallelism: ``p_m``, mean number of that LLM's calls running at once within a
        workflow while any is running (from overlapping call intervals).
    :param workflows: workflows the statistics come from.
    """

    name: str
    invocations: Mapping[str, float]
    parallelism: Mapping[str, float]
    workflows: int = 0

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self.invocations)

    def __post_init__(self) -> None:
        for m, n in self.invocations.items():
            if not n > 0:
                raise ValueError(f"{self.name}: n[{m!r}] must be > 0, got {n}")
            p = self.parallelism.get(m)
            if p is None or not p >= 1.0:
                raise ValueError(f"{self.name}: p[{m!r}] must be >= 1, got {p}")


@dataclass(frozen=True)
class LLMPrediction:
    """One pipeline stage: its workflow-level latency contribution ``L_wm`` (s) and the
    workflow rate it sustains ``d_m · T_m / n_m`` (workflows/s)."""

    latency: float
    throughput: float
    call_rate: float


@dataclass(frozen=True)
class Prediction:
    """APL prediction of one allocation at a workflow rate."""

    latency: float
    throughput: float
    per_llm: dict[str, LLMPrediction]

    @property
    def bottleneck(self) -> str:
        """The LLM that limits throughput."""
        return min(self.per_llm, key=lambda m: self.per_llm[m].throughput)


class AggregatePipeline:
    """Eq. 1–2 of Scepsy §4 over ``stats`` and ``profiles``.

    :param stats: the workflow's per-LLM statistics.
    :param profiles: per-LLM replica profiles covering the (TP, share) the allocation uses.
    :param gpu: GPU type the profiles were measured on (checked when given).
    """

    def __init__(self, stats: WorkflowStats, profiles: ProfileSet, gpu: str | None = None):
        self.stats = stats
        self.profiles = profiles
        self.gpu = gpu

    def stage(
        self, alloc: Allocation, model: str, rate: float, stat: str = "mean"
    ) -> LLMPrediction:
        a = alloc.get(model)
        prof = self.profiles.get(model, a.tp, a.fraction(alloc.units_per_gpu))
        if self.gpu is not None and prof.gpu != self.gpu:
            raise ValueError(f"profile of {model} was measured on {prof.gpu}, not {self.gpu}")
        n, p = self.stats.invocations[model], self.stats.parallelism[model]
        call_rate = rate * n / a.replicas
        return LLMPrediction(
            latency=prof.latency(call_rate, stat) * n / p,
            throughput=a.replicas * prof.max_throughput / n,
            call_rate=call_rate,
        )

    def predict(self, alloc: Allocation, rate: float, stat: str = "mean") -> Prediction:
        """Predicted workflow latency (Eq. 1; ``inf`` if a stage saturates) and throughput
        (Eq. 2) of ``alloc`` at ``rate`` workflows/s."""
        per = {m: self.stage(alloc, m, rate, stat) for m in self.stats.models}
        return Prediction(
            latency=sum(s.latency for s in per.values()),
            throughput=min(s.throughput for s in per.values()),
            per_llm=per,
        )

    def latency(self, alloc: Allocation, rate: float, stat: str = "mean") -> float:
        return self.predict(alloc, rate, stat).latency

    def throughput(self, alloc: Allocation) -> float:
        return self.predict(alloc, 0.0).throughput
