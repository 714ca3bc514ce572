"""Profile sets and their disk cache (Scepsy §4 step 3): every feasible (model, TP, share) of a
workload profiled by :func:`~envs.sim.allocation.scepsy.sweep.profile_llm`, each profile cached as
JSON under a key of its whole configuration (:func:`profile_key`, including
:data:`PROFILE_VERSION`), with a progress bar.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envs.sim.allocation.allocations import TP_DEGREES, min_share_units
from envs.sim.allocation.scepsy.apl import LLMProfile, ProfileSet
from envs.sim.allocation.scepsy.projection import Projection, project_trace
from envs.sim.allocation.scepsy.replay import NEIGHBOURS
from envs.sim.allocation.scepsy.sweep import ReplayConfig, profile_llm
from envs.sim.allocation.scepsy.tracing import Trace, trace_workload
from envs.sim.core.simulation import LatencyCache
from envs.sim.hardware.catalog import get_model
from envs.sim.latency.efficiency import (
    ROOFLINE_CALIBRATION_VARIANT,
    resolve_calibration_variant,
)

#: Bump when the profiling method changes: invalidates every cached profile.
#: 2: T_m read at the knee (>= 99 % completion, p50 <= 2x unloaded).
#: 3: completion = offered window calls finished by the end of the replay (not in the window).
#: (Sub-GPU shares' keys also carry their ``neighbour`` mode unless ``static``: MPS
#: partitions re-profile those shares only; whole-GPU profiles keep their keys.)
PROFILE_VERSION = 3


# -- profile sets and the cache -------------------------------------------------------------
def default_cache_dir() -> Path:
    """``$SERVEGYM_CACHE/scepsy-profiles``, else ``~/.cache/servegym/scepsy-profiles``."""
    root = os.environ.get("SERVEGYM_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "servegym"
    return base / "scepsy-profiles"


def profile_key(
    model: str,
    tp: int,
    fraction: float,
    gpu: str,
    engine: str,
    traces: Sequence[Trace],
    config: ReplayConfig,
    neighbour: str = "busy",
    calibration_variant: str | None = None,
) -> str:
    """Hash of everything a profile depends on (see the module docstring). A sub-GPU share's
    ``neighbour`` is part of it unless ``static`` (whose keys are those before MPS partitions);
    so is the per-op calibration variant (``calibration_variant``, ``None``: the one in force,
    :func:`envs.sim.latency.efficiency.resolve_calibration_variant`) unless it is ``"roofline"``,
    whose keys are those made before calibration variants existed."""
    desc: dict[str, Any] = {
        "version": PROFILE_VERSION,
        "model": model,
        "tp": tp,
        "fraction": round(float(fraction), 6),
        "gpu": gpu,
        "engine": engine,
        "workloads": [
            {"name": t.name, "source": dict(t.source), "content": t.fingerprint} for t in traces
        ],
        "replay": asdict(config),
    }
    if fraction < 1 and neighbour != "static":
        desc["neighbour"] = neighbour
    variant = resolve_calibration_variant(calibration_variant)
    if variant != ROOFLINE_CALIBRATION_VARIANT:
        desc["latency_calibration"] = variant
    blob = json.dumps(desc, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _profile_from_json(d: Mapping[str, Any]) -> LLMProfile:
    return ProfileSet.from_json([dict(d)]).profiles.popitem()[1]


def _configs(
    models: Sequence[str], tps: Sequence[int], gpu: str, units_per_gpu: int
) -> list[tuple[str, int, float]]:
    out: list[tuple[str, int, float]] = []
    for m in models:
        for tp in tps:
            need = min_share_units(m, gpu, tp, units_per_gpu)
            if need is None:
                continue
            out.extend((m, tp, k / units_per_gpu) for k in range(need, units_per_gpu + 1))
    return out


@dataclass
class _Traces:
    traces: list[Trace] = field(default_factory=list)

    def models(self) -> list[str]:
        return sorted({m for t in self.traces for m in t.models})

    def calling(self, model: str) -> list[Trace]:
        return [t for t in self.traces if model in t.models]


def _as_traces(
    workloads: str | Trace | Iterable[str | Trace],
    gpu: str,
    engine: str,
    count: int | None,
    seed: int,
    cfg: ReplayConfig,
    calibration_variant: str,
) -> list[Trace]:
    items = [workloads] if isinstance(workloads, (str, Trace)) else list(workloads)
    if not items:
        raise ValueError("no workload given to profile")
    out = []
    for w in items:
        if isinstance(w, Trace):
            took = (w.gpu, w.engine, w.prefix_cache_blocks, w.prefix_block_tokens)
            want = (gpu, engine, cfg.prefix_cache_blocks, cfg.prefix_block_tokens)
            if took != want:
                raise ValueError(
                    f"trace {w.name!r} was taken with (gpu, engine, prefix cache, block tokens) "
                    f"= {took}, but the profiles are for {want}"
                )
            out.append(w)
        else:
            out.append(
                trace_workload(
                    w,
                    count,
                    seed,
                    gpu=gpu,
                    engine=engine,
                    prefix_cache_blocks=cfg.prefix_cache_blocks,
                    prefix_block_tokens=cfg.prefix_block_tokens,
                    calibration_variant=calibration_variant,
                )
            )
    return out


def profile_set(
    workloads: str | Trace | Iterable[str | Trace],
    models: Sequence[str] | None = None,
    tps: Sequence[int] = TP_DEGREES,
    fractions: Sequence[float] | None = None,
    gpu: str = "rtx-a6000",
    units_per_gpu: int = 4,
    *,
    engine: str = "vllm",
    count: int | None = None,
    seed: int = 0,
    config: ReplayConfig | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    progress: bool = True,
    jobs: int = 1,
    neighbour: str = "busy",
    calibration_variant: str | None = None,
) -> ProfileSet:
    """Profiles of every feasible (model, TP, GPU share) of the workloads' LLMs.

    Feasible: ``tp`` in ``tps`` splits the model's heads and a share of ``k / units_per_gpu``
    holds the weights + KV (:func:`~envs.sim.allocation.allocations.min_share_units`); shares run
    from that minimum to a whole GPU (or only those in ``fractions``). Each LLM replays the
    projections of every given workload that calls it.

    :param workloads: workload name(s) (generated with ``count``/``seed`` and traced) or traces.
    :param models: LLMs to profile (default: all the workloads call).
    :param cache_dir: profile cache (default :func:`default_cache_dir`).
    :param use_cache: read and write the cache.
    :param progress: show a tqdm progress bar.
    :param jobs: worker processes (configs are independent; 1 = in-process).
    :param neighbour: what shares the rest of a sub-GPU share's GPUs (:data:`NEIGHBOURS`).
    :param calibration_variant: per-op calibration the workloads are traced and replayed with
        (``None``: the one in force,
        :func:`envs.sim.latency.efficiency.resolve_calibration_variant`).
    :raises ValueError: for an empty workload, a requested model no workload calls or an
        unknown ``neighbour``.
    """
    if neighbour not in NEIGHBOURS:
        raise ValueError(f"neighbour must be one of {NEIGHBOURS}, got {neighbour!r}")
    if isinstance(units_per_gpu, bool) or not isinstance(units_per_gpu, int) or units_per_gpu < 1:
        raise ValueError(f"units_per_gpu must be an integer >= 1, got {units_per_gpu!r}")
    cfg = config or ReplayConfig()
    variant = resolve_calibration_variant(calibration_variant)
    tr = _Traces(_as_traces(workloads, gpu, engine, count, seed, cfg, variant))
    have = tr.models()
    models = list(dict.fromkeys(have if models is None else models))
    for m in models:
        get_model(m)
        if m not in have:
            raise ValueError(
                f"model {m!r} is absent from workloads {[t.name for t in tr.traces]}; they call "
                f"{have}"
            )
    for tp in tps:
        if tp not in TP_DEGREES:
            raise ValueError(f"tp {tp} is not one of the profiled degrees {TP_DEGREES}")
    todo = _configs(models, tps, gpu, units_per_gpu)
    if fractions is not None:
        want = {round(float(f), 6) for f in fractions}
        todo = [c for c in todo if round(c[2], 6) in want]
    if not todo:
        raise ValueError(f"no feasible (model, tp, share) for {models} at tps {list(tps)} on {gpu}")
    cdir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    out = ProfileSet()
    missing: list[tuple[str, int, float, str]] = []
    for m, tp, f in todo:
        key = profile_key(m, tp, f, gpu, engine, tr.calling(m), cfg, neighbour, variant)
        path = cdir / f"{key}.json"
        if use_cache and path.exists():
            out.add(_profile_from_json(json.loads(path.read_text())))
        else:
            missing.append((m, tp, f, key))
    # All cached: nothing to wait for, so no bar (it would print on every env reset).
    bar = _progress(len(todo), len(todo) - len(missing), progress and bool(missing))
    projections = {
        m: [p for t in tr.calling(m) for p in project_trace(t, m, keep_gaps=cfg.keep_gaps)]
        for m in {c[0] for c in missing}
    }
    args = [
        (m, tp, f, projections[m], gpu, engine, cfg, neighbour, variant) for m, tp, f, _ in missing
    ]
    results: Iterable[LLMProfile]
    if jobs > 1 and len(args) > 1:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=jobs)
        results = pool.map(_profile_job, args)
    else:
        pool = None
        cache = LatencyCache(calibration_variant=variant)
        results = (_profile_job(a, cache) for a in args)
    try:
        for (m, tp, f, key), prof in zip(missing, results, strict=True):
            out.add(prof)
            if use_cache:
                cdir.mkdir(parents=True, exist_ok=True)
                tmp = cdir / f"{key}.json.tmp"
                tmp.write_text(json.dumps(asdict(prof)))
                tmp.replace(cdir / f"{key}.json")
            bar.set_postfix_str(f"{m} TP{tp} @ {f:g}", refresh=False)
            bar.update(1)
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown()
    return out


def _profile_job(
    args: tuple[str, int, float, list[Projection], str, str, ReplayConfig, str, str],
    cache: LatencyCache | None = None,
) -> LLMProfile:
    m, tp, f, projections, gpu, engine, cfg, neighbour, variant = args
    if cache is None:
        cache = LatencyCache(calibration_variant=variant)
    return profile_llm(
        m, tp, f, projections, gpu, engine, config=cfg, latency_cache=cache, neighbour=neighbour
    )


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, done: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    from envs.sim.core.progress import progress

    return progress(total=total, initial=done, desc="scepsy profiles", unit="profile")
