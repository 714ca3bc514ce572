"""Scepsy's GPU scheduler (§5, Fig. 5): the allocation of lowest predicted workflow latency that
sustains a target workflow rate, over GPU fractions × tensor parallelism × replicas.

Given an Aggregate LLM Pipeline (:class:`~envs.sim.allocation.scepsy.apl.AggregatePipeline`, §4) and
a target rate ``λ_w``, :func:`search` follows the three steps of Fig. 5:

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
   LLM parameters and initialize the KV cache"
   (:func:`~envs.sim.allocation.allocations.min_share_units`, the least ``tp × min share`` over the
   TP degrees allowed) — and the **upper bound** — "the scheduler subtracts the sum of the minimum
   GPU fractions of all lower-latency LLMs" from the budget.

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
   (TP degrees from :data:`~envs.sim.allocation.allocations.TP_DEGREES`).

**Objective.** Among candidates that sustain ``λ_w`` *with headroom* — ``headroom × T_w ≥
λ_w`` (predicted throughput, Eq. 2, of which only a fraction is planned on; default
:data:`DEFAULT_HEADROOM` = 0.9, the value Scepsy's prototype plans with; the paper's text gives
none, and ``headroom=1`` plans on the full profiled capacity) and a finite predicted latency —
the lowest predicted latency (Eq. 1); ties → higher ``T_w``. The chosen allocation must be
placeable by :func:`envs.sim.allocation.placement.place` (§6); otherwise the next-ranked candidate
is tried, and so on (:attr:`SearchResult.rank` says which one won).

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
against brute force in ``tests/heuristics/test_scepsy_search.py``. When the best is not placeable,
the candidates are generated lazily in rank order (a heap over vectors, merging each vector's
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
and ``predict(alloc, rate, stat)`` like :class:`~envs.sim.allocation.scepsy.apl.AggregatePipeline`
(Eq. 1 must be the sum of the stage latencies and Eq. 2 their min, which the final
``predict`` checks).

Example::

    res = search(apl, rate=8.0, topology=load_cluster("scepsy-16").topology)
    res.allocation.describe(); res.prediction.latency; res.placement.instances()
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from envs.sim.allocation.allocations import (
    DEFAULT_MIN_KV_TOKENS,
    TP_DEGREES,
    Allocation,
    LLMAllocation,
    Placement,
    min_share_units,
)
from envs.sim.allocation.placement import try_place
from envs.sim.hardware.cluster import Topology
from heuristics.allocation.scepsy.fallback import (
    close_enough,
    place_in_rank_order,
    unplaced_error,
)
from heuristics.allocation.scepsy.interface import (
    ABLATIONS,
    DEFAULT_HEADROOM,
    INF,
    PipelineModel,
    SearchError,
    SearchResult,
)
from heuristics.allocation.scepsy.pruning import (
    check_arguments,
    gpu_budget,
    latency_order,
    lower_bounds,
    min_units,
    scan_vectors,
    spans,
    usable_tps,
)
from heuristics.allocation.scepsy.tables import Cfg, LLMTable

__all__ = [
    "ABLATIONS",
    "DEFAULT_HEADROOM",
    "PipelineModel",
    "SearchError",
    "SearchResult",
    "search",
]

# --------------------------------------------------------------------------------------------


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
        :func:`~envs.sim.allocation.allocations.min_share_units` on the topology's GPU.
    :param max_replicas: at most this many replicas per LLM (e.g. an action menu's cap);
        None: no cap beyond equal shares of at least the minimum.
    :param span_rule: limit TP to the GPUs an LLM spans in the contiguous packing (step 2-3,
        the paper); False lifts it (TP still ≤ the NVLink domain).
    :param require_placement: the result must place on ``topology`` (falls back down the
        ranking otherwise); False: skip placement (used by :func:`search_multi`).
    :param keep: previous placement for :func:`~envs.sim.allocation.placement.place`.
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
    check_arguments(F, max_replicas, rate, missing_profiles, headroom)
    n_gpus, max_domain, allowed = gpu_budget(topology, gpus)
    budget = n_gpus * F
    models = tuple(apl.stats.models)
    if not models:
        raise SearchError("the pipeline has no LLMs")
    tps = usable_tps(tp_degrees, tensor_parallel, max_domain)

    def _min(m: str, tp: int) -> int | None:
        if min_share is not None:
            return min_share(m, tp)
        return min_share_units(m, topology.gpu, tp, F, memory_utilization, min_kv_tokens)

    mins = min_units(models, tps, F, fractional, _min, topology.gpu, min_kv_tokens)
    ordered, ref = latency_order(apl, models, order, F, tps, mins, stat)
    step = F if not fractional else 1
    lo = lower_bounds(ordered, mins, step, budget, n_gpus, F)

    counters: dict[str, Any] = {"stage_evaluations": 0, "unprofiled": set()}
    tables = [
        LLMTable(
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
    scan = scan_vectors(
        [t.row for t in tables], [t.rows for t in tables], lo, budget, step, fill, F
    )
    n_vec, n_feasible, n_cand = scan.vectors, scan.feasible, scan.candidates
    best_s_vec, best_t, best_t_vec = scan.best_s_vec, scan.best_t, scan.best_t_vec
    pool_s, pool_t = scan.pool_s, scan.pool_t

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

    def build(vec: Sequence[int], cfgs: Sequence[Cfg]) -> Allocation:
        by_model = {
            m: LLMAllocation(m, u, c.tp, c.replicas)
            for m, u, c in zip(ordered, vec, cfgs, strict=True)
        }
        return Allocation(tuple(by_model[m] for m in models), F)

    def lists(vec: Sequence[int], sust: bool) -> list[list[Cfg]]:
        return [
            (tables[i].entry(u, s).sust if sust else tables[i].entry(u, s).by_t)
            for i, (u, s) in enumerate(zip(vec, spans(vec, F), strict=True))
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
            placement, alloc, chosen, rank = place_in_rank_order(
                pool_s if sustaining else None,
                pool_t,
                lists,
                build,
                try_alloc,
                lambda: len(memo) >= max_placement_attempts,
                lambda: unplaced_error(
                    build(best_vec, [lst[0] for lst in lists(best_vec, sustaining)]),
                    len(memo),
                    max_placement_attempts,
                    topology,
                    keep,
                    allowed,
                ),
            )

    pred = apl.predict(alloc, rate, stat)
    lat_sum = sum(c.latency for c in chosen)
    if not close_enough(lat_sum, float(pred.latency)):
        raise SearchError(
            f"the pipeline's predict() latency {pred.latency} differs from the sum of its stage "
            f"latencies {lat_sum} for {alloc.describe()}; the search needs Eq. 1 to be that sum"
        )
    return SearchResult(
        allocation=alloc,
        prediction=pred,
        sustains=bool(headroom * pred.throughput >= rate and pred.latency < INF),
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
