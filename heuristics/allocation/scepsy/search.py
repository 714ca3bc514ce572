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

**Overload fallback** (the paper is silent; our choice, issue 29). If no candidate sustains
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
import heapq
import math
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from envs.sim.allocation import (
    DEFAULT_MIN_KV_TOKENS,
    TP_DEGREES,
    Allocation,
    LLMAllocation,
    Placement,
    ReplicaPlacement,
    min_share_units,
)
from envs.sim.cluster import Topology
from envs.sim.placement import PlacementError, nvlink_domains, place, try_place

__all__ = [
    "ABLATIONS",
    "DEFAULT_HEADROOM",
    "MultiSearchResult",
    "PipelineModel",
    "SearchError",
    "SearchResult",
    "WorkflowChoice",
    "gpu_order",
    "search",
    "search_multi",
    "utility",
]

#: Fig. 10 ablation name -> (fractional, tensor_parallel).
ABLATIONS: dict[str, tuple[bool, bool]] = {
    "scepsy": (True, True),
    "parallelism-only": (False, True),
    "fractional-only": (True, False),
    "naive": (False, False),
}

#: Share of the APL's predicted throughput the search plans on (Scepsy's prototype: 0.9).
DEFAULT_HEADROOM = 0.9

_INF = math.inf
_NO_SPAN_LIMIT = 1 << 30


class SearchError(ValueError):
    """The search space is empty (names the LLM or bound responsible) or no candidate places."""


class _StagePrediction(Protocol):
    latency: float
    throughput: float


class _Prediction(Protocol):
    latency: float
    throughput: float


class PipelineModel(Protocol):
    """What the search needs from an Aggregate LLM Pipeline (§4)."""

    stats: Any  # .models: the workflow's LLMs; .name: the workflow's name

    def stage(
        self, alloc: Allocation, model: str, rate: float, stat: str = ...
    ) -> _StagePrediction: ...

    def predict(self, alloc: Allocation, rate: float, stat: str = ...) -> _Prediction: ...


@dataclass(frozen=True)
class SearchResult:
    """Outcome of :func:`search`.

    :param allocation: the chosen allocation (LLMs in the pipeline's model order).
    :param prediction: the APL's prediction of it at ``rate``.
    :param sustains: whether ``headroom ×`` its predicted throughput ``T_w`` reaches ``rate``
        with a finite predicted latency.
    :param placement: where its replicas run (None when ``require_placement=False``).
    :param rate: target workflow rate.
    :param order: LLMs from highest to lowest low-load latency contribution (pruning (i)).
    :param reference_latency: those contributions, seconds per workflow (NaN for a model
        without a whole-GPU profile when ``order`` was given).
    :param budget_units: units searched over.
    :param vectors: fraction vectors enumerated after pruning.
    :param feasible_vectors: of which every LLM has at least one valid parallelism.
    :param candidates: allocations in the pruned space (Σ over vectors of Π per-LLM choices).
    :param stage_evaluations: APL stage predictions computed.
    :param placements_tried: distinct allocations tried on the placer (1 when the best placed).
    :param rank: rank of the chosen candidate (1 = the best predicted one; sustaining
        candidates by latency first, then — if none of those places — all by throughput).
    :param unplaceable: the better-ranked candidates that did not place (first 10).
    :param unprofiled: (model, tp, share units) skipped for lack of a profile.
    :param seconds: wall time of the search.
    :param fractional: ablation flag used.
    :param tensor_parallel: ablation flag used.
    :param headroom: share of ``T_w`` planned on.
    :param planned_rate: the rate ``prediction`` is for: ``rate``, or under overload the
        fallback's ``headroom × T_max`` (module docstring).
    """

    allocation: Allocation
    prediction: Any
    sustains: bool
    placement: Placement | None
    rate: float
    order: tuple[str, ...]
    reference_latency: dict[str, float]
    budget_units: int
    vectors: int
    feasible_vectors: int
    candidates: int
    stage_evaluations: int
    placements_tried: int
    rank: int
    unplaceable: tuple[str, ...]
    unprofiled: tuple[tuple[str, int, int], ...]
    seconds: float
    fractional: bool = True
    tensor_parallel: bool = True
    headroom: float = 1.0
    planned_rate: float = math.nan

    def __post_init__(self) -> None:
        if math.isnan(self.planned_rate):
            object.__setattr__(self, "planned_rate", float(self.rate))

    @property
    def latency(self) -> float:
        return float(self.prediction.latency)

    @property
    def throughput(self) -> float:
        return float(self.prediction.throughput)

    def describe(self) -> str:
        ok = "sustains" if self.sustains else "DOES NOT sustain"
        if self.planned_rate != self.rate:
            ok += f"; planned for {self.planned_rate:.3g}/s"
        return (
            f"{self.allocation.describe()} | L={self.latency:.3f}s T={self.throughput:.2f}/s "
            f"({ok} {self.rate:g}/s, headroom {self.headroom:g}) | {self.vectors} vectors, "
            f"{self.candidates} candidates, rank {self.rank}, {self.seconds * 1e3:.0f} ms"
        )


