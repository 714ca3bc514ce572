"""PDClusterTwoStepScorer (PDCluster-v1's two-step space) is PDClusterScorer's factorised
policy taken in two steps: with the same weights, its slot step's distribution is the flat
policy's marginal over slots and its pair step's the flat policy's pair distribution given the
selected slot, on the same decision of a real episode."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th

import envs  # noqa: F401  (registers the servegym ids)
from agents import TRAIN_ENVS
from agents.extractors import PDClusterScorer, PDClusterTwoStepScorer
from envs.pd_cluster.observation import observation_space


def _log_softmax(x: np.ndarray, legal: np.ndarray) -> np.ndarray:
    z = np.where(legal, x, -np.inf)
    return z - np.logaddexp.reduce(z[legal])


def _tensors(obs: dict[str, np.ndarray]) -> dict[str, th.Tensor]:
    return {k: th.as_tensor(v[None]) for k, v in obs.items()}


def test_the_two_steps_factorise_the_flat_policy() -> None:
    env = gym.make("servegym/PDCluster-v1", workload="mixed", workload_count=6).unwrapped
    obs, _ = env.reset(seed=3)
    K, P, D = env.K, env.P, env.D
    th.manual_seed(0)
    two = PDClusterTwoStepScorer(env.observation_space)
    flat = PDClusterScorer(observation_space(K, P, D, "flat"))
    flat.load_state_dict(two.state_dict(), strict=False)
    for p in two.parameters():  # weights away from the zero-initialised output layers
        p.data.add_(0.3 * th.randn_like(p))
    flat.load_state_dict({k: v for k, v in two.state_dict().items() if "keep" not in k})
    two.keep_out.bias.data.fill_(-50.0)  # keep carries no probability: compare the picks
    checked = 0
    for _ in range(6):
        mask = env.action_masks()
        assert obs["step"][0] == 1.0
        flat_obs, flat_mask = env.flat_observation()
        with th.no_grad():
            joint = flat(_tensors(flat_obs))[0, : K * P * D].numpy()
            scores = two(_tensors(obs))[0, : two.n_actions].numpy()
        legal = flat_mask.reshape(K, P * D)
        joint = _log_softmax(joint, flat_mask).reshape(K, P * D)
        marginal = np.logaddexp.reduce(joint, axis=1)
        slots = legal.any(axis=1)
        np.testing.assert_array_equal(slots, mask[:K])
        np.testing.assert_allclose(
            _log_softmax(scores, mask)[:K][slots], marginal[slots], rtol=0, atol=1e-4
        )
        k = int(np.flatnonzero(slots)[-1])
        obs, _, terminated, truncated, _ = env.step(k)
        assert not (terminated or truncated)
        if obs["step"][1] == 1.0:  # prefill stage: the pair step of slot k
            mask = env.action_masks()
            np.testing.assert_array_equal(mask[: P * D], legal[k])
            with th.no_grad():
                pair = two(_tensors(obs))[0, : P * D].numpy()
            np.testing.assert_allclose(
                _log_softmax(pair, legal[k])[legal[k]],
                (joint[k] - marginal[k])[legal[k]],
                rtol=0,
                atol=1e-4,
            )
            obs, _, _, _, _ = env.step(int(np.flatnonzero(legal[k])[0]))
            checked += 1
    assert checked > 0


def test_pd_cluster_v1_trains_with_the_two_step_scorer() -> None:
    assert TRAIN_ENVS["pd-cluster-v1"].extractor is PDClusterTwoStepScorer
    assert TRAIN_ENVS["pd-cluster-v1"].action_scores


def test_a_flat_observation_space_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="PDClusterTwoStepScorer needs a Dict observation"):
        PDClusterTwoStepScorer(observation_space(4, 2, 2, "flat"))
