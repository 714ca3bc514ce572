"""Specifications of the prefix cache on P-D prefill instances (servegym issue 10 §6): the
simulator's LRU over block hashes, its pricing, its visibility in PDCluster's decision context,
and the agent-chain workload's derived prefix hashes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from envs.pd_cluster import PDClusterEnv
from envs.sim import Assignment, DefaultScheduler, Simulation
from envs.sim.hardware.cluster import cluster_from_dict
from traces.generators import generate
from traces.generators._common import chain_prefix_hashes
from traces.schema import LLMNode, Request, ToolNode, Workflow

MODEL = "llama3.1-70b"
B = 512  # tokens per block, the simulator's default prefix_block_tokens


def twin_prefill_cluster() -> object:
    """Two identical H200 prefill instances and one H200 decode instance: a prefill on either
    costs the same unless the prefix cache makes a difference."""
    return cluster_from_dict(
        {
            "name": "twin-prefill",
            "architecture": "pd",
            "default_model": MODEL,
            "tensor_parallel": {MODEL: {"h200": 4}},
            "prefill": [{"gpu": "h200"}, {"gpu": "h200"}],
            "decode": [{"gpu": "h200"}],
        }
    )


def chain(parent_in: int = 4096, parent_out: int = 600, result: int = 400) -> Workflow:
    """step0 -> tool -> step1, whose prompt is step0's prompt + output + the tool result."""
    nodes = (
        LLMNode("step0", MODEL, parent_in, parent_out, (), "agent_step"),
        ToolNode("tool0", 0.5, ("step0",)),
        LLMNode("step1", MODEL, parent_in + parent_out + result, 50, ("tool0",), "agent_step"),
    )
    return Workflow("w0", 0.0, chain_prefix_hashes(nodes, salt=7, block_tokens=B))


class PinPrefill(DefaultScheduler):
    """Places each call on a fixed prefill instance (pool index) by its node id, or by its
    workflow id (a request's), and on decode instance 0."""

    def __init__(self, prefill: dict[str, int]):
        self.prefill = prefill

    def _where(self, call) -> int:  # noqa: ANN001
        return self.prefill.get(call.node.id, self.prefill.get(call.workflow.id, -1))

    def plan(self, sim, inv):  # noqa: ANN001, ANN201 -- the simulator's scheduler protocol
        if inv.stage == "decode":
            return [Assignment(c, 0.0) for c in inv.calls]
        return [
            Assignment(c, 0.0, sim.prefill[self._where(c)].index, sim.decode[0].index)
            for c in inv.calls
        ]


def run_chain(child_on: int, blocks: int | str = "kv") -> tuple[Simulation, dict[str, object]]:
    sim = Simulation(
        twin_prefill_cluster(), [chain()], compute_horizons=False, prefix_cache_blocks=blocks
    )
    res = sim.run(PinPrefill({"step0": 0, "step1": child_on}))
    return sim, {r.node_id: r for r in res.calls}


def test_child_prefill_on_parent_instance_prices_only_uncached_tokens():
    sim, same = run_chain(child_on=0)
    _, other = run_chain(child_on=1)
    lat = sim.prefill[0].latency
    child = same["step1"]
    # step0's prompt is 8 full blocks; step1 resends it (+ output + tool result): 8 blocks hit
    assert child.cached_tokens == 4096
    assert other["step1"].cached_tokens == 0
    took_same = child.prefill_end - child.prefill_start
    took_other = other["step1"].prefill_end - other["step1"].prefill_start
    assert took_same == pytest.approx(lat.prefill_time(5096 - 4096, 1, 4096), rel=1e-12)
    assert took_other == pytest.approx(lat.prefill_time(5096), rel=1e-12)
    assert took_same < took_other
    assert same["step0"].cached_tokens == 0


def test_prefix_hits_reports_prefill_instances_holding_the_prefix():
    sim = Simulation(
        twin_prefill_cluster(), [chain()], compute_horizons=False, prefix_cache_blocks="kv"
    )
    seen: dict[str, dict[int, int]] = {}
    pin = PinPrefill({"step0": 0, "step1": 1})
    original = pin.plan

    def plan(s, inv):  # noqa: ANN001, ANN202
        for c in inv.calls:
            if inv.stage == "prefill":
                seen[c.node.id] = s.estimates.prefix_hits(c)
        return original(s, inv)

    pin.plan = plan  # type: ignore[method-assign]
    sim.run(pin)
    assert seen["step0"] == {}
    assert seen["step1"] == {sim.prefill[0].index: 4096}


