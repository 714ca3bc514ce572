"""Step 1 of the Scepsy GPU scheduler (§5, Fig. 5) for
:func:`~heuristics.allocation.scepsy.search.search`: the pruned space of fraction vectors (the
GPU budget, the TP degrees within the NVLink domain, each LLM's minimum units, the latency-ratio
order and the lower bounds) and the one pass over it that finds the best sustaining and the
best-throughput vector.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.sim.allocation.allocations import Allocation, LLMAllocation
from envs.sim.allocation.placement import nvlink_domains
from envs.sim.hardware.cluster import Topology
from heuristics.allocation.scepsy.interface import INF, PipelineModel, SearchError
from heuristics.allocation.scepsy.tables import fraction_vectors


def reference_latency(
    apl: PipelineModel,
    model: str,
    F: int,
    tps: Sequence[int],
    min_share: Mapping[int, int],
    stat: str,
) -> float:
    """Low-load latency contribution of ``model`` on whole GPUs at its smallest feasible TP."""
    for tp in tps:
        ms = min_share.get(tp)
        if ms is None or ms > F:
            continue
        alloc = Allocation((LLMAllocation(model, tp * F, tp, 1),), F)
        try:
            return float(apl.stage(alloc, model, 0.0, stat).latency)
        except KeyError as e:
            raise SearchError(
                f"latency ordering (pruning (i)) needs the low-load latency of {model!r} at "
                f"TP{tp} on whole GPUs, but it has no such profile ({e}); profile it or pass "
                f"order="
            ) from None
    raise SearchError(f"{model!r} fits no whole-GPU share at any TP in {tuple(tps)}")


def spans(vec: Sequence[int], F: int) -> list[int]:
    """GPUs each LLM spans when the units ``vec`` are packed contiguously (step 2)."""
    out, off = [], 0
    for u in vec:
        out.append((off % F + u + F - 1) // F)
        off += u
    return out


def check_arguments(
    F: Any, max_replicas: Any, rate: float, missing_profiles: str, headroom: float
) -> None:
    """:raises SearchError: for a bad ``units_per_gpu``, ``max_replicas``, ``rate``,
    ``missing_profiles`` or ``headroom`` of :func:`search`."""
    if isinstance(F, bool) or not isinstance(F, int) or F < 1:
        raise SearchError(f"units_per_gpu must be an integer >= 1, got {F!r}")
    if max_replicas is not None and (
        isinstance(max_replicas, bool) or not isinstance(max_replicas, int) or max_replicas < 1
    ):
        raise SearchError(f"max_replicas must be an integer >= 1 or None, got {max_replicas!r}")
    if not rate >= 0:
        raise SearchError(f"target rate must be >= 0, got {rate!r}")
    if missing_profiles not in ("skip", "raise"):
        raise SearchError(f"missing_profiles must be 'skip' or 'raise', got {missing_profiles!r}")
    if not 0.0 < headroom <= 1.0:
        raise SearchError(f"headroom must be in (0, 1], got {headroom!r}")


def gpu_budget(
    topology: Topology, gpus: int | Collection[tuple[int, int]] | None
) -> tuple[int, int, frozenset[tuple[int, int]] | None]:
    """``(GPUs to spend, the largest NVLink domain among them, the allowed (node, GPU) pairs or
    None)`` of :func:`search`'s ``gpus``.

    :raises SearchError: if the count is not within the topology.
    """
    domains = nvlink_domains(topology)
    allowed: frozenset[tuple[int, int]] | None = None
    if gpus is None:
        n_gpus = topology.num_gpus
        max_domain = max(len(d) for d in domains)
    elif isinstance(gpus, int):
        n_gpus = gpus
        max_domain = max(len(d) for d in domains)
    else:
        allowed = frozenset((int(n), int(g)) for n, g in gpus)
        n_gpus = len(allowed)
        # pruning (iii) over the GPUs we have: the largest NVLink domain among them
        max_domain = max(
            (sum((n, g) in allowed for g in d) for n in range(topology.num_nodes) for d in domains),
            default=0,
        )
    if not 1 <= n_gpus <= topology.num_gpus:
        raise SearchError(f"gpus={gpus!r}; the topology has {topology.num_gpus} GPUs")
    return n_gpus, max_domain, allowed


def usable_tps(
    tp_degrees: Sequence[int], tensor_parallel: bool, max_domain: int
) -> tuple[int, ...]:
    """The TP degrees searched: 1, and with ``tensor_parallel`` those within the largest
    NVLink domain (pruning (iii)).

    :raises SearchError: for a degree that is not an integer >= 1, or none usable.
    """
    for t in tp_degrees:
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise SearchError(f"tp_degrees must be integers >= 1, got {list(tp_degrees)}")
    tps = tuple(sorted({t for t in tp_degrees if t == 1 or (tensor_parallel and t <= max_domain)}))
    if not tps:
        raise SearchError(
            f"no TP degree of {list(tp_degrees)} is usable (tensor_parallel={tensor_parallel}, "
            f"largest NVLink domain {max_domain} GPUs)"
        )
    return tps


def min_units(
    models: Sequence[str],
    tps: Sequence[int],
    F: int,
    fractional: bool,
    min_share: Callable[[str, int], int | None],
    gpu: str,
    min_kv_tokens: int,
) -> dict[str, dict[int, int]]:
    """Per LLM and usable TP, the units of its smallest share (a whole GPU without
    ``fractional``).

    :raises SearchError: for an LLM that fits no share at any TP.
    """
    mins: dict[str, dict[int, int]] = {}
    for m in models:
        d: dict[int, int] = {}
        for tp in tps:
            ms = min_share(m, tp)
            if ms is None or ms > F:
                continue
            d[tp] = F if not fractional else ms
        if not d:
            raise SearchError(
                f"{m!r} fits no {'whole-GPU' if not fractional else 'GPU'} share of "
                f"{gpu} at TP {tps} (weights + {min_kv_tokens} KV tokens)"
            )
        mins[m] = d
    return mins


def latency_order(
    apl: PipelineModel,
    models: Sequence[str],
    order: Sequence[str] | None,
    F: int,
    tps: Sequence[int],
    mins: dict[str, dict[int, int]],
    stat: str,
) -> tuple[tuple[str, ...], dict[str, float]]:
    """Pruning (i): the LLMs from highest to lowest low-load latency (or ``order``), and each
    one's reference latency.

    :raises SearchError: if ``order`` does not list exactly the LLMs.
    """
    if order is None:
        ref = {m: reference_latency(apl, m, F, tps, mins[m], stat) for m in models}
        return tuple(sorted(models, key=lambda m: -ref[m])), ref  # stable: ties keep model order
    ordered = tuple(order)
    if sorted(ordered) != sorted(models):
        raise SearchError(f"order {list(ordered)} must list exactly the LLMs {list(models)}")
    ref = {}
    for m in models:  # only reported (and used by search_multi's utility)
        try:
            ref[m] = reference_latency(apl, m, F, tps, mins[m], stat)
        except SearchError:
            ref[m] = math.nan
    return ordered, ref


def lower_bounds(
    ordered: Sequence[str],
    mins: dict[str, dict[int, int]],
    step: int,
    budget: int,
    n_gpus: int,
    F: int,
) -> list[int]:
    """Per LLM in latency order, its fewest units: its own minimum rounded up to ``step``, and
    at least every later (lower-latency) LLM's.

    :raises SearchError: if the bounds exceed the budget.
    """
    own_lo = [min(tp * ms for tp, ms in mins[m].items()) for m in ordered]
    own_lo = [-(-u // step) * step for u in own_lo]
    lo = list(own_lo)
    for i in range(len(lo) - 2, -1, -1):  # a higher-latency LLM gets ≥ every later one
        lo[i] = max(lo[i], lo[i + 1])
    if sum(lo) > budget:
        need = ", ".join(f"{m} >= {u}" for m, u in zip(ordered, lo, strict=True))
        raise SearchError(
            f"budget of {budget} units ({n_gpus} GPUs x {F}) is below the minimum units of "
            f"the LLMs in latency order ({need}; sum {sum(lo)})"
        )
    return lo


@dataclass
class VectorScan:
    """What one pass over the fraction vectors found (:func:`scan_vectors`)."""

    vectors: int = 0
    feasible: int = 0
    candidates: int = 0
    best_s: tuple[float, float] | None = None
    best_s_vec: tuple[int, ...] | None = None
    best_t: tuple[float, float] | None = None
    best_t_vec: tuple[int, ...] | None = None
    #: every feasible vector with the rank key of its best parallelism, for the fallback
    pool_s: list[tuple[tuple[float, float], tuple[int, ...]]] = field(default_factory=list)
    pool_t: list[tuple[tuple[float, float], tuple[int, ...]]] = field(default_factory=list)


def scan_vectors(
    rows: Sequence[Callable[[int], tuple[Any, Any]]],
    row_cache: Sequence[dict[int, tuple[Any, Any]]],
    lo: Sequence[int],
    budget: int,
    step: int,
    fill: bool,
    F: int,
) -> VectorScan:
    """One pass over all fraction vectors: the best sustaining vector (lowest latency, then
    highest T_w) and the best by throughput (highest T_max, then latency), from each LLM's
    table row for its units and whether its share straddles a GPU boundary."""
    n_vec = n_feasible = n_cand = 0
    best_s: tuple[float, float] | None = None
    best_s_vec: tuple[int, ...] | None = None
    best_t: tuple[float, float] | None = None
    best_t_vec: tuple[int, ...] | None = None
    pool_s: list[tuple[tuple[float, float], tuple[int, ...]]] = []
    pool_t: list[tuple[tuple[float, float], tuple[int, ...]]] = []
    k = len(rows)
    for vec in fraction_vectors(lo, budget, step, fill):
        n_vec += 1
        off = 0
        lat = 0.0
        tw = INF
        tmax = INF
        lat_t = 0.0
        n_s = 1
        n_c = 1
        for i in range(k):
            u = vec[i]
            r = row_cache[i].get(u) or rows[i](u)
            o = off % F
            e = r[1] if o + u > -(-u // F) * F else r[0]
            off += u
            n_c *= e[5]
            if not n_c:
                break
            n_s *= e[2]
            lat += e[0]
            if e[1] < tw:
                tw = e[1]
            if e[3] < tmax:
                tmax = e[3]
            lat_t += e[4]
        if not n_c:
            continue
        n_feasible += 1
        n_cand += n_c
        if n_s:
            key = (lat, -tw)
            pool_s.append((key, vec))
            if best_s is None or key < best_s:
                best_s, best_s_vec = key, vec
        key_t = (-tmax, lat_t)
        pool_t.append((key_t, vec))
        if best_t is None or key_t < best_t:
            best_t, best_t_vec = key_t, vec
    return VectorScan(
        n_vec, n_feasible, n_cand, best_s, best_s_vec, best_t, best_t_vec, pool_s, pool_t
    )
