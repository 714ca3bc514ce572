"""Every attribute of a :class:`~envs.sim.core.simulation.Simulation`, declared and typed in one
place. The parts of the simulation's behaviour that live in their own files (event handlers,
migration, reconfiguration, outcome) derive from :class:`SimulationState`, so a type checker
sees what each reads; the parts that own state are objects the simulation holds
(:class:`~envs.sim.core.planning.AsyncPlanner`, :class:`~envs.sim.core.tools.ToolHistory`,
:class:`~envs.sim.core.estimates.SchedulerEstimates`,
:class:`~envs.sim.engines.shared_gpus.SharedGPUs`, :class:`~envs.sim.core.records.LatencyCache`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from envs.sim.core.estimates import SchedulerEstimates
from envs.sim.core.planning import AsyncPlanner
from envs.sim.core.protocol import Invocation
from envs.sim.core.records import CallStore, CallTable, LatencyCache, PlanningStats
from envs.sim.core.simpy_parts import ClockMixin
from envs.sim.core.tools import ToolHistory
from envs.sim.core.workflows import Call, WorkflowRun
from envs.sim.engines.batching import DecodeInstance
from envs.sim.engines.instances import MonolithicInstance
from envs.sim.engines.prefill import PrefillInstance
from envs.sim.engines.presets import EnginePreset
from envs.sim.engines.shared_gpus import SharedGPUs
from envs.sim.hardware.cluster import ClusterSpec


class SimulationState(ClockMixin):
    """The state of a simulation (see :class:`~envs.sim.core.simulation.Simulation` for the
    options): what it was built with, its instances and workload, and what changes as it runs."""

    # -- options (fixed for the run; see Simulation's :param list) ---------------------------
    cluster: ClusterSpec
    seed: int
    estimate_error: float
    output_predictor: Callable[[Call], int] | None
    token_by_token: bool
    compute_horizons: bool
    horizon_scheduler: Any
    horizon_cache: dict[Any, float]
    online_horizons: bool
    time_limit: float | None
    #: The engine preset of the monolithic instances (None: engine-neutral defaults).
    engine: EnginePreset | None
    prefill_mode: str
    token_budget: int | None
    kv_policy: str
    check_interval: int | None
    check_queued: bool
    migration: str
    prefix_cache_blocks: int | str
    prefix_block_tokens: int
    tool_estimate: str
    record_store: str

    # -- parts the simulation holds ------------------------------------------------------------
    #: Seeds the estimate-error draws.
    rng: np.random.Generator
    latency_cache: LatencyCache
    #: Monolithic instances on named GPU fractions: MPS partitions sharing HBM bandwidth.
    shared_gpus: SharedGPUs
    #: What schedulers may read (run-alone times, prefix hits, KV links).
    estimates: SchedulerEstimates
    #: Asynchronous planning; ``planning`` is its counters.
    planner: AsyncPlanner
    planning: PlanningStats
    #: What H_w(t) charges a revealed tool before it returns.
    tool_history: ToolHistory
    #: Listener method name -> the registered listeners' bound methods.
    listeners: dict[str, list[Callable[..., None]]]

    # -- cluster -----------------------------------------------------------------------------
    #: True for a prefill–decode cluster, False for a monolithic one.
    pd: bool
    served_models: set[str]
    prefill: list[PrefillInstance]
    decode: list[DecodeInstance]
    monolithic: list[MonolithicInstance]
    #: Every instance, by index (an instance's ``index`` is its place here).
    instances: list[Any]
    #: Prefix-cache reverse index: block hash -> indices of the instances caching it, kept by
    #: the instances, so a router finds prefix hits without scanning every cache.
    prefix_index: dict[int, set[int]]

    # -- workload ------------------------------------------------------------------------------
    #: One per workload record, in arrival order.
    runs: list[WorkflowRun]
    #: Every revealed call, by uid (a :class:`CallTable` under a compact record store).
    calls: list[Call] | CallTable
    #: The packed rows of finished workflows' calls (``record_store`` compact/disk), else None.
    _store: CallStore | None
    #: Finished runs, in completion order.
    completed: list[WorkflowRun]
    finished_runs: int
    #: Index in ``runs`` of the next arrival.
    _next_arrival: int

    # -- scheduling ----------------------------------------------------------------------------
    #: Invocations raised and not yet answered (the first is the one ``apply`` answers).
    pending: list[Invocation]
    #: Revealed calls whose prefill/route has not started, by uid (reveal order).
    waiting_prefill: dict[int, Call]
    #: Transferred calls whose decode has not started, by uid.
    waiting_decode: dict[int, Call]
    #: Waiting calls that no plan has placed yet (reveal order).
    unplanned: dict[int, Call]
    #: Per pending prefill/route invocation, the uid of the first call revealed after it was
    #: raised: its plan must cover exactly the unplanned calls below that bound.
    uid_bounds: dict[int, int]
    #: Calls that left a waiting dict (started) while an invocation was pending: the only calls
    #: a pending invocation may list that it must no longer show.
    _started_while_pending: list[Call]
    #: P-D clusters: per decode instance, the calls planned to it and not yet admitted there
    #: (queued or running prefill, transferring, or waiting for decode).
    decode_inbound: dict[int, dict[int, Call]]
    #: Counters: events processed, invocations raised, sequence numbers handed out.
    events: int
    invocation_count: int
    _seq: int