def test_lru_evicts_least_recently_used_blocks_and_updates_the_index():
    cluster = twin_prefill_cluster()
    reqs = [
        Request("r0", 0.0, MODEL, 4 * B, 5, prefix_hashes=(1, 2, 3, 4)),
        Request("r1", 20.0, MODEL, 2 * B, 5, prefix_hashes=(5, 6)),
        Request("r2", 40.0, MODEL, 2 * B + 1, 5, prefix_hashes=(1, 2, 9)),  # refreshes 1, 2
        Request("r3", 60.0, MODEL, 2 * B, 5, prefix_hashes=(7, 8)),
        Request("r4", 80.0, MODEL, 4 * B, 5, prefix_hashes=(1, 2, 3, 4)),
    ]
    pin = PinPrefill({"r0": 0, "r1": 0, "r2": 0, "r3": 0, "r4": 0})
    sim = Simulation(cluster, reqs, compute_horizons=False, prefix_cache_blocks=7)
    hits = {r.workflow_id: r.cached_tokens for r in sim.run(pin).calls}
    # LRU order (oldest first) after r2: 3 4 5 6 1 2 9; r3 adds 7 8 and evicts 3 4.
    assert hits == {"r0": 0, "r1": 0, "r2": 2 * B, "r3": 0, "r4": 2 * B}
    inst = sim.prefill[0]
    # r4 refreshed 1 2, then inserted 3 4, evicting 5 6
    assert list(inst.prefix_cache) == [9, 7, 8, 1, 2, 3, 4]
    assert set(sim.prefix_index) == {9, 7, 8, 1, 2, 3, 4}
    assert all(holders == {inst.index} for holders in sim.prefix_index.values())
    # a larger cache keeps r0's blocks: r4 hits all but the last token
    sim = Simulation(cluster, reqs, compute_horizons=False, prefix_cache_blocks=16)
    hits = {r.workflow_id: r.cached_tokens for r in sim.run(pin).calls}
    assert hits["r4"] == 4 * B - 1


def test_prefix_cache_blocks_rejects_bad_values():
    for bad in (-1, 2.5, "KV"):
        with pytest.raises(ValueError, match="prefix_cache_blocks"):
            Simulation(twin_prefill_cluster(), [chain()], prefix_cache_blocks=bad)
    with pytest.raises(ValueError, match="prefix_cache must be"):
        PDClusterEnv(cluster=twin_prefill_cluster(), trace=[chain()], prefix_cache="yes")


