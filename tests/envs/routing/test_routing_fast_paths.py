"""Issue 32 (routing at scale): every cache and shortcut of Routing-v0's decision path equals the
from-scratch computation it replaces -- the monitor snapshot shared by the decision contexts,
the per-snapshot observation rows, the request-only estimate terms, the cached action mask and
GoodServe's mask-based rerouting."""

from __future__ import annotations

import numpy as np
import pytest

from envs.routing import RoutingEnv
from envs.routing.context import TPM_WINDOW_S, InstanceMonitor, RoutingContext
from envs.routing.workloads import TASKS
from envs.sim.core.simulation import TOKEN_ID_BYTES
from envs.sim.core.workflows import WAIT_PREFILL
from heuristics import make_policy
from heuristics.routing.base import feasible_indices
from heuristics.routing.goodserve import earliest_finish, just_enough, stronger_rerouting

# Overloaded, with shared session prefixes (prefix hits), so that risk checks raise many
# migrate decisions on running and queued requests and some requests move.
OVERLOAD = {
    "instances": 12,
    "workload": "goodserve-sessions",
    "workload_count": 60,
    "load_scale": 4.0,
    "output_predictor": "task-mean",
}


def reference_observation(env: RoutingEnv, ctx: RoutingContext) -> np.ndarray:
    """The instance features computed from scratch (the table in the env's docstring)."""
    cols = np.zeros((14, env.M), dtype=np.float32)
    cols[0] = np.log1p(ctx.capability)
    cols[1] = np.log1p(ctx.q)
    cols[2] = np.log1p(ctx.p * 1e3)
    cols[3] = np.log1p(ctx.d * 1e3)
    cols[4] = ctx.running / 64
    cols[5] = ctx.waiting / 16
    cols[6] = ctx.outstanding / 16
    cols[7] = ctx.free_kv_tokens / ctx.kv_capacity
    cols[8] = ctx.prefix_hit_tokens / max(1, ctx.input_tokens)
    cols[9] = np.minimum(ctx.estimate / ctx.slo, 10.0)
    cols[10] = ctx.meets_deadline
    cols[11] = ctx.feasible
    if ctx.current >= 0:
        cols[12, ctx.current] = 1.0
    cols[13] = np.log1p(ctx.tokens_per_minute) / 15
    np.clip(cols, 0.0, 10.0, out=cols)
    return np.ascontiguousarray(cols.T)


def reference_estimate(env: RoutingEnv, ctx: RoutingContext, call) -> np.ndarray:
    """GoodServe Eq. 2 for every instance from scratch, as the env computed it before the
    snapshot: fresh arrays, ((transfer + q) + max(0, prompt − H) · p) + L̂ · d."""
    mon, sim = env.monitor, env.sim
    hits = np.zeros(env.M)
    for i, tokens in sim.estimates.prefix_hits(call).items():
        hits[mon.pos[i]] = tokens
    assert np.array_equal(hits, ctx.prefix_hit_tokens)
    migrate = ctx.kind == "migrate"
    prompt = call.input_tokens + (call.generated if migrate else 0)
    transfer = np.zeros(env.M)
    kv = migrate and env.migration == "kv" and not ctx.queued
    if migrate:
        per_token = env._kvb[ctx.current] if kv else TOKEN_ID_BYTES
        transfer = env._link_latency + per_token * prompt * env._inv_bw[ctx.current]
        transfer[ctx.current] = 0.0
    prefill = np.zeros(env.M) if kv else np.maximum(0.0, prompt - hits)
    remaining = ctx.predicted_remaining_tokens
    estimate = transfer + mon.q + prefill * mon.p + remaining * mon.d
    if migrate:
        estimate[ctx.current] = env._stay[call.uid]
    return estimate


@pytest.mark.parametrize("migration", ["token", "kv"])
def test_contexts_and_observations_equal_a_from_scratch_build_at_every_decision(migration):
    """At every decision of an overloaded episode (routes, risk checks on running and queued
    requests, moves), the context's monitor arrays equal the live monitor's, the estimate and
    mask equal Eq. 2 and the mask rule from scratch bit for bit, the observation equals the
    from-scratch features, and the shared arrays are read-only."""
    env = RoutingEnv(migration=migration, **OVERLOAD)
    policy = make_policy("goodserve+shorten")
    obs, info = env.reset(seed=1)
    kinds = {"route": 0, "migrate": 0}
    hits = moves = 0
    done = False
    while not done:
        ctx = info["decision_context"]
        mon = env.monitor
        call = env._queue[0]
        kinds[ctx.kind] += 1
        hits += bool(ctx.prefix_hit_tokens.any())
        for name, live in [
            ("q", mon.q),
            ("p", mon.p),
            ("d", mon.d),
            ("running", mon.running),
            ("waiting", mon.waiting),
            ("outstanding", mon.outstanding),
            ("queued_prefill_tokens", mon.queued_prefill),
            ("outstanding_output_tokens", mon.owed_output),
            ("free_kv_tokens", env._kv_capacity - mon.kv_used),
            ("tokens_per_minute", mon._tpm_sum * (60.0 / TPM_WINDOW_S)),
        ]:
            shared = getattr(ctx, name)
            assert np.array_equal(shared, live), name
            assert not shared.flags.writeable, name
        assert np.array_equal(ctx.estimate, reference_estimate(env, ctx, call))
        assert np.array_equal(ctx.meets_deadline, ctx.time + ctx.estimate <= ctx.deadline)
        legal = (env._served == call.model) & env._footprint_ok
        legal &= call.input_tokens < env._max_context
        if ctx.kind == "migrate":
            legal[ctx.current] = True
            assert ctx.queued == (call.stage == WAIT_PREFILL)
        assert np.array_equal(ctx.feasible, legal)
        assert np.array_equal(env.action_masks(), legal)
        assert np.array_equal(obs["instances"], reference_observation(env, ctx))
        assert obs["request"][6 + (TASKS.index(ctx.task) if ctx.task in TASKS else 3)] == 1.0
        action = policy.act(obs, info)
        moves += ctx.kind == "migrate" and action != ctx.current
        obs, _, term, trunc, info = env.step(action)
        done = term or trunc
    assert kinds["route"] == 60 and kinds["migrate"] > 50 and hits > 10 and moves > 0


