"""The options of :class:`envs.allocation.env.AllocationEnv` (``servegym/Allocation-v0``): one
field per constructor argument, its meaning and its check."""

from __future__ import annotations

from dataclasses import dataclass

from envs.allocation.workloads import RATE_WINDOWS, WORKLOADS
from envs.common.options import (
    EnvOptions,
    check_bool,
    check_choice,
    check_number,
    check_str,
    check_workload,
    is_int,
)
from envs.sim import ClusterSpec, engine_names
from envs.sim.allocation.allocations import DEFAULT_MIN_KV_TOKENS


@dataclass(frozen=True)
class AllocationOptions(EnvOptions):
    """Everything an :class:`~envs.allocation.env.AllocationEnv` is built from (Scepsy's
    static problem on 4 GPUs by default)."""

    cluster: str | ClusterSpec = "scepsy-16"
    """A ``pool`` preset name or YAML path (``scepsy-16``: 4 nodes × 4 RTX A6000) or a
    ``ClusterSpec`` with a topology."""

    gpus: int | None = 4
    """Use this many GPUs of the pool (whole nodes; None: all). Scepsy §7.2 uses 4, 8 and 16."""

    workload: str = "rag_reranker"
    """``rag_reranker``, ``beam_search`` or ``rag_beam_combined`` (Scepsy §7.1)."""

    workflow_rate: float | None = None
    """Workflows/s, > 0 (the base rate of a ``rate_trace``); None: the workload's
    ``DEFAULT_WORKFLOW_RATE`` (RAG 1/s, beam 0.1/s, combined 0.2/s)."""

    rate_trace: str | None = None
    """None (a constant rate: Scepsy's static problem, §5) or a ``traces.rates`` shape name
    (``ragpulse_hourly``, ``azure_code_minutely``: the autoscaling problem, one bin of the
    shape per period)."""

    rate_ramp: tuple[float, float] | None = None
    """None, or ``(lo, hi)``: the period rates step linearly from ``lo`` × ``workflow_rate`` in
    the first period to ``hi`` × ``workflow_rate`` in the last (needs ``periods`` >= 2; excludes
    ``rate_trace``)."""

    rate_window: str | int = "train"
    """The window of the ``rate_trace``: ``train`` (a random window of the shape's training
    bins, drawn from the reset seed), ``heldout`` (the same from its held-out bins) or an
    integer start bin."""

    periods: int = 1
    """Allocation periods per episode (>= 1)."""

    period_seconds: float = 120.0
    """Simulated seconds per period (> 0)."""

    warmup_seconds: float = 0.0
    """Leave workflows arriving before this many seconds out of the episode metrics (>= 0,
    less than the episode)."""

    drain_seconds: float = 120.0
    """After the last period, serve the backlog for at most this many seconds (>= 0)."""

    units_per_gpu: int = 4
    """F, GPU-fraction units per GPU; 4 keeps profiling cheap; Scepsy §5 uses 10, which works
    end to end."""

    max_replicas: int = 16
    """R, the largest replica count on the action menu."""

    engine: str = "vllm"
    """Serving-engine preset (``vllm``: Scepsy §7.1 runs vLLM; ``sglang``, ``trtllm``)."""

    min_kv_tokens: int = DEFAULT_MIN_KV_TOKENS
    """KV tokens every decoder share must hold beyond its weights (Scepsy §5's minimum
    fraction)."""

    slo_scale: float = 5.0
    """SLO of a workflow = scale × its run-alone latency (> 0)."""

    reconfig_startup_s: float = 20.0
    """Fixed cold start of a new replica, seconds (engine start, CUDA graphs)."""

    load_bandwidth: float = 2e9
    """Bytes/s per GPU at which a new replica loads its weights (> 0)."""

    apl_info: bool = False
    """Add the Aggregate LLM Pipeline's predicted latency/throughput of each period's
    allocation to ``info["apl"]`` (profiles the workload's LLMs on first use, minutes; cached
    on disk)."""

    max_llms: int = 6
    """Rows of the observation's ``llms`` table: the most LLMs a workload may have (the
    observation is padded to it; a workload with more is an error)."""

    reward: str = "goodput"
    """``goodput`` (+1 per workflow within its SLO), ``slowdown``, ``lateness`` or ``req99``
    (``envs.common.rewards``); ``reward_kwargs`` holds its options."""

    def __post_init__(self) -> None:
        super().__post_init__()
        from traces.rates import rate_shape

        if not isinstance(self.cluster, ClusterSpec):
            check_str("cluster", self.cluster)
        check_number("gpus", self.gpus, 1, integer=True, none=True)
        check_workload("workload", self.workload, None, WORKLOADS, "Allocation-v0", False)
        check_number(
            "workflow_rate", self.workflow_rate, 0, above=True, none=True, unit="workflows/s"
        )
        if self.rate_trace is not None:
            check_str("rate_trace", self.rate_trace)
            try:
                rate_shape(self.rate_trace)
            except ValueError as exc:  # names the known shapes
                raise ValueError(f"rate_trace: {exc}") from None
        window = self.rate_window
        if not (is_int(window) or (isinstance(window, str) and window.isdigit())):
            if window not in RATE_WINDOWS:
                raise ValueError(
                    f"rate_window must be one of {', '.join(map(repr, RATE_WINDOWS))} or an "
                    f"integer start bin, got {window!r}"
                )
        check_number("periods", self.periods, 1, integer=True)
        if self.rate_ramp is not None:
            from envs.allocation.episode import check_ramp

            ramp = check_ramp(self.rate_ramp, self.rate_trace, self.periods)
            object.__setattr__(self, "rate_ramp", ramp)
        check_number("units_per_gpu", self.units_per_gpu, 1, integer=True)
        check_number("max_replicas", self.max_replicas, 1, integer=True)
        check_number("max_llms", self.max_llms, 1, integer=True)
        check_number("min_kv_tokens", self.min_kv_tokens, 0, integer=True)
        check_number("period_seconds", self.period_seconds, 0, above=True, unit="seconds")
        check_number("slo_scale", self.slo_scale, 0, above=True)
        check_number("load_bandwidth", self.load_bandwidth, 0, above=True, unit="bytes/s")
        check_number("warmup_seconds", self.warmup_seconds, 0, unit="seconds")
        check_number("drain_seconds", self.drain_seconds, 0, unit="seconds")
        check_number("reconfig_startup_s", self.reconfig_startup_s, 0, unit="seconds")
        check_choice("engine", self.engine, engine_names())
        check_bool("apl_info", self.apl_info)
        if self.warmup_seconds >= self.periods * self.period_seconds:
            raise ValueError(
                f"warmup_seconds={self.warmup_seconds} leaves nothing of the {self.periods} x "
                f"{self.period_seconds} s episode to measure"
            )
