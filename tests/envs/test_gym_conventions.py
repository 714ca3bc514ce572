"""The three envs are standard Gymnasium citizens on their registered defaults: third-party
checkers and vectorisers accept them, any action in the space is accepted by one documented rule,
every way an episode ends reports its metrics, a live env pickles, and ``rgb_array`` renders a
picture (issue 34; the rules are in ``envs/common/base.py``'s docstring)."""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit

import envs  # noqa: F401  (registers the servegym ids)

IDS = (
    "servegym/PDCluster-v0",
    "servegym/Routing-v0",
    "servegym/Allocation-v0",
    "servegym/PDCluster-v1",
    "servegym/Routing-v1",
)
#: Small episodes with the same code paths as the defaults (for tests that play whole episodes).
SMALL: dict[str, dict[str, Any]] = {
    "servegym/PDCluster-v0": {"workload_count": 4, "slots": 4},
    "servegym/Routing-v0": {"workload_count": 30},
    "servegym/PDCluster-v1": {"workload_count": 4, "slots": 4},
    "servegym/Routing-v1": {"workload_count": 30},
    "servegym/Allocation-v0": {"periods": 5, "period_seconds": 20.0},
}


def first_legal(env: gym.Env) -> int:
    return int(np.flatnonzero(env.unwrapped.action_masks())[0])


@pytest.mark.parametrize("env_id", IDS)
def test_gymnasiums_checker_passes_on_the_registered_defaults(env_id):
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(gym.make(env_id).unwrapped)


@pytest.mark.parametrize("env_id", IDS)
def test_sb3s_checker_passes_on_the_registered_defaults(env_id):
    from stable_baselines3.common.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(gym.make(env_id).unwrapped, warn=False)


@pytest.mark.parametrize("env_id", IDS)
def test_sb3_make_vec_env_with_subprocesses_runs_the_defaults(env_id):
    """SB3's ``make_vec_env`` asks for ``render_mode="rgb_array"`` and steps unmasked actions in
    worker processes; both are accepted."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    vec = make_vec_env(
        env_id, n_envs=2, seed=0, vec_env_cls=SubprocVecEnv, vec_env_kwargs={"start_method": "fork"}
    )
    try:
        obs = vec.reset()
        assert set(obs) == set(vec.observation_space.spaces)
        for _ in range(3):
            obs, rewards, dones, infos = vec.step(np.array([vec.action_space.sample()] * 2))
            assert len(infos) == 2 and all("metrics" in i for i in infos)
        assert vec.get_attr("render_mode") == ["rgb_array", "rgb_array"]
    finally:
        vec.close()


@pytest.mark.parametrize("env_id", IDS)
def test_time_limit_cut_ends_with_the_metrics_so_far(env_id):
    env = TimeLimit(gym.make(env_id, **SMALL[env_id]), 50)
    env.reset(seed=0)
    done, steps = False, 0
    while not done:
        _, _, terminated, truncated, info = env.step(first_legal(env))
        steps += 1
        done = terminated or truncated
    assert steps <= 50
    m = info["metrics"]
    if truncated and not terminated:  # cut by the wrapper: the env never saw an end
        assert m["num_unfinished"] + m["num_not_arrived"] > 0
    assert m.get("num_workflows", m.get("num_requests")) > 0


def test_a_cut_pdcluster_episode_reports_req_over_all_workflows_unfinished_as_inf():
    env = TimeLimit(gym.make("servegym/PDCluster-v0", workload_count=20, slots=8), 50)
    env.reset(seed=1)
    for _ in range(50):
        *_, terminated, truncated, info = env.step(first_legal(env))
    assert truncated and not terminated
    m, sim = info["metrics"], env.unwrapped.sim
    finished = sum(r.finish_time >= 0 for r in sim.runs)
    assert m["completed_fraction"] == pytest.approx(finished / len(sim.runs))
    assert m["num_unfinished"] == sum(r.finish_time < 0 and r.arrival <= sim.now for r in sim.runs)
    assert m["req99"] == np.inf  # more than 1 % did not finish: Req99 is not reached


@pytest.mark.parametrize("env_id", IDS)
def test_a_live_env_pickles_and_resumes_identically_after_ten_steps(env_id):
    env = gym.make(env_id, **SMALL[env_id]).unwrapped
    env.reset(seed=5)
    for _ in range(10):
        env.step(first_legal(env))
    clone = pickle.loads(pickle.dumps(env))

    def rest(e: Any) -> tuple[list, dict]:
        out, done = [], False
        while not done:
            obs, r, terminated, truncated, info = e.step(first_legal(e))
            out.append((r, [obs[k].tobytes() for k in sorted(obs)], info["action_mask"].tobytes()))
            done = terminated or truncated
        return out, info["metrics"]

    assert rest(env) == rest(clone)


@pytest.mark.parametrize("env_id", IDS)
def test_the_step_that_ends_an_episode_masks_action_zero_alone(env_id):
    env = gym.make(env_id, **SMALL[env_id])
    env.reset(seed=0)
    done = False
    while not done:
        *_, terminated, truncated, info = env.step(first_legal(env))
        done = terminated or truncated
    assert terminated
    assert info["action_mask"].tolist() == [True] + [False] * (env.action_space.n - 1)
    assert np.array_equal(env.unwrapped.action_masks(), info["action_mask"])


def masked_and_legal(env: gym.Env, seed: int) -> tuple[int, int]:
    """Step with the fallback's choice until a masked action exists; return (masked, fallback)."""
    env.reset(seed=seed)
    for _ in range(200):
        mask = env.unwrapped.action_masks()
        if not mask.all():
            return int(np.flatnonzero(~mask)[-1]), env.unwrapped.fallback_action()
        env.step(env.unwrapped.fallback_action())
    raise AssertionError("no masked action in 200 steps")


