"""PDCluster's two action spaces (``envs/pd_cluster/actions.py``): the two-step space of
PDCluster-v1 (slot step with keep, then pair step) expresses every pick of the flat space, so
every expert and baseline makes the same decisions in both; its masks and observation say which
step is pending."""

from __future__ import annotations

import numpy as np
import pytest

from envs.pd_cluster import PDClusterEnv
from evaluation.runs import run_episode
from heuristics import make_policy, policies_for

SMALL = {"workload_count": 8, "slots": 16}


@pytest.mark.parametrize("name", sorted(policies_for("pd-cluster")))
def test_every_policy_makes_the_same_decisions_in_both_action_spaces(name):
    runs = {}
    for space in ("flat", "two-step"):
        env = PDClusterEnv(action_space=space, **SMALL)
        runs[space] = run_episode(env, make_policy(name), seed=4)
    flat, two = runs["flat"], runs["two-step"]
    for key in ("metrics", "completion_times", "horizons", "invocations", "utilisation"):
        assert flat[key] == two[key], key
    # one extra (pair) step per prefill-stage pick, none at the decode stage
    assert two["steps"] > flat["steps"]


def test_two_step_masks_and_observation_say_which_step_is_pending():
    env = PDClusterEnv(action_space="two-step", **SMALL)
    K, P, D = env.K, env.P, env.D
    assert env.action_space.n == max(K + 1, P * D)
    obs, info = env.reset(seed=1)
    ctx = info["decision_context"]
    assert ctx.stage == "prefill" and ctx.selected_slot == -1
    mask = info["action_mask"]
    assert np.array_equal(mask[:K], ctx.feasible.reshape(K, -1).any(axis=1))
    assert mask[K] and not mask[K + 1 :].any()  # keep is always legal at a slot step
    assert obs["step"].tolist() == [1.0, 0.0] and not obs["selected"].any()
    assert not obs["pair"].any() and "ratio" not in obs
    slot = int(np.flatnonzero(mask[:K])[-1])
    obs, reward, *_, info = env.step(slot)
    ctx = info["decision_context"]
    assert ctx.selected_slot == slot and not ctx.picked[slot]  # nothing is picked yet
    assert obs["step"].tolist() == [0.0, 1.0] and np.flatnonzero(obs["selected"]).tolist() == [slot]
    pairs = info["action_mask"]
    assert np.array_equal(pairs[: P * D], ctx.feasible[slot].reshape(-1))
    assert not pairs[P * D :].any()
    p, d = divmod(int(np.flatnonzero(pairs)[0]), D)
    assert ctx.action(slot, p, d) == p * D + d
    with pytest.raises(ValueError, match="pair step of slot"):
        ctx.action((slot + 1) % K, p, d)
    *_, info = env.step(p * D + d)
    ctx = info["decision_context"]
    assert ctx.selected_slot == -1 and info["action_mask"][env.K]  # the next slot step


def test_keep_ends_the_invocation_so_always_keeping_takes_one_step_per_invocation():
    env = PDClusterEnv(action_space="two-step", **SMALL)
    env.reset(seed=2)
    steps, done = 0, False
    while not done:
        *_, terminated, truncated, info = env.step(env.K)
        steps += 1
        done = terminated or truncated
    assert steps == info["invocations"]
    assert not info["invalid_action"]
    assert np.isfinite(info["metrics"]["req99"])


def test_a_masked_two_step_action_is_explained_or_replaced():
    env = PDClusterEnv(action_space="two-step", invalid_action="raise", **SMALL)
    _, info = env.reset(seed=1)
    empty = int(np.flatnonzero(~info["action_mask"][: env.K])[0])
    with pytest.raises(ValueError, match=f"slot {empty} is empty"):
        env.step(empty)
    env = PDClusterEnv(action_space="two-step", **SMALL)
    _, info = env.reset(seed=1)
    *_, info = env.step(empty)
    assert info["invalid_action"] and info["decision_context"].selected_slot >= 0


def test_unknown_action_space_is_named():
    with pytest.raises(ValueError, match="action_space must be one of"):
        PDClusterEnv(action_space="pairs", **SMALL)
