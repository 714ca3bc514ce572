"""Actor-critic policies whose logits are per-action scores from the features extractor.

SB3's actor head is ``Linear(latent_dim_pi, n_actions)`` over a flat latent vector, which throws
away the structure of a (slot × prefill × decode) action space. Here the extractor (e.g.
:class:`agents.extractors.PDClusterScorer`) already produces one score per action with shared
weights; the policy splits its output into ``[scores, value features]``, uses the scores as
logits (``action_net`` is the identity) and feeds the value features to an MLP critic. This is
done through SB3's documented extension points (``_build_mlp_extractor`` and ``_build`` of an
``ActorCriticPolicy`` subclass), not by patching SB3.
"""

from __future__ import annotations

from typing import Any

import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import Schedule
from torch import nn


class ScoresValueSplit(nn.Module):
    """SB3 ``mlp_extractor`` replacement: actor latent = the first ``n_scores`` features (the
    logits), critic latent = an MLP of the rest.

    :param n_scores: number of per-action scores at the front of the features.
    :param value_dim: number of value features after them.
    :param vf_arch: hidden layer widths of the critic MLP.
    :param activation_fn: activation between critic layers.
    """

    def __init__(
        self,
        n_scores: int,
        value_dim: int,
        vf_arch: list[int],
        activation_fn: type[nn.Module] = nn.Tanh,
    ):
        super().__init__()
        self.n_scores = n_scores
        layers: list[nn.Module] = []
        last = value_dim
        for width in vf_arch:
            layers += [nn.Linear(last, width), activation_fn()]
            last = width
        self.value_net = nn.Sequential(*layers)
        self.latent_dim_pi = n_scores
        self.latent_dim_vf = last

    def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: th.Tensor) -> th.Tensor:
        return features[:, : self.n_scores]

    def forward_critic(self, features: th.Tensor) -> th.Tensor:
        return self.value_net(features[:, self.n_scores :])


class _ActionScoresMixin:
    """Shared ``_build_mlp_extractor`` / ``_build`` of the two policy classes below."""

    features_extractor: Any
    net_arch: Any
    activation_fn: type[nn.Module]

    def _build_mlp_extractor(self) -> None:
        fe = self.features_extractor
        n = getattr(fe, "action_scores_dim", None)
        if n is None:
            raise ValueError(
                f"{type(self).__name__} needs a features extractor with an `action_scores_dim` "
                f"attribute (per-action scores first), got {type(fe).__name__}"
            )
        n_actions = int(self.action_space.n)  # type: ignore[attr-defined]
        if n != n_actions:
            raise ValueError(f"extractor gives {n} action scores but the env has {n_actions}")
        arch = self.net_arch
        vf_arch = list(arch.get("vf", [])) if isinstance(arch, dict) else list(arch or [])
        self.mlp_extractor = ScoresValueSplit(n, fe.features_dim - n, vf_arch, self.activation_fn)

    def _build(self, lr_schedule: Schedule) -> None:
        super()._build(lr_schedule)  # type: ignore[misc]
        # The scores are the logits: replace the Linear head SB3 built, and rebuild the
        # optimizer so it does not hold the discarded head's parameters.
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(  # type: ignore[attr-defined]
            self.parameters(),  # type: ignore[attr-defined]
            lr=lr_schedule(1),  # type: ignore[call-arg]
            **self.optimizer_kwargs,  # type: ignore[attr-defined]
        )


class ActionScoresPolicy(_ActionScoresMixin, MaskableActorCriticPolicy):
    """MaskablePPO policy with per-action-score logits (see the module docstring).

    Takes :class:`MaskableActorCriticPolicy`'s arguments; ``net_arch`` sets the critic MLP
    (a list, or ``dict(vf=[...])``; ``pi`` is ignored). ``ortho_init`` defaults to False: the
    extractor's own initialisation is kept.
    """

    def __init__(self, *args: Any, ortho_init: bool = False, **kwargs: Any):
        super().__init__(*args, ortho_init=ortho_init, **kwargs)


class ActionScoresActorCriticPolicy(_ActionScoresMixin, ActorCriticPolicy):
    """The same for unmasked PPO (the env must then penalise illegal actions)."""

    def __init__(self, *args: Any, ortho_init: bool = False, **kwargs: Any):
        super().__init__(*args, ortho_init=ortho_init, **kwargs)
