"""Specification of heuristics/allocation/scepsy/search.py (Scepsy §5 GPU scheduler): on small
clusters the pruned search finds exactly the best predicted latency of an exhaustive search over
every unit vector × every (tp, replicas) that places (when the paper's premise holds: the LLM with
the higher latency contribution also needs more GPU); the ablation flags restrict the space as
documented; the multi-workflow level splits GPUs by egalitarian welfare."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.sim.allocation.allocations import Allocation, LLMAllocation
from envs.sim.allocation.placement import fits, nvlink_domains, validate
from envs.sim.allocation.scepsy.apl import (
    AggregatePipeline,
    LLMProfile,
    ProfilePoint,
    ProfileSet,
    WorkflowStats,
)
from envs.sim.hardware.cluster import Topology, load_cluster
from heuristics.allocation.scepsy.multi import gpu_order, search_multi, utility
from heuristics.allocation.scepsy.search import ABLATIONS, DEFAULT_HEADROOM, SearchError, search

# model -> (n, p, isolated call seconds on one whole GPU at TP1); max throughput of one whole
# GPU = 1 / call seconds, so a higher latency contribution n·s/p also means more demand (p = 1)
A = "llama3-8b"
B = "llama3.2-1b"
C = "e5-base-v2"
MIN_SHARE = {A: {1: 4, 2: 2, 4: 1}, B: {1: 2, 2: 1, 4: 1}, C: {1: 1, 2: 1, 4: 1}}  # of 10


SPEC_S1: dict[str, float] = {}  # isolated call seconds of the current pipeline's models


def profile(model: str, tp: int, fraction: float, s1: float) -> LLMProfile:
    """M/M/1-like replica: call time s1/(f·tp^0.8); capacity f·tp·0.9^(tp−1)/s1, so TP1 on a
    share 2f beats TP2 on two shares f (no TP communication) in latency and throughput."""
    s = s1 / (fraction * tp**0.8)
    mu = fraction * tp * 0.9 ** (tp - 1) / s1
    pts = []
    for k in range(10):
        lam = mu * k / 10
        lat = s / (1 - lam / mu)
        pts.append(ProfilePoint(lam, lam, lat, lat, lat, lat, lat, 100))
    return LLMProfile(model, "rtx-a6000", tp, fraction, tuple(pts), mu)


def pipeline(spec: dict[str, tuple[float, float, float]], F: int, name: str = "wf"):
    ps = ProfileSet()
    SPEC_S1.update({m: v[2] for m, v in spec.items()})
    for m, (_, _, s1) in spec.items():
        for tp in (1, 2, 4):
            for sh in range(1, F + 1):
                ps.add(profile(m, tp, sh / F, s1))
    stats = WorkflowStats(
        name, {m: v[0] for m, v in spec.items()}, {m: v[1] for m, v in spec.items()}
    )
    return AggregatePipeline(stats, ps)


def min_share_for(F: int):
    def fn(model: str, tp: int) -> int | None:
        return max(1, math.ceil(MIN_SHARE[model][tp] * F / 10))

    return fn


def brute_force(
    apl,
    rate: float,
    topo: Topology,
    F: int,
    *,
    fractional=True,
    tp_on=True,
    pruned=False,
    headroom=DEFAULT_HEADROOM,
):
    """Best (latency, −throughput) among sustaining allocations and best (throughput, −latency)
    overall, over every unit vector summing to the budget × every valid (tp, replicas) per LLM
    (equal shares ≤ 1 GPU and ≥ the minimum, TP ≤ the NVLink domain), among allocations that
    place. ``pruned``: only the search's pruned space — units non-increasing in latency order
    (n·s/p) and ≥ the minimums, TP ≤ the GPUs spanned in the contiguous packing."""
    models = apl.stats.models
    budget = topo.num_gpus * F
    max_dom = max(len(d) for d in nvlink_domains(topo))
    tps = [t for t in (1, 2, 4) if t == 1 or (tp_on and t <= max_dom)]
    mins = min_share_for(F)
    stats = apl.stats
    order = sorted(models, key=lambda m: -stats.invocations[m] * SPEC_S1[m] / stats.parallelism[m])

    def configs(m: str, u: int, span: int):
        for tp in tps:
            if pruned and tp > span:
                continue
            for r in range(1, u + 1):
                if u % (tp * r):
                    continue
                share = u // (tp * r)
                if share > F or share < mins(m, tp) or (not fractional and share != F):
                    continue
                yield LLMAllocation(m, u, tp, r)

    best_s, best_t = (math.inf, 0.0), (0.0, math.inf)
    for vec in itertools.product(range(1, budget + 1), repeat=len(models)):
        if sum(vec) != budget:
            continue
        units = dict(zip(models, vec, strict=True))
        spans, off = {}, 0
        for m in order:  # contiguous packing in latency order
            spans[m] = (off % F + units[m] + F - 1) // F
            off += units[m]
        if pruned and any(units[a] < units[b] for a, b in itertools.pairwise(order)):
            continue
        lists = [list(configs(m, units[m], spans[m])) for m in models]
        for combo in itertools.product(*lists):
            alloc = Allocation(combo, F)
            pred = apl.predict(alloc, rate)
            if not fits(alloc, topo):
                continue
            if headroom * pred.throughput >= rate and math.isfinite(pred.latency):
                best_s = min(best_s, (pred.latency, -pred.throughput))
            best_t = max(best_t, (pred.throughput, -pred.latency))
    return best_s, best_t


CASES = [
    # (spec, topology, F)
    ({A: (2, 1, 1.0), C: (1, 1, 0.1)}, Topology("rtx-a6000", 1, 2, ((0, 1),)), 10),
    ({A: (3, 1, 1.0), B: (2, 1, 0.4)}, Topology("rtx-a6000", 1, 4, ((0, 1), (2, 3))), 4),
    ({A: (2, 1, 1.0), B: (3, 1, 0.3), C: (1, 1, 0.05)}, Topology("rtx-a6000", 2, 2, ((0, 1),)), 4),
    ({A: (2, 1, 1.0), B: (2, 1, 0.5), C: (2, 1, 0.1)}, Topology("rtx-a6000", 1, 3, ((0, 1),)), 4),
]


def rate_at(load: float, spec, topo: Topology) -> float:
    """``load`` × the cluster's capacity for the workflow (GPUs / GPU-seconds per workflow)."""
    return load * topo.num_gpus / sum(n * s1 for n, _, s1 in spec.values())