def test_chain_hashes_share_exactly_the_parents_prompt_and_output_blocks():
    parent = LLMNode("p", MODEL, 1000, 700, ())  # prompt: 1 full block + a partial one
    kids = [
        LLMNode("a", MODEL, 2000, 5, ("t",)),
        LLMNode("b", MODEL, 1700, 5, ("p",)),  # exactly prompt + output
        LLMNode("c", MODEL, 1699, 5, ("p",)),  # shorter: not an extension, nothing shared
    ]
    nodes = chain_prefix_hashes((parent, ToolNode("t", 1.0, ("p",)), *kids), salt=3, block_tokens=B)
    h = {n.id: n.prefix_hashes for n in nodes if isinstance(n, LLMNode)}
    assert all(len(h[n.id]) == -(-n.input_tokens // B) for n in (parent, *kids))
    reused = (1000 + 700) // B  # 3 blocks: prompt block 0, then two reaching into the output
    assert h["a"][:reused] == h["b"][:reused]
    assert h["a"][reused] != h["b"][reused]  # past the parent's output the prompts differ
    assert h["a"][:1] == h["p"][:1]  # the parent's full prompt block...
    assert h["a"][1] != h["p"][1]  # ...but not its partial one
    assert not set(h["c"]) & (set(h["p"]) | set(h["a"]))


def test_agent_chain_hashes_follow_the_chain_and_are_reproducible():
    wfs = generate("agent_chain", seed=3, count=30)
    assert wfs == generate("agent_chain", seed=3, count=30)
    seen: dict[int, str] = {}
    for wf in wfs:
        calls = [n for n in wf.nodes if isinstance(n, LLMNode)]
        for parent, child in zip(calls, calls[1:], strict=False):
            assert child.input_tokens >= parent.input_tokens + parent.output_tokens
            shared = parent.input_tokens // B  # the parent's full prompt blocks
            assert child.prefix_hashes[:shared] == parent.prefix_hashes[:shared]
            if parent.input_tokens % B:
                assert child.prefix_hashes[shared] != parent.prefix_hashes[shared]
        for n in calls:
            assert len(n.prefix_hashes) == -(-n.input_tokens // B)
            for x in n.prefix_hashes:
                assert seen.setdefault(x, wf.id) == wf.id  # no block shared across workflows


def _records(sim: Simulation) -> list[tuple]:
    return [dataclasses.astuple(r) for r in sim.run(DefaultScheduler()).calls]


def test_cache_off_or_without_hashes_reproduces_the_cacheless_records():
    cluster = twin_prefill_cluster()
    wfs = generate("agent_chain", seed=1, count=6, rate=2.0)
    bare = [
        dataclasses.replace(
            w,
            nodes=tuple(
                dataclasses.replace(n, prefix_hashes=None) if isinstance(n, LLMNode) else n
                for n in w.nodes
            ),
        )
        for w in wfs
    ]
    base = _records(Simulation(cluster, bare, seed=1))
    assert _records(Simulation(cluster, wfs, seed=1)) == base
    assert _records(Simulation(cluster, bare, seed=1, prefix_cache_blocks="kv")) == base
    assert _records(Simulation(cluster, wfs, seed=1, prefix_cache_blocks="kv")) != base


def _first_slot_to(p: int):  # noqa: ANN202
    def act(ctx) -> int:  # noqa: ANN001
        k = int(np.flatnonzero(ctx.valid & ~ctx.picked)[0])
        if ctx.stage == "decode":
            return ctx.action(k, int(ctx.planned_prefill[k]), int(ctx.planned_decode[k]))
        return ctx.action(k, p, 0)

    return act


def _chain_env(visible: bool) -> PDClusterEnv:
    """The two-step chain on the twin-prefill cluster, cache on, hits visible or not."""
    return PDClusterEnv(
        cluster=twin_prefill_cluster(),
        trace=[chain()],
        prefix_cache=True,
        prefix_cache_visible=visible,
    )


@pytest.mark.parametrize("visible", [True, False])
def test_decision_context_sees_hits_and_prices_uncached_prefill(visible: bool):
    env = _chain_env(visible)
    act = _first_slot_to(0)
    _, info = env.reset(seed=0)
    child_ctx = None
    done = False
    while not done:
        ctx = info["decision_context"]
        if ctx.stage == "prefill" and ctx.call_ids[0] == "w0/step1":
            child_ctx = ctx
        _, _, term, trunc, info = env.step(act(ctx))
        done = term or trunc
    assert child_ctx is not None
    lat = env.sim.prefill[0].latency
    if visible:
        assert child_ctx.prefix_hit_tokens[0].tolist() == [4096, 0]
        assert child_ctx.prefill_time[0, 0] == lat.prefill_time(1000, 1, 4096)
    else:
        assert child_ctx.prefix_hit_tokens[0].tolist() == [0, 0]
        assert child_ctx.prefill_time[0, 0] == lat.prefill_time(5096)
    assert child_ctx.prefill_time[0, 1] == lat.prefill_time(5096)
    # the cache is physical either way: the child hit on instance 0
    cached = {r.node_id: r.cached_tokens for r in env.sim.result().calls}
    assert cached == {"step0": 0, "step1": 4096}


@pytest.mark.parametrize("rule", ["earliest_finish", "heterogeneity_aware"])
def test_speed_aware_placement_follows_the_cache_only_when_visible(rule: str):
    import heuristics.pd_cluster.placement as placement

    place = getattr(placement, rule)

    def child_prefill(visible: bool) -> int:
        """The prefill instance ``rule`` picks for step1 after step0 ran on instance 1."""
        env = _chain_env(visible)
        parent_on_1 = _first_slot_to(1)
        _, info = env.reset(seed=0)
        while True:
            ctx = info["decision_context"]
            if ctx.stage == "prefill" and ctx.call_ids[0] == "w0/step1":
                return place(ctx, 0)[0]
            _, _, term, trunc, info = env.step(parent_on_1(ctx))
            assert not (term or trunc)

    assert child_prefill(True) == 1  # the hit makes the parent's instance the earliest finish
    assert child_prefill(False) == 0  # blind: both instances look alike, the lowest wins
