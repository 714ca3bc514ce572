"""Specification of envs/sim/allocation/placement.py (Scepsy §6): the placer never oversubscribes a
GPU nor splits a TP replica across NVLink domains or nodes (property test), places most-constrained
replicas first, names the replica it cannot place, keeps matching replicas where they were, and
is cheap enough for action masking."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.sim.allocation.allocations import Allocation, LLMAllocation, PlacementError
from envs.sim.allocation.placement import fits, nvlink_domains, place, try_place, validate
from envs.sim.hardware.cluster import Topology, load_cluster

MODELS = ("llama3-8b", "llama3.2-1b", "e5-base-v2", "llama3.1-8b-prm", "bge-reranker-base")


def one_node(gpus: int, groups: tuple[tuple[int, ...], ...]) -> Topology:
    return Topology("rtx-a6000", 1, gpus, groups)


def llm(model: str, share: int, tp: int = 1, replicas: int = 1) -> LLMAllocation:
    return LLMAllocation(model, share * tp * replicas, tp, replicas)


def check_matches(alloc: Allocation, placement) -> None:
    """The placement holds exactly the allocation's replicas, valid on its topology."""
    validate(placement)
    want = sorted((a.model, a.tp, a.share_units) for a in alloc.llms for _ in range(a.replicas))
    got = sorted((r.model, r.tp, r.share_units) for r in placement.replicas)
    assert got == want
    numbers = {}
    for r in placement.replicas:
        numbers.setdefault(r.model, []).append(r.replica)
    for m, ns in numbers.items():
        assert sorted(ns) == list(range(len(ns))), m


# -- hand cases ----------------------------------------------------------------------------------
def test_scepsy16_mixed_allocation_is_valid() -> None:
    topo = load_cluster("scepsy-16").topology
    alloc = Allocation(
        (
            llm("llama3-8b", 5, tp=2, replicas=4),
            llm("llama3.1-8b-prm", 10, replicas=6),
            llm("e5-base-v2", 2, replicas=3),
            llm("llama3.2-1b", 4, replicas=3),
        ),
        10,
    )
    p = place(alloc, topo)
    check_matches(alloc, p)
    domains = nvlink_domains(topo)
    for r in p.replicas:
        if r.tp > 1:
            assert tuple(sorted(r.gpus)) in domains
    assert len(p.instances()) == 16


def test_most_constrained_first_saves_the_tp2_replica() -> None:
    """Two 0.4-GPU TP1 replicas placed first pack onto GPU 0 (§6 packs sub-GPU fractions onto
    occupied GPUs), leaving no GPU pair with 0.6 free for the TP2 replica; TP-first places it."""
    topo = one_node(2, ((0, 1),))
    small = Allocation((llm("e5-base-v2", 4, replicas=2),), 10)
    full = Allocation((llm("e5-base-v2", 4, replicas=2), llm("llama3-8b", 6, tp=2)), 10)
    p = place(full, topo)
    check_matches(full, p)
    assert p.used_units() == {(0, 0): 10, (0, 1): 10}
    # small fractions first (simulated by keeping them where they land alone) blocks TP2
    p_small = place(small, topo)
    assert p_small.used_units() == {(0, 0): 8}
    with pytest.raises(PlacementError, match="llama3-8b.*TP2"):
        place(full, topo, keep=p_small)


def test_fits_by_units_but_unplaceable_names_the_replica() -> None:
    # 28 of 40 units, but 3 TP1 shares of 0.6 GPU need 3 GPUs with 0.6 free, and the TP2
    # replica's two GPUs keep only 0.5 each
    topo = one_node(4, ((0, 1), (2, 3)))
    alloc = Allocation((llm("llama3-8b", 5, tp=2), llm("llama3.1-8b-prm", 6, replicas=3)), 10)
    assert alloc.total_units <= topo.num_gpus * 10
    with pytest.raises(PlacementError, match=r"replica of 'llama3.1-8b-prm' \(TP1, 6/10"):
        place(alloc, topo)
    assert not fits(alloc, topo)
    assert try_place(alloc, topo) is None


def test_tp_never_spans_nvlink_domains_or_nodes() -> None:
    topo = Topology("rtx-a6000", 2, 4, ((0, 1), (2, 3)))
    tp4 = Allocation((llm("llama3-8b", 10, tp=4),), 10)
    with pytest.raises(PlacementError, match="TP4 exceeds every NVLink domain"):
        place(tp4, topo)
    # no NVLink at all: only TP1
    with pytest.raises(PlacementError, match="TP2 exceeds"):
        place(Allocation((llm("llama3-8b", 10, tp=2),), 10), Topology("rtx-a6000", 1, 4))
    # 4 TP2 replicas of whole GPUs fill the four pairs, never (1, 2)
    p = place(Allocation((llm("llama3-8b", 10, tp=2, replicas=4),), 10), topo)
    assert sorted((r.node, r.gpus) for r in p.replicas) == [
        (0, (0, 1)),
        (0, (2, 3)),
        (1, (0, 1)),
        (1, (2, 3)),
    ]


