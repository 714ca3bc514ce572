"""Specifications of servegym/Routing-v0 (envs/routing/)."""

from __future__ import annotations

import dataclasses
import warnings

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the environments)
from envs.routing import RoutingEnv
from envs.sim.hardware.cluster import load_cluster, scaled_cluster
from traces.schema import LLMNode, Request, Workflow

MODEL = "llama3.1-8b"
SMALL = {"workload_count": 24, "load_scale": 2.0, "output_predictor": "task-mean"}


def rollout(env: gym.Env, seed: int, choose=None, max_steps: int = 20_000):
    """Run an episode; ``choose(ctx, mask, rng)`` picks (default: uniform over the mask)."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    trace = []
    total = 0.0
    for _ in range(max_steps):
        mask = info["action_mask"]
        assert mask.any(), "mask is all-false while a decision is pending"
        ctx = info["decision_context"]
        a = choose(ctx, mask, rng) if choose else int(rng.choice(np.flatnonzero(mask)))
        obs, r, term, trunc, info = env.step(a)
        total += r
        trace.append((ctx.kind, a, r))
        if term or trunc:
            return trace, info, total
    raise AssertionError("episode did not end")


def test_make_by_id_after_import_and_default_construction_passes_both_checkers():
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make("servegym/Routing-v0")
    assert isinstance(env.unwrapped, RoutingEnv)
    assert env.unwrapped.prefill_mode == "chunked"
    # On the default construction every instance can hold every request, so the checkers'
    # random actions are legal even in the default raise mode.
    check_env(env.unwrapped)
    check_env(RoutingEnv(invalid_action="penalize", render_mode="ansi"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3_check_env(RoutingEnv())


def test_random_routing_episode_completes_every_request_and_reports_metrics():
    env = RoutingEnv(**SMALL)
    trace, info, total = rollout(env, seed=3)
    m = info["metrics"]
    assert m["num_requests"] == m["num_completed"] == 24
    assert 0.0 <= m["slo_violation_ratio"] <= 1.0
    # The goodput reward's return is the number of requests within their SLO.
    met = sum(lat <= slo for lat, slo in zip(info["latencies"], info["slos"], strict=True))
    assert total == met == pytest.approx((1 - m["slo_violation_ratio"]) * 24)
    assert sum(1 for kind, _, _ in trace if kind == "route") == 24
    assert 0.0 < info["utilisation"]["monolithic"] <= 1.0


def test_slo_is_scale_times_run_alone_latency_on_the_reference_gpu():
    env = RoutingEnv(slo_scale=2.5, **SMALL)
    env.reset(seed=0)
    alone = env._run_alone
    for run, slo in zip(env.sim.runs, env._slo, strict=True):
        node = run.workflow.nodes[0]
        assert slo == pytest.approx(2.5 * alone(node.input_tokens, node.output_tokens))
    # alone on an A800 is slower than alone on the H800 of the same cluster
    h800 = env.sim.monolithic[0].latency
    assert env.sim.monolithic[0].gpu == "h800"
    assert alone(8192, 256) > h800.prefill_time(8192) + h800.decode_steps_time(1, 8192, 256)


def test_mask_keeps_requests_off_instances_that_cannot_hold_them():
    # Qwen2.5-14B has a 32,768-token window: a prompt at the window fits nowhere.
    ok = Request("ok", 0.0, "qwen2.5-14b", 30_000, 10, "swe")
    env = RoutingEnv(model="qwen2.5-14b", trace=[ok], output_predictor="task-mean")
    _, info = env.reset(seed=0)
    assert info["action_mask"].all()
    bad = Request("bad", 0.0, "qwen2.5-14b", 32_768, 10, "swe")
    env = RoutingEnv(model="qwen2.5-14b", trace=[bad], output_predictor="task-mean")
    with pytest.raises(ValueError, match="32778 tokens long .* context window of 32768"):
        env.reset(seed=0)


def test_masked_action_raises_and_leaves_state_untouched():
    ok = Request("ok", 0.0, MODEL, 1000, 10, "sql")
    env = RoutingEnv(trace=[ok], output_predictor="task-mean", invalid_action="raise")
    obs, info = env.reset(seed=0)
    with pytest.raises(ValueError, match="outside the action space Discrete"):
        env.step(99)
    obs2, r, term, trunc, info2 = env.step(0)
    assert term and r == 1.0  # a lone 1k-token request on the H800 meets a 2x A800 SLO


def _burst(outputs: list[int], input_step: int = 300) -> list[Request]:
    prompts = ["Write a simple lookup SQL query.", "Solve a very hard programming problem."]
    return [
        Request(f"r{i}", 0.02 * i, MODEL, 2000 + input_step * i, out, "code", prompts[i % 2])
        for i, out in enumerate(outputs)
    ]


#: Context fields and observation features that are functions of the deadline.
DEADLINE_FIELDS = {"slo", "deadline", "slack", "meets_deadline"}
DEADLINE_FEATURES = {"request": [3, 4], "instances": [9, 10]}


def _contexts(trace, **kw):
    env = RoutingEnv(trace=trace, check_interval=None, **kw)
    obs, info = env.reset(seed=0)
    out = []
    while len(out) < len(trace):
        out.append((info["decision_context"], obs))
        obs, _, term, _, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
        if term:
            break
    return out


def _assert_equal_but_deadline(ca, cb) -> None:
    for (c1, o1), (c2, o2) in zip(ca, cb, strict=True):
        for f in dataclasses.fields(c1):
            if f.name not in DEADLINE_FIELDS:
                assert np.array_equal(getattr(c1, f.name), getattr(c2, f.name)), f.name
        for k, cols in DEADLINE_FEATURES.items():
            keep = [i for i in range(o1[k].shape[-1]) if i not in cols]
            assert np.array_equal(o1[k][..., keep], o2[k][..., keep]), k


@pytest.mark.parametrize("predictor", ["task-mean", "history", "mlp", "moe"])
def test_decision_context_never_depends_on_true_output_lengths(predictor):
    # Until the first request finishes the engine's behaviour does not depend on output lengths,
    # so every decision before then must look identical when only the true lengths differ.
    # the same prompt lengths and the output lengths permuted: the same task-median SLO
    a = _burst([2000, 1500, 3000, 2500, 1800, 2200], input_step=0)
    b = _burst([2200, 3000, 1500, 1800, 2500, 2000], input_step=0)
    ca = _contexts(a, output_predictor=predictor, slo_basis="task")
    cb = _contexts(b, output_predictor=predictor, slo_basis="task")
    assert len(ca) == len(cb) == 6
    for (c1, o1), (c2, o2) in zip(ca, cb, strict=True):
        assert c1 == c2
        for k in o1:
            assert np.array_equal(o1[k], o2[k]), k
    # entirely different lengths: only the per-task median SLO may move
    c = _contexts(
        _burst([900, 4000, 1200, 800, 5000, 700], input_step=0),
        output_predictor=predictor,
        slo_basis="task",
    )
    _assert_equal_but_deadline(ca, c)


def test_per_request_slo_leaks_only_through_deadline_fields():
    # The paper's per-request SLO is a function of the true length: documented, and confined.
    a = _burst([2000, 1500, 3000, 2500, 1800, 2200])
    b = _burst([900, 4000, 1200, 800, 5000, 700])
    ca = _contexts(a, output_predictor="moe", slo_basis="request")
    cb = _contexts(b, output_predictor="moe", slo_basis="request")
    assert any(c1.slo != c2.slo for (c1, _), (c2, _) in zip(ca, cb, strict=True))
    _assert_equal_but_deadline(ca, cb)


def test_same_seed_same_trajectory_and_metrics():
    env = RoutingEnv(**SMALL)
    t1, i1, _ = rollout(env, seed=5)
    t2, i2, _ = rollout(env, seed=5)
    assert t1 == t2 and i1["metrics"] == i2["metrics"]
    t3, _, _ = rollout(env, seed=6)
    assert t3 != t1


def test_migration_checks_raise_decisions_for_requests_at_risk_and_moves_land():
    # Tight SLOs and a heavy load: requests fall behind, checks find them, moves happen.
    env = RoutingEnv(slo_scale=1.0, workload_count=30, load_scale=4.0, output_predictor="oracle")

    def slowest_then_fastest(ctx, mask, rng):
        if ctx.kind == "route":  # everything to the slowest GPU
            return int(np.flatnonzero(mask)[np.argmax(ctx.capability[mask])])
        return int(np.argmin(np.where(mask, ctx.capability, np.inf)))

    trace, info, _ = rollout(env, seed=0, choose=slowest_then_fastest)
    kinds = [k for k, _, _ in trace]
    assert kinds.count("migrate") > 0
    assert info["metrics"]["migrations"] > 0
    assert info["metrics"]["num_completed"] == 30


def test_no_migrate_decisions_without_checks():
    env = RoutingEnv(check_interval=None, **SMALL)
    trace, info, _ = rollout(env, seed=1)
    assert {k for k, _, _ in trace} == {"route"}
    assert info["metrics"]["migrations"] == 0


def test_scaled_cluster_cycles_the_presets_gpu_types():
    base = load_cluster("goodserve-4", model=MODEL)
    big = scaled_cluster(base, 10)
    assert [s.gpu for s in big.instances] == [s.gpu for s in base.instances] * 2 + ["h800", "a800"]
    assert [s.index for s in big.instances] == list(range(10))
    env = RoutingEnv(instances=10, **SMALL)
    assert env.action_space.n == 10


@pytest.mark.slow
def test_works_in_sb3_subproc_vec_env_with_masks():
    from stable_baselines3.common.vec_env import SubprocVecEnv

    vec = SubprocVecEnv([lambda: RoutingEnv(**SMALL) for _ in range(2)])
    try:
        vec.seed(0)
        vec.reset()
        masks = np.stack(vec.env_method("action_masks"))
        assert masks.shape == (2, 4) and masks.any(axis=1).all()
        vec.step(np.array([np.flatnonzero(m)[0] for m in masks]))
    finally:
        vec.close()


def test_bad_options_get_clear_errors():
    with pytest.raises(ValueError, match="monolithic"):
        RoutingEnv(cluster="hetero-1", model="llama3.1-70b")
    with pytest.raises(ValueError, match="unknown output_predictor 'psychic'"):
        RoutingEnv(output_predictor="psychic")
    with pytest.raises(ValueError, match="slo_scale"):
        RoutingEnv(slo_scale=0)
    with pytest.raises(ValueError, match="unknown reward"):
        RoutingEnv(reward="nope")
    wf = Workflow(
        "w",
        0.0,
        (LLMNode("a", MODEL, 100, 10), LLMNode("b", MODEL, 100, 10, ("a",))),
    )
    with pytest.raises(ValueError, match="record 0 \\('w'\\) is a workflow of 2 node"):
        RoutingEnv(trace=[wf], output_predictor="task-mean").reset(seed=0)


def test_render_ansi_lists_every_instance():
    env = RoutingEnv(render_mode="ansi", **SMALL)
    env.reset(seed=0)
    text = env.render()
    for gpu in ("h800", "a800", "a40", "v100-32g"):
        assert gpu in text


def test_decision_context_fields_are_consistent():
    env = RoutingEnv(**SMALL)
    _, info = env.reset(seed=2)
    ctx = info["decision_context"]
    names = {f.name for f in dataclasses.fields(ctx)}
    assert "output_tokens" not in names
    expected = ctx.q + np.maximum(0, ctx.input_tokens - ctx.prefix_hit_tokens) * ctx.p
    expected += ctx.predicted_output_tokens * ctx.d
    assert np.allclose(ctx.estimate, expected)
    assert np.array_equal(ctx.meets_deadline, ctx.time + ctx.estimate <= ctx.deadline)


def test_proxy_counts_track_the_engines_and_drain_to_zero():
    # Heavy load and tight SLOs so that queues form and migrations happen.
    env = RoutingEnv(slo_scale=1.0, workload_count=40, load_scale=3.0, output_predictor="oracle")
    obs, info = env.reset(seed=4)
    mon = env.monitor
    done = False
    rng = np.random.default_rng(0)
    while not done:
        ctx = info["decision_context"]
        sim = env.sim
        if ctx.kind == "route":  # this invocation's earlier picks are not in the engines yet
            running = [m.num_running for m in sim.monolithic]
            assert np.array_equal(ctx.running, running)
        assert (ctx.waiting >= 0).all() and (ctx.queued_prefill_tokens >= -1e-6).all()
        assert np.array_equal(ctx.outstanding, ctx.running + ctx.waiting)
        a = int(rng.choice(np.flatnonzero(info["action_mask"])))
        obs, _, term, trunc, info = env.step(a)
        done = term or trunc
    assert info["metrics"]["migrations"] > 0
    for arr in (mon.outstanding, mon.running, mon.waiting, mon.queued_prefill, mon.kv_used):
        assert np.allclose(arr, 0.0), arr


def test_black_box_decode_ema_weights_each_iteration():
    from envs.routing.context import InstanceMonitor

    env = RoutingEnv(**SMALL)
    env.reset(seed=0)
    mon = InstanceMonitor(env.sim.monolithic, ema_alpha=0.5)
    inst = env.sim.monolithic[0]
    mon.on_decode_progress(inst, 1, 0.010, 4)  # first sample sets the EMA
    assert mon.d[0] == pytest.approx(0.010)
    mon.on_decode_progress(inst, 3, 3 * 0.020, 4)  # three iterations of 20 ms = three samples
    assert mon.d[0] == pytest.approx(0.020 + 0.5**3 * (0.010 - 0.020))


@pytest.mark.parametrize("reward", ["slowdown", "goodput"])
def test_truncation_charges_unfinished_requests_only_where_the_reward_says(reward):
    """slowdown charges a request that arrived but did not finish its latency so far / SLO;
    goodput gives it nothing (only completions within their SLO count)."""
    env = RoutingEnv(max_steps=10, reward=reward, **SMALL)
    _, _, total = rollout(env, seed=0)
    sim, slo = env.sim, env._slo
    finished = [run for run in sim.runs if run.finish_time >= 0]
    open_ = [run for run in sim.runs if run.finish_time < 0 and run.arrival <= sim.now]
    assert open_, "the truncation should leave arrived requests unfinished"
    ratios = [(r.finish_time - r.arrival) / slo[r.index] for r in finished]
    if reward == "slowdown":
        ratios += [(sim.now - r.arrival) / slo[r.index] for r in open_]
        expected = -sum(x**4 for x in ratios) / len(sim.runs)
    else:
        expected = sum(1.0 for x in ratios if x <= 1.0)
    assert total == pytest.approx(expected, rel=1e-9)


def _to_slowest_then_stay(ctx, mask, rng):
    if ctx.kind == "route":
        return int(np.flatnonzero(mask)[np.argmax(ctx.capability[mask])])
    return ctx.current


def _decisions(trace, **kw):
    env = RoutingEnv(trace=trace, slo_scale=1.0, slo_basis="task", **kw)
    obs, info = env.reset(seed=0)
    out = []
    while True:
        # Nothing else mid-episode: the base's invalid-action flag and the metrics of the
        # finished part (completed requests only, so no pending request's length shows).
        assert set(info) <= {"action_mask", "decision_context", "invalid_action", "metrics"}
        ctx = info["decision_context"]
        out.append((ctx, obs))
        obs, _, term, trunc, info = env.step(_to_slowest_then_stay(ctx, info["action_mask"], None))
        if term or trunc:
            finish = [r.arrival + lat for r, lat in zip(trace, info["latencies"], strict=True)]
            return out, min(finish)


@pytest.mark.parametrize("predictor", ["moe", "moe-residual", "task-mean"])
def test_no_true_output_length_reaches_a_policy_at_route_or_risk_check_decisions(predictor):
    """Episodes that differ only in true output lengths (permuted, so the task-median SLOs
    agree) give identical decision contexts and observations -- route and migrate decisions,
    running and queued requests -- until the first request finishes, under every realistic
    predictor; step infos carry nothing else."""
    a = _burst([2000, 1500, 3000, 2500, 1800, 2200, 2600, 1700], input_step=0)
    b = _burst([2600, 3000, 1500, 1800, 2500, 2000, 1700, 2200], input_step=0)
    da, fa = _decisions(a, output_predictor=predictor)
    db, fb = _decisions(b, output_predictor=predictor)
    first = min(fa, fb)
    early_a = [(c, o) for c, o in da if c.time < first]
    early_b = [(c, o) for c, o in db if c.time < first]
    assert len(early_a) == len(early_b)
    assert {c.kind for c, _ in early_a} == {"route", "migrate"}
    for (c1, o1), (c2, o2) in zip(early_a, early_b, strict=True):
        assert c1 == c2
        for k in o1:
            assert np.array_equal(o1[k], o2[k]), k


def test_queued_requests_are_risk_checked_with_their_queueing_and_prefill_charged():
    env = RoutingEnv(slo_scale=1.0, workload_count=40, load_scale=3.0, output_predictor="moe")
    queued = []

    def choose(ctx, mask, rng):
        if ctx.kind == "migrate" and ctx.queued:
            queued.append(ctx)
        return _to_slowest_then_stay(ctx, mask, rng)

    rollout(env, seed=0, choose=choose)
    assert queued, "no queued request was ever risk-checked"
    for ctx in queued:
        j = ctx.current
        prefill = max(0.0, ctx.input_tokens + ctx.generated - ctx.prefix_hit_tokens[j]) * ctx.p[j]
        decode = ctx.predicted_remaining_tokens * ctx.d[j]
        assert ctx.estimate[j] >= prefill + decode - 1e-12
        assert ctx.estimate[j] <= prefill + decode + ctx.q[j] + 1e-12
        assert not ctx.meets_deadline[j]
    # switched off, only running requests are checked
    env = RoutingEnv(
        slo_scale=1.0, workload_count=40, load_scale=3.0, output_predictor="moe",
        check_queued=False,
    )  # fmt: skip
    queued.clear()
    rollout(env, seed=0, choose=choose)
    assert not queued


def test_goodserve_moves_queued_requests_and_the_proxy_counts_still_drain():
    from heuristics import make_policy

    env = RoutingEnv(slo_scale=2.0, workload_count=60, load_scale=6.0, output_predictor="moe")
    policy = make_policy("goodserve")
    obs, info = env.reset(seed=1)
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(policy.act(obs, info))
        done = term or trunc
    d = info["diagnosis"]
    assert d["migrations_attempted_queued"] > 0
    assert d["migrations_attempted"] >= d["migrated_requests"] >= d["migrated_met"]
    assert info["metrics"]["num_completed"] == 60
    assert len({c.uid for c in env.sim.calls if c.migrations}) == d["migrated_requests"]
    mon = env.monitor
    for arr in (mon.outstanding, mon.waiting, mon.running, mon.queued_prefill, mon.owed_output):
        assert np.allclose(arr, 0.0)
    causes = [
        d[f"miss_{c}"] for c in ("unfinished", "under_prediction", "queueing", "prefill", "decode")
    ]
    assert d["misses"] == 0 or sum(causes) == pytest.approx(1.0)


def test_live_migration_count_equals_the_sum_over_every_call_at_every_step():
    """The per-step ``migrations`` metric (counted over the calls the env moved, recounted only
    after a plan lands) equals Σ call.migrations over all the simulation's calls."""
    env = RoutingEnv(slo_scale=1.0, workload_count=40, load_scale=3.0, output_predictor="oracle")
    _, info = env.reset(seed=4)
    rng = np.random.default_rng(1)
    done, seen = False, set()
    while not done:
        seen.add(info["metrics"]["migrations"])
        assert info["metrics"]["migrations"] == sum(c.migrations for c in env.sim.calls)
        a = int(rng.choice(np.flatnonzero(info["action_mask"])))
        _, _, term, trunc, info = env.step(a)
        done = term or trunc
    assert info["metrics"]["migrations"] == sum(c.migrations for c in env.sim.calls) > 0
    assert len(seen) > 2  # the count moved during the episode