def test_monitor_snapshot_is_shared_until_a_hook_changes_the_monitor():
    """The snapshot is one object while nothing changes, and a fresh, equal copy after every
    kind of monitor change (routing, departure, engine reports) or a later time."""
    env = RoutingEnv(**OVERLOAD)
    env.reset(seed=0)
    mon: InstanceMonitor = env.monitor
    inst = env.sim.monolithic
    call = env._queue[0]
    s0 = mon.snapshot(1.0)
    assert mon.snapshot(1.0) is s0
    assert mon.snapshot(2.0) is not s0

    def check(before):
        now = before.time
        snap = mon.snapshot(now)
        assert snap is not before
        for name, live in [("q", mon.q), ("p", mon.p), ("d", mon.d), ("waiting", mon.waiting)]:
            assert np.array_equal(getattr(snap, name), live)
            assert getattr(snap, name) is not live
        assert np.array_equal(snap.outstanding, mon.outstanding)
        assert np.array_equal(snap.queued_prefill, mon.queued_prefill)
        assert np.array_equal(snap.owed_output, mon.owed_output)
        assert np.array_equal(snap.kv_used, mon.kv_used)
        assert mon.snapshot(now) is snap
        return snap

    s = mon.snapshot(2.0)
    mon.on_routed(call, 3, 2.0, 100.0)
    s = check(s)
    mon.on_departed(call, 3, 5, 50.0, queued=True)
    s = check(s)
    mon.on_decode_progress(inst[5], 4, 0.2, 3)
    s = check(s)
    call.enqueued_at = 1.5
    mon.on_admit(call, inst[5], 2.0)
    s = check(s)
    mon.on_prefill_done(call, inst[5], 2.0, 50, 0.05)
    s = check(s)
    mon.on_preempted(call, inst[5], 2.0)
    s = check(s)
    mon.on_admit(call, inst[5], 2.0)
    s = check(s)
    mon.on_call_done(call, inst[5], 2.0)
    check(s)


def _reference_stronger_rerouting(ctx: RoutingContext, shorten_misses: bool) -> int:
    """GoodServe §3.4 rerouting on index arrays (the rule as first written)."""
    cur = ctx.current
    if ctx.meets_deadline[cur]:
        return cur
    cap = np.asarray(ctx.capability, dtype=float)
    stronger = feasible_indices(ctx)
    stronger = stronger[(stronger != cur) & (cap[stronger] < cap[cur])]
    if stronger.size == 0:
        return cur
    choice = just_enough(ctx, stronger)
    if choice is not None:
        return choice
    if not shorten_misses:
        return cur
    fastest = earliest_finish(ctx, stronger)
    return fastest if ctx.estimate[fastest] < ctx.estimate[cur] else cur


def _random_context(rng: np.random.Generator) -> RoutingContext:
    m = int(rng.integers(1, 12))
    cap = rng.choice([1.0, 2.0, 3.0], m)  # GPU types: many ties
    estimate = rng.choice([0.5, 1.0, 1.5, 2.0], m)
    current = int(rng.integers(m))
    feasible = rng.random(m) < 0.7
    feasible[current] = True
    meets = rng.random(m) < 0.3
    meets[current] = rng.random() < 0.2
    z = np.zeros(m)
    return RoutingContext(
        time=0.0, kind="migrate", call_id="c", task="sql", input_tokens=10, generated=5,
        predicted_output_tokens=20, predicted_remaining_tokens=15, arrival=0.0, slo=1.0,
        deadline=1.0, slack=1.0, current=current, gpus=["g"] * m, capability=cap, q=z, p=z,
        d=z, running=z, waiting=z, outstanding=z, free_kv_tokens=z, kv_capacity=z + 1,
        queued_prefill_tokens=z, outstanding_output_tokens=z, tokens_per_minute=z,
        prefix_hit_tokens=z, transfer_time=z, estimate=estimate, meets_deadline=meets,
        feasible=feasible,
    )  # fmt: skip


@pytest.mark.parametrize("shorten", [False, True])
def test_mask_based_rerouting_picks_what_the_index_based_rule_picks(shorten):
    rng = np.random.default_rng(7)
    moved = 0
    for _ in range(3000):
        ctx = _random_context(rng)
        got = stronger_rerouting(ctx, shorten)
        assert got == _reference_stronger_rerouting(ctx, shorten), ctx
        moved += got != ctx.current
    assert moved > 300  # the random contexts exercise moves, not only stays
