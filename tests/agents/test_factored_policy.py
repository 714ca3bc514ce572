"""Specifications of the factorised (slot, then pair) PDCluster head (``agents.factored``): it is
the flat head's distribution computed per slot, samples only legal actions, and trains."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import pytest
import torch as th

from agents import build_model
from agents.factored import FactoredActionPolicy, FactoredMaskableDistribution


@pytest.fixture(scope="module")
def observations(factored_steps):
    """(obs, mask) of HexAgent's first steps, seeds 0 and 1 (several slots open at once)."""
    return factored_steps


def models(env, spec):
    th.set_num_threads(1)
    flat = build_model("maskable-ppo", env, spec, seed=0, hyperparams={"n_steps": 32})
    fact = build_model(
        "maskable-ppo-factored", env, spec, seed=1, hyperparams={"n_steps": 32, "batch_size": 16}
    )
    assert isinstance(fact.policy, FactoredActionPolicy)
    # Same extractor weights; random non-zero output layers so every term matters.
    gen = th.Generator().manual_seed(0)
    with th.no_grad():
        for p in flat.policy.features_extractor.parameters():
            p.copy_(th.randn(p.shape, generator=gen) * 0.3)
    fact.policy.features_extractor.load_state_dict(flat.policy.features_extractor.state_dict())
    return flat, fact


def batch(policy, observations):
    obs = {k: np.stack([o[k] for o, _ in observations]) for k in observations[0][0]}
    masks = np.stack([m for _, m in observations])
    obs_t, _ = policy.obs_to_tensor(obs)
    return obs_t, masks


def test_factored_log_probs_equal_the_flat_heads_for_every_legal_action(
    factored_env, factored_spec, observations
):
    flat, fact = models(factored_env, factored_spec)
    fact.policy.mlp_extractor.value_net.load_state_dict(
        flat.policy.mlp_extractor.value_net.state_dict()
    )
    fact.policy.value_net.load_state_dict(flat.policy.value_net.state_dict())
    obs_t, masks = batch(flat.policy, observations)
    b, n = masks.shape
    cols = np.flatnonzero(masks.any(axis=0))
    cols = np.random.default_rng(0).choice(cols, size=min(60, cols.size), replace=False)
    with th.no_grad():
        joint = flat.policy.get_distribution(obs_t, action_masks=masks).distribution.logits
        dist = fact.policy.get_distribution(obs_t, action_masks=masks)
        for col in cols.tolist():
            rows = np.flatnonzero(masks[:, col])
            lp = dist.log_prob(th.full((b,), col, dtype=th.long))[rows]
            assert th.allclose(lp, joint[rows, col], atol=1e-4), (col, lp, joint[rows, col])
        values = fact.policy.predict_values(obs_t)
        assert th.allclose(values, flat.policy.predict_values(obs_t), atol=1e-5)
    # more than one open slot in some observation, so the slot factor is exercised
    k = fact.policy.features_extractor.K
    assert (masks.reshape(b, k, -1).any(-1).sum(1) > 1).any()


def test_factored_samples_are_legal_and_follow_the_distribution(
    factored_env, factored_spec, observations
):
    _, fact = models(factored_env, factored_spec)
    obs, mask = max(observations, key=lambda om: om[1].sum())
    obs_t, _ = fact.policy.obs_to_tensor(obs)
    th.manual_seed(0)
    with th.no_grad():
        dist = fact.policy.get_distribution(obs_t, action_masks=mask)
        probs = np.array([dist.log_prob(th.tensor([a])).exp().item() for a in range(mask.size)])
        draws = np.array([int(dist.get_actions()[0]) for _ in range(400)])
    assert mask[draws].all()
    assert abs(probs[mask].sum() - 1.0) < 1e-4
    top = int(np.argmax(probs))
    assert abs(np.mean(draws == top) - probs[top]) < 0.1


def test_deterministic_action_is_the_best_slot_then_its_best_pair(
    factored_env, factored_spec, observations
):
    flat, fact = models(factored_env, factored_spec)
    fe = fact.policy.features_extractor
    for obs, mask in observations[:6]:
        a, _ = fact.predict(obs, deterministic=True, action_masks=mask)
        obs_t, _ = flat.policy.obs_to_tensor(obs)
        with th.no_grad():
            p = flat.policy.get_distribution(obs_t, action_masks=mask).distribution.probs[0]
        p = p.reshape(fe.K, fe.P * fe.D).numpy()
        slot, pair = divmod(int(a), fe.P * fe.D)
        assert mask[int(a)]
        assert slot == int(np.argmax(p.sum(1)))
        assert pair == int(np.argmax(p[slot]))


def test_factored_mask_of_the_wrong_size_is_a_clear_error():
    dist = FactoredMaskableDistribution(th.zeros(1, 3), lambda k: th.zeros(len(k), 4), 4)
    with pytest.raises(ValueError, match="12"):
        dist.apply_masking(np.ones(11, dtype=bool))


def test_factored_ppo_learns_and_saves_a_loadable_checkpoint(factored_env, factored_spec, tmp_path):
    _, fact = models(factored_env, factored_spec)
    fact.learn(total_timesteps=32)
    assert fact.num_timesteps >= 32
    fact.save(tmp_path / "m.zip")
    from agents import load_model

    loaded = load_model(str(tmp_path / "m.zip"))
    assert isinstance(loaded.policy, FactoredActionPolicy)


def test_sampler_draws_what_torchs_categorical_draws():
    from agents.factored import MASKED_LOGIT, _categorical_sample

    gen = th.Generator().manual_seed(5)
    for b, n in ((8, 256), (3, 64), (1, 5)):
        logits = th.randn(b, n, generator=gen) * 3
        logits[th.rand(b, n, generator=gen) < 0.9] = MASKED_LOGIT  # masked, as in the heads
        logits[:, :2] = th.tensor([0.5, 0.2])  # at least two open entries per row
        th.manual_seed(11)
        expected = [th.distributions.Categorical(logits=logits).sample() for _ in range(50)]
        th.manual_seed(11)
        got = [_categorical_sample(logits) for _ in range(50)]
        assert all(th.equal(e, g) for e, g in zip(expected, got, strict=True))
        assert len({tuple(e.tolist()) for e in expected}) > 1  # the draws vary