@pytest.mark.parametrize("env_id", IDS)
def test_a_masked_action_is_the_fallbacks_choice_with_a_penalty_and_a_flag(env_id):
    """The shared rule: the same step as the fallback's legal choice, reward −invalid_penalty
    apart, ``info["invalid_action"]`` set and the masked action recorded."""
    kwargs = {**SMALL[env_id], "invalid_penalty": 2.5}
    if env_id.startswith("servegym/Routing"):  # the default's instances all serve every request
        kwargs["cluster"] = routing_cluster_with_a_foreign_instance()
    a, b = gym.make(env_id, **kwargs), gym.make(env_id, **kwargs)
    bad, fallback = masked_and_legal(a, seed=3)
    assert masked_and_legal(b, seed=3)[1] == fallback
    obs_a, r_a, *_, info_a = a.step(bad)
    obs_b, r_b, *_, info_b = b.step(fallback)
    assert r_a == pytest.approx(r_b - 2.5)
    assert info_a["invalid_action"] and info_a["requested_action"] == bad
    assert not info_b["invalid_action"] and "requested_action" not in info_b
    for k in obs_a:
        assert np.array_equal(obs_a[k], obs_b[k]), k
    assert np.array_equal(info_a["action_mask"], info_b["action_mask"])


def routing_cluster_with_a_foreign_instance() -> Any:
    """``goodserve-4`` with its last instance serving another model: masked for its requests."""
    import dataclasses

    from envs.sim.hardware.cluster import load_cluster

    spec = load_cluster("goodserve-4")
    *rest, last = spec.instances
    other = dataclasses.replace(last, model="qwen2.5-14b")
    return dataclasses.replace(spec, instances=(*rest, other))


@pytest.mark.parametrize("env_id", IDS)
def test_raise_mode_and_out_of_range_actions_raise_naming_the_culprit(env_id):
    env = gym.make(env_id, **SMALL[env_id])
    env.reset(seed=0)
    n = env.action_space.n
    for bad in (n, -1, 2.5, 1.0, True, [0, 1]):
        with pytest.raises(ValueError, match=rf"{env_id}: action .* outside .*0\.\.{n - 1}"):
            env.step(bad)
    strict = gym.make(env_id, invalid_action="raise", **SMALL[env_id])
    strict.reset(seed=0)
    mask = strict.unwrapped.action_masks()
    if not mask.all():
        with pytest.raises(ValueError, match=f"{env_id}: masked action"):
            strict.step(int(np.flatnonzero(~mask)[0]))


