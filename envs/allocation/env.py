"""``servegym/Allocation-v0``: Scepsy's GPU allocation as a Gymnasium MDP (the spec is the
:class:`AllocationEnv` docstring).
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import numpy as np
from gymnasium import spaces

from envs.allocation.context import AllocationContext, LLMPeriodMetrics
from envs.allocation.episode import EpisodeMixin
from envs.allocation.masking import MaskingMixin
from envs.allocation.observation import (
    GLOBAL_FEATURES,
    LLM_FEATURES,
    ObservationMixin,
)
from envs.allocation.options import AllocationOptions
from envs.allocation.serving import (
    ServingMixin,
)
from envs.allocation.workloads import (
    spec_for,
    structure_stats,
)
from envs.common.base import ServegymEnv
from envs.common.options import takes_options
from envs.common.rewards import make_reward
from envs.common.run_alone import RunAloneLatency
from envs.sim.allocation.allocations import (
    TP_DEGREES,
    Allocation,
    AllocationError,
    LLMAllocation,
    Placement,
    PlacementError,
    min_share_units,
)
from envs.sim.allocation.placement import place
from envs.sim.core.simulation import LatencyCache, Simulation
from envs.sim.engines.presets import get_engine, resolve_token_budget
from envs.sim.hardware.catalog import get_model
from envs.sim.hardware.cluster import ClusterSpec, Topology, load_cluster
from traces.schema import LLMNode, Workflow


def _sub_topology(topo: Topology, gpus: int | None) -> Topology:
    if gpus is None or gpus == topo.num_gpus:
        return topo
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus must be a positive integer, got {gpus!r}")
    if gpus > topo.num_gpus:
        raise ValueError(f"gpus={gpus} but the cluster has only {topo.num_gpus} GPUs")
    if gpus % topo.gpus_per_node:
        raise ValueError(
            f"gpus={gpus} is not a whole number of {topo.gpus_per_node}-GPU nodes; use one of "
            f"{[topo.gpus_per_node * k for k in range(1, topo.num_nodes + 1)]}"
        )
    return dataclasses.replace(topo, num_nodes=gpus // topo.gpus_per_node)


@takes_options(AllocationOptions)
class AllocationEnv(EpisodeMixin, MaskingMixin, ServingMixin, ObservationMixin, ServegymEnv):
    """Scepsy's GPU-allocation problem as a Gymnasium MDP (``servegym/Allocation-v0``).

    ## Description

    Multi-LLM agentic workflows (RAG + reranker, beam search, both combined; Scepsy §7.1) arrive
    at a GPU pool (``scepsy-16``: 4 nodes × 4 RTX A6000, NVLinked pairs). The policy decides how
    much of the pool each LLM gets (GPU-fraction units, tensor parallelism and replicas; Scepsy
    §5); the env places the replicas on the topology (§6,
    :func:`envs.sim.allocation.placement.place`) and serves the workflows with the simulator (vLLM
    engines by default, Scepsy §7.1). The objective is **workflow goodput**: workflows finishing
    within their latency SLO per second.

    An episode is ``periods`` allocation periods of ``period_seconds`` each, with one workflow
    arrival rate per period (Poisson arrivals):

    * ``rate_trace=None``: a constant ``workflow_rate``, Scepsy's static problem (§5);
    * ``rate_trace="ragpulse_hourly"`` (or ``"azure_code_minutely"``): the autoscaling problem;
      one bin of a real service's rate shape per period, times ``workflow_rate``
      (:mod:`traces.rates`; ``rate_window`` = ``"train"``, ``"heldout"`` or a start bin picks the
      window; training and held-out windows never overlap).

    At the start of each period the policy builds an allocation **one LLM at a time**, in a
    fixed order (largest model first): each step picks, for the next LLM, one option of the menu
    below. After the last LLM the allocation is placed and the simulator serves the period.
    Replicas whose (model, node, GPUs, share) did not change keep running; the others are
    retired (they finish what they hold and take no new calls; their GPU share goes to the new
    allocation at once, an approximation: the simulator does not model the overlap) and new
    replicas serve after a model load of ``reconfig_startup_s`` + weights / (TP ×
    ``load_bandwidth``) seconds (the cold start an autoscaler pays). The first period's replicas
    are loaded before traffic starts.

    Calls are routed among the ready, not retired replicas of their model by SGLang's
    cache-aware policy (Scepsy §6 uses an SGLang router per workflow;
    :func:`cache_aware_choice`): to the replica caching the longest prefix of the prompt when it
    covers ≥ 30 % of it, else to the one with the fewest running + waiting calls, and always to
    the least loaded when the load is imbalanced (> 64 calls and > 1.5× apart); before any
    replica of a model is ready, calls queue at the one ready first. Engines keep an LRU prefix
    cache in their free KV blocks (vLLM's automatic prefix caching, 16-token blocks):
    beam-search prompts share their beam's prefix (:mod:`traces.generators.beam_search`).

    A GPU share is an MPS partition (Scepsy §6 enforces fractions with NVIDIA MPS, static SM and
    memory limits): it caps the replica's compute (SMs) and memory at ``share``/F of each GPU,
    strictly; HBM bandwidth and L2, which MPS does not partition, are shared with the other
    replicas on the same GPU that are busy at the time
    (:func:`envs.sim.latency.model.contended_bandwidth_shares`,
    :class:`envs.sim.engines.instances.SharedGPUs`): alone a partition of at least half a GPU can
    use the whole bandwidth, next to busy neighbours it gets its part of it. F = ``units_per_gpu``
    is 4 by default (profiling stays at minutes); the paper's F = 10 is accepted everywhere
    (``units_per_gpu=10``).

    ## Action Space

    ``Discrete(F · |TP| · R)``: option ``(share, tp, replicas)`` = ``replicas`` identical
    replicas at tensor-parallel degree ``tp``, each taking ``share``/F of each of its ``tp``
    GPUs, with F = ``units_per_gpu`` and R = ``max_replicas`` (index = ``((share − 1)·|TP| +
    tp_index)·R + replicas − 1``; :meth:`AllocationEnv.option` decodes it). An option is legal
    when

    1. the share holds the model's weights + ``min_kv_tokens`` of KV at that TP (Scepsy §5's
       minimum fraction; :func:`envs.sim.allocation.allocations.min_share_units`);
    2. TP fits inside an NVLink domain (§5 pruning (iii): TP never crosses PCIe or nodes);
    3. its units leave at least the minimum of every LLM still to be allocated;
    4. the allocation so far, this option, and the minimum option of every LLM still to come
       can be placed on the topology (§6 placer; tried keeping the previous period's replicas
       in place, then from scratch).

    So the mask never traps the policy: at every step some option is legal (the construction
    checks that the minimum allocation of every LLM fits); on the step that ends the episode it
    marks action 0 alone. A masked action is replaced by the fallback's choice
    (:meth:`AllocationEnv.fallback_action`: an even split of what is left) with a penalty, and
    flagged in ``info["invalid_action"]``; ``invalid_action="raise"`` raises instead (the shared
    rule of :mod:`envs.common.base`).

    ## Observation Space

    A ``Dict`` of ``float32`` boxes, values in [0, 10]:

    * ``llms``, shape (L, 16): per LLM (padded to ``max_llms``): valid, is being decided now,
      already decided this period, log1p(params / 1e9), n_m / 100 and p_m / 10 (from the
      workload generator's structure, see below), min share at TP 1 / F, previous units / F,
      previous TP / 4, previous replicas / R, units / F chosen this period, last period:
      log1p(call rate), log1p(mean call latency s), busy fraction, log1p(calls in flight per
      replica), log1p(completed calls / s)
    * ``global``, shape (10,): units left / total, units still reserved for later LLMs' minimums
      / total, period / periods, log1p(target rate), log1p(last measured rate), last period's
      SLO attainment, last period's mean latency / SLO (≤ 10), GPUs / 64, is first period, time
      / (periods × period_seconds)

    ``n_m`` and ``p_m`` are computed from the generated workflows' DAG structure (calls per
    workflow; widest level of each model's calls) over the episode's own workload: the kind of
    statistics a tracing proxy yields, without timing. With ``decision_context=True``,
    ``info["decision_context"]`` (:class:`AllocationContext`) carries the structured state the
    experts act on (``env.decision_context()`` returns it either way).

    ## Rewards

    The SLO of a workflow is ``slo_scale`` × its run-alone latency: the critical path of its DAG
    with each call served alone on a whole GPU at TP 1 on the engine (chunked prefill, then
    decode at batch 1) and each tool taking its latency. ``reward=`` names one of
    :mod:`envs.common.rewards` (ratio = latency / SLO, per workflow completion):

    * ``"goodput"`` (default): +1 per workflow within its SLO, else 0; the return is goodput ×
      episode length, in [0, N] (N = workflows);
    * ``"slowdown"``: −ratio^p / N (≤ 0; with ``reward_kwargs={"p": 1}`` it is −mean latency /
      SLO);
    * ``"lateness"``: −max(0, ratio − α) / N (≤ 0); ``"req99"``: −p99 ratio at the end (≤ 0).

    Unfinished workflows count as misses. A masked action costs −``invalid_penalty`` (1.0) on
    top.

    ## Starting State

    ``reset(seed=...)`` draws the workload and the rate window (from the reset seed or
    ``workload_seed``), computes every workflow's run-alone SLO, and stops at the first
    decision: the first LLM of the first period, on an empty pool.

    ## Episode End

    After the last period the env serves the remaining workflows for at most ``drain_seconds``;
    the rest count as unfinished (SLO misses). The episode then terminates; it is truncated
    after ``max_steps`` steps (None: no limit). An episode is ``periods`` × (LLMs in the
    workload) steps: at the defaults (``rag_reranker``, one period of 120 s on 4 GPUs) 3 steps.

    At the end ``info["metrics"]`` has ``goodput`` (workflows/s within SLO),
    ``slo_violation_ratio``, ``throughput`` (achieved: workflows completed inside the measured
    window per second of it, as a load generator counts them), ``offered_rate`` (measured
    arrivals per second), ``latency_mean`` / ``_p50`` / ``_p90`` / ``_p99`` (s, finished
    workflows), ``num_workflows``, ``num_completed``, ``gpu_utilisation`` (busy
    GPU-share-seconds / GPU-seconds), ``reconfigurations`` (replicas started after the first
    period), ``sustainable`` (1 when ≥ 99 % of the measured workflows finished by the end of the
    drain and the achieved throughput is ≥ 90 % of the offered rate), and with ``apl_info``
    ``apl_latency`` (the APL's predicted mean latency, arrival-weighted over periods) and
    ``apl_throughput`` (its smallest predicted T_w); ``info`` also has ``latencies`` and
    ``slos`` lists and ``allocations`` (one readable line per period). With ``warmup_seconds``
    the metrics cover only workflows arriving after it. Every step's ``info["metrics"]`` holds
    the metrics as if the episode ended now (workflows not finished yet count as misses), so a
    ``TimeLimit`` cut reports them too. Every period's end ``info`` has ``period_metrics`` and,
    with ``apl_info=True``, ``apl``: the Aggregate LLM Pipeline's predicted latency and
    throughput of the period's allocation at its rate (:mod:`envs.sim.allocation.scepsy`; the first
    use traces and profiles the workload's LLMs by replay, minutes, then cached on disk).

    ## Arguments

    Every option is a keyword of the constructor and a field of
    :class:`~envs.allocation.options.AllocationOptions`
    (``options=`` takes a whole one); the table is generated from that dataclass.

    <!-- arguments-table -->

    ## Vectorized use

    ``gymnasium.make_vec("servegym/Allocation-v0", num_envs=4, vectorization_mode="async")`` and
    SB3's ``SubprocVecEnv`` run independent copies; each copy's mask is
    ``vec_env.call("action_masks")`` (Gymnasium) or ``vec_env.env_method("action_masks")`` (SB3,
    what sb3-contrib's ``MaskablePPO`` reads). The action shape depends on ``units_per_gpu`` and
    ``max_replicas``, the observation shape on ``max_llms``: every copy of a vector env must use
    the same ones.

    ## Version History

    * v1: the default episode ramps the workflow rate: 6 periods of 60 s at 0.5, 1.2, 1.9, 2.6,
      3.3 and 4 x the workload's default rate (``rate_ramp=(0.5, 4.0)``, the registered id's
      kwargs in :data:`envs.V1_KWARGS`). Held-out seeds 200-202, RAG on 4 GPUs: goodput
      demand-proportional 1.95, Scepsy 1.14, K8s HPA 0.48, equal split 0.15 wf/s (>= 10x best
      to worst on each seed; docs/envs/allocation-default-episode.md).

      Why this default: Scepsy's question is the throughput an allocation serves at bounded
      latency: "we execute the workflows at different arrival rates" and plot "the achieved
      throughput ... and the workflow request latency" (Scepsy §7.2, Fig. 6). At one constant
      rate, either every allocation has enough (v0's default: all tie on goodput) or the weak
      ones are overloaded from the start and score 0. A ramp puts every policy's knee inside one
      episode: each serves within SLO until its capacity binds, then backlogs, so goodput grows
      with where its knee sits. Each rate is held 60 s, twice a new Llama-3-8B replica's cold
      start (~28 s), and six rates make a Fig. 6 sweep.

    * v0: one 120-s period at the default rate (RAG 1 wf/s). On held-out seed 77 all eight
      policies scored the same goodput (0.97 wf/s on RAG) while mean latency ranged 8.8-39 s,
      and every run measured a backlog. Kept, bit for bit, for published numbers.

    ## References

    Scepsy (§5 allocation search and pruning, §6 placement, MPS fractions and routing, §7.1
    workloads and testbed, §7.2 baselines); see the references page of the documentation for
    full citations.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(self, options: AllocationOptions | None = None, **kwargs: Any) -> None:
        o = self.env_options = AllocationOptions.build(options, kwargs)
        cluster, workload, max_llms = o.cluster, o.workload, o.max_llms
        super().__init__()
        from traces.generators import GENERATORS

        spec = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
        if spec.topology is None:
            raise ValueError(
                f"Allocation needs a GPU pool (architecture 'pool' with a topology); cluster "
                f"{spec.name!r} is {spec.architecture!r}"
            )
        self.topology = _sub_topology(spec.topology, o.gpus)
        self.cluster_name = spec.name
        rate_window = o.rate_window
        if isinstance(rate_window, str) and rate_window.isdigit():
            rate_window = int(rate_window)
        self.workload = workload
        self.workflow_rate = o.workflow_rate
        self.rate_trace = o.rate_trace
        self.rate_window = rate_window
        self.rate_ramp = o.rate_ramp
        self.periods = o.periods
        self.period_seconds = float(o.period_seconds)
        self.warmup_seconds = float(o.warmup_seconds)
        self.drain_seconds = float(o.drain_seconds)
        self.F = o.units_per_gpu
        self.R = o.max_replicas
        self.engine = get_engine(o.engine)
        self.min_kv_tokens = int(o.min_kv_tokens)
        self.slo_scale = float(o.slo_scale)
        self.reconfig_startup_s = float(o.reconfig_startup_s)
        self.load_bandwidth = float(o.load_bandwidth)
        self.apl_info = o.apl_info
        self.max_llms = max_llms
        self._latency_cache = LatencyCache(calibration_variant=o.latency_calibration)
        self.latency_calibration = self._latency_cache.calibration_variant
        self._apl: Any = None

        # The LLMs and their demand: from a traced sample of the workload (fixed seed).
        # check_workload admits only Allocation's WORKLOADS: workflow generators
        sample = cast("list[Workflow]", GENERATORS[workload](seed=0, count=50))
        found = {n.model for wf in sample for n in wf.nodes if isinstance(n, LLMNode)}
        self.models = tuple(sorted(found, key=lambda m: (-get_model(m).total_params, m)))
        if len(self.models) > max_llms:
            raise ValueError(
                f"workload {workload!r} has {len(self.models)} LLMs, more than max_llms={max_llms}"
            )
        self.options: tuple[tuple[int, int, int], ...] = tuple(
            (s, t, d)
            for s in range(1, self.F + 1)
            for t in TP_DEGREES
            for d in range(1, self.R + 1)
        )
        groups = self.topology.nvlink_groups
        self.max_tp = max((len(g) for g in groups), default=1)
        mem = self.engine.memory_utilization
        self.min_share = {
            (m, t): min_share_units(m, self.topology.gpu, t, self.F, mem, self.min_kv_tokens)
            if t <= self.max_tp
            else None
            for m in self.models
            for t in TP_DEGREES
        }
        self.min_units: dict[str, int] = {}
        for m in self.models:
            fits = [s * t for t in TP_DEGREES if (s := self.min_share[(m, t)])]
            if not fits:
                raise AllocationError(
                    f"{m} fits no share of a {self.topology.gpu} at TP {TP_DEGREES} within an "
                    f"NVLink domain of {self.max_tp} GPUs (weights + {self.min_kv_tokens} KV "
                    "tokens); use a larger GPU or fewer KV tokens"
                )
            self.min_units[m] = min(fits)
        minimal = Allocation(
            tuple(self._minimal_option(m) for m in self.models), units_per_gpu=self.F
        )
        try:
            place(minimal, self.topology)
        except PlacementError as exc:
            raise AllocationError(
                f"cluster {self.cluster_name!r} with {self.topology.num_gpus} GPUs cannot hold "
                f"even the minimum allocation of {list(self.models)} ({minimal.describe()}): "
                f"{exc}"
            ) from exc
        self._alone = {}
        for m in self.models:
            lat = self._latency_cache.get(spec_for(m, self.topology.gpu, 1, 1.0), self.engine)
            self._alone[m] = RunAloneLatency(
                lat, self.engine.scheduling, resolve_token_budget(self.engine, lat.gpu, None)
            )
        self.demand = {m: 0.0 for m in self.models}
        for wf in sample:
            for n in wf.nodes:
                if isinstance(n, LLMNode):
                    self.demand[n.model] += self._alone[n.model](n.input_tokens, n.output_tokens)
        self.demand = {m: v / len(sample) for m, v in self.demand.items()}
        self.action_space = spaces.Discrete(len(self.options))
        self.observation_space = spaces.Dict(
            {
                "llms": spaces.Box(0.0, 10.0, (max_llms, LLM_FEATURES), np.float32),
                "global": spaces.Box(0.0, 10.0, (GLOBAL_FEATURES,), np.float32),
            }
        )
        self._init_common(
            o.reward,
            o.reward_kwargs,
            o.invalid_action,
            o.invalid_penalty,
            o.max_steps,
            o.workload_seed,
            o.render_mode,
            o.decision_context,
        )
        self.sim: Simulation | None = None
        self._ctx: AllocationContext | None = None

    # -- helpers -----------------------------------------------------------------------------
    def option(self, action: int) -> tuple[int, int, int]:
        """``(share_units, tp, replicas)`` of action index ``action``."""
        return self.options[int(action)]

    def _minimal_option(self, model: str) -> LLMAllocation:
        t, s = min(
            ((t, s) for t in TP_DEGREES if (s := self.min_share[(model, t)])),
            key=lambda ts: (ts[1] * ts[0], ts[0]),
        )
        return LLMAllocation(model, units=s * t, tp=t, replicas=1)

    def load_seconds(self, model: str, tp: int, fraction: float) -> float:
        """Cold start of one new replica: fixed start-up + its weights over ``tp`` links."""
        lat = self._latency_cache.get(spec_for(model, self.topology.gpu, tp, fraction), self.engine)
        return self.reconfig_startup_s + lat.weight_bytes / (tp * self.load_bandwidth)

    # -- Gymnasium API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        import gymnasium as gym

        from envs.common.workloads import episode_seed

        gym.Env.reset(self, seed=seed)
        self._workload_seed = episode_seed(self, seed, self.workload_seed)
        self._steps = 0
        self._invalid = None
        self._metrics_cache = None
        self.rates = self._schedule()
        self.workflows = self._make_workload(self._workload_seed)
        if not self.workflows:
            raise ValueError(
                f"the episode has no arrivals (rates {self.rates} over {self.periods} x "
                f"{self.period_seconds} s); raise workflow_rate or period_seconds"
            )
        self._slo = np.array([self.slo_scale * self._run_alone(w) for w in self.workflows])
        self._structure = structure_stats(self.workflows)
        self._measured = np.array([w.arrival >= self.warmup_seconds for w in self.workflows])
        self._reward = make_reward(
            self.reward_name, int(self._measured.sum()) or 1, **self.reward_kwargs
        )
        self.sim = None
        self._index = {w.id: i for i, w in enumerate(self.workflows)}
        self._completed_seen = 0
        self.period = 0
        self.allocation: Allocation | None = None
        self.placement: Placement | None = None
        self._replica_instance: dict[tuple, int] = {}  # ReplicaPlacement.key -> instance index
        self._chosen: list[LLMAllocation] = []
        self._llm_metrics: dict[str, LLMPeriodMetrics] = {}
        self._last_rate = 0.0
        self._last_attainment = 0.0
        self._last_ratio = 0.0
        self._reconfigurations = 0
        self._history: list[str] = []
        self._period_info: dict[str, Any] = {}
        self._apl_periods: list[tuple[int, dict[str, float]]] = []
        self._busy_mark: dict[int, float] = {}
        self._calls_mark = 0
        self._done_calls: dict[str, list[float]] = {}
        self._build_context()
        return self._observation(), self._info()

    def step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self._ctx is None:
            raise RuntimeError("call reset() before step()" if self.sim is None else "episode over")
        action, reward = self._legal_action(action)
        s, t, d = self.options[action]
        model = self.models[len(self._chosen)]
        self._chosen.append(LLMAllocation(model, units=s * t * d, tp=t, replicas=d))
        self._steps += 1
        terminated = False
        self._period_info = {}
        if len(self._chosen) == len(self.models):
            alloc = Allocation(tuple(self._chosen), units_per_gpu=self.F)
            self._chosen = []
            reward += self._serve_period(alloc)
            self.period += 1
            if self.period == self.periods:
                reward += self._drain()
                terminated = True
        truncated = self._truncated(terminated, self._steps)
        if terminated or truncated:
            self._ctx = None
            self._end_mask()
            return (
                self._terminal_observation(),
                float(reward),
                terminated,
                truncated,
                self._info(final=True),
            )
        self._build_context()
        return self._observation(), float(reward), False, False, self._info()

    def fallback_action(self) -> int:
        """The fallback policy's choice (what a masked action becomes): an even split of what
        is left, the legal option whose units are closest to the units not yet allocated this
        period divided by the LLMs still to allocate (this one included); ties: fewer units,
        then the lowest index."""
        total = self.topology.num_gpus * self.F
        left = total - sum(a.units for a in self._chosen)
        target = left / (len(self.models) - len(self._chosen))
        legal = np.flatnonzero(self._mask).tolist()

        def units(k: int) -> int:
            s, t, d = self.options[k]
            return s * t * d

        return int(min(legal, key=lambda k: (abs(units(k) - target), units(k), k)))

    def _render_figure(self) -> Any:
        from envs.allocation.render import allocation_figure

        return allocation_figure(self)

    def _render_ansi(self) -> str:
        ctx = self._ctx
        if ctx is None:
            return "episode over\n" + "\n".join(self._history)
        lines = [
            f"t={ctx.time:.1f}s period {ctx.period + 1}/{ctx.periods} target "
            f"{ctx.target_rate:.2f} wf/s (last {ctx.last_rate:.2f}); deciding {ctx.model} "
            f"({ctx.current + 1}/{len(ctx.models)}); {int(ctx.mask.sum())} legal options",
            f"  {'model':<18} {'previous':<28} {'chosen':<28} rate/s  lat(s) busy",
        ]
        prev = {a.model: a for a in ctx.previous.llms} if ctx.previous else {}
        chosen = {a.model: a for a in ctx.chosen}
        for m in ctx.models:
            met = ctx.llm_metrics.get(m, LLMPeriodMetrics())
            p = prev[m].describe(self.F).split(": ")[1] if m in prev else "-"
            c = chosen[m].describe(self.F).split(": ")[1] if m in chosen else "-"
            lines.append(
                f"  {m:<18} {p:<28} {c:<28} {met.call_rate:6.1f} {met.mean_latency:7.3f} "
                f"{met.busy_fraction:4.2f}"
            )
        return "\n".join(lines)
