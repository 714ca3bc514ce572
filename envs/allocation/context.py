"""What an Allocation-v0 policy knows at a decision: :class:`AllocationContext` (the menu, the
mask, the period's target rate, the last period's per-LLM measurements
:class:`LLMPeriodMetrics`, the allocation so far), carried in ``info["decision_context"]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from envs.common.base import DecisionContextBase
from envs.sim.allocation.allocations import (
    DEFAULT_MIN_KV_TOKENS,
    Allocation,
    LLMAllocation,
)
from envs.sim.hardware.cluster import Topology
from envs.sim.latency.efficiency import ROOFLINE_CALIBRATION_VARIANT


@dataclass(frozen=True)
class LLMPeriodMetrics:
    """What an autoscaler can measure about one LLM over the last period.

    :param call_rate: calls that arrived per second.
    :param completed_rate: calls completed per second.
    :param mean_latency: mean latency of the completed calls, s (0 if none completed).
    :param busy_fraction: mean over its replicas of the share of the period the engine was
        busy (GPU utilisation as DCGM reports it).
    :param in_flight: mean running + waiting calls per replica (Little's law: arrival rate ×
        mean latency / replicas).
    :param replicas: replicas serving at the period end.
    """

    call_rate: float = 0.0
    completed_rate: float = 0.0
    mean_latency: float = 0.0
    busy_fraction: float = 0.0
    in_flight: float = 0.0
    replicas: int = 0


@dataclass(eq=False)
class AllocationContext(DecisionContextBase):
    """The scheduler-visible state at an allocation step (``info["decision_context"]``).

    :param time: simulated seconds.
    :param period: index of the period being allocated.
    :param periods: periods in the episode.
    :param period_seconds: length of a period.
    :param target_rate: the upcoming period's scheduled workflow rate (the target throughput
        Scepsy takes as input).
    :param last_rate: workflows/s that arrived in the last period (0 before the first).
    :param workload: workload (generator) name.
    :param models: the LLMs in decision order.
    :param current: index into ``models`` of the LLM decided now.
    :param chosen: this period's choices so far, in ``models`` order.
    :param previous: the last period's allocation (None before the first).
    :param topology: the GPU pool.
    :param units_per_gpu: F.
    :param max_replicas: R.
    :param options: the menu, ``(share_units, tp, replicas)`` per action index.
    :param mask: legal actions now.
    :param llm_metrics: last period's :class:`LLMPeriodMetrics` per model.
    :param min_share: (model, TP) -> the smallest legal share in units (None: TP not usable).
    :param min_units: model -> units of its smallest legal option.
    :param demand: model -> GPU-seconds per workflow on a whole GPU at TP 1, batch 1 (calls per
        workflow × mean run-alone call time over a traced sample of 50 workflows, seed 0).
    :param engine: serving-engine preset name.
    :param memory_utilization: the engine's usable memory share (for minimum shares).
    :param min_kv_tokens: KV tokens a share must hold beyond the weights.
    :param slo_scale: SLO = scale × run-alone latency.
    :param latency_calibration: the per-op calibration variant the env simulates with (a
        policy that models the simulator, Scepsy's profiles, profiles with the same one).
    """

    time: float
    period: int
    periods: int
    period_seconds: float
    target_rate: float
    last_rate: float
    workload: str
    models: tuple[str, ...]
    current: int
    chosen: tuple[LLMAllocation, ...]
    previous: Allocation | None
    topology: Topology
    units_per_gpu: int
    max_replicas: int
    options: tuple[tuple[int, int, int], ...]
    mask: np.ndarray
    llm_metrics: dict[str, LLMPeriodMetrics] = field(default_factory=dict)
    min_share: dict[tuple[str, int], int | None] = field(default_factory=dict)
    min_units: dict[str, int] = field(default_factory=dict)
    demand: dict[str, float] = field(default_factory=dict)
    engine: str = "vllm"
    memory_utilization: float = 0.9
    min_kv_tokens: int = DEFAULT_MIN_KV_TOKENS
    slo_scale: float = 5.0
    latency_calibration: str = ROOFLINE_CALIBRATION_VARIANT

    @property
    def model(self) -> str:
        """The LLM decided now."""
        return self.models[self.current]
