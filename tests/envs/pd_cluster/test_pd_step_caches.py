"""Specifications of PDCluster-v0's per-step shortcuts (issue 32): each must give exactly what the
general code gives. The cross projection (a prefill-stage pick's plane and column re-projected in
one gather) equals re-projecting everything; the per-invocation metrics cache equals the shared
recomputation at every step; the legal-action fast path equals the shared rule."""

from __future__ import annotations

import numpy as np
import pytest

from envs.common.base import ServegymEnv
from envs.pd_cluster import PDClusterEnv
from traces.schema import LLMNode, Workflow

#: Long prompts arriving together: decode KV runs short, so Δ includes the wait for KV room
#: (the ``np.maximum`` branch of the projection).
KV_TIGHT = [
    Workflow(f"w{i}", 0.01 * i, (LLMNode("a", "llama3.1-70b", 100_000 + 37 * i, 3000 + 11 * i),))
    for i in range(40)
]


def _random_steps(env: PDClusterEnv, seed: int, steps: int):
    """Yield after each of ``steps`` random masked steps whose episode is not over."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    for _ in range(steps):
        action = int(rng.choice(np.flatnonzero(info["action_mask"])))
        obs, _, term, trunc, info = env.step(action)
        if term or trunc:
            return
        yield obs, info


@pytest.mark.parametrize(
    "kwargs",
    [
        {"workload": "bfcl", "workload_count": 60},
        {"trace": KV_TIGHT},
    ],
)
def test_cross_projection_equals_a_whole_reprojection(monkeypatch, kwargs):
    monkeypatch.setattr("envs.pd_cluster.projection.WHOLE_REFRESH_LIMIT", 0)
    env = PDClusterEnv(cluster="hetero-1", **kwargs)
    crossed = waited = 0
    original = env._project_cross

    def counting(p: int, d: int) -> None:
        nonlocal crossed, waited
        crossed += 1
        waited += any(env._waits)
        original(p, d)

    env._project_cross = counting
    for _, _ in _random_steps(env, seed=2, steps=400):
        kept = (env._ratio.copy(), env._ratio_log.copy(), env._ratio_obs.copy())
        env._project(slice(None), slice(None))  # everything from scratch, in place
        for before, after in zip(kept, (env._ratio, env._ratio_log, env._ratio_obs), strict=True):
            np.testing.assert_array_equal(before, after)
    assert crossed > 20, "the episode no longer exercises the cross projection"
    if "trace" in kwargs:
        assert waited > 0, "no cross projection saw a wait for KV room"


def test_step_metrics_equal_the_shared_recomputation():
    env = PDClusterEnv(cluster="hetero-1", workload="mixed", workload_count=12)
    seen = set()
    for _, info in _random_steps(env, seed=0, steps=600):
        assert info["metrics"] == ServegymEnv._metrics_so_far(env)
        seen.add((env.sim.now, info["metrics"]["num_unfinished"]))
    assert len(seen) > 5, "the episode should move through several times and completions"


def test_legal_action_fast_path_equals_the_shared_rule():
    env = PDClusterEnv(cluster="hetero-1", workload="mixed", workload_count=4)
    env.reset(seed=0)
    legal = int(np.flatnonzero(env.action_masks())[0])
    illegal = int(np.flatnonzero(~env.action_masks())[0])
    for action in (legal, np.int64(legal), illegal, np.int64(illegal), np.int32(legal)):
        fast = env._legal_action(action)
        fast_invalid = env._invalid
        shared = env._legal_action(np.asarray(action))  # a 0-d array takes the general path
        assert fast == shared and type(fast[0]) is int
        assert fast_invalid == env._invalid
    for bad in (-1, env.action_space.n, True, 1.0):
        with pytest.raises(ValueError, match="outside the action space"):
            env._legal_action(bad)


def _expert_trajectory(observations: bool, **kwargs):
    """HexAgent's actions, rewards, masks, contexts (every field) and final metrics."""
    from dataclasses import fields

    from heuristics import make_policy

    env = PDClusterEnv(cluster="hetero-1", observations=observations, **kwargs)
    policy = make_policy("hexagent")
    policy.reset()
    obs, info = env.reset(seed=0)
    steps, observed = [], []
    done = False
    while not done:
        ctx = info["decision_context"]
        snapshot = {
            f.name: np.array(v, copy=True) if isinstance(v, np.ndarray) else repr(v)
            for f in fields(ctx)
            for v in [getattr(ctx, f.name)]
        }
        action = policy.act(obs, info)
        observed.append(obs)
        obs, reward, term, trunc, info = env.step(action)
        steps.append((action, reward, info["action_mask"], snapshot))
        done = term or trunc
    return steps, info["metrics"], observed


def test_without_observations_the_expert_acts_and_scores_exactly_the_same():
    kwargs = {"workload": "bfcl", "workload_count": 15}
    with_obs, metrics, _ = _expert_trajectory(True, **kwargs)
    without, metrics_without, blank = _expert_trajectory(False, **kwargs)
    assert metrics == metrics_without
    assert len(with_obs) == len(without) > 50
    for (a, r, m, ctx), (a2, r2, m2, ctx2) in zip(with_obs, without, strict=True):
        assert a == a2 and r == r2
        np.testing.assert_array_equal(m, m2)
        assert ctx.keys() == ctx2.keys()
        for key in ctx:
            np.testing.assert_array_equal(ctx[key], ctx2[key], err_msg=key)
    for obs in blank:
        for array in obs.values():
            assert not array.any() and not array.flags.writeable


def test_observations_option_must_be_a_bool():
    with pytest.raises(ValueError, match="observations must be True or False"):
        PDClusterEnv(observations="no")
