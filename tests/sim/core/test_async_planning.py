"""Specifications of asynchronous planning (HexAgent §4.3 "Asynchronous planning avoids
blocking", §5.2, Algorithm 1 lines 5–7 and 23): ``Simulation.apply(plan, delay=...)`` and
PDCluster's ``planning_delay``."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.pd_cluster import PDClusterEnv
from envs.sim import Assignment, DefaultScheduler, SchedulingError, Simulation
from envs.sim.core.scheduler import EarliestFinishScheduler
from envs.sim.hardware.cluster import cluster_from_dict
from heuristics import make_policy
from traces.generators import generate
from traces.schema import LLMNode, ToolNode, Workflow

MODEL = "llama3.1-70b"


def fan(wid: str, arrival: float, inputs: tuple[int, ...], output: int = 8) -> Workflow:
    """Parallel source calls ``s0, s1, ...`` joined by a tool."""
    calls = tuple(LLMNode(f"s{i}", MODEL, n, output) for i, n in enumerate(inputs))
    tool = ToolNode("t", 0.01, tuple(c.id for c in calls))
    return Workflow(wid, arrival, (*calls, tool))


def record(res, wid: str, node: str):
    return next(c for c in res.calls if c.workflow_id == wid and c.node_id == node)


def other_prefill(sim: Simulation, index: int) -> int:
    return next(p.index for p in sim.prefill if p.index != index)


def fallback_choice(sim: Simulation, inv) -> dict[int, tuple[int, int]]:
    """uid -> the (prefill, decode) pair the fallback (least-loaded) gives ``inv``'s new calls."""
    return {
        a.call.uid: (a.prefill_instance, a.decode_instance)
        for a in DefaultScheduler().plan(sim, inv)
    }


def finish(sim: Simulation):
    while (inv := sim.advance()) is not None:
        sim.apply(DefaultScheduler().plan(sim, inv))
    return sim.result()


def test_late_plan_never_moves_a_call_that_started_under_the_fallback(tiny_pd_cluster):
    sim = Simulation(tiny_pd_cluster(), [fan("w", 0.0, (4000,))], compute_horizons=False)
    inv = sim.advance()
    assert inv.stage == "prefill"
    (call,) = inv.calls
    fb_p, fb_d = fallback_choice(sim, inv)[call.uid]
    plan_p = other_prefill(sim, fb_p)
    plan_d = next(d.index for d in sim.decode if d.index != fb_d)
    sim.apply([Assignment(call, 0.0, plan_p, plan_d)], delay=0.5)
    res = finish(sim)
    rec = record(res, "w", "s0")
    # The fallback's idle prefill instance started it at once; the plan landing at 0.5 s found
    # it in service and left its placement alone.
    assert (rec.prefill_instance, rec.decode_instance) == (fb_p, fb_d)
    assert rec.prefill_start == 0.0
    stats = res.extra["planning"]
    assert stats["skipped"]["prefill"] == 1
    assert stats["started_on_fallback"]["prefill"] == 1


def test_late_plan_moves_a_call_still_waiting_when_it_lands(tiny_pd_cluster):
    first = fan("w", 0.0, (6000, 6000, 6000))
    probe = Simulation(tiny_pd_cluster(), [first], compute_horizons=False)
    h200, a100, dec = probe.prefill[1].index, probe.prefill[0].index, probe.decode[0].index
    delay = probe.prefill[1].latency.prefill_time(6000) / 2
    # w's three calls queue on the H200 (blocking plan); v arrives while w/s0 is in prefill.
    sim = Simulation(
        tiny_pd_cluster(), [first, fan("v", delay / 2, (500,))], compute_horizons=False
    )
    inv = sim.advance()
    e0, e1, e2 = inv.calls
    sim.apply([Assignment(c, float(k), h200, dec) for k, c in enumerate((e0, e1, e2))])
    inv = sim.advance()
    (v0,) = inv.new_calls
    assert inv.time == pytest.approx(delay / 2)
    assert [c.uid for c in inv.calls] == [e1.uid, e2.uid, v0.uid]  # e0 is in service
    assert fallback_choice(sim, inv)[v0.uid][0] == a100
    plan = [
        Assignment(e1, 0.0, h200, dec),
        Assignment(e2, 1.0, a100, dec),  # still waiting when the plan lands: moves
        Assignment(v0, 2.0, h200, dec),  # started on the fallback's idle A100: stays
    ]
    sim.apply(plan, delay=delay)
    land = inv.time + delay
    res = finish(sim)
    r_e0, r_e2, r_v0 = record(res, "w", "s0"), record(res, "w", "s2"), record(res, "v", "s0")
    assert r_e0.prefill_end > land  # the H200 was still busy: e2 was waiting at the landing
    assert r_v0.prefill_instance == a100 and r_v0.prefill_start == pytest.approx(inv.time)
    assert r_e2.prefill_instance == a100
    assert r_e2.prefill_start == pytest.approx(max(land, r_v0.prefill_end))
    assert record(res, "w", "s1").prefill_instance == h200
    stats = res.extra["planning"]
    assert stats["plans"] == 1 and stats["skipped"]["prefill"] == 1


