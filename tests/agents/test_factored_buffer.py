"""Specifications of the factorised head's compact rollout buffer (``agents.factored_buffer``,
issue 32): the taken slot's rows score the taken actions exactly as the full observation and
mask do, and PPO trained through it ends with the same parameters as through sb3-contrib's
buffer."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.buffers import MaskableDictRolloutBuffer
from stable_baselines3.common.vec_env import DummyVecEnv

from agents import build_model, make_env
from agents.factored import FactoredMaskableDistribution, open_slots
from agents.factored_buffer import FactoredRolloutBuffer, TakenSlotRows
from agents.factored_buffer import open_slots as open_slots_np


@pytest.fixture(scope="module")
def observations(factored_steps):
    """Observations of HexAgent's first steps on seeds 0 and 1."""
    return [obs for obs, _ in factored_steps]


@pytest.mark.parametrize("n_pairs", [64, 12])
def test_open_slots_equal_any_over_each_slots_pairs(n_pairs):
    rng = np.random.default_rng(n_pairs)
    masks = rng.random((5, 7, n_pairs)) < rng.choice([0.0, 0.02, 0.5], size=(5, 7, 1))
    masks[0, 0, -1] = True  # a last-byte-only row
    expected = masks.any(-1)
    assert expected.any() and not expected.all()
    assert np.array_equal(open_slots_np(masks.reshape(5, -1), 7, n_pairs), expected)
    assert th.equal(open_slots(th.from_numpy(masks)), th.from_numpy(expected))
    shifted = th.from_numpy(masks).flatten()[1:].reshape(-1)[: 4 * 7 * n_pairs]  # odd offset
    expected_shifted = masks.reshape(-1)[1 : 1 + 4 * 7 * n_pairs].reshape(4, 7, -1).any(-1)
    assert th.equal(open_slots(shifted.reshape(4, 7, n_pairs)), th.from_numpy(expected_shifted))


def _random_batch(policy, observations, seed):
    """Full observations, random masks (any pattern, not only the env's), a legal action per
    row, and the TakenSlotRows of those actions built by FactoredRolloutBuffer.add."""
    fe = policy.features_extractor
    k, n = fe.K, fe.P * fe.D
    rng = np.random.default_rng(seed)
    obs = {key: np.stack([o[key] for o in observations]) for key in observations[0]}
    b = len(observations)
    masks = rng.random((b, k * n)) < 0.2
    actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
    space = policy.observation_space
    buf = FactoredRolloutBuffer(1, space, policy.action_space, n_envs=b)
    buf.add(obs, actions[:, None], np.zeros(b), np.zeros(b), th.zeros(b), th.zeros(b), masks)
    rows = TakenSlotRows(
        *(th.from_numpy(x[0]) for x in (buf.ratio_rows, buf.slot_open, buf.pair_mask))
    )
    obs_t, _ = policy.obs_to_tensor(obs)
    return obs_t, masks, th.as_tensor(actions), rows


def test_taken_slot_rows_score_actions_exactly_as_the_full_mask(
    factored_env, factored_spec, observations
):
    th.manual_seed(0)
    model = build_model(
        "maskable-ppo-factored", factored_env, factored_spec, seed=0, hyperparams={"n_steps": 32}
    )
    policy = model.policy
    with th.no_grad():  # non-zero output layers, so every term of the scores matters
        for p in policy.parameters():
            p.add_(th.randn(p.shape) * 0.3)
    for seed in range(2):
        obs_t, masks, actions, rows = _random_batch(policy, observations, seed)
        lean = {key: v for key, v in obs_t.items() if key != "ratio"}  # no K x P x D ratio
        results, grads = [], []
        for o, m in ((obs_t, masks), (lean, rows)):
            policy.zero_grad()
            values, lp, ent = policy.evaluate_actions(o, actions, action_masks=m)
            assert ent is None
            (lp.sum() + values.sum()).backward()
            results.append((values, lp))
            grads.append([p.grad.clone() for p in policy.parameters() if p.grad is not None])
        (values, lp), (values2, lp2) = results
        assert th.isfinite(lp).all() and (lp < 0).all()
        assert th.equal(values, values2) and th.equal(lp, lp2)
        assert len(grads[0]) == len(grads[1]) > 0
        assert all(th.equal(g, h) for g, h in zip(*grads, strict=True))


def test_ppo_through_the_compact_buffer_trains_the_same_parameters(
    factored_env, factored_spec, factored_kwargs
):
    th.set_num_threads(1)
    venv_args = [
        lambda i=i: make_env(factored_spec, factored_kwargs, seed=i, lean=True) for i in range(2)
    ]
    params = []
    for buffer in (None, MaskableDictRolloutBuffer):
        hyper = {"n_steps": 24, "batch_size": 16, "target_kl": None}
        if buffer is not None:
            hyper["rollout_buffer_class"] = buffer
        model = build_model(
            "maskable-ppo-factored",
            DummyVecEnv(venv_args),
            factored_spec,
            seed=3,
            hyperparams=hyper,
        )
        expected = FactoredRolloutBuffer if buffer is None else buffer
        assert type(model.rollout_buffer) is expected
        model.learn(total_timesteps=96)
        params.append({k: v.clone() for k, v in model.policy.state_dict().items()})
    moved = build_model(
        "maskable-ppo-factored", factored_env, factored_spec, seed=3
    ).policy.state_dict()
    assert any(not th.equal(params[0][k], moved[k]) for k in moved)  # training changed them
    assert all(th.equal(params[0][k], params[1][k]) for k in params[0])


def test_taken_masks_only_score_and_check_their_shapes():
    dist = FactoredMaskableDistribution(th.zeros(2, 3), lambda k: th.zeros(len(k), 4), 4)
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        dist.apply_taken(th.ones(2, 4, dtype=th.bool), th.ones(2, 4, dtype=th.bool))
    dist.apply_taken(th.tensor([[True, False, True]] * 2), th.tensor([[True, False] * 2] * 2))
    lp = dist.log_prob(th.tensor([0, 10]))  # slot 0 pair 0, slot 2 pair 2
    assert th.allclose(lp, th.full((2,), float(np.log(0.5) * 2)))
    with pytest.raises(RuntimeError, match="cannot act"):
        dist.get_actions()


def test_compact_buffer_rejects_other_spaces():
    box = spaces.Box(0, 1, (4,))
    with pytest.raises(ValueError, match="ratio"):
        FactoredRolloutBuffer(4, spaces.Dict({"x": box}), spaces.Discrete(4))
    obs = spaces.Dict({"ratio": spaces.Box(0, 1, (2, 3, 4)), "slots": box})
    with pytest.raises(ValueError, match="Discrete\\(24\\)"):
        FactoredRolloutBuffer(4, obs, spaces.Discrete(23))
