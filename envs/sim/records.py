"""What a simulation reports: per-call (:class:`CallRecord`) and per-workflow
(:class:`WorkflowRecord`) records, the :class:`SimulationResult`, asynchronous planning's
:class:`PlanningStats`, and the :class:`LatencyCache` that lets simulations share latency models.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from envs.sim.cluster import InstanceSpec
from envs.sim.engines import EnginePreset
from envs.sim.latency import LatencyModel, load_calibration


@dataclass
class CallRecord:
    """What happened to one LLM call (times in seconds; -1 where a stage did not apply).

    A migrated call keeps the prefill times of its first prefill (``prefill_end`` is its first
    token); ``prefill_instance`` is the instance that finished it. ``preemptions`` counts the
    times a paging engine evicted it; ``recomputed_tokens`` the tokens it prefilled again.

    Client-side latencies (what a benchmark client measures): :attr:`ttft` and :attr:`tpot`.
    """

    workflow_id: str
    node_id: str
    model: str
    task: str
    input_tokens: int
    output_tokens: int
    predicted_output_tokens: int
    revealed_at: float
    prefill_instance: int
    decode_instance: int
    prefill_start: float
    prefill_end: float
    transfer_end: float
    decode_start: float
    decode_end: float
    cached_tokens: int
    migrations: int = 0
    migration_seconds: float = 0.0
    preemptions: int = 0
    recomputed_tokens: int = 0

    @property
    def ttft(self) -> float:
        """Time to first token, seconds: from the call's reveal (its arrival at the serving
        system) to the end of its first prefill, queueing included; NaN if it never got there."""
        if self.prefill_end < 0:
            return math.nan
        return self.prefill_end - self.revealed_at

    @property
    def tpot(self) -> float:
        """Time per output token after the first, seconds: ``(end − first token) /
        (output_tokens − 1)``, stalls, transfers and migrations included; NaN for calls with
        fewer than two output tokens or unfinished ones."""
        if self.output_tokens < 2 or self.decode_end < 0 or self.prefill_end < 0:
            return math.nan
        return (self.decode_end - self.prefill_end) / (self.output_tokens - 1)

    @property
    def latency(self) -> float:
        """End-to-end seconds from reveal to the last token (NaN if unfinished)."""
        if self.decode_end < 0:
            return math.nan
        return self.decode_end - self.revealed_at


@dataclass
class WorkflowRecord:
    """What happened to one workflow.

    :param completion_time: C_w, seconds from arrival to the last node's end (inf if unfinished).
    :param horizon: H_w, its standalone completion time on the same cluster (HexAgent §7.3).
    """

    id: str
    arrival: float
    finish: float
    completion_time: float
    horizon: float
    num_llm_calls: int
    num_tools: int


@dataclass
class SimulationResult:
    """Records and metrics of a finished (or truncated) simulation. ``extra["planning"]`` is
    :meth:`PlanningStats.as_dict` (asynchronous planning; all zeros for a blocking run)."""

    calls: list[CallRecord]
    workflows: list[WorkflowRecord]
    metrics: dict[str, float]
    utilisation: dict[str, float]
    end_time: float
    events: int
    invocations: int
    wall_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PlanningStats:
    """What asynchronous planning did in a run (HexAgent §4.3, §5.2; ``Simulation.apply``'s
    ``delay``). Per-stage counters are dicts keyed ``prefill`` and ``decode``.

    :param plans: plans applied with a delay > 0.
    :param delay_total: their summed delay, seconds of simulated time.
    :param delay_max: the largest delay, seconds.
    :param absorbed: invocations never handed to the scheduler because their stage had a plan
        in flight (Algorithm 1 lines 5–7). Those raised in the same event as the invocation whose
        plan went in flight were already counted in ``SimulationResult.invocations``; later ones
        are not.
    :param replans: fresh invocations raised when a plan landed on a dirty stage.
    :param fallback_calls: calls that entered the stage while its plan was being computed or in
        flight, and so waited under the fallback plan (prefill: the fallback's placement; decode:
        the priority the call carried from prefill).
    :param started_on_fallback: of those, calls that started service at the stage before any
        plan reached them (they ran under the fallback plan because a plan was late).
    :param skipped: plan assignments dropped on landing because the call had started service.
    """

    plans: int = 0
    delay_total: float = 0.0
    delay_max: float = 0.0
    absorbed: int = 0
    replans: int = 0
    fallback_calls: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})
    started_on_fallback: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})
    skipped: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})

    def as_dict(self) -> dict[str, Any]:
        """The counters, plus ``delay_mean`` (seconds; 0 without delayed plans)."""
        out = dataclasses.asdict(self)
        out["delay_mean"] = self.delay_total / self.plans if self.plans else 0.0
        return out


class LatencyCache:
    """One :class:`LatencyModel` per distinct (GPU, model, TP, fraction, precision, engine);
    shared by simulations."""

    def __init__(self) -> None:
        self._models: dict[tuple, LatencyModel] = {}

    def get(
        self,
        spec: InstanceSpec,
        engine: EnginePreset | None = None,
        bandwidth_share: float | None = None,
    ) -> LatencyModel:
        """The latency model of ``spec``'s instances, with ``engine``'s fitted constants and
        memory share when given (monolithic instances only), and ``bandwidth_share`` of the HBM
        bandwidth (``None`` or ``spec.fraction``: bandwidth scales with the fraction)."""
        if bandwidth_share == spec.fraction:
            bandwidth_share = None
        key: tuple = (
            spec.gpu,
            spec.model,
            spec.tp,
            spec.fraction,
            spec.precision,
            spec.kv_precision,
            None if engine is None else engine.name,
        )
        if bandwidth_share is not None:
            key += (bandwidth_share,)
        m = self._models.get(key)
        if m is None:
            extra: dict[str, Any] = {}
            if engine is not None:
                extra = {
                    "calibration": engine.calibration(load_calibration()),
                    "memory_utilization": engine.memory_utilization,
                }
            if bandwidth_share is not None:
                extra["bandwidth_share"] = bandwidth_share
            m = LatencyModel.from_names(
                gpu=spec.gpu,
                model=spec.model,
                tp=spec.tp,
                fraction=spec.fraction,
                precision=spec.precision,
                kv_precision=spec.kv_precision,
                **extra,
            )
            self._models[key] = m
        return m
