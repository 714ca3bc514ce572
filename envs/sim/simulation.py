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
(:meth:`Simulation._fallback_place`) and serving resumes; the plan lands at now + δ and is
applied to the calls still waiting at that stage (a call that started service meanwhile keeps
what it runs on: the runtime state is authoritative). While a stage's plan is in flight, new
work entering that stage raises no invocation: its calls take the fallback at once and the stage
is marked dirty; when the plan lands on a dirty stage, one fresh invocation (trigger
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

import dataclasses
import math
import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

import envs.sim.metrics as _metrics
from envs.sim.catalog import get_model
from envs.sim.cluster import ClusterSpec, InstanceSpec
from envs.sim.engines import EnginePreset, get_engine, resolve_token_budget
from envs.sim.events import PicklableEnvironment, callback
from envs.sim.instances import (
    KV_POLICIES,
    SCHEDULING_MODES,
    DecodeInstance,
    MonolithicInstance,
    PrefillInstance,
    SharedGPUs,
)
from envs.sim.latency import LatencyModel, load_calibration
from envs.sim.protocol import Assignment, Invocation, SchedulingError
from envs.sim.workload import (
    DECODE,
    DONE,
    MIGRATING,
    TRANSFER,
    WAIT_DECODE,
    WAIT_PREFILL,
    Call,
    WorkflowRun,
    WorkloadError,
    as_workflow,
)
from traces.schema import LLMNode, Request, ToolNode, Workflow

STAGES = ("prefill", "decode", "route", "migrate")
ASYNC_STAGES = ("prefill", "decode")  # stages whose plans may land late (``apply``'s delay)
PREFILL_MODES = SCHEDULING_MODES
MIGRATION_MODES = ("token", "kv")
TOOL_ESTIMATES = ("history", "oracle")
TOKEN_ID_BYTES = 4  # bytes per token ID shipped by token-ID migration (int32)
# Methods a listener may define (all optional), with their arguments:
#   on_admit(call, inst, now)                      a batch engine admitted ``call``
#   on_prefill_done(call, inst, now, tokens, seconds)
#       a monolithic prefill finished: ``tokens`` prompt tokens computed (uncached, including a
#       re-prefill after migration) in ``seconds`` since its first chunk started
#   on_decode_progress(inst, iterations, seconds, batch)
#       a batch engine ran ``iterations`` decode iterations of ``batch`` sequences in ``seconds``
#       (a chunked mixed iteration with decodes counts as one)
#   on_call_done(call, inst, now)                  ``call`` finished on ``inst``
#   on_migrated(call, src, dst, now, seconds)      a migration landed in ``dst``'s queue after
#       ``seconds`` in transit
#   on_preempted(call, inst, now)                  a paging engine evicted running ``call``
#       back to its waiting queue (it is admitted again later: ``on_admit`` fires again)
LISTENER_METHODS = (
    "on_admit",
    "on_prefill_done",
    "on_decode_progress",
    "on_call_done",
    "on_migrated",
    "on_preempted",
)


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


class Simulation:
    """A cluster serving a workload, driven by scheduling plans.

    :param cluster: the cluster (see :func:`envs.sim.cluster.load_cluster`).
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
        ``trtllm``; see :mod:`envs.sim.engines`): sets their scheduling, token budget, batch
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
    ):
        if cluster.architecture == "pool":
            raise WorkloadError(
                f"cluster {cluster.name!r} is a GPU pool with no instances; allocate instances "
                "first (servegym/Allocation-v0 does this)"
            )
        if not 0.0 <= estimate_error < 1.0:
            raise ValueError(f"estimate_error must be in [0, 1), got {estimate_error}")
        preset = None if engine is None else get_engine(engine)
        if prefill_mode is None:
            prefill_mode = "prefill-first" if preset is None else preset.scheduling
        if kv_policy is None:
            kv_policy = "reserve" if preset is None else preset.kv_policy
        if prefill_mode not in PREFILL_MODES:
            raise ValueError(f"prefill_mode must be one of {PREFILL_MODES}, got {prefill_mode!r}")
        if kv_policy not in KV_POLICIES:
            raise ValueError(f"kv_policy must be one of {KV_POLICIES}, got {kv_policy!r}")
        if token_budget is not None and (
            isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1
        ):
            raise ValueError(f"token_budget must be an integer >= 1 token, got {token_budget!r}")
        if check_interval is not None and (
            isinstance(check_interval, bool)
            or not isinstance(check_interval, int)
            or check_interval < 1
        ):
            raise ValueError(
                f"check_interval must be None or an integer >= 1 decode iterations, got "
                f"{check_interval!r}"
            )
        if migration not in MIGRATION_MODES:
            raise ValueError(f"migration must be one of {MIGRATION_MODES}, got {migration!r}")
        if tool_estimate not in TOOL_ESTIMATES:
            raise ValueError(
                f"tool_estimate must be one of {TOOL_ESTIMATES}, got {tool_estimate!r}"
            )
        self.tool_estimate = tool_estimate
        # Finished tools' measured latencies, per tool name and over all tools: [sum, count].
        self._tool_seen: dict[str | None, list[float]] = {}
        self._tool_all = [0.0, 0]
        self.engine = preset
        self.token_by_token = token_by_token
        self.prefix_cache_blocks = prefix_cache_blocks
        if isinstance(prefix_block_tokens, bool) or not isinstance(prefix_block_tokens, int):
            raise ValueError(f"prefix_block_tokens must be an integer, got {prefix_block_tokens!r}")
        if prefix_block_tokens < 1:
            raise ValueError(f"prefix_block_tokens must be >= 1, got {prefix_block_tokens}")
        self.prefix_block_tokens = prefix_block_tokens
        self.prefill_mode = prefill_mode
        self.token_budget = token_budget
        self.kv_policy = kv_policy
        self.check_interval = check_interval
        self.check_queued = bool(check_queued)
        self.migration = migration
        self.listeners: dict[str, list[Callable[..., None]]] = {m: [] for m in LISTENER_METHODS}
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
        # Prefix-cache reverse index: block hash -> indices of the monolithic instances caching
        # it, kept by the instances, so a router finds prefix hits without scanning every cache.
        self.prefix_index: dict[int, set[int]] = {}

        self.prefill: list[PrefillInstance] = []
        self.decode: list[DecodeInstance] = []
        self.monolithic: list[MonolithicInstance] = []
        self.instances: list[PrefillInstance | DecodeInstance | MonolithicInstance] = []
        # Monolithic instances on named GPU fractions are MPS partitions sharing HBM bandwidth.
        self.shared_gpus = SharedGPUs(self._bandwidth_variant)
        for spec in cluster.instances:
            mono = spec.role == "monolithic"
            lat = self.latency_cache.get(spec, preset if mono else None)
            if spec.role == "prefill":
                inst: Any = PrefillInstance(
                    self,
                    spec,
                    lat,
                    prefix_cache_blocks=self._prefix_blocks(lat),
                    block_tokens=self.prefix_block_tokens,
                )
                self.prefill.append(inst)
            elif spec.role == "decode":
                inst = DecodeInstance(self, spec, lat, token_by_token)
                self.decode.append(inst)
            else:
                inst = self._make_monolithic(spec)
                self.monolithic.append(inst)
            self.instances.append(inst)
        self.pd = cluster.architecture == "pd"
        self.served_models = set(cluster.models)

        # The KV a call of each model can hold: a call larger than every instance that would
        # decode it could never be placed (decode instances, or the model's monolithic ones).
        largest_kv: dict[str, int] = dict.fromkeys(self.served_models, 0)
        for inst in self.decode if self.pd else self.monolithic:
            model = inst.spec.model
            largest_kv[model] = max(largest_kv.get(model, 0), inst.capacity)
        context = {m: get_model(m).max_context_tokens for m in self.served_models}
        self.runs: list[WorkflowRun] = []
        last = -math.inf
        for i, rec in enumerate(workload):
            wf = as_workflow(rec)
            if not wf.arrival >= last:
                raise WorkloadError(
                    f"workload not sorted by arrival: record {i} ({wf.id!r}) arrives at "
                    f"{wf.arrival} s, before the previous record's {last} s"
                )
            if not math.isfinite(wf.arrival) or wf.arrival < 0:
                raise WorkloadError(f"record {i} ({wf.id!r}) has arrival {wf.arrival}; need >= 0")
            last = wf.arrival
            run = WorkflowRun(wf, i)
            for node in wf.nodes:
                if not isinstance(node, LLMNode):
                    continue
                if node.model not in self.served_models:
                    raise WorkloadError(
                        f"workflow {wf.id!r} node {node.id!r} needs model {node.model!r}, but "
                        f"cluster {cluster.name!r} serves {sorted(self.served_models)}"
                    )
                need = node.input_tokens + node.output_tokens
                window = context[node.model]
                if need > window:  # vLLM refuses such a request (max_model_len)
                    raise WorkloadError(
                        f"record {i} (workflow {wf.id!r}) node {node.id!r} is {need} tokens long "
                        f"(input_tokens {node.input_tokens} + output_tokens "
                        f"{node.output_tokens}), beyond {node.model!r}'s context window of "
                        f"{window} tokens"
                    )
                if need > largest_kv[node.model]:
                    raise WorkloadError(
                        f"record {i} (workflow {wf.id!r}) node {node.id!r} holds {need} KV "
                        f"tokens (input_tokens {node.input_tokens} + output_tokens "
                        f"{node.output_tokens}), more than any instance of cluster "
                        f"{cluster.name!r} serving {node.model!r} holds "
                        f"({largest_kv[node.model]} tokens)"
                    )
            self.runs.append(run)
        self._isolated_cache: dict[tuple[str, int, int], float] = {}
        self._isolated_classes: tuple[int, Any] | None = None
        self._bandwidth: dict[tuple[str, str], float] = {}
        self._kv_links: tuple[np.ndarray, np.ndarray] | None = None

        self.pending: list[Invocation] = []
        self.waiting_prefill: dict[int, Call] = {}  # revealed, prefill/route not started
        self.waiting_decode: dict[int, Call] = {}  # transferred, decode not started
        # Waiting calls that no plan has placed yet (reveal order), and for each pending
        # prefill/route invocation the uid of the first call revealed after it was raised: the
        # plan must cover exactly the unplanned calls below that bound (see ``_validate``).
        self._unplanned: dict[int, Call] = {}
        self._uid_bound: dict[int, int] = {}
        self._started_while_pending = False  # see _drop_started_calls
        # Asynchronous planning (see ``apply``): per P-D stage, the plan in flight (the calls
        # of its invocation and its assignments; None: none), whether the stage absorbed
        # invocations meanwhile (dirty), the calls it absorbed, and the uids of waiting calls
        # no plan has reached yet (they wait under the fallback plan).
        self._in_flight: dict[str, tuple[list[Call], list[Assignment]] | None] = {
            "prefill": None,
            "decode": None,
        }
        self._dirty = {"prefill": False, "decode": False}
        self._absorbed: dict[str, list[Call]] = {"prefill": [], "decode": []}
        self._on_fallback: dict[str, set[int]] = {"prefill": set(), "decode": set()}
        self.planning = PlanningStats()
        # Calls planned to each decode instance and not yet admitted there (P-D clusters): queued
        # or running prefill, transferring, or waiting for decode. Lets schedulers see the decode
        # load that is on its way.
        self.decode_inbound: dict[int, dict[int, Call]] = {d.index: {} for d in self.decode}
        self.calls: list[Call] = []
        self.completed: list[WorkflowRun] = []  # in completion order
        self.finished_runs = 0
        self.events = 0
        self.invocation_count = 0
        self._seq = 0
        self._next_arrival = 0
        if self.runs:
            self.schedule(self.runs[0].arrival, self._on_arrival)

    # -- small utilities ---------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Current simulated time in seconds."""
        return self.env.now

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

    def schedule(self, delay: float, fn: Callable[[Any], None]) -> None:
        """Run ``fn(event)`` after ``delay`` seconds of simulated time."""
        ev = self.env.timeout(delay)
        ev.callbacks.append(fn)

    def schedule_late(self, fn: Callable[[Any], None]) -> None:
        """Run ``fn(event)`` at the current instant, after every other event of this instant
        (including those scheduled later at the same time)."""
        _LateEvent(self.env).callbacks.append(fn)

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

    def _drop_started_calls(self) -> None:
        """Take calls out of the pending invocations that started service after the invocation
        was raised but within the same event (an engine that finished a call starts its next
        queued one in the callback that revealed the finished call's children): a scheduler is
        shown only calls it can still plan."""
        self._started_while_pending = False
        for inv in self.pending:
            if inv.stage == "migrate":
                continue
            waiting = self.waiting_decode if inv.stage == "decode" else self.waiting_prefill
            inv.calls = [c for c in inv.calls if c.uid in waiting]
            inv.new_calls = [c for c in inv.new_calls if c.uid in waiting]

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
            fallback plan now (:meth:`_fallback_place`; at the decode stage they keep the priority
            they carried from prefill), the simulation resumes, and at now + ``delay`` the plan
            is applied to the calls still waiting at the stage; calls that started service
            meanwhile are skipped (the runtime state is authoritative). Until then the stage
            raises no invocation (see the module docstring). The plan is validated now, against
            the state it was made for; with a delay it may name only the invocation's calls.
        """
        if not self.pending:
            raise SchedulingError("apply() called with no pending invocation")
        inv = self.pending[0]
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
            self._validate_migration(inv, plan)
            self.pending.pop(0)
            src = self.instances[inv.instance]
            for a in plan:
                if a.prefill_instance != src.index:
                    self._migrate(a.call, src, self.instances[a.prefill_instance], a.priority)
            src.resume()
            return
        self._validate(inv, plan)
        if delay > 0:
            listed = {c.uid for c in inv.calls}
            for a in plan:
                if a.call.uid not in listed:
                    raise SchedulingError(
                        f"call {a.call.id} is not one of invocation {inv.seq}'s calls; a delayed "
                        "plan may only name the calls it was asked for"
                    )
        self.pending.pop(0)
        self._uid_bound.pop(inv.seq, None)
        if delay > 0:
            self._plan_in_flight(inv, plan, float(delay))
        else:
            self._apply_plan(inv.stage, plan)

    def _apply_plan(self, stage: str, plan: Sequence[Assignment]) -> None:
        """Set the (validated) ``plan``'s priorities and placements at a ``prefill``, ``route``
        or ``decode`` stage, moving re-placed waiting calls between queues."""
        touched: dict[int, Any] = {}
        if stage == "decode":
            for a in plan:
                a.call.decode_priority = float(a.priority)
                touched[a.call.decode_instance] = self.instances[a.call.decode_instance]
        else:
            for a in plan:
                c = a.call
                old = c.prefill_instance
                c.prefill_priority = float(a.priority)
                if self.pd:
                    if c.decode_instance is not None:
                        del self.decode_inbound[c.decode_instance][c.uid]
                    c.decode_instance = a.decode_instance
                    self.decode_inbound[c.decode_instance][c.uid] = c
                    c.decode_priority = float(
                        a.priority if a.decode_priority is None else a.decode_priority
                    )
                else:
                    c.decode_priority = c.prefill_priority
                target = self.instances[a.prefill_instance]
                if old is None or old != a.prefill_instance:
                    if old is not None:
                        self._dequeue_waiting(c, self.instances[old])
                    else:
                        del self._unplanned[c.uid]
                    target.enqueue(c)
                elif self.pd:
                    target.reprioritised(c)
                touched[target.index] = target
        for inst in touched.values():
            inst.on_queue_changed()

    # -- asynchronous planning (HexAgent §4.3, §5.2) -----------------------------------------
    def _plan_in_flight(self, inv: Invocation, plan: Sequence[Assignment], delay: float) -> None:
        """Put ``inv``'s validated ``plan`` in flight for ``delay`` seconds: fallback for its
        calls without a plan now, the other pending invocations of the stage absorbed, and the
        landing scheduled (Algorithm 1 line 23)."""
        stage = inv.stage
        assert self._in_flight[stage] is None, "a stage's invocations are absorbed in flight"
        stats = self.planning
        stats.plans += 1
        stats.delay_total += delay
        stats.delay_max = max(stats.delay_max, delay)
        self._in_flight[stage] = (list(inv.calls), list(plan))
        if stage == "prefill":
            self._fallback_place([c for c in inv.calls if c.uid in self._unplanned])
        else:
            self._decode_fallback(inv.new_calls)
        # Invocations of this stage raised in the same event wait behind ``inv``: absorb them.
        for other in [p for p in self.pending if p.stage == stage]:
            self.pending.remove(other)
            self._uid_bound.pop(other.seq, None)
            self._absorb(stage, other.new_calls)
        self.schedule(delay, callback(self._land, stage))

    def _absorb(self, stage: str, new_calls: list[Call]) -> None:
        """New work entered ``stage`` while its plan is in flight (Algorithm 1 lines 5–7): no
        invocation; the calls take the fallback plan now and the stage is marked dirty."""
        self.planning.absorbed += 1
        self._dirty[stage] = True
        self._absorbed[stage].extend(new_calls)
        if stage == "prefill":
            self._fallback_place([c for c in new_calls if c.uid in self._unplanned])
        else:
            self._decode_fallback(new_calls)

    def _decode_fallback(self, calls: list[Call]) -> None:
        """``calls`` wait for decode without a decode plan: they keep the priority they carried
        from prefill (the fallback plan of the decode stage, as :class:`DefaultScheduler`'s)."""
        fallback = self._on_fallback["decode"]
        for c in calls:
            if c.uid in self.waiting_decode and c.uid not in fallback:
                fallback.add(c.uid)
                self.planning.fallback_calls["decode"] += 1

    def _fallback_place(self, calls: list[Call]) -> None:
        """Place ``calls`` (waiting for prefill, without a plan) by the fallback plan: the
        least-loaded (prefill, decode) pair of :class:`envs.sim.scheduler.DefaultScheduler` —
        the simulator's no-RL default — at the back of the prefill instance's queue (priority
        one above the largest queued there; the decode priority is the same). Schedulers'
        priority scales differ (reveal times, ranks), so a call without a plan joins behind the
        planned ones instead of cutting into an order it cannot read."""
        if not calls:
            return
        from envs.sim.scheduler import DefaultScheduler

        inv = Invocation("prefill", self.env.now, "fallback", calls, calls, -1)
        back: dict[int, float] = {}
        plan = []
        for a in DefaultScheduler().plan(self, inv):
            p = a.prefill_instance
            if p not in back:
                back[p] = max((c.prefill_priority for c in self.instances[p].queue), default=-1.0)
            back[p] += 1.0
            plan.append(Assignment(a.call, back[p], p, a.decode_instance))
        self._apply_plan("prefill", plan)
        self.planning.fallback_calls["prefill"] += len(plan)
        self._on_fallback["prefill"].update(a.call.uid for a in plan)

    def _land(self, stage: str) -> None:
        """The plan in flight for ``stage`` arrives: apply it to the calls still waiting there
        (a started call is never moved: HexAgent §4.3, §5.2), then, if the stage absorbed work
        meanwhile and calls wait there, raise one fresh invocation for them."""
        flight = self._in_flight[stage]
        assert flight is not None
        self._in_flight[stage] = None
        calls, plan = flight
        waiting = self.waiting_decode if stage == "decode" else self.waiting_prefill
        live = [a for a in plan if a.call.uid in waiting]
        self.planning.skipped[stage] += len(plan) - len(live)
        # The plan reached every call of its invocation: those it leaves out keep their plan.
        fallback = self._on_fallback[stage]
        for c in calls:
            fallback.discard(c.uid)
        self._apply_plan(stage, live)
        absorbed, self._absorbed[stage] = self._absorbed[stage], []
        if self._dirty[stage]:
            self._dirty[stage] = False
            if waiting:
                self.planning.replans += 1
                self._raise(stage, "replan", [c for c in absorbed if c.uid in waiting])

    # -- reconfiguration (servegym/Allocation-v0) --------------------------------------------
    def add_instances(
        self, specs: Sequence[InstanceSpec], ready_at: float | None = None
    ) -> list[MonolithicInstance]:
        """Start monolithic instances mid-run (an autoscaler or a new allocation adding
        replicas). They take indices after the existing ones (``specs``' own indices are
        replaced) and serve from ``ready_at`` (default: now); calls routed to them earlier wait
        in their queue, as requests wait for a pod that is loading its model.

        :raises SchedulingError: on a P-D cluster, a non-monolithic spec or ``ready_at`` in the
            past.
        """
        if self.pd:
            raise SchedulingError("instances can be added to monolithic clusters only")
        now = self.env.now
        ready = now if ready_at is None else float(ready_at)
        if not ready >= now:
            raise SchedulingError(f"ready_at {ready_at} is before the current time {now}")
        added: list[MonolithicInstance] = []
        new_specs = []
        for spec in specs:
            if spec.role != "monolithic":
                raise SchedulingError(
                    f"instance {spec.name!r}: role {spec.role!r} is not monolithic"
                )
            spec = dataclasses.replace(spec, index=len(self.instances))
            new_specs.append(spec)
            inst = self._make_monolithic(spec)
            inst.ready_at = ready
            if ready > now:
                inst.paused = True
                self.schedule(ready - now, callback(self._instance_ready, inst))
            self.monolithic.append(inst)
            self.instances.append(inst)
            self.served_models.add(spec.model)
            added.append(inst)
        self.cluster = dataclasses.replace(
            self.cluster, instances=self.cluster.instances + tuple(new_specs)
        )
        return added

    def _instance_ready(self, inst: MonolithicInstance) -> None:
        inst.paused = False
        inst.on_queue_changed()

    def retire_instance(self, index: int) -> None:
        """Stop routing to monolithic instance ``index`` (a replica scaled away): it takes no new
        calls and finishes the ones it runs, like a gracefully terminated server; calls queued
        there and not started stay unless a plan moves them (plans may move them elsewhere)."""
        if not 0 <= index < len(self.instances) or self.instances[index].role != "monolithic":
            raise SchedulingError(f"instance {index!r} is not a monolithic instance")
        self.instances[index].retired = True

    def _dequeue_waiting(self, call: Call, inst: Any) -> None:
        if isinstance(inst, PrefillInstance):
            inst.remove(call)
        else:
            inst.remove_waiting(call)

    def _validate(self, inv: Invocation, plan: Sequence[Assignment]) -> None:
        seen: set[int] = set()
        n_inst = len(self.instances)
        for a in plan:
            c = a.call
            self._check_once(a, seen)
            if inv.stage == "decode":
                if c.stage != WAIT_DECODE or c.uid not in self.waiting_decode:
                    raise SchedulingError(
                        f"call {c.id} is not waiting for decode (stage {c.stage!r})"
                    )
                continue
            if c.stage != WAIT_PREFILL or c.uid not in self.waiting_prefill:
                raise SchedulingError(
                    f"call {c.id} is not waiting for {inv.stage} (stage {c.stage!r}); a call "
                    "that started service never moves"
                )
            p = a.prefill_instance
            role = "prefill" if self.pd else "monolithic"
            if p is None or not 0 <= p < n_inst or self.instances[p].role != role:
                raise SchedulingError(
                    f"call {c.id}: {role} instance {p!r} is not a {role} instance of cluster "
                    f"{self.cluster.name!r} (valid: "
                    f"{[i.index for i in self.instances if i.role == role]})"
                )
            self._check_serves(c, p, "instance")
            if not self.pd and self.instances[p].retired and c.prefill_instance != p:
                raise SchedulingError(
                    f"call {c.id}: instance {p} is retired and takes no new calls"
                )
            d = a.decode_instance if self.pd else p
            if self.pd and (d is None or not 0 <= d < n_inst or self.instances[d].role != "decode"):
                raise SchedulingError(
                    f"call {c.id}: decode instance {d!r} is not a decode instance (valid: "
                    f"{[i.index for i in self.decode]})"
                )
            self._check_holds(c, d, "instance")
        if inv.stage != "decode":
            # The unplanned calls of ``inv.calls``: a call never loses its instance once placed,
            # and calls revealed after ``inv`` was raised have larger uids (the bound).
            bound = self._uid_bound.get(inv.seq, len(self.calls))
            for c in self._unplanned.values():
                if c.uid >= bound:
                    break
                if c.uid not in seen:
                    raise SchedulingError(
                        f"plan leaves call {c.id} without an instance; every call that has no "
                        "plan yet must be assigned"
                    )

    @staticmethod
    def _check_once(a: Assignment, seen: set[int]) -> None:
        """A call appears once in a plan, with a finite priority."""
        if a.call.uid in seen:
            raise SchedulingError(f"plan assigns call {a.call.id} twice")
        seen.add(a.call.uid)
        if not math.isfinite(a.priority):
            raise SchedulingError(f"call {a.call.id}: priority must be finite, got {a.priority}")

    def _check_serves(self, call: Call, index: int, what: str) -> None:
        served = self.instances[index].spec.model
        if served != call.model:
            raise SchedulingError(
                f"call {call.id} needs model {call.model!r} but {what} {index} serves {served!r}"
            )

    def _check_holds(self, call: Call, index: int, what: str) -> None:
        cap = self.instances[index].capacity
        if call.kv_tokens > cap:
            raise SchedulingError(
                f"call {call.id} needs {call.kv_tokens} KV tokens (input {call.input_tokens} + "
                f"output {call.output_tokens}) but {what} {index} holds at most {cap}"
            )

    def _validate_migration(self, inv: Invocation, plan: Sequence[Assignment]) -> None:
        src = inv.instance
        listed = {c.uid for c in inv.calls}
        seen: set[int] = set()
        for a in plan:
            c = a.call
            self._check_once(a, seen)
            if c.uid not in listed:
                raise SchedulingError(
                    f"call {c.id} is not one of this migrate invocation's calls (the running "
                    f"calls of instance {src} at the check)"
                )
            queued = self.check_queued and c.stage == WAIT_PREFILL
            if (c.stage != DECODE and not queued) or c.prefill_instance != src:
                raise SchedulingError(
                    f"call {c.id} is no longer running on instance {src} (stage {c.stage!r}, "
                    f"instance {c.prefill_instance}); expected a decoding call of instance {src}"
                )
            p = a.prefill_instance
            if (
                p is None
                or not 0 <= p < len(self.instances)
                or self.instances[p].role != "monolithic"
            ):
                raise SchedulingError(
                    f"call {c.id}: migration target {p!r} is not a monolithic instance of cluster "
                    f"{self.cluster.name!r} (valid: {[m.index for m in self.monolithic]})"
                )
            self._check_serves(c, p, "migration target")
            self._check_holds(c, p, "migration target")

    # -- migration ---------------------------------------------------------------------------
    def raise_check(self, inst: MonolithicInstance, calls: list[Call]) -> None:
        """Raise a ``migrate`` invocation for ``inst``'s decoding ``calls`` (the instance pauses
        until the plan is applied)."""
        self.pending.append(
            Invocation(
                "migrate",
                self.env.now,
                "check",
                calls,
                list(calls),
                self.invocation_count,
                instance=inst.index,
            )
        )
        self.invocation_count += 1

    def _migrate(
        self, call: Call, src: MonolithicInstance, dst: MonolithicInstance, priority: float
    ) -> None:
        tokens = call.input_tokens + call.generated
        queued = call.stage == WAIT_PREFILL  # a pending call holds no KV: ship its token IDs
        if queued:
            src.remove_waiting(call)
            num_bytes = TOKEN_ID_BYTES * tokens
        elif self.migration == "token":
            src.running.remove(call)
            src.release(call)
            num_bytes = TOKEN_ID_BYTES * tokens
        else:
            src.running.remove(call)
            num_bytes = src.latency.kv_bytes_per_token * tokens
        dt = self.cluster.kv_transfer.transfer_time(num_bytes, src.gpu, dst.gpu)
        call.stage = MIGRATING
        call.migrations += 1
        call.prefill_priority = call.decode_priority = float(priority)
        self.schedule(dt, callback(self._on_migration_landed, call, src, dst, dt, queued))

    def _on_migration_landed(
        self,
        call: Call,
        src: MonolithicInstance,
        dst: MonolithicInstance,
        seconds: float,
        queued: bool = False,
    ) -> None:
        call.migration_seconds += seconds
        if self.migration == "kv" and not queued:
            src.release(call)
            call.resident = True
            call.stage = WAIT_DECODE
        else:
            call.resident = False
            call.stage = WAIT_PREFILL
        now = self.env.now
        for f in self.listeners["on_migrated"]:
            f(call, src, dst, now, seconds)
        dst.enqueue(call)
        if self.migration == "kv" and not queued:
            src.on_queue_changed()  # the freed KV may admit a waiting call

    # -- estimates (what schedulers may use) ---------------------------------------------------
    def isolated_call_time(self, call: Call, use_truth: bool = False) -> float:
        """Seconds ``call`` takes on the fastest path of an empty cluster (prefill + transfer +
        decode, batch of one), from the estimate (default) or the truth."""
        out = call.output_tokens if use_truth else call.predicted_output_tokens
        key = (call.model, call.input_tokens, out)
        t = self._isolated_cache.get(key)
        if t is None:
            t = self._isolated_time(call.model, call.input_tokens, out)
            self._isolated_cache[key] = t
        return t if use_truth else t * call.time_error

    def _isolated_time(self, model: str, input_tokens: int, output_tokens: int) -> float:
        best = math.inf
        classes = self._isolated_classes
        if classes is None or classes[0] != len(self.instances):
            classes = self._isolated_classes = (len(self.instances), self._instance_classes())
        if self.pd:
            prefill_classes, decode_classes, transfer = classes[1]
            need = input_tokens + output_tokens
            seen_d = []
            for dg, group in decode_classes:
                # the class's first instance that holds the call prices it
                for capacity, lat in group:
                    if need <= capacity:
                        seen_d.append((dg, lat.decode_steps_time(1, input_tokens, output_tokens)))
                        break
            latency_s = transfer.latency_s
            for pg, lat in prefill_classes:
                tp = lat.prefill_time(input_tokens)
                kv_bytes = lat.kv_bytes_per_token * input_tokens  # this class's KV precision
                for dg, td in seen_d:
                    tt = latency_s + kv_bytes / self._bandwidth[pg, dg] if output_tokens else 0.0
                    best = min(best, tp + (tt + td if output_tokens else 0.0))
        else:
            for lat in classes[1].get(model, ()):
                t = lat.prefill_time(input_tokens)
                if output_tokens > 1:  # the prefill emits the first token
                    t += lat.decode_steps_time(1, input_tokens + 1, output_tokens - 1)
                best = min(best, t)
        return best

    def _instance_classes(self) -> Any:
        """What :meth:`_isolated_time` prices a call on: for P-D clusters each distinct prefill
        latency model (instances of one spec share one: GPU, TP, fraction, precision) and each
        distinct decode one with its instances' capacities, and the pair bandwidths; for
        monolithic clusters each model's distinct latency models."""
        if self.pd:
            prefill: dict[int, tuple[str, Any]] = {}
            for p in self.prefill:
                prefill.setdefault(id(p.latency), (p.gpu, p.latency))
            decode: dict[int, tuple[str, list[tuple[int, Any]]]] = {}
            for d in self.decode:
                decode.setdefault(id(d.latency), (d.gpu, []))[1].append((d.capacity, d.latency))
            kv = self.cluster.kv_transfer
            self._bandwidth = {
                (pg, dg): kv.bandwidth(pg, dg)
                for pg, _ in prefill.values()
                for dg, _ in decode.values()
            }
            return list(prefill.values()), list(decode.values()), kv
        by_model: dict[str, list[Any]] = {}
        for m in self.monolithic:
            lats = by_model.setdefault(m.spec.model, [])
            if not any(lat is m.latency for lat in lats):
                lats.append(m.latency)
        return by_model

    def prefix_hits(self, call: Call) -> dict[int, int]:
        """Instance index -> prompt tokens of ``call`` cached there, for the instances that hold
        at least its first prefix block (all others: 0): monolithic instances, or a P-D
        cluster's prefill instances."""
        hashes = call.node.prefix_hashes
        if not hashes:
            return {}
        holders = self.prefix_index.get(hashes[0])
        if not holders:
            return {}
        return {i: self.instances[i].prefix_hit_tokens(call) for i in sorted(holders)}

    def kv_links(self) -> tuple[np.ndarray, np.ndarray]:
        """P-D clusters: the (P, D) bytes/s of the KV link from each prefill to each decode
        instance, and the (D,) KV capacity in tokens of each decode instance (fixed per run)."""
        if self._kv_links is None:
            kv = self.cluster.kv_transfer
            bandwidth = np.array(
                [[kv.bandwidth(p.gpu, d.gpu) for d in self.decode] for p in self.prefill]
            )
            capacity = np.array([d.capacity for d in self.decode])
            bandwidth.flags.writeable = capacity.flags.writeable = False
            self._kv_links = (bandwidth, capacity)
        return self._kv_links

    def transfer_time(self, call: Call, prefill_index: int, decode_index: int) -> float:
        """Seconds to move ``call``'s prompt KV between two instances."""
        p = self.instances[prefill_index]
        d = self.instances[decode_index]
        kv = p.latency.kv_bytes_per_token * call.input_tokens
        return self.cluster.kv_transfer.transfer_time(kv, p.gpu, d.gpu)

    # -- event handlers ----------------------------------------------------------------------
    def _raise(self, stage: str, trigger: str, new_calls: list[Call]) -> None:
        if stage in ASYNC_STAGES and self._in_flight[stage] is not None:
            self._absorb(stage, new_calls)
            return
        if stage == "decode":
            waiting = self.waiting_decode
            calls = [waiting[uid] for uid in sorted(waiting)]  # by uid: reveal order
        else:
            calls = list(self.waiting_prefill.values())  # insertion order is reveal order
            self._uid_bound[self.invocation_count] = len(self.calls)
        self.pending.append(
            Invocation(stage, self.env.now, trigger, calls, new_calls, self.invocation_count)
        )
        self.invocation_count += 1

    def _prefix_blocks(self, lat: Any) -> int:
        """Prefix-cache blocks of an instance with latency model ``lat`` (see
        ``prefix_cache_blocks``)."""
        blocks = self.prefix_cache_blocks
        if blocks == "kv":
            return int(lat.kv_capacity_tokens) // self.prefix_block_tokens
        if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)) or blocks < 0:
            raise ValueError(
                f"prefix_cache_blocks must be an integer >= 0 blocks or 'kv', got {blocks!r}"
            )
        return int(blocks)

    def _make_monolithic(self, spec: InstanceSpec) -> MonolithicInstance:
        preset = self.engine
        lat = self.latency_cache.get(spec, preset)
        inst = MonolithicInstance(
            self,
            spec,
            lat,
            self.token_by_token,
            prefix_cache_blocks=self._prefix_blocks(lat),
            block_tokens=self.prefix_block_tokens,
            prefill_mode=self.prefill_mode,
            token_budget=resolve_token_budget(preset, lat.gpu, self.token_budget),
            check_interval=self.check_interval,
            kv_policy=self.kv_policy,
            max_batch=None if preset is None else preset.max_batch_for(lat.gpu),
        )
        if spec.gpu_ids and spec.fraction < 1:
            self.shared_gpus.add(inst)
        return inst

    def _bandwidth_variant(self, inst: MonolithicInstance, share: float) -> LatencyModel:
        """``inst``'s latency model with ``share`` of each GPU's HBM bandwidth."""
        return self.latency_cache.get(inst.spec, self.engine, bandwidth_share=share)

    def _on_arrival(self, _event: Any) -> None:
        run = self.runs[self._next_arrival]
        self._next_arrival += 1
        if self._next_arrival < len(self.runs):
            nxt = self.runs[self._next_arrival]
            self.schedule(nxt.arrival - self.env.now, self._on_arrival)
        self._reveal(run, run.sources(), "arrival")

    def _reveal(self, run: WorkflowRun, nodes: list[LLMNode | ToolNode], trigger: str) -> None:
        now = self.env.now
        new_calls: list[Call] = []
        online = self.online_horizons
        for node in nodes:
            run.revealed.append(node.id)
            parent_end = _latest(run.path_end, node.parents) if online else 0.0
            if isinstance(node, ToolNode):
                estimate = run.tool_estimates[node.id] = self.tool_time_estimate(node)
                run.path_end[node.id] = parent_end + estimate
                self.schedule(node.latency, callback(self._tool_done, run, node))
                continue
            call = Call(len(self.calls), run, node, now)
            self.calls.append(call)
            run.calls[node.id] = call
            self._draw_estimates(call)
            if self.online_horizons:
                run.path_end[node.id] = parent_end + self.isolated_call_time(call)
            self.waiting_prefill[call.uid] = call
            self._unplanned[call.uid] = call
            new_calls.append(call)
        if run.path_end:
            run.online_horizon = max(run.path_end.values())
        if new_calls:
            self._raise("prefill" if self.pd else "route", trigger, new_calls)

    def _draw_estimates(self, call: Call) -> None:
        e = self.estimate_error
        if e > 0:
            f_out, f_time = self.rng.uniform(1.0 - e, 1.0 + e, size=2)
            call.predicted_output_tokens = max(0, int(round(call.output_tokens * f_out)))
            call.time_error = float(f_time)
        if self.output_predictor is not None:
            call.predicted_output_tokens = int(self.output_predictor(call))

    def on_prefill_done(self, call: Call, inst: PrefillInstance) -> None:
        if call.output_tokens == 0:
            del self.decode_inbound[call.decode_instance][call.uid]
            call.transfer_end = call.decode_start = call.decode_end = self.env.now
            call.stage = DONE
            for f in self.listeners["on_call_done"]:
                f(call, inst, self.env.now)
            self._call_done(call)
            return
        call.stage = TRANSFER
        assert call.decode_instance is not None
        dt = self.transfer_time(call, inst.index, call.decode_instance)
        self.schedule(dt, callback(self._on_transfer_done, call))

    def _on_transfer_done(self, call: Call) -> None:
        call.transfer_end = self.env.now
        call.stage = WAIT_DECODE
        self.waiting_decode[call.uid] = call
        self.instances[call.decode_instance].enqueue(call)
        self._raise("decode", "transfer", [call])

    def on_decode_done(self, call: Call, inst: Any) -> None:
        for f in self.listeners["on_call_done"]:
            f(call, inst, self.env.now)
        self._call_done(call)

    def on_started(self, call: Call) -> None:
        """An engine started serving ``call`` at this stage: it can no longer be re-planned.
        (A migrated call is in neither waiting dict: it was never re-plannable.)"""
        if call.stage == WAIT_DECODE:
            if self.waiting_decode.pop(call.uid, None) is not None:
                del self.decode_inbound[call.decode_instance][call.uid]
        else:
            self.waiting_prefill.pop(call.uid, None)
        if self.pending:
            self._started_while_pending = True
        stage = "decode" if call.stage == WAIT_DECODE else "prefill"
        fallback = self._on_fallback[stage]
        if fallback and call.uid in fallback:
            fallback.discard(call.uid)
            self.planning.started_on_fallback[stage] += 1

    def tool_time_estimate(self, node: ToolNode) -> float:
        """Seconds a scheduler expects revealed tool ``node`` to take before it returns (see
        ``tool_estimate``): its true latency under ``oracle``; under ``history`` the mean
        measured latency of the finished tools of its name, else of all finished tools, else
        0 s."""
        if self.tool_estimate == "oracle":
            return node.latency
        total, count = self._tool_seen.get(node.name) or self._tool_all
        return total / count if count else 0.0

    def _tool_done(self, run: WorkflowRun, node: ToolNode) -> None:
        """Tool ``node`` returned: its latency is now measured, so the history learns it and
        H_w(t) charges it exactly (as a finished call is re-costed from its true length)."""
        seen = self._tool_seen.setdefault(node.name, [0.0, 0])
        seen[0] += node.latency
        seen[1] += 1
        self._tool_all[0] += node.latency
        self._tool_all[1] += 1
        if self.online_horizons:
            run.path_end[node.id] = _latest(run.path_end, node.parents) + node.latency
            run.online_horizon = max(run.path_end.values())
        self._node_done(run, node.id)

    def _call_done(self, call: Call) -> None:
        run = call.workflow
        if self.online_horizons:
            # Refine H_w(t) with the true isolated duration now that the output length is known.
            parent_end = _latest(run.path_end, call.node.parents)
            run.path_end[call.node.id] = parent_end + self.isolated_call_time(call, use_truth=True)
            run.online_horizon = max(run.path_end.values())
        service = (call.prefill_end - call.prefill_start) + (call.decode_end - call.decode_start)
        self._node_done(run, call.node.id, service)

    def _node_done(self, run: WorkflowRun, node_id: str, service: float = 0.0) -> None:
        node = run.nodes[node_id]
        path = _latest(run.service_path, node.parents) + service
        run.service_path[node_id] = path
        run.attained_service += service
        run.attained_critical = max(run.attained_critical, path)
        children = run.finish_node(node_id)
        if run.done:
            run.finish_time = self.env.now
            self.finished_runs += 1
            self.completed.append(run)
            return
        if children:
            self._reveal(run, children, "reveal")

    # -- results -----------------------------------------------------------------------------
    def standalone_horizon(self, run: WorkflowRun) -> float:
        """H_w: the completion time of ``run``'s workflow alone on this cluster (HexAgent §7.3),
        simulated with the horizon scheduler on true lengths."""
        wf = run.workflow
        key = (
            self.cluster,
            self.prefill_mode,
            self.token_budget,
            self.kv_policy,
            None if self.engine is None else self.engine.name,
            _workflow_key(wf),
        )
        h = self.horizon_cache.get(key)
        if h is None:
            from envs.sim.scheduler import EarliestFinishScheduler

            alone = Workflow(id=wf.id, arrival=0.0, nodes=wf.nodes)
            sim = Simulation(
                self.cluster,
                [alone],
                compute_horizons=False,
                # the default horizon scheduler never reads H_w(t); a custom one may
                online_horizons=self.horizon_scheduler is not None,
                latency_cache=self.latency_cache,
                prefill_mode=self.prefill_mode,
                token_budget=self.token_budget,
                engine=self.engine,
                kv_policy=self.kv_policy,
            )
            res = sim.run(self.horizon_scheduler or EarliestFinishScheduler())
            h = res.workflows[0].completion_time
            self.horizon_cache[key] = h
        return h

    def result(self) -> SimulationResult:
        """Per-call and per-workflow records, metrics and utilisation at the current time."""
        calls = [
            CallRecord(
                workflow_id=c.workflow.id,
                node_id=c.node.id,
                model=c.model,
                task=c.node.task,
                input_tokens=c.input_tokens,
                output_tokens=c.output_tokens,
                predicted_output_tokens=c.predicted_output_tokens,
                revealed_at=c.revealed_at,
                prefill_instance=-1 if c.prefill_instance is None else c.prefill_instance,
                decode_instance=-1 if c.decode_instance is None else c.decode_instance,
                prefill_start=c.prefill_start,
                prefill_end=c.prefill_end,
                transfer_end=c.transfer_end,
                decode_start=c.decode_start,
                decode_end=c.decode_end,
                cached_tokens=c.cached_tokens,
                migrations=c.migrations,
                migration_seconds=c.migration_seconds,
                preemptions=c.preemptions,
                recomputed_tokens=c.recomputed_tokens,
            )
            for c in self.calls
        ]
        workflows = []
        for run in self.runs:
            finished = run.finish_time >= 0
            ct = run.finish_time - run.arrival if finished else math.inf
            h = self.standalone_horizon(run) if self.compute_horizons else math.nan
            workflows.append(
                WorkflowRecord(
                    id=run.id,
                    arrival=run.arrival,
                    finish=run.finish_time if finished else math.inf,
                    completion_time=ct,
                    horizon=h,
                    num_llm_calls=run.num_llm_calls,
                    num_tools=len(run.nodes) - run.num_llm_calls,
                )
            )
        metrics: dict[str, float] = {}
        if workflows and self.compute_horizons:
            metrics = _metrics.summarize_workflows(
                [w.completion_time for w in workflows], [w.horizon for w in workflows]
            )
        end = self.env.now
        util: dict[str, float] = {}
        for role, group in (
            ("prefill", self.prefill),
            ("decode", self.decode),
            ("monolithic", self.monolithic),
        ):
            if group and end > 0:
                util[role] = sum(i.busy_time for i in group) / (len(group) * end)
        return SimulationResult(
            calls=calls,
            workflows=workflows,
            metrics=metrics,
            utilisation=util,
            end_time=end,
            events=self.events,
            invocations=self.invocation_count,
            extra={"planning": self.planning.as_dict()},
        )


class _LateEvent(simpy.events.Event):
    """A zero-delay event processed after all normal-priority events of the same instant
    (SimPy orders its queue by time, then priority: URGENT 0, NORMAL 1; this uses 2)."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, 2, 0)


def _latest(ends: dict[str, float], parents: Sequence[str]) -> float:
    """``max(ends[p] for p in parents)``, 0.0 without parents (a node's earliest start)."""
    if not parents:
        return 0.0
    if len(parents) == 1:
        return ends[parents[0]]
    return max([ends[p] for p in parents])


def _workflow_key(wf: Workflow) -> tuple:
    return tuple(
        (n.id, n.parents, n.model, n.input_tokens, n.output_tokens)
        if isinstance(n, LLMNode)
        else (n.id, n.parents, n.latency)
        for n in wf.nodes
    )
