"""Issue 33's learned-routing parts: Routing-v0's opt-in ``observation="extended"``, the
privileged teacher that labels it, the per-workload teacher, and a checkpoint trained on the
extended observation acting in an env built without it (as ``evaluate.py`` builds it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents.teachers import HindsightTriageRouter, PerWorkloadTeacher
from envs.routing import RoutingEnv
from envs.routing.observation import (
    EXTENDED_INSTANCE_FEATURES,
    EXTENDED_REQUEST_FEATURES,
    INSTANCE_FEATURES,
    REQUEST_FEATURES,
    RHO_MAX,
)
from heuristics import make_policy

COUNT = 24


def _rho(obs: dict[str, np.ndarray]) -> float:
    return float(np.expm1(obs["request"][REQUEST_FEATURES] * np.log1p(RHO_MAX)))


def test_extended_observation_appends_to_the_unchanged_default() -> None:
    plain = RoutingEnv(workload_count=COUNT)
    ext = RoutingEnv(workload_count=COUNT, observation="extended")
    assert ext.observation_space["request"].shape == (REQUEST_FEATURES + EXTENDED_REQUEST_FEATURES,)
    assert ext.observation_space["instances"].shape == (
        plain.M,
        INSTANCE_FEATURES + EXTENDED_INSTANCE_FEATURES,
    )
    router = make_policy("preble")
    o1, i1 = plain.reset(seed=5)
    o2, i2 = ext.reset(seed=5)
    done, routed = False, 0
    while not done:
        assert ext.observation_space.contains(o2)
        np.testing.assert_array_equal(o2["request"][:REQUEST_FEATURES], o1["request"])
        np.testing.assert_array_equal(o2["instances"][:, :INSTANCE_FEATURES], o1["instances"])
        ctx = i2["decision_context"]
        if ctx.kind == "route":
            routed += 1
            # per-request SLOs encode the true length: ρ · L̂_out recovers it
            true = ext._queue[0].output_tokens
            assert _rho(o2) * ctx.predicted_output_tokens == pytest.approx(true, rel=0.03)
            can = o2["instances"][:, INSTANCE_FEATURES + 3].astype(bool)
            assert not (can & ~np.asarray(ctx.feasible)).any()
            assert o2["request"][REQUEST_FEATURES + 2] == float(not can.any())
        a = router.act(o1, i1)
        o1, _, t1, _, i1 = plain.step(a)
        o2, _, t2, _, i2 = ext.step(a)
        assert t1 == t2
        done = t1
    assert routed == COUNT


def test_extended_observation_under_task_slos_does_not_recover_lengths() -> None:
    env = RoutingEnv(workload_count=COUNT, observation="extended", slo_basis="task")
    obs, info = env.reset(seed=5)
    router = make_policy("least-request")
    ratios = []
    while True:
        ctx = info["decision_context"]
        if ctx.kind == "route":
            ratios.append(_rho(obs) * ctx.predicted_output_tokens / env._queue[0].output_tokens)
        obs, _, term, trunc, info = env.step(router.act(obs, info))
        if term or trunc:
            break
    assert np.mean(np.abs(np.log(ratios))) > 0.1  # the task median says little per request


def test_unknown_observation_option_is_named() -> None:
    with pytest.raises(ValueError, match="observation must be one of .*'wide'"):
        RoutingEnv(observation="wide")


def test_triage_teacher_picks_an_instance_that_can_make_it_else_the_slowest() -> None:
    env = RoutingEnv(workload_count=40, observation="extended")
    teacher = HindsightTriageRouter(env)
    teacher.reset()
    obs, info = env.reset(seed=11)
    alone = teacher._run_alone(env)
    saw_can = saw_none = 0
    while True:
        ctx = info["decision_context"]
        action = teacher.act(obs, info)
        assert ctx.feasible[action]
        if ctx.kind == "migrate":
            assert action == ctx.current
        else:
            out = env._queue[0].output_tokens
            a = np.array([m(ctx.input_tokens, out) for m in alone])
            est = ctx.q + np.maximum(0, ctx.input_tokens - ctx.prefix_hit_tokens) * ctx.p
            est = est + out * ctx.d
            can = ctx.feasible & (np.maximum(est, a) <= ctx.slack)
            if can.any():
                saw_can += 1
                assert can[action]
            else:
                saw_none += 1
                assert a[action] == a[ctx.feasible].max()
        obs, _, term, trunc, info = env.step(action)
        if term or trunc:
            break
    assert saw_can > 0
    with pytest.raises(ValueError, match="margin must be >= 1"):
        HindsightTriageRouter(env, margin=0.9)


def test_per_workload_teacher_delegates_by_the_env_workload() -> None:
    env = RoutingEnv(workload_count=COUNT)
    teacher = PerWorkloadTeacher(env, {"goodserve": "least-request"}, "routing")
    teacher.reset()
    expert = make_policy("least-request")
    obs, info = env.reset(seed=2)
    for _ in range(10):
        assert teacher.act(obs, info) == expert.act(obs, info)
        obs, _, term, trunc, info = env.step(expert.act(obs, info))
        if term or trunc:
            break
    other = PerWorkloadTeacher(env, {"mixed": "hexagent"}, "routing")
    with pytest.raises(ValueError, match="workload 'goodserve', which has no expert"):
        other.act(obs, info)


def test_extended_checkpoint_acts_in_a_default_env(tmp_path: Path) -> None:
    from agents import TRAIN_ENVS, build_model, load_policy

    ext = RoutingEnv(workload_count=COUNT, observation="extended")
    model = build_model("maskable-ppo", ext, TRAIN_ENVS["routing"], seed=0)
    model.save(tmp_path / "model.zip")
    plain = RoutingEnv(workload_count=COUNT)
    # without the run's config the shapes do not match: a clear error
    with pytest.raises(ValueError, match="was trained on observations"):
        load_policy(tmp_path, plain)
    (tmp_path / "config.json").write_text(json.dumps({"env": "routing", "observation": "extended"}))
    policy = load_policy(tmp_path, plain)
    obs, info = plain.reset(seed=3)
    for _ in range(8):
        action = policy.act(obs, info)
        assert info["action_mask"][action]
        # it acts on the extended observation of the env's current state
        want, _ = model.predict(
            plain._observation_extended(), deterministic=True, action_masks=info["action_mask"]
        )
        assert action == int(want)
        obs, _, term, trunc, info = plain.step(action)
        if term or trunc:
            break


def test_implied_triage_reads_the_length_off_the_deadline_not_the_simulator() -> None:
    from agents.teachers import ImpliedTriageRouter

    env = RoutingEnv(workload_count=COUNT)
    router = ImpliedTriageRouter(env)
    obs, info = env.reset(seed=7)
    ctx = info["decision_context"]
    call = env._queue[0]
    true = call.output_tokens
    assert router._length(env, ctx, call) == pytest.approx(true, rel=0.03)
    call.output_tokens = true * 5  # the simulator's truth is not what it reads
    assert router._length(env, ctx, call) == pytest.approx(true, rel=0.03)
    call.output_tokens = true