def assert_same_optimum(res, brute, rate: float) -> None:
    (lat, _), (thr, _) = brute
    validate(res.placement)
    if math.isfinite(lat):
        assert res.sustains and res.headroom * res.throughput >= rate
        assert res.latency == pytest.approx(lat, rel=1e-9)
    else:
        assert not res.sustains
        assert res.throughput == pytest.approx(thr, rel=1e-9)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("load", [0.05, 0.4, 0.8, 2.0])
def test_search_is_exact_over_the_pruned_space(case: int, load: float) -> None:
    """The table-driven search (best parallelism per LLM, one pass over vectors, lazy ranked
    fallback when the best does not place) = brute force over the same pruned space."""
    spec, topo, F = CASES[case]
    apl = pipeline(spec, F)
    rate = rate_at(load, spec, topo)
    res = search(apl, rate, topo, units_per_gpu=F, min_share=min_share_for(F))
    assert res.allocation.total_units == topo.num_gpus * F  # the budget rule
    assert_same_optimum(res, brute_force(apl, rate, topo, F, pruned=True), rate)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("load", [0.05, 0.4, 0.8, 2.0])
def test_ordering_and_bounds_never_drop_the_optimum(case: int, load: float) -> None:
    """With the premise (a higher latency contribution means more demand), latency ordering,
    the min/upper bounds and TP ≤ NVLink keep the optimum of the whole space — with the span
    rule lifted (see the next test)."""
    spec, topo, F = CASES[case]
    apl = pipeline(spec, F)
    rate = rate_at(load, spec, topo)
    res = search(apl, rate, topo, units_per_gpu=F, min_share=min_share_for(F), span_rule=False)
    assert_same_optimum(res, brute_force(apl, rate, topo, F), rate)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.sampled_from([(1, 2, ((0, 1),)), (1, 3, ((1, 2),)), (2, 2, ((0, 1),)), (1, 4, ())]),
    F=st.sampled_from((2, 3, 4)),
    llms=st.lists(
        st.tuples(
            st.sampled_from((1.0, 2.0, 3.0)), st.sampled_from((1.0, 2.0)), st.floats(0.05, 1.0)
        ),
        min_size=2,
        max_size=3,
    ),
    load=st.floats(0.02, 1.5),
)
def test_search_is_exact_over_the_pruned_space_random(shape, F, llms, load) -> None:
    nodes, G, groups = shape
    topo = Topology("rtx-a6000", nodes, G, groups)
    spec = {m: v for m, v in zip((A, B, C), llms, strict=False)}
    apl = pipeline(spec, F)
    rate = rate_at(load, spec, topo)
    brute = brute_force(apl, rate, topo, F, pruned=True)
    try:
        res = search(apl, rate, topo, units_per_gpu=F, min_share=min_share_for(F))
    except SearchError:
        assert brute[1][0] == 0.0  # nothing in the pruned space places
        return
    assert_same_optimum(res, brute, rate)


