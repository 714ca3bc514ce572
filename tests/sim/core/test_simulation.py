"""Specifications of the discrete-event simulator (envs.sim)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.sim import (
    Assignment,
    DefaultScheduler,
    SchedulingError,
    Simulation,
    WorkloadError,
    load_cluster,
)
from envs.sim.hardware.cluster import ClusterConfigError, cluster_from_dict, cluster_names
from traces.schema import LLMNode, Request, ToolNode, Workflow

MODEL = "llama3.1-70b"


def small_mono(model: str = "llama3.1-8b") -> object:
    return cluster_from_dict(
        {
            "name": "tiny-mono",
            "architecture": "monolithic",
            "default_model": model,
            "tensor_parallel": {model: {"a40": 1, "h800": 1}},
            "instances": [
                {"gpu": "a40", "max_batch_size": 8},
                {"gpu": "h800", "max_batch_size": 8},
            ],
        }
    )


def diamond(i: int, arrival: float, sizes: tuple[int, ...], model: str = MODEL) -> Workflow:
    """a -> tool -> (b, c) -> d."""
    a, b, c, d, o = sizes
    return Workflow(
        f"w{i}",
        arrival,
        (
            LLMNode("a", model, a, o),
            ToolNode("t", 0.05, ("a",)),
            LLMNode("b", model, b, o + 3, ("t",)),
            LLMNode("c", model, c, 2 * o + 1, ("t",)),
            LLMNode("d", model, d, o, ("b", "c")),
        ),
    )


workloads = st.lists(
    st.tuples(
        st.floats(0.0, 0.5),
        st.tuples(*[st.integers(1, 4000)] * 4, st.integers(1, 300)),
    ),
    min_size=1,
    max_size=12,
)


def build(specs: list[tuple[float, tuple[int, ...]]], model: str = MODEL) -> list[Workflow]:
    t = 0.0
    out = []
    for i, (gap, sizes) in enumerate(specs):
        t += gap
        out.append(diamond(i, t, sizes, model))
    return out


def timeline(result) -> list[tuple]:
    return [
        (c.workflow_id, c.node_id, c.prefill_instance, c.decode_instance, c.decode_end)
        for c in result.calls
    ]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads)
def test_decode_fast_forward_matches_token_by_token(tiny_pd_cluster, specs):
    wfs = build(specs)
    cl = tiny_pd_cluster()
    fast = Simulation(cl, wfs, compute_horizons=False).run(DefaultScheduler())
    slow = Simulation(cl, wfs, compute_horizons=False, token_by_token=True).run(DefaultScheduler())
    assert len(fast.calls) == len(slow.calls)
    for a, b in zip(timeline(fast), timeline(slow), strict=True):
        assert a[:4] == b[:4]
        assert a[4] == pytest.approx(b[4], rel=1e-9, abs=1e-9)
    assert fast.events <= slow.events


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads)
def test_monolithic_fast_forward_matches_token_by_token(specs):
    wfs = build(specs, model="llama3.1-8b")
    cl = small_mono()
    fast = Simulation(cl, wfs, compute_horizons=False).run(DefaultScheduler())
    slow = Simulation(cl, wfs, compute_horizons=False, token_by_token=True).run(DefaultScheduler())
    for a, b in zip(timeline(fast), timeline(slow), strict=True):
        assert a[:4] == b[:4]
        assert a[4] == pytest.approx(b[4], rel=1e-9, abs=1e-9)


def test_kv_capacity_is_never_exceeded_under_pressure():
    # 60 long calls at once on one decode instance: their footprint is several times its capacity.
    cl = cluster_from_dict(
        {
            "name": "one-decode",
            "architecture": "pd",
            "tensor_parallel": {MODEL: {"a100-80g": 4}},
            "default_model": MODEL,
            "prefill": [{"gpu": "a100-80g", "count": 2}],
            "decode": [{"gpu": "a100-80g"}],
        }
    )
    reqs = [Request(f"r{i}", 0.01 * i, MODEL, 30000, 2000) for i in range(60)]
    sim = Simulation(cl, reqs, compute_horizons=False)
    res = sim.run(DefaultScheduler())
    dec = sim.decode[0]
    assert 60 * 32000 > 3 * dec.capacity  # the test really creates pressure
    assert dec.peak_reserved <= dec.capacity
    assert dec.peak_reserved > dec.capacity - 32000  # and the engine fills what it can
    assert all(c.decode_end > 0 for c in res.calls)


def test_every_call_completes_exactly_once(tiny_pd_cluster):
    wfs = build([(0.05, (500, 1200, 90, 3000, 40))] * 20)
    sim = Simulation(tiny_pd_cluster(), wfs, compute_horizons=False)
    res = sim.run(DefaultScheduler())
    keys = [(c.workflow_id, c.node_id) for c in res.calls]
    assert len(keys) == len(set(keys)) == 20 * 4
    assert all(c.decode_end >= c.decode_start >= c.transfer_end >= c.prefill_end for c in res.calls)
    assert all(c.prefill_end > c.prefill_start >= c.revealed_at for c in res.calls)
    assert all(w.finish < math.inf for w in res.workflows)
    assert not sim.waiting_prefill and not sim.waiting_decode
    assert not any(sim.decode_inbound.values())


class InboundAuditor(DefaultScheduler):
    """Checks that ``decode_inbound`` holds exactly the planned, not yet admitted calls."""

    def plan(self, sim, inv):
        for d in sim.decode:
            expected = {
                c.uid
                for c in sim.calls
                if c.decode_instance == d.index and c.stage not in ("decode", "done")
            }
            assert set(sim.decode_inbound[d.index]) == expected
        return super().plan(sim, inv)


def test_decode_inbound_tracks_planned_calls_until_admission(tiny_pd_cluster):
    wfs = build([(0.01, (3000, 1200, 90, 3000, 40))] * 12)
    Simulation(tiny_pd_cluster(), wfs, compute_horizons=False).run(InboundAuditor())


class RevealAuditor(DefaultScheduler):
    """Checks, at every invocation, that only revealed nodes are visible."""

    def __init__(self) -> None:
        self.checked = 0

    def plan(self, sim, inv):
        for run in sim.runs:
            visible = {n.id for n in run.revealed_nodes()}
            for node_id in visible:
                assert all(p in run.finished for p in run.nodes[node_id].parents)
            for node_id, node in run.nodes.items():
                if node_id not in visible and node.parents:
                    assert not all(p in run.finished for p in node.parents) or run.done
            assert set(run.calls) <= visible
        for c in inv.calls:
            assert all(p in c.workflow.finished for p in c.node.parents)
            self.checked += 1
        return super().plan(sim, inv)


def test_online_reveal_never_exposes_an_unrevealed_node(tiny_pd_cluster):
    wfs = build([(0.02, (800, 300, 2500, 100, 64))] * 15)
    auditor = RevealAuditor()
    res = Simulation(tiny_pd_cluster(), wfs, compute_horizons=False).run(auditor)
    assert auditor.checked > 0
    by_key = {(c.workflow_id, c.node_id): c for c in res.calls}
    for w in wfs:
        for node in w.nodes:
            if isinstance(node, LLMNode):
                for p in node.parents:
                    if (w.id, p) in by_key:
                        assert by_key[(w.id, node.id)].revealed_at >= by_key[(w.id, p)].decode_end


@pytest.mark.parametrize("preset", ["hetero-1", "homo-h200-4p4d"])
def test_horizon_is_at_most_completion_when_run_alone(preset):
    cl = load_cluster(preset)
    for i, sizes in enumerate([(200, 4000, 50, 900, 30), (3000, 3000, 3000, 3000, 400)]):
        wf = diamond(i, 0.0, sizes)
        res = Simulation(cl, [wf]).run(DefaultScheduler())
        w = res.workflows[0]
        assert 0 < w.horizon <= w.completion_time * (1 + 1e-9)


def test_same_seed_gives_identical_records(tiny_pd_cluster):
    wfs = build([(0.03, (700, 1500, 200, 2500, 80))] * 25)
    runs = [
        Simulation(tiny_pd_cluster(), wfs, seed=s, estimate_error=0.3).run(DefaultScheduler())
        for s in (7, 7, 8)
    ]
    a, b, c = (
        [dataclasses.astuple(x) for x in r.calls] + [dataclasses.astuple(x) for x in r.workflows]
        for r in runs
    )
    assert a == b
    assert a != c  # the seed does reach the estimate-error draws


def test_workflow_with_cycle_names_the_nodes(tiny_pd_cluster):
    wf = Workflow(
        "bad", 0.0, (LLMNode("x", MODEL, 10, 10, ("y",)), LLMNode("y", MODEL, 10, 10, ("x",)))
    )
    with pytest.raises(WorkloadError, match=r"'bad'.*cycle.*'x'"):
        Simulation(tiny_pd_cluster(), [wf])


def test_workflow_with_missing_parent_names_the_node(tiny_pd_cluster):
    wf = Workflow("bad", 0.0, (LLMNode("x", MODEL, 10, 10, ("ghost",)),))
    with pytest.raises(WorkloadError, match=r"node 'x'.*unknown parent 'ghost'"):
        Simulation(tiny_pd_cluster(), [wf])


def test_workflow_with_negative_tokens_names_the_node(tiny_pd_cluster):
    wf = Workflow("bad", 0.0, (LLMNode("x", MODEL, 10, -5),))
    with pytest.raises(WorkloadError, match=r"node 'x' has output_tokens=-5"):
        Simulation(tiny_pd_cluster(), [wf])


def test_unsorted_workload_and_unserved_model_are_rejected(tiny_pd_cluster):
    w0 = diamond(0, 1.0, (10, 10, 10, 10, 10))
    w1 = diamond(1, 0.5, (10, 10, 10, 10, 10))
    with pytest.raises(WorkloadError, match="not sorted by arrival"):
        Simulation(tiny_pd_cluster(), [w0, w1])
    with pytest.raises(WorkloadError, match="needs model 'qwen2.5-14b'"):
        Simulation(tiny_pd_cluster(), [diamond(0, 0.0, (10, 10, 10, 10, 10), model="qwen2.5-14b")])


def test_illegal_plan_raises_and_leaves_state_untouched(tiny_pd_cluster):
    sim = Simulation(
        tiny_pd_cluster(), build([(0.0, (100, 100, 100, 100, 10))]), compute_horizons=False
    )
    inv = sim.advance()
    assert inv is not None and inv.stage == "prefill"
    call = inv.calls[0]
    decode_idx = sim.decode[0].index
    with pytest.raises(SchedulingError, match="not a prefill instance"):
        sim.apply([Assignment(call, 0.0, decode_idx, decode_idx)])
    with pytest.raises(SchedulingError, match="without an instance"):
        sim.apply([])
    assert call.prefill_instance is None and sim.pending
    sim.apply([Assignment(call, 0.0, sim.prefill[1].index, decode_idx)])
    assert call.prefill_instance == sim.prefill[1].index


def test_prefix_cache_hits_shorten_prefill():
    cl = small_mono()
    hashes = tuple(range(8))
    reqs = [
        Request("r0", 0.0, "llama3.1-8b", 4096, 10, prefix_hashes=hashes),
        Request("r1", 5.0, "llama3.1-8b", 4096, 10, prefix_hashes=hashes),
    ]

    class Pin(DefaultScheduler):
        def plan(self, sim, inv):
            return [Assignment(c, 0.0, sim.monolithic[1].index) for c in inv.calls]

    sim = Simulation(cl, reqs, compute_horizons=False, prefix_cache_blocks=64)
    res = sim.run(Pin())
    r0, r1 = res.calls
    assert r0.cached_tokens == 0
    assert r1.cached_tokens == 4095  # 8 blocks of 512 cover the prompt; one token recomputed
    assert (r1.prefill_end - r1.prefill_start) < (r0.prefill_end - r0.prefill_start)


def test_cluster_presets_load_with_paper_sizes():
    names = cluster_names()
    for n in ["hetero-1", "hetero-2", "homo-h200-4p4d", "homo-a100-4p4d", "goodserve-4"]:
        assert n in names
    h1 = load_cluster("hetero-1")
    assert len(h1.by_role("prefill")) == len(h1.by_role("decode")) == 8
    assert [i.gpu for i in h1.by_role("prefill")].count("h200") == 3
    q = load_cluster("hetero-1", model="qwen3-235b-a22b")
    assert {(i.gpu, i.tp) for i in q.instances} == {("a100-80g", 8), ("h100-sxm", 8), ("h200", 4)}
    h2 = load_cluster("hetero-2")
    assert len(h2.by_role("decode")) == 10
    pool = load_cluster("scepsy-16")
    assert pool.topology is not None and pool.topology.num_gpus == 16


def test_unknown_preset_and_unsupported_model_get_clear_errors():
    with pytest.raises(ClusterConfigError, match="known presets: .*hetero-1"):
        load_cluster("hetero-9")
    with pytest.raises(
        ClusterConfigError, match=r"no tensor-parallel table for model 'llama3\.1-8b'"
    ):
        load_cluster("hetero-1", model="llama3.1-8b")
