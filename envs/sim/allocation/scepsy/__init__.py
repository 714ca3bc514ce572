"""Scepsy's Aggregate LLM Pipeline (Scepsy §4) on the simulator: workflow tracing, per-LLM
replay profiling and the pipeline model. The GPU scheduler that searches allocations with it is
a policy (:mod:`heuristics.allocation.scepsy.search`); the pipeline is a performance model of the
simulator, so ``servegym/Allocation-v0`` can report its predictions too.

* :mod:`~envs.sim.allocation.scepsy.tracing` — §4 steps 1–2: trace workflows; ``n_m``, ``p_m``;
* :mod:`~envs.sim.allocation.scepsy.profiling` — §4 step 3: throughput–latency profiles by replay
  (cached on disk; ``python -m envs.sim.allocation.scepsy.profiling``);
* :mod:`~envs.sim.allocation.scepsy.apl` — §4 steps 4–5, Eq. 1–2.

:func:`pipelines_for` builds a workload's pipelines (one per workflow family) in one call::

    from envs.sim.allocation.scepsy import pipeline_for
    apl = pipeline_for("rag_reranker", "rtx-a6000", units_per_gpu=4)
    apl.predict(allocation, rate=2.0).latency
"""

from __future__ import annotations

from typing import Any

from envs.sim.allocation.allocations import Allocation
from envs.sim.allocation.scepsy.apl import AggregatePipeline, LLMPrediction, Prediction

#: Workflows traced to build a pipeline (statistics and replayed requests); None: the tracing
#: default :data:`envs.sim.allocation.scepsy.tracing.TRACE_COUNT`, as ``python -m
#: envs.sim.allocation.scepsy.profiling`` uses, so both share the profile cache.
TRACE_COUNT: int | None = None


def pipelines_for(
    workload: str,
    gpu: str,
    units_per_gpu: int,
    engine: str = "vllm",
    count: int | None = TRACE_COUNT,
    seed: int = 0,
    progress: bool = True,
    calibration_variant: str | None = None,
) -> dict[str, AggregatePipeline]:
    """One :class:`AggregatePipeline` per workflow family of generator ``workload`` (a combined
    workload has several; Scepsy §5 schedules them as separate workflows): trace ``count``
    workflows (seed ``seed``) on ``gpu``, aggregate ``n_m``/``p_m``, profile every feasible
    (model, TP, share) at ``units_per_gpu`` (cached on disk; the first call takes minutes).
    Memoised per process, whether the arguments come by position or by name (the env's APL and
    the Scepsy policy then share one tracing; ``progress`` is not part of the key).
    ``calibration_variant``: the per-op calibration the simulator is traced and profiled with
    (``None``: the one in force,
    :func:`envs.sim.latency.efficiency.resolve_calibration_variant`)."""
    from envs.sim.latency.efficiency import resolve_calibration_variant

    variant = resolve_calibration_variant(calibration_variant)
    key = (workload, gpu, units_per_gpu, engine, count, seed, variant)
    if key not in _PIPELINES:
        _PIPELINES[key] = _build_pipelines(*key, progress=progress)
    return _PIPELINES[key]


#: :func:`pipelines_for`'s per-process memo, by (workload, gpu, units, engine, count, seed,
#: calibration variant).
_PIPELINES: dict[tuple, dict[str, AggregatePipeline]] = {}


def _build_pipelines(
    workload: str,
    gpu: str,
    units_per_gpu: int,
    engine: str,
    count: int | None,
    seed: int,
    calibration_variant: str,
    progress: bool,
) -> dict[str, AggregatePipeline]:
    from envs.sim.allocation.scepsy.profiles import profile_set
    from envs.sim.allocation.scepsy.tracing import split_trace, trace_workload, workflow_stats

    trace = trace_workload(
        workload, count, seed, gpu=gpu, engine=engine, calibration_variant=calibration_variant
    )
    families = split_trace(trace)
    # A single-family workload is profiled by name, exactly as ``python -m
    # envs.sim.allocation.scepsy.profiling --workload <name>`` does, so the two share the disk
    # cache.
    profiles = profile_set(
        workload if len(families) == 1 else list(families.values()),
        count=count,
        seed=seed,
        gpu=gpu,
        units_per_gpu=units_per_gpu,
        engine=engine,
        progress=progress,
        calibration_variant=calibration_variant,
    )
    return {
        fam: AggregatePipeline(workflow_stats(t, name=fam), profiles, gpu=gpu)
        for fam, t in families.items()
    }


class MixturePipeline:
    """The APL of a stream mixing workflow families: family ``f`` gets ``share_f`` of the rate;
    predicted mean latency = Σ share_f · L_f(share_f · λ) on its LLMs' part of the allocation;
    throughput = min_f T_f / share_f."""

    def __init__(self, pipelines: dict[str, AggregatePipeline], shares: dict[str, float]):
        if set(pipelines) != set(shares):
            raise ValueError(f"shares {sorted(shares)} do not match families {sorted(pipelines)}")
        self.pipelines = pipelines
        self.shares = shares

    def predict(self, alloc: Allocation, rate: float, stat: str = "mean") -> Prediction:
        lat, thr = 0.0, float("inf")
        per: dict[str, LLMPrediction] = {}
        for fam, apl in self.pipelines.items():
            share = self.shares[fam]
            sub = Allocation(
                tuple(alloc.get(m) for m in apl.stats.models), units_per_gpu=alloc.units_per_gpu
            )
            pred = apl.predict(sub, rate * share, stat)
            lat += share * pred.latency
            thr = min(thr, pred.throughput / share if share > 0 else float("inf"))
            per.update(pred.per_llm)
        return Prediction(latency=lat, throughput=thr, per_llm=per)


def pipeline_for(
    workload: str, gpu: str, units_per_gpu: int, engine: str = "vllm", **kwargs: Any
) -> AggregatePipeline | MixturePipeline:
    """The workload's pipeline: its single family's, or a :class:`MixturePipeline` over the
    families of ``rag_beam_combined`` (each arrival is either family with probability 1/2)."""
    pipes = pipelines_for(workload, gpu, units_per_gpu, engine, **kwargs)
    if len(pipes) == 1:
        return next(iter(pipes.values()))
    return MixturePipeline(pipes, {fam: 1.0 / len(pipes) for fam in pipes})


__all__ = ["AggregatePipeline", "MixturePipeline", "pipeline_for", "pipelines_for"]
