"""The discrete-event cluster simulation (SimPy), paused at every scheduling decision.

Usage without RL::

    from envs.sim import Simulation, load_cluster, DefaultScheduler
    result = Simulation(load_cluster("hetero-1"), workflows, seed=0).run(DefaultScheduler())
    result.metrics["req99"]

Usage step by step (what the Gymnasium environments do, Decima's pattern)::

    sim = Simulation(cluster, workflows, seed=0)
    while (inv := sim.advance()) is not None:   # run until a decision is pending
        sim.apply(plan_for(inv))                # one plan per invocation
    result = sim.result()

Scheduler invocations (HexAgent §4.3, §5.2) are raised when new work enters a stage:

* ``prefill`` (P-D clusters): on workflow arrival and when a finished node reveals LLM calls. The
  invocation lists every call still waiting for prefill, so the plan can re-place and re-order
  them; a call that started prefill never moves.
* ``decode`` (P-D clusters): when a KV transfer completes. Lists every call waiting for decode;
  calls are locked to their planned decode instance, the plan sets their queue priority.
* ``route`` (monolithic clusters): when requests or workflow calls are revealed. Lists every call
  waiting in (or for) a monolithic queue that has not started.
* ``migrate`` (monolithic clusters, when ``check_interval`` τ is set; GoodServe §3.4): every τ
  decode iterations of an instance, at that iteration boundary. Lists the instance's running
  calls that are past prefill (``Invocation.instance`` names it). A plan moves some of them to
  other instances (``Assignment.prefill_instance`` = target); calls left out stay.

Nothing is processed while an invocation is pending, so the plan is applied at the instant the
invocation was raised; instances start service through zero-delay events queued behind it.
An instance that raised a ``migrate`` invocation stays paused at its boundary until the plan is
applied; it then resumes through a zero-delay event, i.e. after every invocation pending at that
instant (e.g. a ``route`` raised by a call that finished at the same boundary) was answered, so
calls routed to it meanwhile compete for admission at that boundary.

Asynchronous planning (HexAgent §4.3 "Asynchronous planning avoids blocking", §5.2, Algorithm 1
lines 5–7 and 23; P-D stages only): ``apply(plan, delay=δ)`` with δ > 0 models a plan that takes
δ seconds to compute. The invocation's calls that have no plan yet take the fallback plan at once
(:meth:`envs.sim.core.planning.AsyncPlanner.fallback_place`) and serving resumes; the plan lands at
now + δ and is applied to the calls still waiting at that stage (a call that started service
meanwhile keeps what it runs on: the runtime state is authoritative). While a stage's plan is in
flight, new work entering that stage raises no invocation: its calls take the fallback at once and
the stage is marked dirty; when the plan lands on a dirty stage, one fresh invocation (trigger
``replan``) lists every call still waiting there. So at most one plan per stage is in flight.
``delay=0`` is the blocking behaviour above. :attr:`Simulation.planning` counts what happened.

Migration (GoodServe §3.4, §4.3): ``migration="token"`` frees the call's KV on the source at
once, ships its token IDs (4 bytes per prompt or generated token) and re-prefills them on the
target; ``migration="kv"`` stops decoding at once but keeps the KV reserved on the source until
its bytes have crossed the pair's link, then the call joins the target's queue KV-resident and
decodes at admission without prefill. In transit a call is in no instance's lists (stage
``migrating``); on landing it enters the target's queue with the plan's priority.

Listeners (:meth:`Simulation.add_listener`) receive black-box measurements, e.g. for routers
that estimate instance speed online (GoodServe §3.3); see ``LISTENER_METHODS``.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from envs.sim.core.estimates import SchedulerEstimates
from envs.sim.core.handlers import EventHandlersMixin
from envs.sim.core.migration import MigrationMixin
from envs.sim.core.outcome import OutcomeMixin
from envs.sim.core.planning import AsyncPlanner
from envs.sim.core.protocol import (
    ASYNC_STAGES,
    LISTENER_METHODS,
    MIGRATION_MODES,
    PREFILL_MODES,
    STAGES,
    TOKEN_ID_BYTES,
    TOOL_ESTIMATES,
    Assignment,
    Invocation,
    SchedulingError,
)
from envs.sim.core.records import (
    CallRecord,
    CallStore,
    CallTable,
    LatencyCache,
    PlanningStats,
    SimulationResult,
    WorkflowRecord,
)
from envs.sim.core.setup import RECORD_STORES, checked_options, workflow_runs
from envs.sim.core.simpy_parts import PicklableEnvironment
from envs.sim.core.state import SimulationState
from envs.sim.core.tools import ToolHistory
from envs.sim.core.validation import validate_migration, validate_plan
from envs.sim.core.workflows import (
    Call,
)
from envs.sim.engines.batching import DecodeInstance
from envs.sim.engines.prefill import PrefillInstance
from envs.sim.engines.presets import EnginePreset
from envs.sim.engines.reconfiguration import ReconfigurationMixin
from envs.sim.engines.shared_gpus import SharedGPUs
from envs.sim.hardware.cluster import ClusterSpec
from traces.schema import Request, Workflow


class Simulation(
    ReconfigurationMixin,
    MigrationMixin,
    EventHandlersMixin,
    OutcomeMixin,
    SimulationState,
):
    """A cluster serving a workload, driven by scheduling plans.

    :param cluster: the cluster (see :func:`envs.sim.hardware.cluster.load_cluster`).
    :param workload: workflows and/or requests, sorted by arrival.
    :param seed: seeds the estimate-error draws; same seed and inputs ⇒ identical results.
    :param estimate_error: relative error e injected into scheduler-visible estimates
        (HexAgent §7.6): each call's predicted output length and service-time estimates are
        scaled by factors drawn uniformly from [1 − e, 1 + e]. The simulation runs on the truth.
    :param output_predictor: optional ``f(call) -> predicted output tokens`` replacing the
        truth-with-error default.
    :param token_by_token: one decode iteration per event (slow; for testing the fast path).
    :param compute_horizons: simulate each workflow alone to get H_w (HexAgent §7.3).
    :param horizon_scheduler: scheduler for the standalone runs (default: earliest-finish).
    :param latency_cache: share latency models across simulations.
    :param horizon_cache: share standalone horizons (keyed by workflow content) across runs.
    :param online_horizons: keep each workflow's online horizon H_w(t) (HexAgent §5.1) up to
        date at every reveal and completion (False: skip it, for envs that never read it; it
        costs a latency-model sweep over the instances per call).
    :param prefix_cache_blocks: LRU prefix-cache blocks per instance that prefills: every
        monolithic instance, and every prefill instance of a P-D cluster (0 = off), or
        ``"kv"``: as many blocks as the instance's KV capacity holds (vLLM keeps cached
        prefixes in free KV blocks, SGLang's RadixAttention in its KV pool; the LRU bound is
        that memory). Standalone horizons H_w are simulated without it.
    :param prefix_block_tokens: tokens per block of the workload's ``prefix_hashes`` (512:
        Mooncake's traces; 16: vLLM's block size, used by the beam-search generator).
    :param time_limit: stop the simulation at this simulated time in seconds (None = run out).
    :param engine: serving-engine preset of the monolithic instances (``vllm``, ``sglang``,
        ``trtllm``; see :mod:`envs.sim.engines.presets`): sets their scheduling, token budget, batch
        cap, KV policy, memory share and fitted overheads. None: the engine-neutral defaults
        below (prefill-first, 2048-token budget, reserve-at-admission, no batch cap).
    :param prefill_mode: monolithic scheduling, one of ``PREFILL_MODES``: ``prefill-first`` (a
        prefill pass stalls the decodes), ``chunked`` (vLLM: per-iteration token budget,
        decodes first), ``chunked-prefill-first`` (SGLang), ``mixed-whole`` (TensorRT-LLM);
        None: the engine's, else ``prefill-first``.
    :param token_budget: tokens per iteration (decodes + prefill tokens), >= 1; None: the
        engine's for each instance's GPU, else 2048.
    :param kv_policy: ``reserve`` or ``paged`` (monolithic instances); None: the engine's, else
        ``reserve``.
    :param check_interval: τ, decode iterations of a monolithic instance between ``migrate``
        invocations (GoodServe §3.4: 50); None = no checks, no migration.
    :param check_queued: a check also lists the instance's waiting (not yet admitted, not
        KV-resident) calls after its decoding ones; a plan may move them (nothing computed is
        lost: they re-enter the target's queue). Default False: decoding calls only.
    :param migration: ``token`` (ship token IDs, re-prefill on the target; GoodServe §3.4) or
        ``kv`` (ship the KV cache at the pair's bandwidth; §4.3).
    :param tool_estimate: what H_w(t) charges a revealed tool node that has not finished yet
        (see :attr:`TOOL_ESTIMATES`): ``history`` (default) the mean latency of the tools with
        the same name that finished earlier in this run (all finished tools when none of that
        name has; 0 s before any tool finished), ``oracle`` its true trace latency (what a
        scheduler cannot know before the tool returns). A finished tool is charged its measured
        latency either way. The simulation always runs tools for their true latency.
    :param record_store: what is kept of a finished workflow (see :data:`RECORD_STORES`):
        ``objects`` (default) its :class:`Call` objects and the run's per-node state, as
        while it ran; ``compact`` its calls packed into fixed-width rows
        (:class:`envs.sim.core.records.CallStore`, 152 bytes a call) and the run's per-node
        bookkeeping dropped, so a long episode holds a fraction of the memory; ``disk`` as
        ``compact`` with the packed rows appended to an anonymous temporary file, 8,192 at a
        time, so memory stays flat. Either way :meth:`result` returns the same records and
        metrics (pinned by a test). Under ``compact``/``disk`` :attr:`calls` is a
        :class:`envs.sim.core.records.CallTable`: a finished workflow's calls read back as
        :class:`envs.sim.core.records.PackedCall` (their record fields, no engine bookkeeping), and
        a finished run keeps ``nodes``, ``done`` and its times but not its ``calls``,
        ``path_end``, ``service_path``, ``tool_estimates``, ``revealed``, ``finished`` or reveal
        counters. For bare simulations (the envs read finished runs' state and use ``objects``).
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        workload: Sequence[Workflow | Request],
        *,
        seed: int = 0,
        estimate_error: float = 0.0,
        output_predictor: Callable[[Call], int] | None = None,
        token_by_token: bool = False,
        compute_horizons: bool = True,
        horizon_scheduler: Any = None,
        latency_cache: LatencyCache | None = None,
        horizon_cache: dict[Any, float] | None = None,
        prefix_cache_blocks: int | str = 0,
        online_horizons: bool = True,
        time_limit: float | None = None,
        prefill_mode: str | None = None,
        token_budget: int | None = None,
        check_interval: int | None = None,
        check_queued: bool = False,
        migration: str = "token",
        engine: str | EnginePreset | None = None,
        kv_policy: str | None = None,
        prefix_block_tokens: int = 512,
        tool_estimate: str = "history",
        record_store: str = "objects",
    ):
        preset, prefill_mode, kv_policy = checked_options(
            cluster,
            estimate_error=estimate_error,
            engine=engine,
            prefill_mode=prefill_mode,
            kv_policy=kv_policy,
            token_budget=token_budget,
            check_interval=check_interval,
            migration=migration,
            tool_estimate=tool_estimate,
            record_store=record_store,
            prefix_block_tokens=prefix_block_tokens,
        )
        self.record_store = record_store
        self.tool_estimate = tool_estimate
        self.tool_history = ToolHistory(tool_estimate)
        self.engine = preset
        self.token_by_token = token_by_token
        self.prefix_cache_blocks = prefix_cache_blocks
        self.prefix_block_tokens = prefix_block_tokens
        self.prefill_mode = prefill_mode
        self.token_budget = token_budget
        self.kv_policy = kv_policy
        self.check_interval = check_interval
        self.check_queued = bool(check_queued)
        self.migration = migration
        self.listeners = {m: [] for m in LISTENER_METHODS}
        self.cluster = cluster
        self.env = PicklableEnvironment()
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.estimate_error = estimate_error
        self.output_predictor = output_predictor
        self.compute_horizons = compute_horizons
        self.horizon_scheduler = horizon_scheduler
        self.latency_cache = latency_cache or LatencyCache()
        self.horizon_cache = horizon_cache if horizon_cache is not None else {}
        self.time_limit = time_limit
        self.online_horizons = online_horizons
        self._build_instances()
        self.runs = workflow_runs(workload, cluster, self.served_models, self._largest_kv())
        self.estimates = SchedulerEstimates(self)
        self._start_runtime_state()
        if self.runs:
            self.schedule(self.runs[0].arrival, self._on_arrival)

    def _build_instances(self) -> None:
        """One instance per spec of the cluster, in order, each with its latency model (shared
        through the latency cache) and, for monolithic ones, the engine preset."""
        self.prefix_index = {}
        self.prefill = []
        self.decode = []
        self.monolithic = []
        self.instances = []
        self.shared_gpus = SharedGPUs(self._bandwidth_variant)
        preset = self.engine
        for spec in self.cluster.instances:
            mono = spec.role == "monolithic"
            lat = self.latency_cache.get(spec, preset if mono else None)
            inst: Any
            if spec.role == "prefill":
                inst = PrefillInstance(
                    self,
                    spec,
                    lat,
                    prefix_cache_blocks=self._prefix_blocks(lat),
                    block_tokens=self.prefix_block_tokens,
                )
                self.prefill.append(inst)
            elif spec.role == "decode":
                inst = DecodeInstance(self, spec, lat, self.token_by_token)
                self.decode.append(inst)
            else:
                inst = self._make_monolithic(spec)
                self.monolithic.append(inst)
            self.instances.append(inst)
        self.pd = self.cluster.architecture == "pd"
        self.served_models = set(self.cluster.models)

    def _largest_kv(self) -> dict[str, int]:
        """Model -> the KV tokens a call of it can hold: a call larger than every instance that
        would decode it could never be placed (decode instances, or the model's monolithic
        ones)."""
        largest_kv: dict[str, int] = dict.fromkeys(self.served_models, 0)
        for inst in self.decode if self.pd else self.monolithic:
            model = inst.spec.model
            largest_kv[model] = max(largest_kv.get(model, 0), inst.capacity)
        return largest_kv

    def _start_runtime_state(self) -> None:
        """The state that changes as the simulation runs, empty at time 0."""
        self.pending = []
        self.waiting_prefill = {}
        self.waiting_decode = {}
        self.unplanned = {}
        self.uid_bounds = {}
        self._started_while_pending = []
        self.planner = AsyncPlanner(self)
        self.planning = self.planner.stats
        self.decode_inbound = {d.index: {} for d in self.decode}
        self.calls = []
        self._store = None
        if self.record_store != "objects":
            self._store = CallStore(self.runs, spill=self.record_store == "disk")
            self.calls = CallTable(self._store)
        self.completed = []
        self.finished_runs = 0
        self.events = 0
        self.invocation_count = 0
        self._seq = 0
        self._next_arrival = 0

    # -- small utilities ---------------------------------------------------------------------
    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def add_listener(self, listener: Any) -> None:
        """Register ``listener``; its methods named in ``LISTENER_METHODS`` (any subset) are
        called as the events happen. Listeners observe; they must not change the simulation."""
        found = False
        for name in LISTENER_METHODS:
            fn = getattr(listener, name, None)
            if callable(fn):
                self.listeners[name].append(fn)
                found = True
        if not found:
            raise TypeError(
                f"listener {listener!r} defines none of the listener methods {LISTENER_METHODS}"
            )

    @property
    def done(self) -> bool:
        """True when every workflow has finished (or the time limit was reached)."""
        return self.finished_runs == len(self.runs) or (
            self.time_limit is not None and self.env.now >= self.time_limit
        )

    # -- driving -----------------------------------------------------------------------------
    def advance(self) -> Invocation | None:
        """Process events until a scheduling decision is pending; None when the run is over."""
        env = self.env
        limit = self.time_limit if self.time_limit is not None else math.inf
        while not self.pending:
            t = env.peek()
            if t == math.inf or t > limit:
                return None
            env.step()
            self.events += 1
        if self._started_while_pending:
            self._drop_started_calls()
        return self.pending[0]

    def run(self, scheduler: Any, planning_delay: float = 0.0) -> SimulationResult:
        """Run to the end, asking ``scheduler.plan(sim, invocation)`` for every decision.

        :param planning_delay: seconds each ``prefill``/``decode`` plan takes to land (see
            :meth:`apply`'s ``delay``; P-D clusters only); 0 blocks.
        """
        if planning_delay and not self.pd:
            raise ValueError(
                f"planning_delay={planning_delay!r}: cluster {self.cluster.name!r} is not a P-D "
                "cluster; only the prefill and decode stages plan asynchronously"
            )
        start = _time.perf_counter()
        while (inv := self.advance()) is not None:
            delay = planning_delay if inv.stage in ASYNC_STAGES else 0.0
            self.apply(scheduler.plan(self, inv), delay=delay)
        result = self.result()
        result.wall_seconds = _time.perf_counter() - start
        return result

    def apply(self, plan: Sequence[Assignment], delay: float = 0.0) -> None:
        """Apply ``plan`` to the pending invocation and resume.

        Calls already assigned may be left out (they keep their plan); every call without an
        assignment must be covered. At the ``migrate`` stage calls left out, or assigned their
        current instance, stay; the others start migrating and the checked instance resumes.
        Validation happens before any change, so an illegal plan raises
        :class:`SchedulingError` and leaves the state untouched.

        :param delay: seconds of simulated time the plan took to compute (HexAgent §4.3
            "Asynchronous planning avoids blocking", §5.2, Algorithm 1 lines 5–7 and 23); only
            for the ``prefill`` and ``decode`` stages. 0 (default): the plan applies now, as if
            planning were instantaneous. > 0: the invocation's calls without a plan take the
            fallback plan now (:meth:`AsyncPlanner.fallback_place`; at the decode stage they keep
            the priority they carried from prefill), the simulation resumes, and at now + ``delay``
            the plan is applied to the calls still waiting at the stage; calls that started service
            meanwhile are skipped (the runtime state is authoritative). Until then the stage
            raises no invocation (see the module docstring). The plan is validated now, against
            the state it was made for; with a delay it may name only the invocation's calls.
        """
        if not self.pending:
            raise SchedulingError("apply() called with no pending invocation")
        inv = self.pending[0]
        if type(plan) is list and not plan and delay == 0 and inv.stage == "decode":
            # an empty decode plan (every call keeps its prefill-time priority): validating and
            # applying it changes nothing, and a decode invocation has no uid bound
            if type(delay) is bool or not isinstance(delay, (int, float)):
                raise ValueError(f"delay must be a number of seconds >= 0, got {delay!r}")
            self.pending.pop(0)
            return
        if isinstance(delay, bool) or not isinstance(delay, (int, float)):
            raise ValueError(f"delay must be a number of seconds >= 0, got {delay!r}")
        if not (math.isfinite(delay) and delay >= 0):
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        if delay > 0 and inv.stage not in ASYNC_STAGES:
            raise ValueError(
                f"a planning delay applies to the P-D stages {ASYNC_STAGES}; invocation "
                f"{inv.seq} is at stage {inv.stage!r} (use delay=0)"
            )
        if inv.stage == "migrate":
            validate_migration(self, inv, plan)
            self.pending.pop(0)
            assert inv.instance is not None  # a migrate invocation names its instance
            src = self.instances[inv.instance]
            for a in plan:
                dst = a.prefill_instance
                if dst != src.index:
                    assert dst is not None  # validated: a monolithic instance
                    self._migrate(a.call, src, self.instances[dst], a.priority)
            src.resume()
            return
        validate_plan(self, inv, plan)
        if delay > 0:
            listed = {c.uid for c in inv.calls}
            for a in plan:
                if a.call.uid not in listed:
                    raise SchedulingError(
                        f"call {a.call.id} is not one of invocation {inv.seq}'s calls; a delayed "
                        "plan may only name the calls it was asked for"
                    )
        self.pending.pop(0)
        self.uid_bounds.pop(inv.seq, None)
        if delay > 0:
            self.planner.put_in_flight(inv, plan, float(delay))
        else:
            self.apply_placements(inv.stage, plan)

    def apply_placements(self, stage: str, plan: Sequence[Assignment]) -> None:
        """Set the (validated) ``plan``'s priorities and placements at a ``prefill``, ``route``
        or ``decode`` stage, moving re-placed waiting calls between queues."""
        touched: dict[int, Any] = {}
        if stage == "decode":
            for a in plan:
                a.call.decode_priority = float(a.priority)
                d = a.call.decode_instance
                assert d is not None  # a call waiting for decode has its decode instance
                touched[d] = self.instances[d]
        else:
            for a in plan:
                c = a.call
                old = c.prefill_instance
                c.prefill_priority = float(a.priority)
                if self.pd:
                    if c.decode_instance is not None:
                        del self.decode_inbound[c.decode_instance][c.uid]
                    d = a.decode_instance
                    assert d is not None  # validated: a decode instance
                    c.decode_instance = d
                    self.decode_inbound[d][c.uid] = c
                    c.decode_priority = float(
                        a.priority if a.decode_priority is None else a.decode_priority
                    )
                else:
                    c.decode_priority = c.prefill_priority
                p = a.prefill_instance
                assert p is not None  # validated: a prefill or monolithic instance
                target = self.instances[p]
                if old is None or old != p:
                    if old is not None:
                        self._dequeue_waiting(c, self.instances[old])
                    else:
                        del self.unplanned[c.uid]
                    target.enqueue(c)
                elif self.pd:
                    target.reprioritised(c)
                touched[target.index] = target
        for inst in touched.values():
            inst.on_queue_changed()


__all__ = [
    "ASYNC_STAGES",
    "LISTENER_METHODS",
    "MIGRATION_MODES",
    "PREFILL_MODES",
    "STAGES",
    "TOKEN_ID_BYTES",
    "TOOL_ESTIMATES",
    "Assignment",
    "CallRecord",
    "Invocation",
    "LatencyCache",
    "PlanningStats",
    "RECORD_STORES",
    "SchedulingError",
    "Simulation",
    "SimulationResult",
    "WorkflowRecord",
]