def test_late_decode_plan_keeps_the_priority_of_a_call_already_decoding(tiny_pd_cluster):
    sim = Simulation(tiny_pd_cluster(), [fan("w", 0.0, (300,), output=50)], compute_horizons=False)
    inv = sim.advance()
    (call,) = inv.calls
    sim.apply([Assignment(call, 7.0, sim.prefill[1].index, sim.decode[1].index)])
    inv = sim.advance()
    assert inv.stage == "decode" and inv.calls == [call]
    sim.apply([Assignment(call, 3.0)], delay=0.2)
    res = finish(sim)
    # The idle decode engine admitted it at the transfer's instant, before the plan landed.
    assert call.decode_priority == 7.0
    assert record(res, "w", "s0").decode_start == pytest.approx(inv.time)
    assert res.extra["planning"]["skipped"]["decode"] == 1
    assert res.extra["planning"]["started_on_fallback"]["decode"] == 1


def test_a_landed_plan_reaches_the_calls_it_leaves_out():
    # Decode batch of one: w/s1 waits for decode while w/s0 decodes. Both decode plans are empty
    # (every call keeps its priority): s0's lands after s0 started (it ran on the fallback),
    # s1's while s1 still waits, so s1 started under a plan.
    cluster = cluster_from_dict(
        {
            "name": "one-seat",
            "architecture": "pd",
            "default_model": MODEL,
            "tensor_parallel": {MODEL: {"h200": 4}},
            "prefill": [{"gpu": "h200"}, {"gpu": "h200"}],
            "decode": [{"gpu": "h200", "max_batch_size": 1}],
        }
    )
    sim = Simulation(cluster, [fan("w", 0.0, (300, 300), output=200)], compute_horizons=False)
    inv = sim.advance()
    d = sim.decode[0].index
    sim.apply([Assignment(c, float(k), sim.prefill[k].index, d) for k, c in enumerate(inv.calls)])
    decode_invocations = 0
    while (inv := sim.advance()) is not None:
        assert inv.stage == "decode"
        decode_invocations += 1
        sim.apply([], delay=0.001)
    stats = sim.result().extra["planning"]
    assert decode_invocations == 2 and stats["fallback_calls"]["decode"] == 2
    assert stats["started_on_fallback"]["decode"] == 1


