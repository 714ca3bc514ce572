"""Specification of envs/sim/allocation/scepsy/tracing.py and profiling.py (Scepsy §4 steps 1–3):
``n_m`` / ``p_m`` from overlapping call intervals, the projection of a workflow DAG onto one
LLM's calls (fan-out and fan-in kept, traced gaps as delays), a profile whose latency grows with
the rate up to a finite ``T_m``, the on-disk cache, and the property an earlier prototype got
wrong: replaying a fan-out workload with its concurrency gives higher latency than replaying its
calls one at a time at the same call rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envs.sim.allocation.scepsy import profiles, replay
from envs.sim.allocation.scepsy.apl import ProfilePoint
from envs.sim.allocation.scepsy.profiles import profile_set
from envs.sim.allocation.scepsy.projection import (
    Projection,
    independent_calls,
    project_trace,
    project_workflow,
    projected_parents,
)
from envs.sim.allocation.scepsy.replay import knee_throughput, replay_point, replica_cluster
from envs.sim.allocation.scepsy.sweep import ReplayConfig, profile_llm
from envs.sim.allocation.scepsy.tracing import (
    Trace,
    split_records,
    split_trace,
    trace_workflows,
    trace_workload,
    union_length,
    workflow_stats,
)
from envs.sim.core.simulation import CallRecord
from envs.sim.hardware.catalog import UnknownNameError
from traces.schema import LLMNode, ToolNode, Workflow

GEN = "llama3.2-1b"
VER = "llama3.1-8b-prm"
BIG = "llama3-8b"
#: small sweeps: a profile in well under a second
FAST = ReplayConfig(min_calls=400, max_calls=800, min_workflows=10, refine=1, confirm=0)


def rec(wid: str, node: str, model: str, start: float, end: float) -> CallRecord:
    return CallRecord(
        wid, node, model, "t", 10, 5, 5, start, 0, 0, start, start, start, start, end, 0
    )


def fan_out_then_one(wid: str, k: int = 3) -> Workflow:
    """``k`` identical parallel GEN calls, then one BIG call after all of them."""
    nodes = [LLMNode(f"a{j}", GEN, 300, 40, (), "gen") for j in range(k)]
    nodes.append(LLMNode("b", BIG, 500, 20, tuple(f"a{j}" for j in range(k)), "gen"))
    return Workflow(wid, 0.0, tuple(nodes), meta={"workload": "toy"})


def beam_toy(wid: str = "beam", steps: int = 3, width: int = 3) -> Workflow:
    """Beam-search shape: per step ``width`` GEN calls, each scored by a VER call, then a select
    tool that gates the next step."""
    nodes: list[LLMNode | ToolNode] = []
    gate: tuple[str, ...] = ()
    for s in range(steps):
        for j in range(width):
            nodes.append(LLMNode(f"s{s}g{j}", GEN, 200 + 50 * s, 30 + 7 * j, gate, "gen"))
            nodes.append(LLMNode(f"s{s}v{j}", VER, 240 + 50 * s, 1, (f"s{s}g{j}",), "ver"))
        nodes.append(ToolNode(f"s{s}sel", 0.002, tuple(f"s{s}v{j}" for j in range(width))))
        gate = (f"s{s}sel",)
    return Workflow(wid, 0.0, tuple(nodes), meta={"workload": "toy"})


# -- §4 steps 1-2: tracing and aggregation -----------------------------------------------------
def test_n_and_p_of_parallel_calls_then_one_call():
    trace = trace_workflows([fan_out_then_one("w0"), fan_out_then_one("w1")])
    stats = workflow_stats(trace)
    assert stats.invocations == {GEN: 3.0, BIG: 1.0}
    assert stats.parallelism[GEN] == pytest.approx(3.0, rel=1e-9)  # batched together: same span
    assert stats.parallelism[BIG] == pytest.approx(1.0)
    assert stats.workflows == 2
    # each workflow ran alone from t=0: identical workflows give identical call times
    by = trace.records_by_workflow()
    assert by["w0"]["b"].revealed_at == by["w1"]["b"].revealed_at > 0
    assert by["w0"]["b"].revealed_at == pytest.approx(
        max(r.decode_end for r in by["w0"].values() if r.model == GEN)
    )


def test_p_is_duration_weighted_and_n_counts_absent_workflows_as_zero():
    records = [
        rec("w1", "x", GEN, 0.0, 1.0),
        rec("w1", "y", GEN, 0.0, 1.0),  # w1: two calls fully overlapping -> busy 2, union 1
        rec("w2", "x", GEN, 0.0, 4.0),  # w2: one call -> busy 4, union 4
        rec("w3", "z", BIG, 0.0, 2.0),  # w3 never calls GEN
    ]
    stats = workflow_stats(records, "toy")
    assert stats.invocations[GEN] == pytest.approx(3 / 3)
    assert stats.invocations[BIG] == pytest.approx(1 / 3)
    assert stats.parallelism[GEN] == pytest.approx(6 / 5)  # not the mean of ratios (1.5)
    # Eq. 1 identity: n·L/p = mean busy (union) time per workflow
    mean_latency = 6 / 3
    assert stats.invocations[GEN] * mean_latency / stats.parallelism[GEN] == pytest.approx(5 / 3)
    staggered = [rec("w", "a", GEN, 0.0, 2.0), rec("w", "b", GEN, 1.0, 3.0)]
    assert workflow_stats(staggered).parallelism[GEN] == pytest.approx(4 / 3)
    assert union_length([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == pytest.approx(4.0)


def test_stats_errors_name_the_culprit():
    records = [rec("w", "a", GEN, 0.0, 1.0)]
    with pytest.raises(ValueError, match="llama3-8b.*absent"):
        workflow_stats(records, models=[BIG])
    with pytest.raises(UnknownNameError):
        workflow_stats(records, models=["no-such-llm"])
    with pytest.raises(ValueError, match="empty"):
        workflow_stats([], "toy")
    with pytest.raises(ValueError, match="empty workload"):
        trace_workflows([])


def test_combined_workload_splits_into_its_families():
    trace = trace_workload("rag_beam_combined", count=6, seed=3)
    parts = split_trace(trace)
    assert set(parts) <= {"rag_reranker", "beam_search"} and len(parts) == 2
    assert sum(len(t.workflows) for t in parts.values()) == 6
    assert sum(len(t.records) for t in parts.values()) == len(trace.records)
    assert set(parts["beam_search"].models) == {GEN, VER}
    by_id = split_records(trace.records)  # the same split from workflow ids alone
    assert {f: len(r) for f, r in by_id.items()} == {f: len(t.records) for f, t in parts.items()}
    stats = workflow_stats(parts["rag_reranker"])
    assert set(stats.models) == {"e5-base-v2", "bge-reranker-base", BIG}


# -- §4 step 3: projection -------------------------------------------------------------------
def test_projection_keeps_fan_out_and_fan_in():
    wf = beam_toy()
    gen = projected_parents(wf, GEN)
    assert gen["s0g1"] == ()
    for s in (1, 2):
        for j in range(3):  # step s's generators wait for all of step s-1's (fan-in)
            assert gen[f"s{s}g{j}"] == tuple(f"s{s - 1}g{i}" for i in range(3))
    ver = projected_parents(wf, VER)
    assert ver["s0v2"] == ()
    assert ver["s2v0"] == ("s1v0", "s1v1", "s1v2")
    # a real beam-search workflow: every step's 8 generator calls depend on all 8 of the previous
    real = trace_workload("beam_search", count=1, seed=5).workflows[0]
    par = projected_parents(real, GEN)
    depth = real.meta["depth"]
    for s in range(1, depth):
        assert all(par[f"s{s}g{j}"] == tuple(f"s{s - 1}g{i}" for i in range(8)) for j in range(8))


def test_projection_turns_traced_gaps_into_shared_delays():
    trace = trace_workflows([beam_toy()])
    recs = trace.records_by_workflow()["beam"]
    p = project_workflow(trace.workflows[0], GEN, recs)
    assert p is not None and p.calls == 9
    nodes = {n.id: n for n in p.nodes}
    gaps = [n for n in p.nodes if isinstance(n, ToolNode)]
    assert len(gaps) == 2  # one delay per step boundary, shared by the step's 3 generators
    for s in (1, 2):
        gid = nodes[f"s{s}g0"].parents[0]
        assert all(nodes[f"s{s}g{j}"].parents == (gid,) for j in range(3))
        gap = nodes[gid]
        assert gap.parents == tuple(f"s{s - 1}g{i}" for i in range(3))
        ready = max(recs[f"s{s - 1}g{i}"].decode_end for i in range(3))
        assert gap.latency == pytest.approx(recs[f"s{s}g0"].revealed_at - ready, abs=1e-9)
        assert gap.latency > 0.002  # the verifier call + the select tool, not just the tool
    assert p.offsets[0] == 0.0 and len(p.offsets) == 9
    assert p.span == pytest.approx(max(r.decode_end for r in recs.values() if r.model == GEN))
    bare = project_workflow(trace.workflows[0], GEN, recs, keep_gaps=False)
    assert bare is not None and not any(isinstance(n, ToolNode) for n in bare.nodes)
    assert project_workflow(trace.workflows[0], BIG, recs) is None
    with pytest.raises(ValueError, match="absent from workload"):
        project_trace(trace, BIG)


# -- §4 step 3: replay and profiles ----------------------------------------------------------
def single_calls(n: int = 40) -> list[Workflow]:
    rng = np.random.default_rng(0)
    return [
        Workflow(f"r{i}", 0.0, (LLMNode("c", GEN, int(rng.integers(200, 800)), 60, ()),))
        for i in range(n)
    ]


def test_profile_latency_grows_with_rate_and_saturates():
    prof = profile_llm(GEN, 1, 0.5, single_calls(), config=FAST)
    t_m = prof.max_throughput
    assert 0 < t_m < math.inf
    below = [q for q in prof.points if q.rate < t_m]
    assert len(below) >= 4 and any(q.rate > t_m for q in prof.points)  # swept past saturation
    assert below[-1].mean > 1.2 * below[0].mean  # queueing near T_m
    # T_m is read at the knee: the median stays within 2x the unloaded one up to it
    assert prof.unloaded_p50 > 0
    assert all(q.p50 <= 2.0 * prof.unloaded_p50 for q in below)
    assert prof.latency(below[0].rate) == pytest.approx(below[0].mean)
    assert prof.latency(0.5 * t_m) < prof.latency(0.95 * t_m) < math.inf
    assert prof.latency(t_m) == math.inf and prof.latency(3 * t_m) == math.inf
    assert prof.points[0].throughput == pytest.approx(prof.points[0].rate, rel=0.1)
    faster = profile_llm(GEN, 1, 1.0, single_calls(), config=FAST)  # a whole GPU
    assert faster.max_throughput > 1.3 * t_m
    assert faster.points[0].mean < prof.points[0].mean


def test_concurrency_preserving_replay_beats_one_at_a_time_in_latency():
    fan = [
        Workflow(f"f{i}", 0.0, tuple(LLMNode(f"c{j}", BIG, 1500, 60, ()) for j in range(8)))
        for i in range(6)
    ]
    proj = project_trace(trace_workflows(fan), BIG)
    alone = independent_calls(proj)
    assert len(alone) == 48 and all(p.calls == 1 for p in alone)
    cluster = replica_cluster(BIG, 1, 1.0, "rtx-a6000")
    rate = 0.8  # calls/s, light load for one-at-a-time arrivals
    together = replay_point(proj, cluster, rate, workflows=60, warmup=0.1)
    spread = replay_point(alone, cluster, rate, workflows=480, warmup=0.1)  # the same 480 calls
    assert together.point.mean > 1.5 * spread.point.mean
    assert together.point.p50 > spread.point.p50
    # and profile_llm replays the projection, not its calls one by one
    wide = [
        Workflow(f"g{i}", 0.0, tuple(LLMNode(f"c{j}", GEN, 1500, 60, ()) for j in range(8)))
        for i in range(6)
    ]
    gen = project_trace(trace_workflows(wide), GEN)
    kept = profile_llm(GEN, 1, 0.5, gen, config=FAST)
    lost = profile_llm(GEN, 1, 0.5, independent_calls(gen), config=FAST)
    assert kept.points[0].mean > 1.3 * lost.points[0].mean


def test_cache_hit_returns_the_same_profiles_without_simulating(tmp_path, monkeypatch):
    trace = trace_workflows(single_calls(20), name="singles")
    kw = dict(tps=(1,), fractions=(1.0,), config=FAST, cache_dir=tmp_path, progress=False)
    first = profile_set(trace, [GEN], **kw)
    assert len(first) == 1 and len(list(tmp_path.glob("*.json"))) == 1

    def boom(*a, **k):
        raise AssertionError("a cache hit must not simulate")

    monkeypatch.setattr(replay, "_simulate", boom)
    again = profile_set(trace, [GEN], **kw)
    assert again.profiles == first.profiles
    # any change of the configuration misses the cache (and would simulate)
    with pytest.raises(AssertionError, match="must not simulate"):
        profile_set(trace, [GEN], **{**kw, "config": ReplayConfig(**{**FAST.__dict__, "seed": 1})})


def test_profile_set_enumerates_feasible_shares_and_rejects_absent_models(tmp_path):
    trace = trace_workflows(single_calls(10), name="singles")
    with pytest.raises(ValueError, match="llama3-8b.*absent"):
        profile_set(trace, [BIG], cache_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="empty workload"):
        profile_llm(GEN, 1, 1.0, [], config=FAST)
    configs = profiles._configs([BIG, GEN], (1, 2, 4), "rtx-a6000", 4)
    assert (BIG, 1, 0.25) not in configs  # 8B weights + KV do not fit a quarter A6000 at TP1
    assert (BIG, 4, 0.25) in configs and (GEN, 1, 0.25) in configs
    assert all(0 < f <= 1 for _, _, f in configs)


def test_projection_objects_carry_no_foreign_calls():
    trace = Trace("t", (beam_toy(),), trace_workflows([beam_toy()]).records)
    for p in project_trace(trace, VER):
        assert isinstance(p, Projection)
        assert {n.model for n in p.nodes if isinstance(n, LLMNode)} == {VER}


def test_tracing_is_memoised_however_the_arguments_are_spelled() -> None:
    a = trace_workload("rag_reranker", count=3, seed=11)
    assert trace_workload("rag_reranker", 3, 11, gpu="rtx-a6000", engine="vllm") is a
    assert trace_workload("rag_reranker", count=3, seed=12) is not a


def test_pipelines_are_built_once_per_process_by_position_or_by_name(monkeypatch) -> None:
    import envs.sim.allocation.scepsy as scepsy

    built = []
    monkeypatch.setattr(scepsy, "_PIPELINES", {})
    monkeypatch.setattr(scepsy, "_build_pipelines", lambda *a, **k: built.append(a) or {"f": 1})
    first = scepsy.pipelines_for("rag_reranker", "rtx-a6000", 4, "vllm")
    again = scepsy.pipelines_for("rag_reranker", "rtx-a6000", 4, engine="vllm", progress=False)
    assert again is first and len(built) == 1
    scepsy.pipelines_for("rag_reranker", "rtx-a6000", 2, "vllm")
    assert len(built) == 2


def _pt(rate: float, p50: float, completion: float, censored: int = 0) -> ProfilePoint:
    return ProfilePoint(
        rate, rate * min(1.0, completion), p50, p50, p50, p50, p50, 100, completion, censored
    )


def test_knee_is_the_last_rate_with_full_completion_and_a_bounded_median():
    """Constructed sweep (unloaded median 1 s): the queue stays stable up to 4 calls/s (99.5 %
    complete, median 1.9 s); at 5 calls/s the median passes 2x unloaded, and deeper backlog
    (6-8 calls/s) still completes more calls per second. T_m is read at the knee, not there."""
    pts = [
        _pt(1.0, 1.0, 1.0),
        _pt(2.0, 1.1, 1.0),
        _pt(4.0, 1.9, 0.995),
        _pt(5.0, 2.6, 0.995),  # completes, but latency has left the knee
        _pt(6.0, 6.0, 0.97),
        _pt(8.0, 30.0, 0.93),  # deep backlog: the old >= 90 % rule read T_m here
    ]
    assert knee_throughput(pts, 1.0) == pytest.approx(4.0 * 0.995)
    # order of the sweep does not matter; a looser latency factor moves the knee up by one point
    assert knee_throughput(pts[::-1], 1.0, latency_factor=3.0) == pytest.approx(5.0 * 0.995)
    # completion alone: 98 % at 4 calls/s is past the knee even with a short median
    drop = [pts[0], pts[1], _pt(4.0, 1.2, 0.98), _pt(5.0, 1.3, 1.0)]
    assert knee_throughput(drop, 1.0) == pytest.approx(2.0)
    # a point that passes again above a failing one (noise at deep backlog) does not count
    noisy = [pts[0], _pt(2.0, 2.5, 1.0), _pt(3.0, 1.5, 1.0)]
    assert knee_throughput(noisy, 1.0) == pytest.approx(1.0)
    # an unfinished window call is past the knee
    cens = [pts[0], _pt(2.0, 1.1, 1.0, censored=3)]
    assert knee_throughput(cens, 1.0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="already past the knee"):
        knee_throughput([_pt(1.0, 5.0, 1.0)], 1.0)
    with pytest.raises(ValueError, match="unloaded_p50"):
        knee_throughput(pts, 0.0)
