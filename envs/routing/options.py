"""The options of :class:`envs.routing.env.RoutingEnv` (``servegym/Routing-v0``): one field per
constructor argument, its meaning and its check."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envs.common.options import (
    EnvOptions,
    check_bool,
    check_choice,
    check_number,
    check_predictor,
    check_str,
    check_trace,
    check_workload,
)
from envs.routing.observation import OBSERVATIONS
from envs.routing.workloads import PAPER_RATES, SLO_BASES, SLO_REFERENCE_GPU
from envs.sim import MIGRATION_MODES, PREFILL_MODES, ClusterSpec, EnginePreset, engine_names


@dataclass(frozen=True)
class RoutingOptions(EnvOptions):
    """Everything a :class:`~envs.routing.env.RoutingEnv` is built from (GoodServe's setup
    by default)."""

    cluster: str | ClusterSpec = "goodserve-4"
    """Preset name or YAML path (``goodserve-4``) or a ``ClusterSpec`` of monolithic
    instances."""

    model: str | None = None
    """``llama3.1-8b`` or ``qwen2.5-14b`` (GoodServe §4); None: the cluster's default
    (``goodserve-4``: ``llama3.1-8b``). With a ``trace``, a model given here also serves every
    call of the trace, whatever model it names."""

    instances: int | None = None
    """Grow the cluster to this many instances, cycling its GPU types (None: as is). For the
    scale experiments (8 to 512)."""

    workload: str = "goodserve"
    """Generator name: ``goodserve`` (GoodServe §5's BIRD / SWE-bench / LiveCodeBench mix at
    Mooncake timestamps) or ``goodserve-sessions`` (our session mix); any other
    ``traces.generators`` name whose records are single requests works too."""

    trace: str | Sequence[Any] | None = None
    """A servegym JSONL request trace, or a list of records, instead of a generator
    (``workload_count`` keeps its first records, ``load_scale`` divides its arrival times)."""

    workload_count: int | None = None
    """Requests per episode (None: 500)."""

    workload_rate: float | None = None
    """Arrival rate, requests/s (None: the Mooncake trace's 3.401, ``PAPER_RATES``)."""

    load_scale: float | None = None
    """Multiplies the arrival rate, > 0. None: 0.35 for a generator (1.19 req/s on
    ``goodserve``, about 0.7 of the ~1.7 req/s up to which the ``goodserve-4`` preset keeps
    least-request's median latency flat); 1.0 (as recorded) for a trace."""

    slo_scale: float = 2.0
    """SLO = scale × run-alone latency on ``slo_reference_gpu`` (GoodServe §4: 1 to 3)."""

    slo_reference_gpu: str = SLO_REFERENCE_GPU
    """The mid-tier GPU whose run-alone latency defines the SLO (A800, GoodServe §4)."""

    slo_basis: str = "request"
    """``request`` (each request's own run-alone latency; the deadline then encodes its true
    output length) or ``task`` (the median run-alone latency of its task type; no leak)."""

    output_predictor: str = "moe"
    """Output-length predictor, a name from ``envs.common.predictors.PREDICTORS`` (``moe``;
    ``oracle``, ``oracle-error``, ``mlp``, ``history``, ``task-mean``)."""

    predictor_error: float = 0.0
    """e of the ``oracle-error`` predictor (truth × U[1 − e, 1 + e]), >= 0."""

    engine: str | EnginePreset | None = "vllm"
    """Serving-engine preset of the instances (``vllm``: GoodServe §4 runs vLLM; ``sglang``,
    ``trtllm``; None: the engine-neutral defaults): scheduling, token budget by GPU, batch cap,
    paged KV with preemption, fitted overheads."""

    prefill_mode: str | None = None
    """Override the engine's scheduling (``chunked``, ``prefill-first``,
    ``chunked-prefill-first``, ``mixed-whole``); None: the engine's."""

    token_budget: int | None = None
    """Override the engine's tokens per iteration (None: the engine's, by GPU)."""

    check_interval: int | None = 50
    """τ, decode iterations between migration checks (GoodServe §3.4: 50); None or 0 disables
    the checks (no migrate decisions)."""

    check_queued: bool = True
    """Risk checks also cover the checked instance's queued requests (GoodServe §3.4 "each
    ongoing request"). False: running requests only."""

    migration: str = "token"
    """How a request migrates: ``token`` (re-prefill its token IDs on the target, GoodServe
    §3.4) or ``kv`` (transfer its KV cache at the pair's bandwidth, §4.3)."""

    prefix_cache: bool = True
    """An LRU prefix cache on every instance (512-token blocks, as many as the KV capacity
    holds)."""

    ema_alpha: float = 0.2
    """Weight in (0, 1] of a new sample in the black-box EMAs of the instance monitor
    (GoodServe §3.3)."""

    observation: str = "default"
    """The observation layout: ``default`` (the table in the env docstring), ``extended``
    (ours: 3 more request and 4 more instance columns,
    ``envs.routing.observation.ExtendedObservationMixin``) or ``queue`` (ours: ``extended``
    plus 1 request and 4 instance columns on the prefill queue)."""

    reward: str = "goodput"
    """``goodput`` (+1 per request finished within its SLO), ``slowdown``, ``lateness`` or
    ``req99`` (``envs.common.rewards``); ``reward_kwargs`` holds its options."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.cluster, ClusterSpec):
            check_str("cluster", self.cluster)
        check_str("model", self.model, none=True)
        check_number("instances", self.instances, 1, integer=True, none=True)
        check_trace("trace", self.trace)
        check_workload("workload", self.workload, self.trace, PAPER_RATES, "Routing-v0")
        check_number("workload_count", self.workload_count, 1, integer=True, none=True)
        check_number("workload_rate", self.workload_rate, 0, above=True, none=True, unit="req/s")
        check_number("load_scale", self.load_scale, 0, above=True, none=True)
        check_number("slo_scale", self.slo_scale, 0, above=True)
        check_str("slo_reference_gpu", self.slo_reference_gpu)
        check_choice("slo_basis", self.slo_basis, SLO_BASES)
        check_predictor("output_predictor", self.output_predictor)
        check_number("predictor_error", self.predictor_error, 0)
        if not isinstance(self.engine, EnginePreset):
            check_choice("engine", self.engine, engine_names(), none=True)
        check_choice("prefill_mode", self.prefill_mode, PREFILL_MODES, none=True)
        check_number("token_budget", self.token_budget, 1, integer=True, none=True)
        check_number("check_interval", self.check_interval, 0, integer=True, none=True)
        check_bool("check_queued", self.check_queued)
        check_choice("migration", self.migration, MIGRATION_MODES)
        check_bool("prefix_cache", self.prefix_cache)
        check_number("ema_alpha", self.ema_alpha, 0, above=True, high=1)
        check_choice("observation", self.observation, OBSERVATIONS)