def test_span_rule_can_drop_the_optimum() -> None:
    """Known limit of the paper's step 2-3 rule TP ≤ GPUs spanned: llama3-8b as TP2 @ 0.8 leaves
    0.2 on each of the 2 GPUs; the embedder's best use of them is TP2 @ 0.2, but in the
    contiguous packing its 0.4 GPU spans one GPU, so only TP1 is offered (TP1 @ 0.4 does not
    place next to the equal TP2 shares; the search falls back to 2 x TP1 @ 0.2)."""
    spec, topo, F = CASES[0]
    apl = pipeline(spec, F)
    rate = rate_at(0.05, spec, topo)
    paper = search(apl, rate, topo, units_per_gpu=F, min_share=min_share_for(F))
    lifted = search(apl, rate, topo, units_per_gpu=F, min_share=min_share_for(F), span_rule=False)
    assert paper.rank > 1 and paper.unplaceable  # its best did not place
    assert paper.allocation.get(C).tp == 1 and lifted.allocation.get(C).tp == 2
    assert lifted.latency < paper.latency


@pytest.mark.parametrize("ablation", sorted(ABLATIONS))
def test_ablations_restrict_the_space_and_stay_exact(ablation: str) -> None:
    fractional, tp_on = ABLATIONS[ablation]
    spec, topo, F = CASES[2]
    apl = pipeline(spec, F)
    rate = 0.3 * topo.num_gpus / sum(n * s1 for n, _, s1 in spec.values())
    try:
        res = search(
            apl,
            rate,
            topo,
            units_per_gpu=F,
            min_share=min_share_for(F),
            fractional=fractional,
            tensor_parallel=tp_on,
        )
    except SearchError:  # 3 LLMs on 4 whole GPUs may leave no room: then brute force agrees
        (lat, _), (thr, _) = brute_force(
            apl, rate, topo, F, fractional=fractional, tp_on=tp_on, pruned=True
        )
        assert thr == 0.0
        return
    for a in res.allocation.llms:
        if not fractional:
            assert a.share_units == F
        if not tp_on:
            assert a.tp == 1
    (lat, _), (thr, _) = brute_force(
        apl, rate, topo, F, fractional=fractional, tp_on=tp_on, pruned=True
    )
    if math.isfinite(lat):
        assert res.latency == pytest.approx(lat, rel=1e-9)
    else:
        assert res.throughput == pytest.approx(thr, rel=1e-9)


def test_ablation_flags_on_a_large_cluster() -> None:
    topo = load_cluster("scepsy-16").topology
    apl = pipeline({A: (4, 1, 1.0), B: (6, 2, 0.3), C: (1, 1, 0.05)}, 10)
    for name, (fractional, tp_on) in ABLATIONS.items():
        res = search(
            apl,
            2.0,
            topo,
            min_share=min_share_for(10),
            fractional=fractional,
            tensor_parallel=tp_on,
        )
        assert res.allocation.total_units == 160, name
        assert all(a.share_units == 10 for a in res.allocation.llms) or fractional, name
        assert all(a.tp == 1 for a in res.allocation.llms) or tp_on, name
        validate(res.placement)
    full = search(apl, 2.0, topo, min_share=min_share_for(10))
    naive = search(
        apl, 2.0, topo, min_share=min_share_for(10), fractional=False, tensor_parallel=False
    )
    assert full.latency <= naive.latency