def test_balanced_then_least_capacity_domain() -> None:
    """§6: among the most balanced NVLink domains, the one with the least capacity."""
    topo = one_node(4, ((0, 1), (2, 3)))
    first = place(Allocation((llm("llama3-8b", 4, tp=2),), 10), topo)
    (r,) = first.replicas
    # a second TP2 replica goes to the same (balanced, less free) pair, not the empty one
    both = place(Allocation((llm("llama3-8b", 4, tp=2, replicas=2),), 10), topo)
    assert {x.gpus for x in both.replicas} == {r.gpus}
    # an unbalanced pair (a TP1 share on one GPU) loses to the balanced empty pair
    mixed = Allocation((llm("llama3-8b", 4, tp=2), llm("e5-base-v2", 3)), 10)
    kept = place(Allocation((llm("e5-base-v2", 3),), 10), topo)
    p = place(mixed, topo, keep=kept)
    (e5,) = [x for x in p.replicas if x.model == "e5-base-v2"]
    (tp2,) = [x for x in p.replicas if x.tp == 2]
    assert e5.gpus[0] not in tp2.gpus


def test_malformed_allocation_and_topology_are_named() -> None:
    topo = one_node(2, ((0, 1),))
    with pytest.raises(PlacementError, match="exceeds one GPU"):
        place(Allocation((LLMAllocation("llama3-8b", 12, 1, 1),), 10), topo)
    with pytest.raises(PlacementError, match="does not divide"):
        place(Allocation((LLMAllocation("llama3-8b", 7, 2, 1),), 10), topo)
    with pytest.raises(ValueError, match="repeats GPU 1"):
        fits(Allocation((llm("e5-base-v2", 1),), 10), one_node(3, ((0, 1), (1, 2))))


# -- keep -----------------------------------------------------------------------------------------
def test_keep_leaves_matching_replicas_in_place() -> None:
    topo = load_cluster("scepsy-16").topology
    before = Allocation(
        (llm("llama3-8b", 10, tp=2, replicas=2), llm("e5-base-v2", 2, replicas=3)), 10
    )
    p0 = place(before, topo)
    assert place(before, topo, keep=p0) == p0
    after = Allocation(
        (
            llm("llama3-8b", 10, tp=2, replicas=3),  # one more replica
            llm("e5-base-v2", 2, replicas=2),  # one fewer
            llm("llama3.2-1b", 5, replicas=2),  # new
        ),
        10,
    )
    p1 = place(after, topo, keep=p0)
    check_matches(after, p1)
    old = {(r.model, r.replica): r for r in p0.replicas}
    new = {(r.model, r.replica): r for r in p1.replicas}
    for key in [("llama3-8b", 0), ("llama3-8b", 1), ("e5-base-v2", 0), ("e5-base-v2", 1)]:
        assert new[key] == old[key]
    # a changed share does not match: that LLM is placed afresh
    p2 = place(Allocation((llm("llama3-8b", 5, tp=2, replicas=2),), 10), topo, keep=p0)
    assert all(r.share_units == 5 for r in p2.replicas)


def test_gpus_restricts_the_placement() -> None:
    topo = load_cluster("scepsy-16").topology
    block = [(1, 2), (1, 3), (2, 0)]
    alloc = Allocation((llm("llama3-8b", 10, tp=2), llm("e5-base-v2", 5, replicas=2)), 10)
    p = place(alloc, topo, gpus=block)
    assert set(p.used_units()) <= set(block)
    assert not fits(Allocation((llm("llama3-8b", 10, tp=2, replicas=2),), 10), topo, gpus=block)


# -- properties -----------------------------------------------------------------------------------
@st.composite
def topologies(draw) -> Topology:
    nodes = draw(st.integers(1, 3))
    G = draw(st.integers(1, 6))
    perm = draw(st.permutations(list(range(G))))
    groups, i = [], 0
    while i < G:
        size = draw(st.integers(1, G - i))
        if size > 1:
            groups.append(tuple(sorted(perm[i : i + size])))
        i += size
    return Topology("rtx-a6000", nodes, G, tuple(groups))


@st.composite
def allocations(draw, F: int) -> Allocation:
    n = draw(st.integers(1, 4))
    out = []
    for m in MODELS[:n]:
        tp = draw(st.sampled_from((1, 1, 2, 4)))
        out.append(llm(m, draw(st.integers(1, F)), tp=tp, replicas=draw(st.integers(1, 4))))
    return Allocation(tuple(out), F)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=topologies(), F=st.sampled_from((1, 2, 4, 10)), data=st.data())
def test_placement_is_valid_or_raises(topo: Topology, F: int, data) -> None:
    alloc = data.draw(allocations(F))
    ok = fits(alloc, topo)
    try:
        p = place(alloc, topo)
    except PlacementError:
        assert not ok
        return
    assert ok
    check_matches(alloc, p)
    domains = nvlink_domains(topo)
    for r in p.replicas:
        assert 0 <= r.node < topo.num_nodes
        if r.tp > 1:
            assert any(set(r.gpus) <= set(d) for d in domains)
    assert all(u <= F for u in p.used_units().values())
    # keep: one more replica of the first LLM leaves every old replica where it was
    a0 = alloc.llms[0]
    grown = Allocation(
        (LLMAllocation(a0.model, a0.units + a0.tp * a0.share_units, a0.tp, a0.replicas + 1),)
        + alloc.llms[1:],
        F,
    )
    p2 = try_place(grown, topo, keep=p)
    if p2 is not None:
        check_matches(grown, p2)
        assert set(p.replicas) <= set(p2.replicas)
