"""Aegaeon and Ayo as Allocation-v0 baselines (Scepsy §7.2): legal over whole episodes, the rule
that sets each apart, and errors that name the culprit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envs.allocation import AllocationEnv
from envs.sim.allocation.allocations import AllocationError
from envs.sim.hardware.catalog import get_model
from heuristics import make_policy
from heuristics.allocation import AegaeonPolicy, AyoPolicy
from heuristics.allocation.aegaeon import _apportion, _placeable_tp1

BASELINES = ("aegaeon-3p1d", "aegaeon-2p2d", "aegaeon-1p3d", "ayo")


def ctx_of(workload: str, gpus: int = 4):
    env = AllocationEnv(workload=workload, gpus=gpus, period_seconds=10.0, workflow_rate=0.5)
    _, info = env.reset(seed=0)
    return env, info["decision_context"]


@pytest.mark.parametrize("workload", ["rag_reranker", "beam_search"])
@pytest.mark.parametrize("name", BASELINES)
def test_every_action_is_masked_in_over_a_whole_episode(name, workload):
    env = AllocationEnv(
        workload=workload, gpus=4, periods=2, period_seconds=5.0, drain_seconds=5.0,
        workflow_rate=0.4, invalid_action="raise",
    )  # fmt: skip
    pol = make_policy(name)
    obs, info = env.reset(seed=0)
    pol.reset()
    steps, done = 0, False
    while not done:
        a = pol.act(obs, info)
        assert info["action_mask"][a], f"{name} took masked action {env.option(a)}"
        obs, _, term, trunc, info = env.step(a)
        assert not info.get("invalid_action")
        steps += 1
        done = term or trunc
    assert steps == 2 * len(env.models)
    assert pol.fallbacks == 0, f"{name} needed the nearest legal option {pol.fallbacks} times"
    assert info["metrics"]["num_workflows"] > 0


@pytest.mark.parametrize("workload", ["rag_reranker", "beam_search", "rag_beam_combined"])
@pytest.mark.parametrize("p,d", [(3, 1), (2, 2), (1, 3)])
def test_aegaeon_pools_are_the_per_node_split_and_non_llms_stay_on_prefill(workload, p, d):
    env, ctx = ctx_of(workload, gpus=8)
    pol = AegaeonPolicy(p, d)
    alloc = pol.plan(ctx)
    F, N = ctx.units_per_gpu, ctx.topology.num_nodes
    pre = sum(x for x, _ in pol.split.values())
    dec = sum(y for _, y in pol.split.values())
    assert math.isclose(pre, N * p * F) and math.isclose(dec, N * d * F)
    for m, (_, y) in pol.split.items():
        if get_model(m).encoder_only or m == "llama3.1-8b-prm":  # PRM emits one token
            assert y == 0.0, f"{m} got decode capacity"
    used = sum(alloc.get(m).units for m in ctx.models)
    assert used <= ctx.topology.num_gpus * F
    for m in ctx.models:
        a = alloc.get(m)
        assert a.tp == 1 and a.units // a.replicas <= F
        assert a.units // a.replicas >= ctx.min_share[(m, 1)]


@pytest.mark.parametrize("packing", ["share", "units"])
def test_aegaeon_split_moves_capacity_between_prefill_and_decode_heavy_models(packing):
    _, ctx = ctx_of("beam_search", gpus=4)
    prm, gen = "llama3.1-8b-prm", "llama3.2-1b"  # verifier: prefill only; generator: decodes
    units = {pd: AegaeonPolicy(*pd, packing=packing).plan(ctx) for pd in [(3, 1), (2, 2), (1, 3)]}
    prm_u = [units[pd].get(prm).units for pd in [(3, 1), (2, 2), (1, 3)]]
    gen_u = [units[pd].get(gen).units for pd in [(3, 1), (2, 2), (1, 3)]]
    assert prm_u[0] > prm_u[1] > prm_u[2]
    assert gen_u[0] < gen_u[1] < gen_u[2]


def test_apportion_keeps_minimums_sums_to_total_and_tracks_proportions():
    u = _apportion({"a": 10.0, "b": 5.0, "c": 0.01}, {"a": 2, "b": 1, "c": 1}, 16)
    assert sum(u.values()) == 16 and u["c"] == 1
    assert abs(u["a"] - 15 * 10 / 15) < 1 and abs(u["b"] - 15 * 5 / 15) < 1
    # a minimum that binds is taken out of the others' shares
    u = _apportion({"a": 1.0, "b": 1.0}, {"a": 6, "b": 1}, 8)
    assert u == {"a": 6, "b": 2}


def test_placeable_tp1_packs_largest_shares_or_most_units():
    from envs.sim.allocation.allocations import Allocation
    from envs.sim.allocation.placement import try_place

    _, ctx = ctx_of("beam_search", gpus=4)
    topo = ctx.topology

    def places(out):
        return try_place(Allocation(tuple(out), units_per_gpu=4), topo) is not None

    out = _placeable_tp1({"a": 10, "b": 6}, {"a": 2, "b": 1}, 4, 16, topo, prefer="units")
    assert places(out) and [x.units for x in out] == [10, 6]
    # 15 units at min share 2: 5 x 3/4 GPU does not pack on 4 GPUs beside b's quarter, 15 x 1/4
    # is below the minimum, so 7 x 1/2 (14 units) is the most that places
    out = _placeable_tp1({"a": 15, "b": 1}, {"a": 2, "b": 1}, 4, 16, topo, prefer="units")
    assert places(out)
    assert (out[0].units, out[0].replicas) == (14, 7) and out[1].units == 1
    # largest shares: 3 whole GPUs, 3 units idle; b still gets its quarter
    out = _placeable_tp1({"a": 15, "b": 1}, {"a": 2, "b": 1}, 4, 16, topo, prefer="share")
    assert places(out)
    assert (out[0].units, out[0].replicas) == (12, 3) and out[1].units == 1
    out = _placeable_tp1({"a": 7, "b": 9}, {"a": 2, "b": 1}, 4, 16, topo, prefer="share")
    assert places(out) and [(x.units, x.replicas) for x in out] == [(4, 1), (8, 2)]
    for prefer in ("share", "units"):
        a = _placeable_tp1({"a": 40}, {"a": 1}, 4, 8, topo, prefer=prefer)[0]  # at most R
        assert a.replicas <= 8 and a.units // a.replicas <= 4
    with pytest.raises(ValueError, match="prefer"):
        _placeable_tp1({"a": 4}, {"a": 1}, 4, 8, topo, prefer="big")


def test_aegaeon_errors_name_the_culprit():
    _, ctx = ctx_of("rag_reranker")
    with pytest.raises(AllocationError, match=r"4P/1D has 5 instances.*4 GPUs"):
        AegaeonPolicy(4, 1).plan(ctx)
    with pytest.raises(AllocationError, match=r"no prefill instance.*bge-reranker-base"):
        AegaeonPolicy(0, 4).plan(ctx)
    _, ctx = ctx_of("beam_search")
    with pytest.raises(AllocationError, match=r"no decode instance") as exc:
        AegaeonPolicy(4, 0).plan(ctx)
    assert "llama3.2-1b" in str(exc.value) and "llama3.1-8b-prm" not in str(exc.value)
    with pytest.raises(ValueError, match="decode_gpus"):
        AegaeonPolicy(2, -1)


@pytest.mark.parametrize("workload,gpus", [("rag_reranker", 4), ("beam_search", 8),
                                           ("rag_beam_combined", 16)])  # fmt: skip
def test_ayo_provisions_whole_gpu_engines_one_per_non_llm_rest_even(workload, gpus):
    _, ctx = ctx_of(workload, gpus=gpus)
    alloc = AyoPolicy().plan(ctx)
    F = ctx.units_per_gpu
    llm_inst = []
    for m in ctx.models:
        a = alloc.get(m)
        assert a.units == F * a.tp * a.replicas, f"{m}: not whole GPUs"
        if get_model(m).encoder_only:
            assert a.replicas == 1
        else:
            llm_inst.append(a.replicas)
    assert max(llm_inst) - min(llm_inst) <= 1
    assert sum(alloc.get(m).units for m in ctx.models) == gpus * F  # no GPU left idle


def test_ayo_error_names_the_engines_without_a_gpu():
    _, ctx = ctx_of("rag_beam_combined", gpus=4)
    with pytest.raises(AllocationError) as exc:
        AyoPolicy().plan(ctx)
    msg = str(exc.value)
    for m in ("bge-reranker-base", "e5-base-v2", "llama3-8b", "llama3.2-1b"):
        assert m in msg
    with pytest.raises(ValueError, match="non_llm_instances"):
        AyoPolicy(0)


def test_registered_under_the_allocation_family():
    import evaluation

    fam = evaluation.FAMILIES["allocation"]
    for name in BASELINES:
        assert name in fam.baselines
        assert make_policy(name).name == name
    assert np.all([isinstance(make_policy(n), (AegaeonPolicy, AyoPolicy)) for n in BASELINES])
    for p, d in [(3, 1), (2, 2), (1, 3)]:
        pol = make_policy(f"aegaeon-{p}p{d}d-units")
        assert (pol.P, pol.D, pol.packing, pol.name) == (p, d, "units", f"aegaeon-{p}p{d}d-units")
        assert make_policy(f"aegaeon-{p}p{d}d").packing == "share"