def test_latency_order_and_bounds() -> None:
    topo = Topology("rtx-a6000", 1, 4, ((0, 1), (2, 3)))
    apl = pipeline({C: (1, 1, 0.05), A: (3, 1, 1.0), B: (2, 1, 0.4)}, 4)
    res = search(apl, 0.5, topo, units_per_gpu=4, min_share=min_share_for(4))
    assert res.order == (A, B, C)  # by n·s/p: 3.0 > 0.8 > 0.05
    u = [res.allocation.get(m).units for m in res.order]
    assert u == sorted(u, reverse=True)
    assert res.allocation.models == (C, A, B)  # results keep the pipeline's order
    assert res.candidates >= res.feasible_vectors > 0


def test_unsustainable_rate_returns_max_throughput_flagged() -> None:
    topo = Topology("rtx-a6000", 1, 2, ((0, 1),))
    apl = pipeline({A: (2, 1, 1.0), C: (1, 1, 0.1)}, 10)
    res = search(apl, 100.0, topo, min_share=min_share_for(10))
    assert not res.sustains and res.throughput < 100.0
    (_, _), (thr, _) = brute_force(apl, 100.0, topo, 10)
    assert res.throughput == pytest.approx(thr)


def test_overload_fallback_plans_the_balanced_allocation_at_a_bounded_latency() -> None:
    """No allocation sustains the target: the search re-plans for headroom × T_max, so among
    the allocations of highest T_w it returns the one of lowest latency predicted there (finite),
    not one ranked by the infinite latency at the target."""
    topo = Topology("rtx-a6000", 1, 2, ((0, 1),))
    apl = pipeline({A: (2, 1, 1.0), B: (3, 1, 0.3), C: (1, 1, 0.1)}, 10)
    res = search(apl, 100.0, topo, min_share=min_share_for(10))
    (_, _), (thr, _) = brute_force(apl, 100.0, topo, 10)
    assert not res.sustains and res.rate == 100.0
    assert res.throughput == pytest.approx(thr)
    assert res.planned_rate == pytest.approx(DEFAULT_HEADROOM * thr)
    assert math.isfinite(res.latency)
    # the lowest latency at the planned rate among allocations of throughput T_max
    (lat, _), _ = brute_force(apl, res.planned_rate, topo, 10, pruned=True)
    assert res.latency == pytest.approx(lat, rel=1e-9)
    old = search(apl, 100.0, topo, min_share=min_share_for(10), overload_fallback=False)
    assert old.throughput == pytest.approx(thr) and not math.isfinite(old.latency)


@pytest.mark.parametrize("headroom", [1.0, 0.9, 0.7])
def test_headroom_is_respected_and_changes_the_choice_near_capacity(headroom: float) -> None:
    """A candidate sustains λ only if headroom × T_w ≥ λ; every sustaining result keeps that
    margin, and just below full capacity headroom excludes what headroom = 1 would pick."""
    spec, topo, F = CASES[0]
    apl = pipeline(spec, F)
    full = search(apl, 0.0, topo, units_per_gpu=F, min_share=min_share_for(F), headroom=1.0)
    t_max = search(apl, 1e6, topo, units_per_gpu=F, min_share=min_share_for(F)).throughput
    changed = 0
    for load in (0.3, 0.6, 0.8, 0.85, 0.9, 0.95, 0.99):
        rate = load * t_max
        res = search(
            apl, rate, topo, units_per_gpu=F, min_share=min_share_for(F), headroom=headroom
        )
        if res.sustains:
            assert headroom * res.throughput >= rate
            (lat, _), _ = brute_force(apl, rate, topo, F, headroom=headroom, pruned=True)
            assert res.latency == pytest.approx(lat, rel=1e-9)
        else:
            assert headroom * t_max < rate  # nothing could have kept the margin
        plain = search(apl, rate, topo, units_per_gpu=F, min_share=min_share_for(F), headroom=1.0)
        changed += plain.allocation != res.allocation
    assert full.headroom == 1.0
    assert (changed > 0) == (headroom < 1.0)


