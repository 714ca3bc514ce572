"""Every attribute of an :class:`~envs.allocation.env.AllocationEnv` that its mixins read,
declared and typed in one place (class-level annotations only: nothing changes at runtime). The
mixins (:mod:`~envs.allocation.episode`, :mod:`~envs.allocation.masking`,
:mod:`~envs.allocation.serving`, :mod:`~envs.allocation.observation`) derive from
:class:`AllocationState`, so a type checker sees what each reads; ``AllocationEnv.__init__`` and
``reset`` set them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from envs.common.base import ServegymEnv

if TYPE_CHECKING:
    from envs.allocation.context import AllocationContext, LLMPeriodMetrics
    from envs.common.rewards import Reward
    from envs.common.run_alone import RunAloneLatency
    from envs.sim.allocation.allocations import Allocation, LLMAllocation, Placement
    from envs.sim.core.simulation import LatencyCache, Simulation
    from envs.sim.engines.presets import EnginePreset
    from envs.sim.hardware.cluster import Topology
    from traces.schema import Workflow


class AllocationState(ServegymEnv):
    """The state of an allocation env: its options and what ``__init__`` derives from the GPU
    pool, and what ``reset`` and each period change."""

    # -- options and pool (fixed by __init__) ---------------------------------------------------
    topology: Topology
    cluster_name: str
    workload: str
    workflow_rate: float | None
    rate_trace: str | None
    rate_window: str | int
    rate_ramp: tuple[float, float] | None
    periods: int
    period_seconds: float
    warmup_seconds: float
    drain_seconds: float
    #: Units per GPU; replicas per LLM at most.
    F: int
    R: int
    engine: EnginePreset
    min_kv_tokens: int
    slo_scale: float
    reconfig_startup_s: float
    load_bandwidth: float
    apl_info: bool
    max_llms: int
    latency_calibration: Any
    _latency_cache: LatencyCache
    _apl: Any
    #: The LLMs served, largest first; the action options (model index, TP, units).
    models: tuple[str, ...]
    options: tuple[tuple[int, int, int], ...]
    max_tp: int
    min_share: dict[tuple[str, int], int | None]
    min_units: dict[str, int]
    _alone: dict[str, RunAloneLatency]
    demand: dict[str, float]

    # -- episode (set by reset) -----------------------------------------------------------------
    rates: list[float]
    workflows: list[Workflow]
    _slo: np.ndarray
    _structure: dict[str, tuple[float, float]]
    _measured: np.ndarray
    _reward: Reward
    sim: Simulation | None
    _index: dict[str, int]
    _completed_seen: int
    period: int
    allocation: Allocation | None
    placement: Placement | None
    _replica_instance: dict[tuple[Any, ...], int]
    _chosen: list[LLMAllocation]
    _llm_metrics: dict[str, LLMPeriodMetrics]
    _last_rate: float
    _last_attainment: float
    _last_ratio: float
    _reconfigurations: int
    _history: list[str]
    _period_info: dict[str, Any]
    _apl_periods: list[tuple[int, dict[str, float]]]
    _busy_mark: dict[int, float]
    _calls_mark: int
    _done_calls: dict[str, list[float]]
    _ctx: AllocationContext | None

    if TYPE_CHECKING:
        # Methods one mixin (or the env) defines and another calls.
        def _try_place(self, alloc: Allocation) -> Placement | None: ...
        def _minimal_option(self, model: str) -> LLMAllocation: ...
        def _latency(self, i: int) -> float: ...
        def _run_alone(self, wf: Workflow) -> float: ...
        def load_seconds(self, model: str, tp: int, fraction: float) -> float: ...