# --------------------------------------------------------------------------------------------
# per-LLM tables


@dataclass
class _Cfg:
    tp: int
    replicas: int
    latency: float
    throughput: float


@dataclass
class _Entry:
    """Valid parallelisms of one LLM at some units and span, best first."""

    configs: list[_Cfg]  # all valid
    sust: list[_Cfg]  # sustaining, by (latency, -throughput)
    by_t: list[_Cfg]  # all, by (-throughput, latency)


class _LLMTable:
    """Parallelism choices of one LLM per (units, GPUs spanned)."""

    def __init__(
        self,
        model: str,
        apl: PipelineModel,
        rate: float,
        stat: str,
        F: int,
        tps: Sequence[int],
        min_share: Mapping[int, int],
        fractional: bool,
        missing: str,
        counters: dict[str, Any],
        span_rule: bool = True,
        max_replicas: int | None = None,
        headroom: float = 1.0,
    ):
        self.model = model
        self.headroom = headroom
        self.apl, self.rate, self.stat, self.F = apl, rate, stat, F
        self.tps = tuple(tps)
        self.min_share = dict(min_share)
        self.fractional = fractional
        self.missing = missing
        self.counters = counters
        self.span_rule = span_rule
        self.max_replicas = _NO_SPAN_LIMIT if max_replicas is None else max_replicas
        self._stage: dict[tuple[int, int, int], _Cfg | None] = {}
        self._entries: dict[tuple[int, int], _Entry] = {}
        self._configs: dict[int, list[_Cfg]] = {}
        # fast rows for the enumeration: units -> (entry at span s0, entry at s0 + 1)
        self.rows: dict[int, tuple[_Entry, _Entry]] = {}

    def stage(self, tp: int, share: int, replicas: int) -> _Cfg | None:
        key = (tp, share, replicas)
        if key in self._stage:
            return self._stage[key]
        units = tp * share * replicas
        alloc = Allocation((LLMAllocation(self.model, units, tp, replicas),), self.F)
        try:
            s = self.apl.stage(alloc, self.model, self.rate, self.stat)
        except KeyError:
            if self.missing == "raise":
                raise
            self.counters["unprofiled"].add((self.model, tp, share))
            cfg = None
        else:
            self.counters["stage_evaluations"] += 1
            cfg = _Cfg(tp, replicas, float(s.latency), float(s.throughput))
        self._stage[key] = cfg
        return cfg

    def configs(self, units: int) -> list[_Cfg]:
        """Every valid (tp, replicas) at ``units`` (any span)."""
        out = []
        F = self.F
        for tp in self.tps:
            ms = self.min_share.get(tp)
            if ms is None or units % tp:
                continue
            per_tp = units // tp  # = share × replicas
            for share in range(min(F, per_tp), ms - 1, -1):
                if self.fractional is False and share != F:
                    continue
                if per_tp % share or per_tp // share > self.max_replicas:
                    continue
                cfg = self.stage(tp, share, per_tp // share)
                if cfg is not None:
                    out.append(cfg)
        return out

    def entry(self, units: int, span: int) -> _Entry:
        if not self.span_rule:
            span = _NO_SPAN_LIMIT
        key = (units, span)
        e = self._entries.get(key)
        if e is None:
            cfgs = [c for c in self.configs_cached(units) if c.tp <= span]
            sust = sorted(
                (c for c in cfgs if self.headroom * c.throughput >= self.rate and c.latency < _INF),
                key=lambda c: (c.latency, -c.throughput, c.tp, c.replicas),
            )
            by_t = sorted(cfgs, key=lambda c: (-c.throughput, c.latency, c.tp, c.replicas))
            e = self._entries[key] = _Entry(cfgs, sust, by_t)
        return e

    def configs_cached(self, units: int) -> list[_Cfg]:
        cfgs = self._configs.get(units)
        if cfgs is None:
            cfgs = self._configs[units] = self.configs(units)
        return cfgs

    def row(self, units: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """(summary at span ⌈u/F⌉, summary at span ⌈u/F⌉+1); a summary is (best sustaining
        latency or inf, its throughput, #sustaining, max throughput, its latency, #valid)."""
        r = self.rows.get(units)
        if r is None:
            s0 = -(-units // self.F)
            out = []
            for span in (s0, s0 + 1):
                e = self.entry(units, span)
                b = e.sust[0] if e.sust else None
                t = e.by_t[0] if e.by_t else None
                out.append(
                    (
                        b.latency if b else _INF,
                        b.throughput if b else -_INF,
                        len(e.sust),
                        t.throughput if t else -_INF,
                        t.latency if t else _INF,
                        len(e.configs),
                    )
                )
            r = self.rows[units] = (out[0], out[1])  # type: ignore[assignment]
        return r  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# enumeration of fraction vectors (pruning (i) + bounds + budget rule)


def _vectors(lo: Sequence[int], budget: int, step: int, fill: bool) -> Iterator[tuple[int, ...]]:
    """Unit vectors in latency order: u[0] ≥ u[1] ≥ … , u[i] ≥ lo[i] (lo already a suffix max,
    multiples of ``step``), Σ = budget (``fill``) or ≤ budget."""
    k = len(lo)
    # rest_lo[i] = Σ_{j>i} lo[j]: what the lower-latency LLMs need at least (upper bound rule)
    rest_lo = [sum(lo[i + 1 :]) for i in range(k)]
    vec = [0] * k

    def rec(i: int, remaining: int, cap: int) -> Iterator[tuple[int, ...]]:
        hi = min(cap, remaining - rest_lo[i])
        if i == k - 1:
            if fill:
                if lo[i] <= remaining <= cap:
                    vec[i] = remaining
                    yield tuple(vec)
                return
            u = lo[i]
            while u <= hi:
                vec[i] = u
                yield tuple(vec)
                u += step
            return
        u_min = lo[i]
        if fill:  # the k - i - 1 later LLMs get at most u each
            need = -(-remaining // (k - i))
            need = -(-need // step) * step
            u_min = max(u_min, need)
        u = hi - (hi - u_min) % step if hi >= u_min else u_min - step
        while u >= u_min:
            vec[i] = u
            yield from rec(i + 1, remaining - u, u)
            u -= step

    if k == 0:
        return
    yield from rec(0, budget, budget)


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
        (infinite) latency at ``rate``, the rule before issue 29.
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


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _fallback(
    pool: list[tuple[tuple[float, float], tuple[int, ...]]],
    lists: Callable[[Sequence[int], bool], list[list[_Cfg]]],
    build: Callable[[Sequence[int], Sequence[_Cfg]], Allocation],
    sustaining: bool,
    try_alloc: Callable[[Allocation], Placement | None],
    exhausted: Callable[[], bool],
) -> tuple[tuple[Placement, Allocation, list[_Cfg], int] | None, int]:
    """Candidates in rank order (lazily; k-best over a heap of vectors) until one places:
    ((placement, allocation, its configurations, rank) or None, candidates popped).

    ``pool`` holds every vector to consider with the rank key of its best parallelism: (latency
    sum, −T_w) among sustaining candidates (``sustaining``), else (−T_w, latency sum); ties →
    enumeration order, as in :func:`search`'s pass. The primary key is monotone when one LLM
    moves to its next configuration (lists sorted by it), so popping the heap and pushing each
    popped candidate's successors (one LLM one step down, at positions ≥ the last one moved, so
    every combination is generated once) yields candidates in exact rank order. ``try_alloc``
    memoises placement attempts; ``exhausted`` says when the attempt budget is spent.
    """

    def key(ls: list[list[_Cfg]], idx: Sequence[int]) -> tuple[float, float]:
        lat = 0.0
        tw = _INF
        for i, j in enumerate(idx):
            c = ls[i][j]
            lat += c.latency
            tw = min(tw, c.throughput)
        return (lat, -tw) if sustaining else (-tw, lat)

    # (key, vector id, configuration indices or () for "best, lists not built yet", last moved)
    heap: list[tuple[tuple[float, float], int, tuple[int, ...], int]] = [
        (kv, vid, (), 0) for vid, (kv, _) in enumerate(pool)
    ]
    heapq.heapify(heap)
    built: dict[int, list[list[_Cfg]]] = {}
    rank = 0
    while heap and not exhausted():
        _, vid, idx, last = heapq.heappop(heap)
        vec = pool[vid][1]
        ls = built.get(vid)
        if ls is None:
            ls = built[vid] = lists(vec, sustaining)
        if not idx:
            idx = (0,) * len(ls)
        rank += 1
        cfgs = [ls[i][j] for i, j in enumerate(idx)]
        alloc = build(vec, cfgs)
        p = try_alloc(alloc)
        if p is not None:
            return (p, alloc, cfgs, rank), rank
        for pos in range(last, len(idx)):
            if idx[pos] + 1 < len(ls[pos]):
                nxt = idx[:pos] + (idx[pos] + 1,) + idx[pos + 1 :]
                heapq.heappush(heap, (key(ls, nxt), vid, nxt, pos))
    return None, rank


def _why(
    alloc: Allocation,
    topology: Topology,
    keep: Placement | None,
    allowed: frozenset[tuple[int, int]] | None,
) -> str:
    """The placer's reason ``alloc`` does not place."""
    try:
        place(alloc, topology, keep=keep, gpus=allowed)
    except PlacementError as e:
        return str(e)
    return "(it places now)"


# --------------------------------------------------------------------------------------------
# several workflows


@dataclass(frozen=True)
class WorkflowChoice:
    """One workflow's share of a multi-workflow allocation.

    :param name: workflow name (``stats.name``).
    :param rate: its target rate.
    :param gpus: the (node, GPU) pairs it was given.
    :param result: its search on them (placement restricted to them).
    :param utility: its utility (module docstring).
    """

    name: str
    rate: float
    gpus: tuple[tuple[int, int], ...]
    result: SearchResult
    utility: float


@dataclass(frozen=True)
class MultiSearchResult:
    """Outcome of :func:`search_multi`.

    :param workflows: per-workflow choice of the winning split.
    :param allocation: all workflows' LLMs, workflow by workflow (a model of two workflows
        appears twice: separate deployments).
    :param placement: every replica; a model shared by workflows has its replicas numbered
        consecutively across them, so instance names stay unique.
    :param owners: workflow index of each ``placement.replicas`` entry.
    :param welfare: egalitarian welfare (min utility) of the split.
    :param splits: GPU splits with an allocation for every workflow.
    :param searches: per-workflow searches run.
    :param seconds: wall time.
    """

    workflows: tuple[WorkflowChoice, ...]
    allocation: Allocation
    placement: Placement
    owners: tuple[int, ...]
    welfare: float
    splits: int
    searches: int
    seconds: float

    def describe(self) -> str:
        return " || ".join(
            f"{w.name} @ {w.rate:g}/s on {len(w.gpus)} GPUs (u={w.utility:.3f}): "
            f"{w.result.describe()}"
            for w in self.workflows
        )


def utility(res: SearchResult) -> float:
    """A workflow's utility for :func:`search_multi`: ``L_ref / L_w`` if it sustains its rate
    (``L_ref``: Σ of its LLMs' low-load whole-GPU latency contributions), else
    ``T_w / λ_w − 1`` (negative: any sustaining workflow has a higher utility)."""
    if res.sustains:
        lref = sum(res.reference_latency.values())
        return lref / res.latency if res.latency > 0 else _INF
    return res.throughput / res.rate - 1.0 if res.rate > 0 else 0.0


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Ways to give ``parts`` workflows ≥ 1 GPU each, ``total`` in all."""
    if parts == 1:
        yield (total,)
        return
    for g in range(1, total - parts + 2):
        for rest in _compositions(total - g, parts - 1):
            yield (g, *rest)


def gpu_order(topology: Topology) -> tuple[tuple[int, int], ...]:
    """The cluster's GPUs node by node, each node's NVLink domains kept together — the list
    :func:`search_multi` cuts into contiguous per-workflow blocks."""
    return tuple(
        (n, g) for n in range(topology.num_nodes) for d in nvlink_domains(topology) for g in d
    )


def search_multi(
    workflows: Sequence[tuple[PipelineModel, float]],
    topology: Topology,
    *,
    units_per_gpu: int = 10,
    keep: Placement | None = None,
    **kwargs: Any,
) -> MultiSearchResult:
    """Split the GPUs between workflows for the highest egalitarian welfare (§5 "Scheduling
    multiple workflows"; utility: :func:`utility`).

    The outer level enumerates how many whole GPUs each workflow gets (≥ 1 each, all GPUs
    used); workflow ``w`` gets the next contiguous block of :func:`gpu_order` (workflows in the
    given order; blocks follow nodes and NVLink domains, so at most one domain per boundary is
    cut). "For each workflow and its assigned GPUs, the GPU scheduler searches for the
    per-workflow allocation independently": :func:`search` with ``gpus=`` that block, so each
    result also places inside its block and the union is a valid placement. Searches are
    cached per (workflow, block). The split of highest (min utility, sum utility) wins; a
    split where some workflow has no allocation on its block is skipped.

    :param workflows: (pipeline, target rate) per workflow.
    :param keep: previous placement: each workflow keeps matching replicas inside its block
        (a model shared by workflows matches either's old replicas).
    :param kwargs: passed to every :func:`search` (ablation flags, ``stat``, …).
    :raises SearchError: if no split gives every workflow an allocation.
    """
    t0 = time.perf_counter()
    W = len(workflows)
    if W == 0:
        raise SearchError("no workflows to schedule")
    order = gpu_order(topology)
    G = len(order)
    if W > G:
        raise SearchError(f"{W} workflows need at least one GPU each; the topology has {G}")
    names = [
        str(getattr(apl.stats, "name", f"workflow{w}")) for w, (apl, _) in enumerate(workflows)
    ]
    cache: dict[tuple[int, int, int], SearchResult | None] = {}

    def result(w: int, start: int, g: int) -> SearchResult | None:
        if (w, start, g) not in cache:
            apl, rate = workflows[w]
            try:
                cache[(w, start, g)] = search(
                    apl,
                    rate,
                    topology,
                    units_per_gpu=units_per_gpu,
                    gpus=order[start : start + g],
                    keep=keep,
                    **kwargs,
                )
            except SearchError:
                cache[(w, start, g)] = None
        return cache[(w, start, g)]

    best: tuple[float, float] | None = None
    best_split: list[tuple[int, int, SearchResult]] | None = None
    n_splits = 0
    for split in _compositions(G, W):
        parts, start = [], 0
        for w, g in enumerate(split):
            res = result(w, start, g)
            if res is None:
                break
            parts.append((start, g, res))
            start += g
        else:
            n_splits += 1
            utils = [utility(r) for _, _, r in parts]
            score = (min(utils), sum(utils))
            if best is None or score > best:
                best, best_split = score, parts
    if best is None or best_split is None:
        raise SearchError(
            f"no split of {G} GPUs gives every workflow of {names} an allocation on its GPUs"
        )

    llms: list[LLMAllocation] = []
    replicas: list[ReplicaPlacement] = []
    owners: list[int] = []
    next_number: dict[str, int] = {}
    choices = []
    for w, (start, g, res) in enumerate(best_split):
        llms.extend(res.allocation.llms)
        assert res.placement is not None
        base = dict(next_number)
        for r in res.placement.replicas:
            n = base.get(r.model, 0) + r.replica
            replicas.append(dataclasses.replace(r, replica=n))
            owners.append(w)
            next_number[r.model] = max(next_number.get(r.model, 0), n + 1)
        choices.append(
            WorkflowChoice(
                names[w], float(workflows[w][1]), order[start : start + g], res, utility(res)
            )
        )
    placement = Placement(tuple(replicas), topology, units_per_gpu)
    return MultiSearchResult(
        workflows=tuple(choices),
        allocation=Allocation(tuple(llms), units_per_gpu),
        placement=placement,
        owners=tuple(owners),
        welfare=best[0],
        splits=n_splits,
        searches=len(cache),
        seconds=time.perf_counter() - t0,
    )
