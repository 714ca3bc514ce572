"""Specifications of servegym/PDCluster-v0 (envs/pd_cluster/)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the environments)
from envs.pd_cluster import PDClusterEnv
from envs.sim.hardware.cluster import cluster_from_dict
from traces.schema import LLMNode, ToolNode, Workflow

SMALL = {"workload": "mixed", "workload_count": 8}


def random_masked_rollout(env: gym.Env, seed: int, max_steps: int = 10_000):
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    trace = []
    for _ in range(max_steps):
        mask = info["action_mask"]
        assert mask.any(), "mask is all-false while a decision is pending"
        a = int(rng.choice(np.flatnonzero(mask)))
        obs, r, term, trunc, info = env.step(a)
        trace.append((a, r, {k: v.copy() for k, v in obs.items()}))
        if term or trunc:
            return trace, info
    raise AssertionError("episode did not end")


def test_make_by_id_with_and_without_import():
    env = gym.make("envs:servegym/PDCluster-v0", **SMALL)
    assert isinstance(env.unwrapped, PDClusterEnv)


def test_passes_gymnasium_and_sb3_env_checkers():
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    # The checkers step random (possibly masked) actions, so they need the penalize mode.
    env = PDClusterEnv(invalid_action="penalize", render_mode="ansi", **SMALL)
    check_env(env)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3_check_env(PDClusterEnv(invalid_action="penalize", **SMALL))


def test_every_unmasked_action_is_legal_and_episode_reports_metrics():
    env = PDClusterEnv(**SMALL)
    trace, info = random_masked_rollout(env, seed=3)
    assert len(trace) > 0
    m = info["metrics"]
    assert m["completed_fraction"] == 1.0
    assert 1.0 <= m["req95"] <= m["req99"]
    assert len(info["completion_times"]) == len(info["horizons"]) == 8
    assert all(0 < c < float("inf") for c in info["completion_times"])


def test_every_masked_action_raises_and_leaves_state_untouched():
    env = PDClusterEnv(invalid_action="raise", **SMALL)
    obs, info = env.reset(seed=1)
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(40):
        mask = info["action_mask"]
        masked = np.flatnonzero(~mask)
        for a in rng.choice(masked, size=min(5, len(masked)), replace=False):
            with pytest.raises(ValueError, match=f"masked action {a}"):
                env.step(int(a))
            checked += 1
        assert np.array_equal(env.action_masks(), mask)
        obs, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        if term or trunc:
            break
    assert checked > 0
    with pytest.raises(ValueError, match="outside the action space Discrete"):
        env.step(env.action_space.n)


def test_decode_stage_locks_each_call_to_its_planned_pair():
    env = PDClusterEnv(**SMALL)
    obs, info = env.reset(seed=2)
    rng = np.random.default_rng(2)
    seen_decode = 0
    for _ in range(2000):
        ctx = info["decision_context"]
        if ctx.stage == "decode":
            seen_decode += 1
            legal = np.flatnonzero(info["action_mask"])
            for a in legal:
                k, p, d = ctx.unflatten(a)
                assert (p, d) == (ctx.planned_prefill[k], ctx.planned_decode[k])
            assert len(legal) == int((ctx.valid & ~ctx.picked).sum())
        obs, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        if term or trunc:
            break
    assert seen_decode > 0


def test_decode_kv_feasibility_is_in_the_mask():
    model = "llama3.1-70b"
    cl = cluster_from_dict(
        {
            "name": "kv-tight",
            "architecture": "pd",
            "default_model": model,
            # A100s at TP 2 hold 41k KV tokens: a call can outgrow them within the model's window
            "tensor_parallel": {model: {"a100-80g": 2, "h200": 4}},
            "prefill": [{"gpu": "a100-80g"}],
            "decode": [{"gpu": "a100-80g"}, {"gpu": "h200"}],
        }
    )
    env = PDClusterEnv(cluster=cl, trace=[Workflow("w", 0.0, (LLMNode("a", model, 100, 10),))])
    env.reset(seed=0)
    sim = env.sim
    caps = [d.capacity for d in sim.decode]
    assert caps[0] < caps[1]
    big = caps[0] + 1000  # fits only the H200 decode instance
    env = PDClusterEnv(cluster=cl, trace=[Workflow("w", 0.0, (LLMNode("a", model, big, 10),))])
    _, info = env.reset(seed=0)
    ctx = info["decision_context"]
    legal = {ctx.unflatten(a) for a in np.flatnonzero(info["action_mask"])}
    assert legal == {(0, 0, 1)}


def test_same_seed_same_trajectory_and_metrics():
    a_trace, a_info = random_masked_rollout(PDClusterEnv(estimate_error=0.2, **SMALL), seed=5)
    b_trace, b_info = random_masked_rollout(PDClusterEnv(estimate_error=0.2, **SMALL), seed=5)
    assert [(a, r) for a, r, _ in a_trace] == [(a, r) for a, r, _ in b_trace]
    for (_, _, oa), (_, _, ob) in zip(a_trace, b_trace, strict=True):
        for k in oa:
            assert np.array_equal(oa[k], ob[k])
    assert a_info["metrics"] == b_info["metrics"]
    c_trace, _ = random_masked_rollout(PDClusterEnv(estimate_error=0.2, **SMALL), seed=6)
    assert [a for a, _, _ in c_trace] != [a for a, _, _ in a_trace]


def test_observation_hides_unrevealed_nodes_and_true_lengths():
    model = "llama3.1-70b"

    def wf(child_out: int, root_out: int) -> Workflow:
        return Workflow(
            "w",
            0.0,
            (
                LLMNode("a", model, 500, root_out, task="chat"),
                ToolNode("t", 0.1, ("a",)),
                LLMNode("b", model, 9000, child_out, ("t",), task="chat"),
            ),
        )

    def first_obs(trace, **kw):
        env = PDClusterEnv(trace=trace, output_predictor="task-mean", **kw)
        obs, info = env.reset(seed=0)
        return obs, info["decision_context"]

    o1, c1 = first_obs([wf(10, 64)])
    o2, c2 = first_obs([wf(4000, 64)])  # the unrevealed child differs
    o3, c3 = first_obs([wf(10, 900)])  # the revealed root's true output differs
    for o in (o2, o3):
        for k in o1:
            assert np.array_equal(o1[k], o[k]), k
    assert c1 == c2 == c3


def test_penalize_mode_charges_and_falls_back():
    env = PDClusterEnv(invalid_action="penalize", invalid_penalty=2.5, **SMALL)
    _, info = env.reset(seed=0)
    bad = int(np.flatnonzero(~info["action_mask"])[0])
    _, r, _, _, info2 = env.step(bad)
    assert r <= -2.5
    assert len(info2["decision_context"].picks) <= 1


def test_reward_sums_to_minus_mean_powered_slowdown():
    env = PDClusterEnv(reward="slowdown", reward_kwargs={"p": 2.0}, **SMALL)
    trace, info = random_masked_rollout(env, seed=4)
    ret = sum(r for _, r, _ in trace)
    ratios = np.array(info["completion_times"]) / np.array(info["horizons"])
    assert ret == pytest.approx(-np.mean(ratios**2), rel=1e-9)


def test_terminal_req99_reward():
    env = PDClusterEnv(reward="req99", **SMALL)
    trace, info = random_masked_rollout(env, seed=4)
    assert all(r == 0 for _, r, _ in trace[:-1])
    assert trace[-1][1] == pytest.approx(-info["metrics"]["req99"])


def test_truncation_reports_unfinished_workflows():
    env = PDClusterEnv(max_steps=5, **SMALL)
    trace, info = random_masked_rollout(env, seed=0)
    assert len(trace) == 5
    assert info["metrics"]["completed_fraction"] < 1.0


@pytest.mark.parametrize(
    ("reward", "charge"),
    [("slowdown", lambda r: -(r**4)), ("lateness", lambda r: -max(0.0, r - 2.0))],
)
def test_truncation_charges_unfinished_workflows_their_elapsed_time(reward, charge):
    """The documented return: finished workflows are charged C_w / H_w, those that arrived but
    did not finish by the truncation their elapsed time / H_w (not nothing)."""
    env = PDClusterEnv(max_steps=12, reward=reward, **SMALL)
    trace, info = random_masked_rollout(env, seed=0)
    sim = env.sim
    ratios = [
        ((run.finish_time if run.finish_time >= 0 else sim.now) - run.arrival)
        / sim.standalone_horizon(run)
        for run in sim.runs
        if run.arrival <= sim.now
    ]
    assert any(run.finish_time < 0 and run.arrival <= sim.now for run in sim.runs)
    expected = sum(charge(r) for r in ratios) / len(sim.runs)
    assert sum(r for _, r, _ in trace) == pytest.approx(expected, rel=1e-9)


def test_works_in_gymnasium_vector_env():
    vec = gym.vector.SyncVectorEnv([lambda: PDClusterEnv(**SMALL) for _ in range(2)])
    obs, info = vec.reset(seed=[0, 1])
    assert obs["ratio"].shape[0] == 2
    masks = np.stack(vec.call("action_masks"))
    actions = np.array([np.flatnonzero(m)[0] for m in masks])
    obs, r, term, trunc, info = vec.step(actions)
    assert r.shape == (2,)


@pytest.mark.slow
def test_works_in_sb3_subproc_vec_env_with_masks():
    from stable_baselines3.common.vec_env import SubprocVecEnv

    vec = SubprocVecEnv([lambda: PDClusterEnv(**SMALL) for _ in range(2)])
    try:
        vec.seed(0)
        vec.reset()
        masks = np.stack(vec.env_method("action_masks"))
        assert masks.shape == (2, vec.action_space.n) and masks.any(axis=1).all()
        vec.step(np.array([np.flatnonzero(m)[0] for m in masks]))
    finally:
        vec.close()


def test_render_modes():
    env = PDClusterEnv(render_mode="ansi", **SMALL)
    env.reset(seed=0)
    text = env.render()
    assert "prefill" in text and "slot" in text
    env = PDClusterEnv(render_mode="rgb_array", **SMALL)
    env.reset(seed=0)
    img = env.render()
    assert img.ndim == 3 and img.shape[2] == 3 and img.dtype == np.uint8 and img.std() > 0


def test_bad_options_get_clear_errors():
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        PDClusterEnv(reward="nope")
    with pytest.raises(ValueError, match="needs a prefill-decode"):
        PDClusterEnv(cluster="goodserve-4", model="llama3.1-8b")
    with pytest.raises(ValueError, match="invalid_action"):
        PDClusterEnv(invalid_action="ignore")


def test_task_mean_predictor_sees_each_finished_call_once_per_episode():
    env = PDClusterEnv(output_predictor="task-mean", **SMALL)
    for seed in (0, 1):
        random_masked_rollout(env, seed=seed)
        assert env._predictor.observed == len(env.sim.calls)


def test_context_arrays_kept_from_an_earlier_step_keep_their_values():
    """The env updates R, the mask and decode times in place between picks (copy-on-write): an
    array, or a view of one, that a policy kept from an earlier step still holds that step's
    values, and the current context always shows the current ones."""
    env = PDClusterEnv(**SMALL)
    _, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    kept = []
    for step in range(300):
        ctx = info["decision_context"]
        if step % 3 == 0:
            arrays = (ctx.projected_ratio, ctx.feasible[0], ctx.decode_time, ctx.prefill_ready)
            kept.append((arrays, [a.copy() for a in arrays]))
        _, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        if term or trunc:
            break
        ctx = info["decision_context"]
        assert np.array_equal(ctx.feasible.reshape(-1), info["action_mask"])
    assert len(kept) > 10
    for arrays, copies in kept:
        for a, c in zip(arrays, copies, strict=True):
            assert np.array_equal(a, c)


def test_an_explicit_model_serves_a_traces_calls_and_none_keeps_the_traces_own():
    trace = [Workflow("w", 0.0, (LLMNode("a", "qwen3-235b-a22b", 100, 10),))]
    env = PDClusterEnv(cluster="hetero-1", model="llama3.1-70b", trace=trace)
    env.reset(seed=0)
    assert {c.model for run in env.sim.runs for c in [run.workflow.nodes[0]]} == {"llama3.1-70b"}
    with pytest.raises(ValueError, match="needs model 'qwen3-235b-a22b'"):
        PDClusterEnv(cluster="hetero-1", trace=trace).reset(seed=0)  # llama cluster, qwen trace
