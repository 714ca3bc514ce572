"""Specification of the routing policies (heuristics/routing/base.py, goodserve.py, routers.py):
the registry, feasibility of every pick, migrate-decision behaviour, determinism, and each
router's rule on hand-built RoutingContexts whose answers are computed by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.routing.context import RoutingContext
from heuristics import Policy, make_policy, policies_for
from heuristics.routing.base import Router, argmin_lex, routing_context

ROUTERS = {
    "goodserve",
    "goodserve-no-migration",
    "random-route",
    "power-of-two",
    "round-robin",
    "least-request",
    "lowest-tpm",
    "preble",
    "llumnix",
    "earliest-finish",
    "goodserve+queue-aware",
    "goodserve+shorten",
    "prefix-aware-low",
    "llm-d",
    "sglang-cache-aware",
    "dynamo-kv",
}
MIGRATING = {
    "goodserve", "llumnix", "earliest-finish", "goodserve+queue-aware", "goodserve+shorten",
}  # fmt: skip
ALL_ROUTERS = sorted(policies_for("routing"))


# -- helpers ----------------------------------------------------------------------------------
def routing_ctx(m: int = 3, *, kind: str = "route", current: int = -1, **fields: Any):
    """A RoutingContext over ``m`` idle, feasible instances with capabilities 1, 2, 3, … s
    (instance 0 the strongest); ``meets_deadline`` follows ``estimate`` unless given."""
    time = float(fields.pop("time", 0.0))
    deadline = float(fields.pop("deadline", 10.0))
    f = lambda v: np.asarray(v, dtype=float)  # noqa: E731
    base: dict[str, Any] = dict(
        time=time,
        kind=kind,
        call_id="r0",
        task="sql",
        input_tokens=1000,
        generated=0 if kind == "route" else 100,
        predicted_output_tokens=200,
        predicted_remaining_tokens=200 if kind == "route" else 100,
        arrival=0.0,
        slo=deadline,
        deadline=deadline,
        slack=deadline - time,
        current=current,
        gpus=["gpu"] * m,
        capability=f(np.arange(1, m + 1)),
        q=np.zeros(m),
        p=np.full(m, 0.001),
        d=np.full(m, 0.01),
        running=np.zeros(m, dtype=np.int64),
        waiting=np.zeros(m, dtype=np.int64),
        outstanding=np.zeros(m, dtype=np.int64),
        free_kv_tokens=np.full(m, 10_000.0),
        kv_capacity=np.full(m, 10_000.0),
        queued_prefill_tokens=np.zeros(m),
        outstanding_output_tokens=np.zeros(m),
        tokens_per_minute=np.zeros(m),
        prefix_hit_tokens=np.zeros(m),
        transfer_time=np.zeros(m),
        estimate=np.full(m, 5.0),
        feasible=np.ones(m, dtype=bool),
    )
    base.update(
        {k: (f(v) if isinstance(v, list) and k != "gpus" else v) for k, v in fields.items()}
    )
    base["feasible"] = np.asarray(base["feasible"], dtype=bool)
    if "meets_deadline" not in fields:
        base["meets_deadline"] = time + base["estimate"] <= deadline
    base["meets_deadline"] = np.asarray(base["meets_deadline"], dtype=bool)
    return RoutingContext(**base)


def pick(name: str, ctx: RoutingContext, **kwargs: Any) -> int:
    return make_policy(name, **kwargs).act(None, {"decision_context": ctx})


# -- registry ---------------------------------------------------------------------------------
def test_policies_for_routing_lists_every_router_and_none_leaks_into_pd_cluster():
    assert set(policies_for("routing")) == ROUTERS
    assert not ROUTERS & set(policies_for("pd-cluster"))
    assert "random" in policies_for("pd-cluster")


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_every_router_is_a_policy_named_as_registered(name):
    policy = make_policy(name)
    assert isinstance(policy, Policy)
    assert policy.name == name


def test_routing_context_names_what_info_holds_when_it_is_missing():
    with pytest.raises(ValueError, match=r"RoutingContext.*\['action_mask'\]"):
        routing_context({"action_mask": np.ones(3)})


def test_a_rule_that_picks_an_infeasible_instance_raises_naming_policy_and_choice():
    class Buggy(Router):
        name = "buggy"

        def choose(self, ctx: RoutingContext) -> int:
            return 1

    ctx = routing_ctx(feasible=[True, False, True])
    with pytest.raises(RuntimeError, match=r"'buggy' chose infeasible instance 1"):
        Buggy().act(None, {"decision_context": ctx})
    with pytest.raises(ValueError, match="unknown decision kind 'preempt'"):
        Buggy().act(None, {"decision_context": routing_ctx(kind="preempt")})


def test_ties_go_to_the_more_capable_instance_then_the_lower_index():
    ctx = routing_ctx(4, capability=[3.0, 1.0, 2.0, 1.0])
    assert argmin_lex(ctx, np.arange(4), [np.zeros(4)]) == 1
    for name in ("least-request", "lowest-tpm", "llumnix", "earliest-finish", "preble"):
        assert pick(name, ctx) == 1, name


# -- hand-built routing cases -----------------------------------------------------------------
def test_just_enough_takes_the_weakest_instance_meeting_the_deadline_earliest_finish_the_fastest():
    # capabilities 1, 2, 3 s; estimates 5, 8, 15 s; deadline 10 s -> meets T, T, F
    ctx = routing_ctx(estimate=[5.0, 8.0, 15.0])
    assert pick("goodserve", ctx) == 1
    assert pick("goodserve-no-migration", ctx) == 1
    assert pick("earliest-finish", ctx) == 0


def test_just_enough_breaks_capability_ties_by_smaller_estimate():
    ctx = routing_ctx(capability=[1.0, 2.0, 2.0], estimate=[4.0, 9.0, 7.0])
    assert pick("goodserve", ctx) == 2


def test_goodserve_routes_to_the_earliest_finish_when_no_instance_meets_the_deadline():
    ctx = routing_ctx(estimate=[14.0, 12.0, 20.0])  # deadline 10 s: none meets it
    assert pick("goodserve", ctx) == 1


def test_least_request_and_lowest_tpm_read_outstanding_and_tokens_per_minute():
    ctx = routing_ctx(outstanding=np.array([3, 1, 1]), tokens_per_minute=[100.0, 500.0, 50.0])
    assert pick("least-request", ctx) == 1  # 1 and 2 tie at one request: 1 is faster
    assert pick("lowest-tpm", ctx) == 2


def test_preble_explores_by_missed_prefill_plus_load_plus_eviction():
    # L_in 1000, L̂_out 200; best hit 400 < 600 missed -> explore. cost =
    #   0: 1000·0.001 + 2000·0.001 + 4·200·0.01 + 0              = 1 + 2 + 8 = 11
    #   1: 600·0.002 + 0 + 1·200·0.02 + 0                        = 1.2 + 4   = 5.2
    #   2: 1000·0.004 + 0 + 0 + (1000 + 200 − 500)·0.004         = 4 + 2.8   = 6.8
    ctx = routing_ctx(
        p=[0.001, 0.002, 0.004],
        d=[0.01, 0.02, 0.04],
        running=np.array([4, 1, 0]),
        queued_prefill_tokens=[2000.0, 0.0, 0.0],
        prefix_hit_tokens=[0.0, 400.0, 0.0],
        free_kv_tokens=[10_000.0, 10_000.0, 500.0],
    )
    assert pick("preble", ctx) == 1
    # no hits and room everywhere: 0 -> 11, 1 -> 1000·0.002 + 4 = 6, 2 -> 4 + 0 = 4
    ctx.prefix_hit_tokens = np.zeros(3)
    ctx.free_kv_tokens = np.full(3, 10_000.0)
    assert pick("preble", ctx) == 2


def test_preble_exploits_the_longest_hit_when_it_covers_most_of_the_prompt():
    # hits 600 on 1 and 2 (> 400 missed): exploit; 2 has the lower load (0 vs 3·200·0.01 = 6 s)
    ctx = routing_ctx(prefix_hit_tokens=[0.0, 600.0, 600.0], running=np.array([0, 3, 0]))
    assert pick("preble", ctx) == 2
    assert pick("least-request", ctx) == 0


def test_llumnix_routes_to_the_highest_freeness():
    # F = (free − queued) / max(1, running) = (10000−2000)/4, 10000/1, 500/1 = 2000, 10000, 500
    ctx = routing_ctx(
        running=np.array([4, 1, 0]),
        queued_prefill_tokens=[2000.0, 0.0, 0.0],
        free_kv_tokens=[10_000.0, 10_000.0, 500.0],
    )
    assert pick("llumnix", ctx) == 1


# -- migrate decisions ------------------------------------------------------------------------
def at_risk_on_1(estimate: list[float], meets: list[bool]) -> RoutingContext:
    """Request at risk on instance 1 (capability 2 s) of four: capabilities 1, 2, 4, 1.5 s."""
    return routing_ctx(
        4,
        kind="migrate",
        current=1,
        capability=[1.0, 2.0, 4.0, 1.5],
        estimate=estimate,
        meets_deadline=meets,
    )


def test_goodserve_migrates_to_the_weakest_stronger_instance_that_meets_the_deadline():
    ctx = at_risk_on_1([6.0, 12.0, 3.0, 8.0], [True, False, True, True])
    assert pick("goodserve", ctx) == 3  # stronger: 0 (1 s), 3 (1.5 s); both meet; 3 is weaker
    assert pick("earliest-finish", ctx) == 2  # 3 < 0.9 · 12, though instance 2 is weaker
    assert pick("goodserve-no-migration", ctx) == 1


def test_goodserve_just_enough_keeps_a_request_no_instance_can_save_where_it_is():
    """§3.4 just-enough: no instance's estimate meets the deadline, so GoodServe stays -- even
    though instance 0 would finish sooner than staying (9 s < 12 s) and instance 2 sooner still."""
    none_meet = [False] * 4
    assert pick("goodserve", at_risk_on_1([9.0, 12.0, 2.0, 14.0], none_meet)) == 1
    assert pick("goodserve", at_risk_on_1([0.5, 12.0, 0.1, 14.0], none_meet)) == 1


def test_goodserve_shorten_variant_moves_to_the_fastest_stronger_finish_if_it_beats_staying():
    none_meet = [False] * 4
    assert pick("goodserve+shorten", at_risk_on_1([9.0, 12.0, 2.0, 14.0], none_meet)) == 0
    assert pick("goodserve+shorten", at_risk_on_1([13.0, 12.0, 2.0, 14.0], none_meet)) == 1


def test_goodserve_stays_on_the_strongest_instance_and_when_not_at_risk():
    ctx = at_risk_on_1([6.0, 12.0, 3.0, 8.0], [True, False, True, True])
    ctx.current = 0
    assert pick("goodserve", ctx) == 0
    ctx.current = 1
    ctx.meets_deadline = np.ones(4, dtype=bool)
    assert pick("goodserve", ctx) == 1


def test_llumnix_migrates_out_of_an_overloaded_instance_to_one_still_freer_after_the_move():
    # L_in + L̂_out = 1000 + 200 = 1200 tokens; L̂_rem = 100. Current 0: F = 500 / 10 = 50 < 100
    # (overloaded). After the move: 1: (20000 − 1200) / 3 = 6267; 2: (3000 − 1200) / 1 = 1800
    ctx = routing_ctx(
        kind="migrate",
        current=0,
        free_kv_tokens=[500.0, 20_000.0, 3000.0],
        running=np.array([10, 2, 0]),
    )
    assert pick("llumnix", ctx) == 1
    # overloaded (F = 50 / 1) but every destination ends up less free: 1 -> −200, 2 -> −100
    ctx.free_kv_tokens = np.array([50.0, 1000.0, 1100.0])
    ctx.running = np.array([1, 0, 0])
    assert pick("llumnix", ctx) == 0
    # not overloaded (F = 5000 >= 100): stays although instance 1 is far freer
    ctx.free_kv_tokens = np.array([5000.0, 1e6, 1100.0])
    assert pick("llumnix", ctx) == 0


def test_earliest_finish_stays_unless_a_move_saves_its_margin():
    ctx = routing_ctx(kind="migrate", current=2, estimate=[9.5, 11.0, 10.0])
    assert pick("earliest-finish", ctx) == 2  # 9.5 > 0.9 · 10
    assert pick("earliest-finish", ctx, margin=0.0) == 0


@st.composite
def random_contexts(draw: st.DrawFn) -> RoutingContext:
    m = draw(st.integers(2, 5))
    feasible = np.array(draw(st.lists(st.booleans(), min_size=m, max_size=m)))
    kind = draw(st.sampled_from(["route", "migrate"]))
    current = -1
    if kind == "migrate":
        current = draw(st.integers(0, m - 1))
        feasible[current] = True  # staying is always legal
    if not feasible.any():
        feasible[draw(st.integers(0, m - 1))] = True
    floats = lambda lo, hi: np.array(  # noqa: E731
        draw(st.lists(st.floats(lo, hi), min_size=m, max_size=m))
    )
    ints = lambda hi: np.array(draw(st.lists(st.integers(0, hi), min_size=m, max_size=m)))  # noqa: E731
    estimate = floats(0.1, 100.0)
    return routing_ctx(
        m,
        kind=kind,
        current=current,
        feasible=feasible,
        capability=draw(st.sampled_from([floats(0.5, 5.0), np.ones(m)])),
        estimate=estimate,
        meets_deadline=np.array(draw(st.lists(st.booleans(), min_size=m, max_size=m))),
        p=floats(1e-4, 1e-2),
        d=floats(1e-3, 1e-1),
        running=ints(64),
        outstanding=ints(64),
        free_kv_tokens=floats(-1000.0, 50_000.0),
        queued_prefill_tokens=floats(0.0, 20_000.0),
        tokens_per_minute=floats(0.0, 1e6),
        prefix_hit_tokens=floats(0.0, 1000.0),
        input_tokens=draw(st.integers(1, 1000)),
        predicted_output_tokens=draw(st.integers(1, 4000)),
    )


@settings(max_examples=150, deadline=None)
@given(ctx=random_contexts())
def test_every_router_picks_a_feasible_instance_and_only_migrating_ones_move(ctx):
    info = {"decision_context": ctx}
    for name in ALL_ROUTERS:
        choice = make_policy(name).act(None, info)
        assert ctx.feasible[choice], (name, choice)
        if ctx.kind == "migrate" and name not in MIGRATING:
            assert choice == ctx.current, name
        if ctx.kind == "migrate" and name == "goodserve" and choice != ctx.current:
            assert ctx.capability[choice] < ctx.capability[ctx.current]


# -- stateful routers -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["random-route", "power-of-two"])
def test_random_routers_are_deterministic_for_a_seed_and_reset_reseeds(name):
    ctx = routing_ctx(4, outstanding=np.array([0, 0, 0, 0]), capability=[1.0, 1.0, 1.0, 1.0])
    info = {"decision_context": ctx}
    p = make_policy(name, seed=1)
    a = [p.act(None, info) for _ in range(40)]
    fresh = make_policy(name, seed=1)
    assert [fresh.act(None, info) for _ in range(40)] == a
    p.reset()
    assert [p.act(None, info) for _ in range(40)] == a
    q = make_policy(name, seed=2)
    assert [q.act(None, info) for _ in range(40)] != a
    # equal loads and speeds: power-of-two keeps the lower index of its pair, so never picks 3
    assert set(a) == ({0, 1, 2, 3} if name == "random-route" else {0, 1, 2})


def test_power_of_two_takes_the_less_loaded_of_its_two_draws():
    # The two draws are distinct, so instance 3 (the most requests) always loses to the other
    # draw, and instance 0 (the fewest) wins whenever it is drawn.
    ctx = routing_ctx(4, outstanding=np.array([0, 5, 5, 9]))
    policy = make_policy("power-of-two", seed=0)
    picks = [policy.act(None, {"decision_context": ctx}) for _ in range(200)]
    assert 3 not in picks
    assert picks.count(0) > picks.count(1)


def test_round_robin_cycles_skips_infeasible_and_restarts_on_reset():
    ctx = routing_ctx(4, feasible=[True, False, True, True])
    info = {"decision_context": ctx}
    policy = make_policy("round-robin")
    assert [policy.act(None, info) for _ in range(5)] == [0, 2, 3, 0, 2]
    stay = routing_ctx(4, kind="migrate", current=1)
    assert policy.act(None, {"decision_context": stay}) == 1  # a migrate check does not advance
    assert policy.act(None, info) == 3
    policy.reset()
    assert policy.act(None, info) == 0


# -- on the real env --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_ROUTERS)
def test_every_router_plays_a_routing_episode_legally_and_only_migrating_ones_migrate(name):
    from envs.routing import RoutingEnv

    env = RoutingEnv(workload_count=40, load_scale=2.0, slo_scale=1.0, output_predictor="task-mean")
    policy = make_policy(name)
    obs, info = env.reset(seed=0)
    policy.reset()
    kinds = set()
    while True:
        kinds.add(info["decision_context"].kind)
        action = policy.act(obs, info)
        assert info["action_mask"][action], (name, action)
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    assert kinds == {"route", "migrate"}
    if name not in MIGRATING:
        assert info["metrics"]["migrations"] == 0


def test_queue_aware_variant_sees_a_queue_the_lagging_ema_misses():
    # Instance 2 (the weakest) has a stale q_g of 0 but 20k prompt tokens queued at 1 ms/token:
    # plain GoodServe picks it (just-enough), the variant knows it cannot meet the deadline.
    ctx = routing_ctx(3, estimate=[3.0, 4.0, 5.0], queued_prefill_tokens=[0, 0, 20_000])
    assert pick("goodserve", ctx) == 2
    assert pick("goodserve+queue-aware", ctx) == 1
    # with no queue anywhere the variant routes exactly like GoodServe
    ctx = routing_ctx(3, estimate=[3.0, 4.0, 5.0])
    assert pick("goodserve+queue-aware", ctx) == pick("goodserve", ctx) == 2


# -- deployed routers and our prefix-aware reference ------------------------------------------
def test_prefix_aware_low_picks_least_outstanding_tokens_after_its_cache_discount():
    # work = queued prefill + predicted outputs outstanding + (L_in − H): 1000+0+1000, 0+1500+1000,
    # 0+1500+(1000−900) -> instance 2 (cache hit wins), then without the hit instance 0 (2000 <
    # 2500) is tied with nobody.
    ctx = routing_ctx(
        3,
        queued_prefill_tokens=[1000.0, 0.0, 0.0],
        outstanding_output_tokens=[0.0, 1500.0, 1500.0],
        prefix_hit_tokens=[0.0, 0.0, 900.0],
    )
    assert pick("prefix-aware-low", ctx) == 2
    ctx.prefix_hit_tokens = np.zeros(3)
    assert pick("prefix-aware-low", ctx) == 0


def test_llm_d_sums_weighted_queue_kv_and_prefix_scores():
    # queue scores (max−q)/(max−min) with q = 4, 0, 2: 0, 1, 0.5; KV free fractions .9, .2, .5;
    # prefix H/L_in: 0, 0, .8. 2q + 2kv + 3p = 1.8, 2.4, 1 + 1 + 2.4 = 4.4 -> instance 2;
    # without the prefix hit: 1.8, 2.4, 2.0 -> instance 1.
    ctx = routing_ctx(
        3,
        waiting=np.array([4, 0, 2]),
        free_kv_tokens=[9000.0, 2000.0, 5000.0],
        prefix_hit_tokens=[0.0, 0.0, 800.0],
    )
    assert pick("llm-d", ctx) == 2
    ctx.prefix_hit_tokens = np.zeros(3)
    assert pick("llm-d", ctx) == 1
    ctx.waiting = np.array([3, 3, 3])  # equal queues score 1 each: KV decides
    assert pick("llm-d", ctx) == 0


def test_sglang_cache_aware_balances_only_past_both_thresholds_else_follows_the_cache():
    router = make_policy("sglang-cache-aware")
    act = lambda ctx: router.act(None, {"decision_context": ctx})  # noqa: E731
    # imbalance: 40 − 5 > 32 and 40 > 1.1 · 5 -> least loaded (instance 1)
    hit = [0.0, 0.0, 900.0]
    assert act(routing_ctx(3, outstanding=np.array([40, 5, 10]), prefix_hit_tokens=hit)) == 1
    # balanced (gap 30 <= 32): 900 / 1000 > 0.5 matched -> the cache holder
    assert act(routing_ctx(3, outstanding=np.array([35, 5, 10]), prefix_hit_tokens=hit)) == 2
    # no match: the smallest tree -- its own count of prompt tokens sent: 1 has none yet, then 0
    router.reset()
    none = routing_ctx(3, outstanding=np.array([1, 1, 1]))
    assert [act(none) for _ in range(4)] == [0, 1, 2, 0]


def test_dynamo_kv_minimises_overlap_weighted_prefill_blocks_plus_active_blocks():
    # blocks of 16 tokens: prefill (1000 − H)/16 + (used KV + queued prefill)/16 (+ the same
    # 1000/16 everywhere): 62.5 + 500, 62.5 + 100, 6.25 + 400 -> instance 1; with less used KV
    # on 2 (1000 tokens): 6.25 + 62.5 -> instance 2.
    ctx = routing_ctx(
        3,
        free_kv_tokens=[2000.0, 8400.0, 3600.0],
        prefix_hit_tokens=[0.0, 0.0, 900.0],
    )
    assert pick("dynamo-kv", ctx) == 1
    ctx.free_kv_tokens = np.array([2000.0, 8400.0, 9000.0])
    assert pick("dynamo-kv", ctx) == 2