def test_budget_below_minimums_is_named() -> None:
    topo = Topology("rtx-a6000", 1, 1)
    apl = pipeline({A: (2, 1, 1.0), B: (1, 1, 0.5), C: (1, 1, 0.1)}, 4)
    with pytest.raises(SearchError, match="budget of 4 units"):
        search(apl, 0.1, topo, units_per_gpu=4, min_share=min_share_for(4), fractional=False)


def test_fill_rule_and_its_relaxation() -> None:
    """Budget rule: units sum to the budget; fill=False searches every sum ≤ budget (a
    superset, so never worse)."""
    spec, topo, F = CASES[1]
    apl = pipeline(spec, F)
    for load in (0.05, 0.5):
        rate = rate_at(load, spec, topo)
        full = search(apl, rate, topo, units_per_gpu=F, min_share=min_share_for(F))
        free = search(apl, rate, topo, units_per_gpu=F, min_share=min_share_for(F), fill=False)
        assert full.allocation.total_units == 16 and free.allocation.total_units <= 16
        assert free.vectors > full.vectors
        assert free.latency <= full.latency + 1e-12


def test_max_replicas_caps_every_llm() -> None:
    topo = load_cluster("scepsy-16").topology
    apl = pipeline({A: (4, 1, 1.0), B: (6, 2, 0.3), C: (1, 1, 0.05)}, 10)
    res = search(apl, 5.0, topo, min_share=min_share_for(10), max_replicas=3)
    assert max(a.replicas for a in res.allocation.llms) <= 3
    validate(res.placement)


def test_missing_profiles_are_skipped_and_reported_or_raise() -> None:
    spec, topo, F = CASES[1]
    apl = pipeline(spec, F)
    for key in [k for k in apl.profiles.profiles if k[0] == A and k[1] == 2]:
        del apl.profiles.profiles[key]  # no TP2 profiles of llama3-8b
    res = search(apl, 0.1, topo, units_per_gpu=F, min_share=min_share_for(F))
    assert res.allocation.get(A).tp == 1
    assert (A, 2, 4) in res.unprofiled
    with pytest.raises(KeyError, match="no profile for llama3-8b at TP2"):
        search(
            apl, 0.1, topo, units_per_gpu=F, min_share=min_share_for(F), missing_profiles="raise"
        )


def test_multi_workflow_split_is_egalitarian_and_placed() -> None:
    topo = Topology("rtx-a6000", 2, 4, ((0, 1), (2, 3)))
    rag = pipeline({A: (1, 1, 1.0), C: (1, 1, 0.05)}, 10, name="rag")
    beam = pipeline({B: (8, 3, 0.3), A: (2, 1, 1.0)}, 10, name="beam")  # shares llama3-8b
    res = search_multi([(rag, 1.0), (beam, 1.0)], topo, min_share=min_share_for(10))
    blocks = [set(w.gpus) for w in res.workflows]
    assert not blocks[0] & blocks[1] and len(blocks[0] | blocks[1]) == 8
    assert all(w.result.sustains for w in res.workflows)
    assert res.welfare == min(w.utility for w in res.workflows)
    validate(res.placement)
    for w, r in zip(res.owners, res.placement.replicas, strict=True):
        assert all((r.node, g) in blocks[w] for g in r.gpus)
    # the shared model is two deployments; every replica has an owner, names stay unique
    assert [a.model for a in res.allocation.llms].count(A) == 2
    assert len(res.owners) == len(res.placement.replicas)
    names = [i.name for i in res.placement.instances()]
    assert len(set(names)) == len(names)
    # brute force over splits: no split has a higher minimum utility
    order = gpu_order(topo)
    for g in range(1, 8):
        rs = [
            search(rag, 1.0, topo, gpus=order[:g], min_share=min_share_for(10)),
            search(beam, 1.0, topo, gpus=order[g:], min_share=min_share_for(10)),
        ]
        assert min(utility(r) for r in rs) <= res.welfare