@pytest.mark.parametrize("env_id", IDS)
def test_rgb_array_draws_a_picture_that_changes_with_the_state(env_id):
    env = gym.make(env_id, render_mode="rgb_array", **SMALL[env_id])
    env.reset(seed=0)
    first = env.render()
    assert first.dtype == np.uint8 and first.ndim == 3 and first.shape[2] == 3
    assert len(np.unique(first.reshape(-1, 3), axis=0)) > 8  # not a blank canvas
    for _ in range(5):
        env.step(first_legal(env))
    assert not np.array_equal(env.render(), first)


def test_per_step_info_is_light_unless_the_context_is_requested():
    """PDCluster at K = 256: the decision context is the heavy part of ``info``; the registered
    id leaves it out, ``decision_context=True`` (what policies use) puts it back."""
    light = gym.make("servegym/PDCluster-v0", workload_count=20)
    full = gym.make("servegym/PDCluster-v0", workload_count=20, decision_context=True)
    obs, info = light.reset(seed=0)
    _, info_full = full.reset(seed=0)
    assert "decision_context" not in info
    assert info_full["decision_context"] is full.unwrapped.decision_context()
    assert light.unwrapped.decision_context() == info_full["decision_context"]
    size = len(pickle.dumps(info))
    assert size < len(pickle.dumps(obs)) / 2
    assert len(pickle.dumps(info_full)) > 10 * size


@pytest.mark.parametrize(
    ("env_id", "policy"),
    [
        ("servegym/PDCluster-v0", "hexagent"),
        ("servegym/Routing-v0", "least-request"),
        ("servegym/Allocation-v0", "naive-equal"),
    ],
)
def test_a_heuristic_on_an_env_without_the_context_says_how_to_ask_for_it(env_id, policy):
    from heuristics import make_policy

    env = gym.make(env_id, **SMALL[env_id])
    obs, info = env.reset(seed=0)
    expert = make_policy(policy)
    expert.reset()
    with pytest.raises(ValueError, match="decision_context=True"):
        expert.act(obs, info)
    rich = gym.make(env_id, decision_context=True, **SMALL[env_id])
    obs, info = rich.reset(seed=0)
    assert info["action_mask"][expert.act(obs, info)]


@pytest.mark.parametrize("env_id", ["servegym/PDCluster-v0", "servegym/Routing-v0"])
def test_every_steps_metrics_equal_a_fresh_computation_from_the_simulator(env_id):
    """The per-step metrics are cached between completions; at every step they equal what the
    simulator's state gives computed from scratch (the cache never goes stale)."""
    from envs.sim.core import metrics as sim_metrics

    env = gym.make(env_id, **SMALL[env_id])
    env.reset(seed=2)
    u = env.unwrapped
    rng = np.random.default_rng(2)
    done, checked = False, 0
    while not done:
        mask = u.action_masks()
        *_, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        done = terminated or truncated
        sim, now = u.sim, u.sim.now
        lat = np.array(
            [r.finish_time - r.arrival if r.finish_time >= 0 else np.inf for r in sim.runs]
        )
        if env_id == "servegym/PDCluster-v0":
            # an unfinished workflow's C_w / H_w is inf for any H_w > 0
            h = [sim.standalone_horizon(r) if r.finish_time >= 0 else 1.0 for r in sim.runs]
            fresh = sim_metrics.summarize_workflows(lat, h)
        else:
            fresh = sim_metrics.summarize_requests(lat, u._slo, u._duration)
            fresh["migrations"] = float(sum(c.migrations for c in sim.calls))
        fresh["num_unfinished"] = float(
            sum(r.finish_time < 0 and r.arrival <= now for r in sim.runs)
        )
        fresh["num_not_arrived"] = float(sum(r.arrival > now for r in sim.runs))
        assert {k: info["metrics"][k] for k in fresh} == fresh
        checked += 1
    assert checked > 20
