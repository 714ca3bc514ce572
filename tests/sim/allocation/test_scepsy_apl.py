"""The Aggregate LLM Pipeline (Scepsy §4, Eq. 1–2) on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from envs.sim.allocation.allocations import Allocation, LLMAllocation
from envs.sim.allocation.scepsy import MixturePipeline
from envs.sim.allocation.scepsy.apl import (
    AggregatePipeline,
    LLMProfile,
    ProfilePoint,
    ProfileSet,
    WorkflowStats,
)


def point(rate, mean):
    return ProfilePoint(rate, rate, mean, mean, mean, mean, mean)


def profiles():
    ps = ProfileSet()
    # A: one replica, 1 s at low load rising to 3 s at 4 calls/s, saturating at 5 calls/s.
    ps.add(LLMProfile("a", "g", 1, 0.5, (point(0.5, 1.0), point(2.0, 2.0), point(4.0, 3.0)), 5.0))
    # B: 2 s flat up to 1 call/s, 4 s at 2 calls/s, saturating at 2.5 calls/s.
    ps.add(LLMProfile("b", "g", 2, 1.0, (point(0.2, 2.0), point(1.0, 2.0), point(2.0, 4.0)), 2.5))
    return ps


STATS = WorkflowStats("w", {"a": 3.0, "b": 1.0}, {"a": 1.5, "b": 1.0}, workflows=10)


def alloc(da=2, db=1):
    # a: TP1 @ 0.5 (2 units of F=4 per replica); b: TP2 @ 1.0 (8 units)
    return Allocation(
        (LLMAllocation("a", units=2 * da, tp=1, replicas=da), LLMAllocation("b", 8 * db, 2, db)),
        units_per_gpu=4,
    )


def test_eq1_and_eq2_on_a_two_llm_case():
    apl = AggregatePipeline(STATS, profiles())
    pred = apl.predict(alloc(), rate=1.0)
    # A: call rate 1.0 * 3 / 2 replicas = 1.5/s -> 1 + (1.5 - 0.5) / 1.5 * 1 = 1.6667 s per call,
    #    x n/p = 3/1.5 = 2 -> 3.3333 s; B: 1.0 * 1 / 1 = 1/s -> 2 s, x 1/1 -> 2 s.
    assert pred.per_llm["a"].call_rate == pytest.approx(1.5)
    assert pred.per_llm["a"].latency == pytest.approx((1 + 1 / 1.5) * 2)
    assert pred.per_llm["b"].latency == pytest.approx(2.0)
    assert pred.latency == pytest.approx((1 + 1 / 1.5) * 2 + 2.0)
    # T_w = min(2 * 5 / 3, 1 * 2.5 / 1) = 2.5 (B is the bottleneck)
    assert pred.throughput == pytest.approx(2.5)
    assert pred.bottleneck == "b"


def test_replicas_split_the_load_and_saturation_is_infinite():
    apl = AggregatePipeline(STATS, profiles())
    assert apl.latency(alloc(db=1), 2.6) == math.inf  # B saturates at 2.5 calls/s
    two = apl.predict(alloc(db=2), 2.6)  # 1.3 calls/s each: 2 + 0.3 * 2 = 2.6 s
    assert two.per_llm["b"].latency == pytest.approx(2.6)
    assert two.throughput == pytest.approx(min(2 * 5 / 3, 2 * 2.5))
    assert math.isfinite(two.latency)


def test_profile_interpolates_below_extrapolates_above_and_roundtrips(tmp_path):
    ps = profiles()
    a = ps.get("a", 1, 0.5)
    assert a.latency(0.1) == 1.0  # flat below the first point
    assert a.latency(3.0) == pytest.approx(2.5)
    assert a.latency(4.5) == pytest.approx(3.25)  # last segment's slope towards saturation
    assert a.latency(5.0) == math.inf
    path = tmp_path / "p.json"
    ps.save(path)
    assert ProfileSet.load(path).profiles == ps.profiles
    with pytest.raises(KeyError, match="no profile for a at TP2"):
        ps.get("a", 2, 0.5)


def test_mixture_weights_families_by_their_share_of_the_rate():
    other = WorkflowStats("v", {"b": 2.0}, {"b": 2.0})
    ps = profiles()
    mix = MixturePipeline(
        {"w": AggregatePipeline(STATS, ps), "v": AggregatePipeline(other, ps)},
        {"w": 0.5, "v": 0.5},
    )
    pred = mix.predict(alloc(db=2), 1.0)
    w = AggregatePipeline(STATS, ps).predict(alloc(db=2), 0.5)
    v_alloc = Allocation((LLMAllocation("b", 16, 2, 2),), units_per_gpu=4)
    v = AggregatePipeline(other, ps).predict(v_alloc, 0.5)
    assert pred.latency == pytest.approx(0.5 * w.latency + 0.5 * v.latency)
    assert pred.throughput == pytest.approx(min(w.throughput / 0.5, v.throughput / 0.5))


def test_bad_statistics_are_named():
    with pytest.raises(ValueError, match=r"p\['a'\] must be >= 1"):
        WorkflowStats("w", {"a": 1.0}, {"a": 0.5})
    with pytest.raises(ValueError, match=r"n\['a'\] must be > 0"):
        WorkflowStats("w", {"a": 0.0}, {"a": 1.0})