def test_invocations_of_a_stage_are_absorbed_while_its_plan_is_in_flight(tiny_pd_cluster):
    delay = 0.2
    records = [fan(f"w{i}", 0.05 * i, (2000, 1500)) for i in range(8)]
    sim = Simulation(tiny_pd_cluster(), records, compute_horizons=False)
    applied: dict[str, float] = {}
    triggers = []
    handed_out = 0
    while (inv := sim.advance()) is not None:
        if inv.stage in applied:
            # The stage's last plan has landed before any new invocation of that stage.
            assert inv.time >= applied[inv.stage] + delay - 1e-12
        waiting = sim.waiting_decode if inv.stage == "decode" else sim.waiting_prefill
        assert {c.uid for c in inv.calls} == set(waiting)  # every call still waiting
        triggers.append(inv.trigger)
        handed_out += 1
        applied[inv.stage] = inv.time
        sim.apply(EarliestFinishScheduler().plan(sim, inv), delay=delay)
    res = sim.result()
    stats = res.extra["planning"]
    assert all(math.isfinite(w.completion_time) for w in res.workflows)
    assert stats["absorbed"] > 0 and stats["replans"] > 0
    assert triggers.count("replan") == stats["replans"]
    assert stats["plans"] == handed_out
    assert stats["delay_mean"] == pytest.approx(delay) and stats["delay_max"] == delay


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.floats(0.0, 0.3), st.integers(50, 5000)), min_size=1, max_size=8),
    st.floats(0.001, 0.5),
)
def test_every_call_finishes_once_and_a_started_call_keeps_its_instances(
    tiny_pd_cluster, arrivals, delay
):
    arrivals.sort()
    records = [fan(f"w{i}", t, (n, n // 2 + 1)) for i, (t, n) in enumerate(arrivals)]
    sim = Simulation(tiny_pd_cluster(), records, compute_horizons=False)
    started: dict[int, tuple[int, int]] = {}
    while (inv := sim.advance()) is not None:
        for c in sim.calls:
            if c.prefill_start >= 0:
                pair = (c.prefill_instance, c.decode_instance)
                assert started.setdefault(c.uid, pair) == pair, f"{c.id} moved after it started"
        sim.apply(EarliestFinishScheduler().plan(sim, inv), delay=delay)
    res = sim.result()
    assert len(res.calls) == 2 * len(records)
    assert all(c.decode_end >= c.decode_start >= c.transfer_end >= c.prefill_end for c in res.calls)
    for uid, pair in started.items():
        c = sim.calls[uid]
        assert (c.prefill_instance, c.decode_instance) == pair


def test_zero_delay_reproduces_the_blocking_run_exactly(tiny_pd_cluster):
    records = generate("mixed", seed=0, count=20)
    blocking = Simulation(tiny_pd_cluster(), records, seed=0).run(EarliestFinishScheduler())
    zero = Simulation(tiny_pd_cluster(), records, seed=0).run(EarliestFinishScheduler(), 0.0)
    late = Simulation(tiny_pd_cluster(), records, seed=0).run(EarliestFinishScheduler(), 0.05)
    rows = [dataclasses.astuple(r) for r in blocking.calls]
    assert [dataclasses.astuple(r) for r in zero.calls] == rows
    assert [dataclasses.astuple(r) for r in zero.workflows] == [
        dataclasses.astuple(r) for r in blocking.workflows
    ]
    assert zero.invocations == blocking.invocations and zero.extra["planning"]["plans"] == 0
    assert [dataclasses.astuple(r) for r in late.calls] != rows  # the delay is not a no-op


def test_env_zero_delay_reproduces_the_blocking_episode():
    def episode(**kw):
        env = PDClusterEnv(workload="mixed", workload_count=6, **kw)
        policy = make_policy("hexagent")
        policy.reset()
        obs, info = env.reset(seed=1)
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(policy.act(obs, info))
            done = term or trunc
        return info

    base, zero = episode(), episode(planning_delay=0)
    assert zero["completion_times"] == base["completion_times"]
    assert zero["invocations"] == base["invocations"] and zero["steps"] == base["steps"]
    assert base["planning"]["plans"] == 0 and base["planning"]["planning_delay"] is None
    fixed = episode(planning_delay=0.02)
    assert 0 < fixed["planning"]["plans"] <= fixed["invocations"]
    assert fixed["planning"]["delay_mean"] == pytest.approx(0.02)
    measured = episode(planning_delay="measured", planning_delay_scale=3.0)
    p = measured["planning"]
    assert 0 < p["plans"] <= measured["invocations"] and p["measured_wall_mean"] > 0
    assert p["delay_mean"] == pytest.approx(3.0 * p["measured_wall_mean"])
    assert p["delay_max"] == pytest.approx(3.0 * p["measured_wall_max"])


def twin_pd() -> object:
    """2 identical H200 prefill instances, 1 H200 decode instance."""
    return cluster_from_dict(
        {
            "name": "twin-pd",
            "architecture": "pd",
            "default_model": MODEL,
            "tensor_parallel": {MODEL: {"h200": 4}},
            "prefill": [{"gpu": "h200"}, {"gpu": "h200"}],
            "decode": [{"gpu": "h200"}],
        }
    )


def two_pending_prefill_invocations() -> Simulation:
    """Two chains a -> b served in lockstep, so both b's are revealed in one event: two prefill
    invocations are pending at once."""
    chains = [
        Workflow(w, 0.0, (LLMNode("a", MODEL, 500, 20), LLMNode("b", MODEL, 300, 5, ("a",))))
        for w in ("w", "v")
    ]
    sim = Simulation(twin_pd(), chains, compute_horizons=False)
    sim.advance()
    while len(sim.pending) < 2:
        inv = sim.pending[0]
        if inv.stage == "prefill":  # one a per prefill instance: they run in lockstep
            d = sim.decode[0].index
            sim.apply(
                [Assignment(c, 0.0, sim.prefill[k].index, d) for k, c in enumerate(inv.calls)]
            )
        else:
            sim.apply([])
        assert sim.advance() is not None, "the chains never revealed their b's together"
    return sim


def test_pending_invocations_of_a_stage_are_absorbed_by_a_delayed_plan():
    sim = two_pending_prefill_invocations()
    first, second = sim.pending
    assert first.stage == second.stage == "prefill"
    (b_w,), (b_v,) = first.new_calls, second.new_calls
    sim.apply(DefaultScheduler().plan(sim, first), delay=0.3)
    # The second is never handed out: its call takes the fallback at once, like b_w.
    assert not sim.pending
    assert b_w.prefill_instance is not None and b_v.prefill_instance is not None
    res = finish(sim)
    stats = res.extra["planning"]
    assert stats["absorbed"] == 1 and stats["fallback_calls"]["prefill"] == 2
    # Both started at once on the idle prefill instances, so nothing waited when the plan
    # landed: its assignment was skipped and no fresh invocation was needed.
    assert stats["started_on_fallback"]["prefill"] == 2 and stats["skipped"]["prefill"] == 1
    assert stats["replans"] == 0
    assert all(math.isfinite(w.completion_time) for w in res.workflows)


def test_a_fallback_call_queues_behind_the_planned_calls():
    # Two calls in service and two queued with priority 6 on the twin prefill instances; a new
    # call placed by the fallback while a long plan is in flight must not overtake them, whatever
    # its reveal time says.
    sim = Simulation(
        twin_pd(),
        [fan("w", 0.0, (3000, 3000, 3000, 3000)), fan("v", 0.01, (3000,))],
        compute_horizons=False,
    )
    inv = sim.advance()
    p0, p1, d = sim.prefill[0].index, sim.prefill[1].index, sim.decode[0].index
    pairs = [(p0, 5.0), (p1, 5.0), (p0, 6.0), (p1, 6.0)]
    sim.apply([Assignment(c, prio, p, d) for c, (p, prio) in zip(inv.calls, pairs, strict=True)])
    inv = sim.advance()
    (v0,) = inv.new_calls
    sim.apply([Assignment(c, 0.0, p0, d) for c in inv.calls], delay=30.0)
    assert v0.prefill_priority > 6.0
    res = finish(sim)
    queued = [record(res, "w", "s2"), record(res, "w", "s3")]
    r_v0 = record(res, "v", "s0")
    assert r_v0.prefill_start >= min(r.prefill_end for r in queued)
    assert res.extra["planning"]["started_on_fallback"]["prefill"] == 1


def test_bad_delays_and_plans_get_clear_errors():
    sim = two_pending_prefill_invocations()
    inv = sim.pending[0]
    (call,) = inv.new_calls
    ok = Assignment(call, 0.0, sim.prefill[0].index, sim.decode[0].index)
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="finite number of seconds >= 0"):
            sim.apply([ok], delay=bad)
    for bad in ("1", True, None):
        with pytest.raises(ValueError, match="number of seconds >= 0"):
            sim.apply([ok], delay=bad)
    (other,) = sim.pending[1].new_calls  # waiting for prefill, but not in invocation 0
    stray = Assignment(other, 1.0, sim.prefill[0].index, sim.decode[0].index)
    with pytest.raises(SchedulingError, match=f"not one of invocation {inv.seq}'s calls"):
        sim.apply([ok, stray], delay=0.1)
    assert call.prefill_instance is None and len(sim.pending) == 2  # untouched
    mono = cluster_from_dict(
        {
            "name": "tiny-mono",
            "architecture": "monolithic",
            "default_model": "llama3.1-8b",
            "tensor_parallel": {"llama3.1-8b": {"a40": 1}},
            "instances": [{"gpu": "a40"}],
        }
    )
    wf = Workflow("m", 0.0, (LLMNode("a", "llama3.1-8b", 100, 5),))
    msim = Simulation(mono, [wf], compute_horizons=False)
    minv = msim.advance()
    with pytest.raises(ValueError, match="P-D stages .* stage 'route'"):
        msim.apply(DefaultScheduler().plan(msim, minv), delay=0.1)
    with pytest.raises(ValueError, match="'tiny-mono' is not a P-D cluster"):
        Simulation(mono, [wf], compute_horizons=False).run(DefaultScheduler(), 0.1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"planning_delay": "fast"}, "planning_delay must be None, a number of seconds"),
        ({"planning_delay": True}, "planning_delay must be None, a number of seconds"),
        ({"planning_delay": -0.1}, "planning_delay must be a finite number"),
        ({"planning_delay": math.nan}, "planning_delay must be a finite number"),
        ({"planning_delay": "measured", "planning_delay_scale": 0}, "finite number > 0"),
        ({"planning_delay": "measured", "planning_delay_scale": "x"}, "number > 0, got 'x'"),
        ({"planning_delay": 0.1, "planning_delay_scale": 2.0}, "needs planning_delay='measured'"),
    ],
)
def test_bad_planning_options_get_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PDClusterEnv(workload="mixed", workload_count=2, **kwargs)
