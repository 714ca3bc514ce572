"""Specifications of the faster PDCluster learner (issue 11). PDClusterScorer's sparse form
computes the per-action hidden layer only for slots with a legal pair, and must give the dense
form's scores, value features and gradients on any observation, so checkpoints load into either
form and act the same; the policy's log_softmax-normalised masked distribution must be
sb3-contrib's."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from sb3_contrib.common.maskable.distributions import MaskableCategorical

from agents import TRAIN_ENVS, build_model, env_kwargs, load_policy, make_env
from agents.extractors import PDClusterScorer
from agents.policies import LogSoftmaxMaskableCategorical

K, P, D, N_SLOT, N_INST = 7, 3, 2, 12, 9


def space(k: int = K, p: int = P, d: int = D) -> gym.spaces.Dict:
    big = np.float32(1e6)
    return gym.spaces.Dict(
        {
            "slots": gym.spaces.Box(-big, big, (k, N_SLOT), np.float32),
            "instances": gym.spaces.Box(-big, big, (p + d, N_INST), np.float32),
            "ratio": gym.spaces.Box(0, big, (k, p, d), np.float32),
            "stage": gym.spaces.Box(0, 1, (3,), np.float32),
        }
    )


def random_observations(rng: np.random.Generator, b: int) -> dict[str, th.Tensor]:
    """Random features; validity and legality at random, with the corner cases forced in: a
    batch element that is all padding (no valid slot, no legal pair), a valid slot without a
    legal pair, a slot whose every pair is legal, and a slot with exactly one legal pair."""
    slots = rng.normal(size=(b, K, N_SLOT)).astype(np.float32)
    valid = rng.random((b, K)) < 0.6
    legal = (rng.random((b, K, P, D)) < 0.4) & valid[:, :, None, None]
    valid[0] = False
    legal[0] = False
    valid[1, :3] = True
    legal[1, 0] = False
    legal[1, 1] = True
    legal[1, 2] = False
    legal[1, 2, 1, 0] = True
    slots[..., 0] = valid
    ratio = np.where(legal, rng.uniform(0.01, 2.0, size=legal.shape), 0.0).astype(np.float32)
    best = np.where(legal, ratio, np.inf).min(axis=(2, 3))
    slots[..., 11] = np.where(np.isfinite(best), best / 5.0, 0.0)
    obs = {
        "slots": slots,
        "instances": rng.normal(size=(b, P + D, N_INST)).astype(np.float32),
        "ratio": ratio,
        "stage": rng.random((b, 3)).astype(np.float32),
    }
    return {k: th.as_tensor(v) for k, v in obs.items()}


def twin_extractors(seed: int) -> tuple[PDClusterScorer, PDClusterScorer]:
    """Sparse and dense extractors with the same random weights. Every parameter is drawn at
    random: the default initialisation zeroes the per-action MLP's output layer, which would
    hide any error in the hidden layer the sparse form computes differently."""
    th.manual_seed(seed)
    sparse = PDClusterScorer(space(), hidden=8, sparse=True)
    for param in sparse.parameters():
        th.nn.init.normal_(param, std=0.5)
    dense = PDClusterScorer(space(), hidden=8, sparse=False)
    dense.load_state_dict(sparse.state_dict())
    return sparse, dense


@pytest.mark.parametrize("seed", range(5))
def test_sparse_and_dense_give_the_same_scores_and_value_features(seed):
    sparse, dense = twin_extractors(seed)
    obs = random_observations(np.random.default_rng(seed), b=6)
    with th.no_grad():
        a, b = sparse(obs), dense(obs)
    assert a.shape == b.shape == (6, sparse.features_dim)
    th.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # The all-padding element and the valid slot without a legal pair score by the slot term
    # alone (pair term 0 for every (p, d)): equal across its pairs.
    scores = a[:, : K * P * D].reshape(6, K, P, D)
    assert th.all(scores[0] == scores[0, :, :1, :1])
    assert th.all(scores[1, 0] == scores[1, 0, 0, 0])


def test_sparse_and_dense_agree_when_no_slot_of_the_batch_has_a_legal_pair():
    sparse, dense = twin_extractors(0)
    obs = random_observations(np.random.default_rng(0), b=3)
    obs["ratio"] = th.zeros_like(obs["ratio"])
    with th.no_grad():
        th.testing.assert_close(sparse(obs), dense(obs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_sparse_and_dense_give_the_same_gradients(seed):
    sparse, dense = twin_extractors(seed)
    obs = random_observations(np.random.default_rng(seed), b=6)
    weights = th.randn(sparse.features_dim, generator=th.Generator().manual_seed(seed))
    for fe in (sparse, dense):
        (fe(obs) * weights).sum().backward()
    for (name, ps), pd in zip(sparse.named_parameters(), dense.parameters(), strict=True):
        assert ps.grad is not None and pd.grad is not None, name
        scale = float(pd.grad.abs().max())
        th.testing.assert_close(ps.grad, pd.grad, rtol=1e-5, atol=1e-5 * max(scale, 1.0), msg=name)


def test_trained_sparse_checkpoint_reloads_and_acts_like_the_dense_form(tmp_path):
    spec = TRAIN_ENVS["pd-cluster-v0"]
    kwargs = env_kwargs(spec, {"cluster": "hetero-1", "workload": "mixed", "count": 4, "slots": 4})
    env = make_env(spec, kwargs)
    th.set_num_threads(1)
    hyper = {"n_steps": 64, "batch_size": 32}
    model = build_model("maskable-ppo", env, spec, seed=0, hyperparams=hyper)
    assert model.policy.features_extractor.sparse
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(total_timesteps=256)
    assert any(not th.equal(before[k], v) for k, v in model.policy.state_dict().items())
    model.save(tmp_path / "model.zip")
    loaded = load_policy(tmp_path / "model.zip", env)
    dense = build_model(
        "maskable-ppo", env, spec, seed=1, hyperparams=hyper, extractor_kwargs={"sparse": False}
    )
    dense.policy.load_state_dict(loaded.model.policy.state_dict())
    obs, info = env.reset(seed=11)
    for _ in range(40):
        mask = info["action_mask"]
        action, _ = model.predict(obs, deterministic=True, action_masks=mask)
        assert loaded.act(obs, info) == int(action)
        obs_t, _ = model.policy.obs_to_tensor(obs)
        with th.no_grad():
            p_sparse = loaded.model.policy.get_distribution(obs_t, action_masks=mask)
            p_dense = dense.policy.get_distribution(obs_t, action_masks=mask)
        th.testing.assert_close(
            p_sparse.distribution.probs, p_dense.distribution.probs, rtol=1e-5, atol=1e-6
        )
        obs, _, terminated, truncated, info = env.step(int(action))
        if terminated or truncated:
            break
    env.close()


def test_log_softmax_masked_distribution_equals_sb3_contribs():
    gen = th.Generator().manual_seed(0)
    logits = th.randn(5, 40, generator=gen) * 3
    masks = th.rand(5, 40, generator=gen) < 0.2
    masks[0] = False  # every action masked: uniform, as in sb3-contrib
    masks[1] = False
    masks[1, 7] = True  # a single legal action
    actions = th.tensor([3, 7, *[int(th.nonzero(m)[0]) for m in masks[2:]]])
    out = []
    for cls in (LogSoftmaxMaskableCategorical, MaskableCategorical):
        x = logits.clone().requires_grad_()
        dist = cls(logits=x)
        dist.apply_masking(masks)
        log_prob, entropy = dist.log_prob(actions), dist.entropy()
        (log_prob.sum() + entropy.sum()).backward()
        out.append((dist.logits, dist.probs, log_prob, entropy, x.grad))
        dist.apply_masking(None)
        th.testing.assert_close(dist.logits, logits.log_softmax(-1))
    for ours, theirs in zip(*out, strict=True):
        # Row 0 (all masked) is uniform in both, but torch's -1e8 - logsumexp rounds its
        # log-probabilities to 0 where log_softmax gives log(1/40): compare it through probs.
        th.testing.assert_close(ours[1:], theirs[1:], rtol=1e-5, atol=1e-5)
    th.testing.assert_close(out[0][1][0], th.full((40,), 1 / 40))
    th.testing.assert_close(out[1][1][0], th.full((40,), 1 / 40))
    assert th.all(out[0][1][1:][~masks[1:]] == 0.0) and out[0][1][1, 7] == 1.0
