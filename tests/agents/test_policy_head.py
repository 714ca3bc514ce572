"""Specifications of the action-scores policies' actor head (issue 32): SB3 would build a
``Linear(K·P·D, K·P·D)`` head (1 GB at K = 256) that the policy discards; it is no longer built,
and the policy's parameters are still exactly what they were for the same seed (torch's RNG
advances as the discarded Linear's initialisation advanced it)."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn

from agents.extractors import PDClusterScorer
from agents.policies import (
    ActionScoresActorCriticPolicy,
    ActionScoresPolicy,
    identity_head,
)

K, P, D = 5, 3, 2


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (30, 30), (7, 1001), (64, 4096)])
def test_identity_head_leaves_the_rng_where_the_linear_would(shape):
    latent, n = shape
    th.manual_seed(3)
    nn.Linear(latent, n)
    expected = th.rand(8)
    th.manual_seed(3)
    head = identity_head(latent, n, chunk=97)  # a small chunk: several rounds and a remainder
    assert isinstance(head, nn.Identity)
    assert th.equal(th.rand(8), expected)


def _space() -> gym.spaces.Dict:
    big = np.float32(1e6)
    return gym.spaces.Dict(
        {
            "slots": gym.spaces.Box(-big, big, (K, 12), np.float32),
            "instances": gym.spaces.Box(-big, big, (P + D, 9), np.float32),
            "ratio": gym.spaces.Box(0, big, (K, P, D), np.float32),
            "stage": gym.spaces.Box(0, 1, (3,), np.float32),
        }
    )


class _LegacyMasked(ActionScoresPolicy):
    """The policy as it was before issue 32: SB3 builds its Linear head, then it is dropped."""

    def _build(self, lr_schedule):
        MaskableActorCriticPolicy._build(self, lr_schedule)
        self.action_net = nn.Identity()


class _LegacyPlain(ActionScoresActorCriticPolicy):
    def _build(self, lr_schedule):
        ActorCriticPolicy._build(self, lr_schedule)
        self.action_net = nn.Identity()


def _build(cls: type, seed: int) -> nn.Module:
    th.manual_seed(seed)
    return cls(
        _space(),
        gym.spaces.Discrete(K * P * D),
        lambda _: 3e-4,
        net_arch={"pi": [], "vf": [16]},
        features_extractor_class=PDClusterScorer,
        features_extractor_kwargs={"hidden": 8},
    )


@pytest.mark.parametrize(
    ("cls", "legacy"),
    [(ActionScoresPolicy, _LegacyMasked), (ActionScoresActorCriticPolicy, _LegacyPlain)],
)
def test_policy_parameters_equal_the_legacy_build_for_the_same_seed(cls, legacy):
    new, old = _build(cls, 11), _build(legacy, 11)
    new_state, old_state = new.state_dict(), old.state_dict()
    assert new_state.keys() == old_state.keys()
    for key in new_state:
        assert th.equal(new_state[key], old_state[key]), key
    # nothing of the size of a K·P·D x K·P·D head is held, and the optimizer holds exactly
    # the policy's parameters
    assert isinstance(new.action_net, nn.Identity)
    held = {id(p) for group in new.optimizer.param_groups for p in group["params"]}
    assert held == {id(p) for p in new.parameters()}
    assert max(p.numel() for p in new.parameters()) < (K * P * D) ** 2
