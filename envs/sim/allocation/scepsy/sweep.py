"""The rate sweep of one LLM's profile (Scepsy §4 step 3): :class:`ReplayConfig` (every replay
parameter) and :func:`profile_llm`, which sweeps the arrival rate from low load to saturation at
one (TP, share) and records latency percentiles and throughput per point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from envs.sim.allocation.scepsy.apl import LLMProfile
from envs.sim.allocation.scepsy.projection import Projection, project_trace
from envs.sim.allocation.scepsy.replay import (
    ReplayResult,
    burst_capacity,
    isolated_timing,
    knee_throughput,
    merge_replays,
    replay_point,
    replica_cluster,
)
from envs.sim.allocation.scepsy.tracing import Trace, trace_workflows
from envs.sim.core.simulation import LatencyCache
from envs.sim.engines.presets import get_engine
from envs.sim.hardware.catalog import get_gpu, get_model
from traces.generators.beam_search import PREFIX_BLOCK_TOKENS
from traces.schema import Workflow


# -- the sweep ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplayConfig:
    """Replay and sweep parameters (all part of the cache key).

    Workflows per point: enough that the arrival span ``T`` covers ``warmup_spans +
    span_factor`` traced spans of a projected workflow (:func:`call_weighted_span`), within
    ``[min_calls, max_calls]`` simulated calls and at least ``min_workflows`` workflows.

    :param min_calls: fewest LLM calls simulated per rate point.
    :param max_calls: most LLM calls simulated per rate point (bounds a point's cost).
    :param min_workflows: fewest projected workflows per point.
    :param span_factor: measurement window in call-weighted projected-workflow spans.
    :param keep_gaps: keep the traced non-LLM gaps as tool delays (module docstring).
    :param start: first swept rate as a share of the burst-probe capacity.
    :param growth: rate multiplier of the geometric sweep.
    :param refine: bisection steps between the last sustained and first unsustained rate.
    :param max_points: cap on geometric points.
    :param warmup: share of the arrival span excluded from the measurement window (at least
        ``warmup_spans`` call-weighted spans, at most half of it).
    :param warmup_spans: see ``warmup``.
    :param tolerance: a point is sustained if it completes at least ``1 − tolerance`` of the
        calls offered in its window (default 0.01: the knee's ≥ 99 %).
    :param latency_factor: ... and its median call latency is at most this × the unloaded
        median (default 2; module docstring, "Knee rule").
    :param prefix_cache_blocks: the replica's prefix cache: ``"kv"`` (default: vLLM's automatic
        prefix caching in free KV blocks, as ``servegym/Allocation-v0`` serves), a block count,
        or 0 (off). Each replayed copy of a workflow gets its own prefix hashes.
    :param prefix_block_tokens: tokens per block of the workload's ``prefix_hashes``.
    :param confirm: replays (extra seeds) pooled with a borderline point of the geometric phase
        (completing between ``1 − 2·tolerance`` and ``1 − tolerance`` of its offered calls)
        before it counts as unsustained (guards against one unlucky draw of heavy workflows
        stopping the sweep a growth factor early).
    :param seed: replay seed (workflow order and arrival times).
    """

    min_calls: int = 3000
    max_calls: int = 24000
    min_workflows: int = 20
    span_factor: float = 6.0
    keep_gaps: bool = True
    start: float = 0.05
    growth: float = 1.6
    refine: int = 3
    max_points: int = 16
    warmup: float = 0.2
    warmup_spans: float = 2.0
    tolerance: float = 0.01
    latency_factor: float = 2.0
    confirm: int = 1
    prefix_cache_blocks: int | str = "kv"
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.min_calls <= self.max_calls or self.min_workflows < 1:
            raise ValueError(
                f"need 1 <= min_calls <= max_calls and min_workflows >= 1, got {self.min_calls}, "
                f"{self.max_calls}, {self.min_workflows}"
            )
        if not self.growth > 1.0:
            raise ValueError(f"growth must be > 1, got {self.growth}")
        if not 0.0 < self.start < 1.0:
            raise ValueError(f"start must be in (0, 1), got {self.start}")
        if not 0.0 <= self.warmup < 1.0 or not 0.0 <= self.tolerance < 1.0:
            raise ValueError("warmup and tolerance must be in [0, 1)")
        if not self.latency_factor >= 1.0:
            raise ValueError(f"latency_factor must be >= 1, got {self.latency_factor}")
        if self.max_points < 2 or self.refine < 0 or self.confirm < 0:
            raise ValueError("need max_points >= 2, refine >= 0 and confirm >= 0")

    def workflows(self, projections: Sequence[Projection], rate: float) -> int:
        """Projected workflows to replay at ``rate`` calls/s."""
        mean_calls = _mean(p.calls for p in projections)
        spans = self.span_factor + self.warmup_spans
        want = spans * call_weighted_span(projections) * rate / mean_calls
        lo, hi = self.min_calls / mean_calls, self.max_calls / mean_calls
        return max(self.min_workflows, math.ceil(min(max(want, lo), hi)))

    def warmup_seconds(self, projections: Sequence[Projection], horizon: float) -> float:
        """Start of the measurement window for an arrival span of ``horizon`` seconds."""
        spans = self.warmup_spans * call_weighted_span(projections)
        return min(0.5 * horizon, max(self.warmup * horizon, spans))


def call_weighted_span(projections: Sequence[Projection]) -> float:
    """Traced span of the projected workflow a random call belongs to, on average (long
    workflows hold most calls, so the replay's ramp-up lasts about this long)."""
    calls = sum(p.calls for p in projections)
    return sum(p.calls * p.span for p in projections) / calls


def _mean(xs: Iterable[float]) -> float:
    v = list(xs)
    return sum(v) / len(v)


def profile_llm(
    model: str,
    tp: int,
    fraction: float,
    workload: Trace | Sequence[Workflow] | Sequence[Projection],
    gpu: str = "rtx-a6000",
    engine: str = "vllm",
    *,
    config: ReplayConfig | None = None,
    latency_cache: LatencyCache | None = None,
    log: Callable[[ReplayResult], None] | None = None,
    neighbour: str = "busy",
) -> LLMProfile:
    """Throughput–latency profile of one replica of ``model`` at ``tp`` on ``fraction`` of each
    GPU (§4 step 3; the replay, the sweep and the saturation rule are in the module docstring).

    :param workload: a :class:`Trace`, workflows (traced first on ``gpu``/``engine``) or
        projections of ``model`` (:func:`project_trace`).
    :param log: called with every replay result (diagnostics).
    :param neighbour: what shares the rest of a sub-GPU share's GPUs (:data:`NEIGHBOURS`; see
        the module docstring).
    :raises ValueError: for an unknown model/GPU, a TP or share the model does not fit, an empty
        workload, a model the workload never calls or an unknown ``neighbour``.
    """
    cfg = config or ReplayConfig()
    get_model(model)
    get_gpu(gpu)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    projections = _projections(workload, model, gpu, engine, cfg)
    cluster = replica_cluster(model, tp, fraction, gpu, neighbour)
    cache = latency_cache or LatencyCache()
    cache.get(cluster.instances[0], get_engine(engine))  # ValueError: does not fit / bad TP
    unloaded: list[float] = []
    projections = isolated_timing(
        projections,
        cluster,
        seed=cfg.seed,
        engine=engine,
        latency_cache=cache,
        prefix_cache_blocks=cfg.prefix_cache_blocks,
        prefix_block_tokens=cfg.prefix_block_tokens,
        unloaded=unloaded,
    )
    unloaded_p50 = float(np.percentile(unloaded, 50))
    bound = cfg.latency_factor * unloaded_p50

    def run(rate: float, confirm: int) -> ReplayResult:
        results = []
        for k in range(1 + confirm):
            results.append(
                replay_point(
                    projections,
                    cluster,
                    rate,
                    workflows=cfg.workflows(projections, rate),
                    seed=cfg.seed + k,
                    engine=engine,
                    warmup=lambda horizon: cfg.warmup_seconds(projections, horizon),
                    tolerance=cfg.tolerance,
                    latency_bound=bound,
                    latency_cache=cache,
                    prefix_cache_blocks=cfg.prefix_cache_blocks,
                    prefix_block_tokens=cfg.prefix_block_tokens,
                )
            )
            last = results[-1]
            if (
                last.sustained
                or last.censored
                or last.finished < (1 - 2 * cfg.tolerance) * last.offered
                or last.point.p50 > 1.5 * bound
            ):
                break  # sustained, or clearly not: only borderline points get confirmed
        r = results[0] if len(results) == 1 else merge_replays(results, cfg.tolerance, bound)
        if log is not None:
            log(r)
        return r

    n_probe = max(cfg.min_workflows, math.ceil(cfg.min_calls / _mean(p.calls for p in projections)))
    capacity = burst_capacity(
        projections,
        cluster,
        workflows=n_probe,
        seed=cfg.seed,
        engine=engine,
        latency_cache=cache,
        prefix_cache_blocks=cfg.prefix_cache_blocks,
        prefix_block_tokens=cfg.prefix_block_tokens,
    )
    results: list[ReplayResult] = []
    rate = cfg.start * capacity
    lo: ReplayResult | None = None
    hi: ReplayResult | None = None
    for _ in range(cfg.max_points):
        r = run(rate, cfg.confirm)
        results.append(r)
        if r.sustained:
            lo = r
            if hi is not None:
                break
            rate *= cfg.growth
        else:
            hi = r
            if lo is not None:
                break
            rate /= cfg.growth  # even the start rate saturates: step down
    if lo is None or hi is None:
        what = "sustained no rate" if lo is None else "never saturated"
        raise RuntimeError(
            f"profiling {model} TP{tp} @ {fraction:g} on {gpu}: the sweep {what} within "
            f"{cfg.max_points} points (rates {[round(x.point.rate, 4) for x in results]} calls/s)"
        )
    for _ in range(cfg.refine):  # a misjudged point here moves T_m within the bracket only
        r = run(math.sqrt(lo.point.rate * hi.point.rate), 0)
        results.append(r)
        if r.sustained:
            lo = r
        else:
            hi = r
    points = tuple(r.point for r in results)
    t_max = knee_throughput(
        points,
        unloaded_p50,
        min_completion=1.0 - cfg.tolerance,
        latency_factor=cfg.latency_factor,
    )
    return LLMProfile(model, gpu, tp, float(fraction), points, t_max, unloaded_p50)


def _projections(
    workload: Trace | Sequence[Workflow] | Sequence[Projection],
    model: str,
    gpu: str,
    engine: str,
    cfg: ReplayConfig,
) -> list[Projection]:
    if isinstance(workload, Trace):
        return project_trace(workload, model, keep_gaps=cfg.keep_gaps)
    items = list(workload)
    if not items:
        raise ValueError(f"cannot profile {model}: empty workload")
    if all(isinstance(p, Projection) for p in items):
        wrong = sorted({p.model for p in items if isinstance(p, Projection) and p.model != model})
        if wrong:
            raise ValueError(f"projections of {wrong} given to profile {model!r}")
        return items  # type: ignore[return-value]
    if all(isinstance(w, Workflow) for w in items):
        trace = trace_workflows(
            items,  # type: ignore[arg-type]
            gpu,
            engine,
            prefix_cache_blocks=cfg.prefix_cache_blocks,
            prefix_block_tokens=cfg.prefix_block_tokens,
        )
        return project_trace(trace, model, keep_gaps=cfg.keep_gaps)
    raise TypeError("workload must be a Trace, a list of Workflows or a list of Projections")
