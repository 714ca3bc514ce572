"""Scepsy's GPU scheduler (§5, Fig. 5): the allocation of lowest predicted workflow latency that
sustains a target workflow rate, over GPU fractions × tensor parallelism × replicas.

Given an Aggregate LLM Pipeline (:class:`~envs.sim.scepsy.apl.AggregatePipeline`, §4) and a
target rate ``λ_w``, :func:`search` follows the three steps of Fig. 5:

1. **Enumerate GPU fractions.** Every LLM ``m`` gets ``u_m`` units (``units_per_gpu`` units = one
   GPU; the paper uses 10). Prunings, as §5 step 1 lists them:

   (i) *latency-ratio ordering* — LLMs are ordered by their APL latency contribution at low load
       (profile latency at rate 0 × ``n_m / p_m``, on whole GPUs at the smallest TP the model fits
       — TP1 for every model that fits one GPU), and only vectors where a higher-latency LLM gets
       at least the units of every lower-latency one are kept ("ensuring that LLMs with a higher
       latency ratio get more GPU fractions"; ties keep the pipeline's model order);
   (ii) *contiguous allocation* — LLMs are laid out contiguously over the GPU list in that order
       (symmetry: which GPUs an LLM gets does not matter, only how many it spans, step 2);
   (iii) *TP limited to the NVLink domain* (step 3);

   plus the per-LLM **lower bound** — "the minimum number of GPU fractions required to load the
   LLM parameters and initialize the KV cache" (:func:`~envs.sim.allocation.min_share_units`,
   the least ``tp × min share`` over the TP degrees allowed) — and the **upper bound** — "the
   scheduler subtracts the sum of the minimum GPU fractions of all lower-latency LLMs" from the
   budget.

   **Budget rule: the units sum to the budget exactly** (``fill=True``). §5 counts the mappings
   of 5 LLMs to 16 GPUs × 10 fractions as ``C(16·10 + 5 − 1, 5 − 1) ≈ 29 million`` — the number
   of ways to split exactly 160 units among 5 LLMs — and §3 has the scheduler fulfil the target
   rate and then use "the remaining resources to best reduce their end-to-end latency"; GPUs
   are never left idle. ``fill=False`` searches every sum ≤ budget instead (a superset, much
   larger; for experiments).

2. **Pack fractions onto GPUs** contiguously in latency order ("1.66 GPUs are packed as a 1.0
   fraction on GPU 1 and a 0.66 fraction on GPU 2"): LLM ``m`` starting at unit offset ``o``
   spans ``⌈(o mod F + u_m) / F⌉`` GPUs.

3. **Resolve parallelism.** For each LLM, every (``tp``, ``replicas``) with ``tp × replicas``
   dividing ``u_m`` (equal shares: §5 "the tensor parallelism degree times replica count evenly
   divides the number of GPUs", in units), each share at most one GPU and at least the
   model's minimum at that TP, ``tp`` ≤ the GPUs the LLM spans and ≤ the largest NVLink domain
   (TP degrees from :data:`~envs.sim.allocation.TP_DEGREES`).

**Objective.** Among candidates that sustain ``λ_w`` *with headroom* — ``headroom × T_w ≥
λ_w`` (predicted throughput, Eq. 2, of which only a fraction is planned on; default
:data:`DEFAULT_HEADROOM` = 0.9, the value Scepsy's prototype plans with; the paper's text gives
none, and ``headroom=1`` plans on the full profiled capacity) and a finite predicted latency —
the lowest predicted latency (Eq. 1); ties → higher ``T_w``. The chosen allocation must be
placeable by :func:`envs.sim.placement.place` (§6); otherwise the next-ranked candidate is
tried, and so on (:attr:`SearchResult.rank` says which one won).

**Overload fallback** (the paper is silent; our choice). If no candidate sustains
``λ_w``, the pool cannot serve the target: the search re-plans for the highest rate the pool
sustains with headroom, ``λ' = headroom × T_max`` (``T_max``: the highest ``T_w`` of the pruned
space), i.e. among the candidates of highest ``T_w`` — the most balanced ones, no stage
saturating before the others — the lowest latency *predicted at* ``λ'``. At ``λ_w`` itself every
latency is infinite, so ranking by it cannot tell a balanced allocation from one that buys a few
% of throughput with a much slower stage. The result is flagged ``sustains=False``; its
``prediction`` and :attr:`SearchResult.planned_rate` are at ``λ'``. If no sustaining candidate
places, the placeable candidate of highest ``T_w`` is returned (``sustains=False``).

**Exact and fast.** Given a fraction vector, Eq. 1 is a sum of per-LLM terms and the constraint
``T_w = min_m T_wm ≥ λ_w`` holds iff it holds for every LLM, so the best parallelism of each LLM
depends only on its own units and span: per (LLM, units, GPUs spanned) the scheduler keeps the
lowest-latency sustaining (tp, replicas) and the highest-throughput one, from one APL stage
evaluation per distinct (tp, share, replicas). Each fraction vector then costs a few table
lookups, and the best over all vectors is exactly the optimum over the whole pruned space (every
vector × every per-LLM parallelism; :attr:`SearchResult.candidates` counts that space) — checked
against brute force in ``tests/test_scepsy_search.py``. When the best is not placeable, the
candidates are generated lazily in rank order (a heap over vectors, merging each vector's
per-LLM sorted configuration lists — k-best of a sum / of a min), so the fallback is also exact.

**Ablations (§7.4, Fig. 10).** ``fractional=False``: every share is a whole GPU
("parallelism-only", units step by whole GPUs); ``tensor_parallel=False``: TP1 only, replicas and
fractions allowed ("fractional-only"); both False: "naive Scepsy" (whole GPUs, TP1 replicas).
:data:`ABLATIONS` names them.

**Several workflows** (§5 "Scheduling multiple workflows"): :func:`search_multi` adds an outer
level giving each workflow a number of whole GPUs — a contiguous block of the GPU list, nodes and
NVLink domains kept together — searches each workflow on its block independently (placed inside
it, so the union places) and keeps the split of highest **egalitarian welfare** (the largest
minimum utility; ties → the largest sum, social welfare). Utility of a workflow with predicted
latency ``L_w`` and throughput ``T_w`` at target ``λ_w``: ``L_ref / L_w`` when it sustains
``λ_w`` (a speed-up over its low-load, one-GPU-per-LLM reference latency ``L_ref`` = Σ of the
ordering latencies; scale-free, so workflows of different lengths compare), and
``T_w / λ_w − 1 < 0`` when it does not (any split that sustains every workflow beats one that
starves any). A model used by two workflows is deployed **separately** for each (its replicas
serve one workflow's calls), since each workflow's search is independent; the combined
placement numbers the replicas of a shared model consecutively and
:attr:`MultiSearchResult.owners` says which workflow each replica serves.

Works with any pipeline object offering ``stats.models``, ``stage(alloc, model, rate, stat)``
and ``predict(alloc, rate, stat)`` like :class:`~envs.sim.scepsy.apl.AggregatePipeline`
(Eq. 1 must be the sum of the stage latencies and Eq. 2 their min, which the final
``predict`` checks).

Example::

    res = search(apl, rate=8.0, topology=load_cluster("scepsy-16").topology)
    res.allocation.describe(); res.prediction.latency; res.placement.instances()
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from envs.sim.allocation import (
    DEFAULT_MIN_KV_TOKENS,
    TP_DEGREES,
    Allocation,
    LLMAllocation,
    Placement,
    min_share_units,
)
from envs.sim.cluster import Topology
from envs.sim.placement import nvlink_domains, try_place
from heuristics.allocation.scepsy.fallback import _close, _fallback, _why
from heuristics.allocation.scepsy.interface import (
    _INF,
    ABLATIONS,
    DEFAULT_HEADROOM,
    PipelineModel,
    SearchError,
    SearchResult,
)
from heuristics.allocation.scepsy.tables import _Cfg, _LLMTable, _vectors

__all__ = [
    "ABLATIONS",
    "DEFAULT_HEADROOM",
    "PipelineModel",
    "SearchError",
    "SearchResult",
    "search",
]

# --------------------------------------------------------------------------------------------


def _reference_latency(
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


def search(
    apl: PipelineModel,
    rate: float,
    topology: Topology,
    *,
    units_per_gpu: int = 10,
    gpus: int | Collection[tuple[int, int]] | None = None,
    fill: bool = True,
    fractional: bool = True,
    tensor_parallel: bool = True,
    tp_degrees: Sequence[int] = TP_DEGREES,
    stat: str = "mean",
    order: Sequence[str] | None = None,
    min_share: Callable[[str, int], int | None] | None = None,
    memory_utilization: float = 0.9,
    min_kv_tokens: int = DEFAULT_MIN_KV_TOKENS,
    max_replicas: int | None = None,
    span_rule: bool = True,
    require_placement: bool = True,
    keep: Placement | None = None,
    missing_profiles: str = "skip",
    max_placement_attempts: int = 10_000,
    headroom: float = DEFAULT_HEADROOM,
    overload_fallback: bool = True,
) -> SearchResult:
    """Lowest-latency allocation of ``apl``'s LLMs sustaining ``rate`` workflows/s (§5).

    :param apl: the workflow's Aggregate LLM Pipeline (or anything with its interface).
    :param rate: target workflow arrival rate λ_w, workflows/s.
    :param topology: the GPU pool (GPU type, NVLink domains; placement target).
    :param units_per_gpu: fractions per GPU (the paper: 10).
    :param gpus: GPUs to spend: None = the whole topology; a count (placed anywhere on the
        topology); or the (node, GPU) pairs to use (budget = their number, placement and the
        NVLink domain limit restricted to them; :func:`search_multi` gives each workflow its own).
    :param fill: units sum to the budget exactly (the paper); False: ≤ budget.
    :param fractional: allow sub-GPU shares (False: "parallelism-only" ablation).
    :param tensor_parallel: allow TP > 1 (False: "fractional-only" ablation).
    :param tp_degrees: TP degrees to consider (also capped by the largest NVLink domain).
    :param stat: latency statistic of the profiles (``mean``, ``p90``, …).
    :param order: LLMs from highest to lowest latency, overriding the profiled ordering.
    :param min_share: ``(model, tp) -> min share units or None``; default
        :func:`~envs.sim.allocation.min_share_units` on the topology's GPU.
    :param max_replicas: at most this many replicas per LLM (e.g. an action menu's cap);
        None: no cap beyond equal shares of at least the minimum.
    :param span_rule: limit TP to the GPUs an LLM spans in the contiguous packing (step 2-3,
        the paper); False lifts it (TP still ≤ the NVLink domain).
    :param require_placement: the result must place on ``topology`` (falls back down the
        ranking otherwise); False: skip placement (used by :func:`search_multi`).
    :param keep: previous placement for :func:`~envs.sim.placement.place`.
    :param missing_profiles: ``skip`` (default; configurations without a profile are left out
        and listed in :attr:`SearchResult.unprofiled`) or ``raise``.
    :param max_placement_attempts: give up after this many unplaceable candidates.
    :param headroom: plan on this share of the predicted throughput: a candidate sustains
        ``rate`` iff ``headroom × T_w ≥ rate`` (in (0, 1]; default :data:`DEFAULT_HEADROOM`).
    :param overload_fallback: when nothing sustains ``rate``, re-plan for ``headroom × T_max``
        (module docstring); False: return the candidate of highest ``T_w`` ranked by its
        (infinite) latency at ``rate`` (the re-plan's own search uses this, so it never recurses).
    :raises SearchError: if an LLM fits nowhere, the budget is below the minimums, no fraction
        vector has a valid parallelism for every LLM, or no candidate places.
    """
    t0 = time.perf_counter()
    F = units_per_gpu
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
    budget = n_gpus * F
    models = tuple(apl.stats.models)
    if not models:
        raise SearchError("the pipeline has no LLMs")
    for t in tp_degrees:
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise SearchError(f"tp_degrees must be integers >= 1, got {list(tp_degrees)}")
    # pruning (iii): TP never beyond the largest NVLink domain
    tps = tuple(sorted({t for t in tp_degrees if t == 1 or (tensor_parallel and t <= max_domain)}))
    if not tps:
        raise SearchError(
            f"no TP degree of {list(tp_degrees)} is usable (tensor_parallel={tensor_parallel}, "
            f"largest NVLink domain {max_domain} GPUs)"
        )

    def _min(m: str, tp: int) -> int | None:
        if min_share is not None:
            return min_share(m, tp)
        return min_share_units(m, topology.gpu, tp, F, memory_utilization, min_kv_tokens)

    mins: dict[str, dict[int, int]] = {}
    for m in models:
        d: dict[int, int] = {}
        for tp in tps:
            ms = _min(m, tp)
            if ms is None or ms > F:
                continue
            d[tp] = F if not fractional else ms
        if not d:
            raise SearchError(
                f"{m!r} fits no {'whole-GPU' if not fractional else 'GPU'} share of "
                f"{topology.gpu} at TP {tps} (weights + {min_kv_tokens} KV tokens)"
            )
        mins[m] = d

    # pruning (i): latency-ratio order
    if order is None:
        ref = {m: _reference_latency(apl, m, F, tps, mins[m], stat) for m in models}
        ordered = tuple(sorted(models, key=lambda m: -ref[m]))  # stable: ties keep model order
    else:
        ordered = tuple(order)
        if sorted(ordered) != sorted(models):
            raise SearchError(f"order {list(ordered)} must list exactly the LLMs {list(models)}")
        ref = {}
        for m in models:  # only reported (and used by search_multi's utility)
            try:
                ref[m] = _reference_latency(apl, m, F, tps, mins[m], stat)
            except SearchError:
                ref[m] = math.nan

    step = F if not fractional else 1
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

    counters: dict[str, Any] = {"stage_evaluations": 0, "unprofiled": set()}
    tables = [
        _LLMTable(
            m,
            apl,
            rate,
            stat,
            F,
            tps,
            mins[m],
            fractional,
            missing_profiles,
            counters,
            span_rule,
            max_replicas,
            headroom,
        )
        for m in ordered
    ]
    k = len(ordered)

    # ---- one pass over all fraction vectors: best sustaining + best throughput -------------
    n_vec = n_feasible = n_cand = 0
    best_s: tuple[float, float] | None = None
    best_s_vec: tuple[int, ...] | None = None
    best_t: tuple[float, float] | None = None
    best_t_vec: tuple[int, ...] | None = None
    rows = [t.row for t in tables]
    row_cache: list[dict[int, tuple[Any, Any]]] = [t.rows for t in tables]
    # every feasible vector with the rank key of its best parallelism, for the fallback
    pool_s: list[tuple[tuple[float, float], tuple[int, ...]]] = []
    pool_t: list[tuple[tuple[float, float], tuple[int, ...]]] = []
    for vec in _vectors(lo, budget, step, fill):
        n_vec += 1
        off = 0
        lat = 0.0
        tw = _INF
        tmax = _INF
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

    if best_t_vec is None:
        raise SearchError(
            f"none of the {n_vec} fraction vectors over {budget} units gives every LLM a valid "
            f"(tp, replicas) (equal shares <= 1 GPU and >= the minimum, tp <= GPUs spanned and "
            f"<= NVLink domain {max_domain}); LLMs in latency order {list(ordered)}"
            + (
                f"; skipped unprofiled {sorted(counters['unprofiled'])}"
                if counters["unprofiled"]
                else ""
            )
        )
    sustaining = best_s_vec is not None
    if not sustaining and overload_fallback and best_t is not None and -best_t[0] > 0:
        t_max = -best_t[0]
        # every candidate of T_w = T_max sustains λ' (rounding kept on the safe side)
        planned = headroom * t_max * (1.0 - 1e-12)
        res = search(
            apl,
            planned,
            topology,
            units_per_gpu=units_per_gpu,
            gpus=gpus,
            fill=fill,
            fractional=fractional,
            tensor_parallel=tensor_parallel,
            tp_degrees=tp_degrees,
            stat=stat,
            order=order,
            min_share=min_share,
            memory_utilization=memory_utilization,
            min_kv_tokens=min_kv_tokens,
            max_replicas=max_replicas,
            span_rule=span_rule,
            require_placement=require_placement,
            keep=keep,
            missing_profiles=missing_profiles,
            max_placement_attempts=max_placement_attempts,
            headroom=headroom,
            overload_fallback=False,
        )
        return dataclasses.replace(
            res,
            rate=float(rate),
            sustains=False,
            planned_rate=planned,
            seconds=time.perf_counter() - t0,
            stage_evaluations=counters["stage_evaluations"] + res.stage_evaluations,
        )

    def spans(vec: Sequence[int]) -> list[int]:
        out, off = [], 0
        for u in vec:
            out.append((off % F + u + F - 1) // F)
            off += u
        return out

    def build(vec: Sequence[int], cfgs: Sequence[_Cfg]) -> Allocation:
        by_model = {
            m: LLMAllocation(m, u, c.tp, c.replicas)
            for m, u, c in zip(ordered, vec, cfgs, strict=True)
        }
        return Allocation(tuple(by_model[m] for m in models), F)

    def lists(vec: Sequence[int], sust: bool) -> list[list[_Cfg]]:
        return [
            (tables[i].entry(u, s).sust if sust else tables[i].entry(u, s).by_t)
            for i, (u, s) in enumerate(zip(vec, spans(vec), strict=True))
        ]

    best_vec = best_s_vec if sustaining else best_t_vec
    assert best_vec is not None
    chosen = [lst[0] for lst in lists(best_vec, sustaining)]
    alloc = build(best_vec, chosen)
    memo: dict[Allocation, Placement | None] = {}  # placement attempts
    unplaceable: list[str] = []

    def try_alloc(a: Allocation) -> Placement | None:
        if a not in memo:
            memo[a] = try_place(a, topology, keep=keep, gpus=allowed)
            if memo[a] is None and len(unplaceable) < 10:
                unplaceable.append(a.describe())
        return memo[a]

    rank = 1
    placement: Placement | None = None
    if require_placement:
        placement = try_alloc(alloc)
        if placement is None:
            # rank order: sustaining candidates by latency, then (none of them placing) every
            # candidate by throughput
            phases = [(pool_s, True), (pool_t, False)] if sustaining else [(pool_t, False)]
            offset = 0
            found = None
            for pool, mode in phases:
                found, pops = _fallback(
                    pool, lists, build, mode, try_alloc, lambda: len(memo) >= max_placement_attempts
                )
                if found is not None:
                    placement, alloc, chosen, r = found
                    rank = offset + r
                    break
                offset += pops
            if found is None:
                best = build(best_vec, [lst[0] for lst in lists(best_vec, sustaining)])
                raise SearchError(
                    f"no candidate of the pruned space places on the topology after {len(memo)} "
                    f"placement attempts (max_placement_attempts={max_placement_attempts}); the "
                    f"best, {best.describe()}, fails: {_why(best, topology, keep, allowed)}"
                )

    pred = apl.predict(alloc, rate, stat)
    lat_sum = sum(c.latency for c in chosen)
    if not _close(lat_sum, float(pred.latency)):
        raise SearchError(
            f"the pipeline's predict() latency {pred.latency} differs from the sum of its stage "
            f"latencies {lat_sum} for {alloc.describe()}; the search needs Eq. 1 to be that sum"
        )
    return SearchResult(
        allocation=alloc,
        prediction=pred,
        sustains=bool(headroom * pred.throughput >= rate and pred.latency < _INF),
        placement=placement,
        rate=float(rate),
        order=ordered,
        reference_latency=ref,
        budget_units=budget,
        vectors=n_vec,
        feasible_vectors=n_feasible,
        candidates=n_cand,
        stage_evaluations=counters["stage_evaluations"],
        placements_tried=len(memo),
        rank=rank,
        unplaceable=tuple(unplaceable),
        unprofiled=tuple(sorted(counters["unprofiled"])),
        seconds=time.perf_counter() - t0,
        fractional=fractional,
        tensor_parallel=tensor_parallel,
        headroom=float(headroom),
    )
