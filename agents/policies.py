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
from sb3_contrib.common.maskable.distributions import (
    MaskableCategorical,
    MaskableCategoricalDistribution,
    MaybeMasks,
)
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import Schedule
from torch import nn


def value_mlp(
    value_dim: int, vf_arch: list[int], activation_fn: type[nn.Module]
) -> tuple[nn.Sequential, int]:
    """The critic's hidden layers (Linear + activation per width in ``vf_arch``) over
    ``value_dim`` input features, and the width of their output."""
    layers: list[nn.Module] = []
    last = value_dim
    for width in vf_arch:
        layers += [nn.Linear(last, width), activation_fn()]
        last = width
    return nn.Sequential(*layers), last


def identity_head(latent_dim: int, n_actions: int, chunk: int = 1 << 20) -> nn.Identity:
    """An identity actor head that leaves torch's default RNG where building
    ``nn.Linear(latent_dim, n_actions)`` would: its initialisation draws one 32-bit random number
    per weight and bias entry (``kaiming_uniform_`` then ``uniform_``, one draw per float32
    element, in order). The same count is drawn here through a reusable buffer of ``chunk``
    float64 entries (one float64 uniform consumes two 32-bit draws), so no
    ``latent_dim x n_actions`` matrix is ever allocated. ``tests/agents/test_policy_head.py`` checks
    that the RNG state afterwards equals the real Linear's.

    :param latent_dim: the Linear's input width.
    :param n_actions: its output width.
    :param chunk: float64 entries drawn per call (memory: 8 bytes each).
    """
    draws = latent_dim * n_actions + n_actions
    pairs, odd = divmod(draws, 2)
    buf = th.empty(min(chunk, max(pairs, 1)), dtype=th.float64)
    while pairs > 0:
        m = min(len(buf), pairs)
        buf[:m].uniform_()
        pairs -= m
    if odd:
        th.empty(1, dtype=th.float32).uniform_()
    return nn.Identity()


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
        self.value_net, self.latent_dim_vf = value_mlp(value_dim, vf_arch, activation_fn)
        self.latent_dim_pi = n_scores

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
        # The scores are the logits, so SB3's ``Linear(latent_dim_pi, n_actions)`` head is not
        # needed: at K = 256 it would be a 16,384 x 16,384 Linear (1 GB), built only to be
        # discarded. Without ``ortho_init`` it is not built: :func:`identity_head` stands in and
        # advances torch's RNG exactly as that Linear's initialisation did, so the layers built
        # after it (the value head) get the same initial weights as before for a given seed.
        # With ``ortho_init`` SB3 re-initialises the head orthogonally (its RNG use depends on
        # that), so the head is built and dropped as before.
        dist = self.action_dist  # type: ignore[attr-defined]
        n_actions = int(self.action_space.n)  # type: ignore[attr-defined]
        if not self.ortho_init:  # type: ignore[attr-defined]
            dist.proba_distribution_net = lambda latent_dim: identity_head(latent_dim, n_actions)
        try:
            super()._build(lr_schedule)  # type: ignore[misc]
        finally:
            dist.__dict__.pop("proba_distribution_net", None)
        # Rebuild the optimizer so it does not hold a discarded head's parameters.
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(  # type: ignore[attr-defined]
            self.parameters(),  # type: ignore[attr-defined]
            lr=lr_schedule(1),  # type: ignore[call-arg]
            **self.optimizer_kwargs,  # type: ignore[attr-defined]
        )


class LogSoftmaxMaskableCategorical(MaskableCategorical):
    """sb3-contrib's :class:`MaskableCategorical`, normalising the masked logits with
    ``log_softmax`` instead of ``logits - logsumexp(logits)`` (torch's ``Categorical``).

    The two are the same function (they differ by float rounding, ~1e-6), but masked logits
    are -1e8 and ``exp`` of such underflowing arguments takes torch's slow path (~10x slower
    per element on this project's 2-core CPU), while the fused ``log_softmax`` kernel does not
    slow down. On PDCluster at K = 256 (16,384 actions, ~1 % legal) the ``logsumexp`` and its
    backward were ~30 % of a PPO minibatch step; swapping them gave 1.6x PPO steps/s
    (``benchmarks.train_speed``, rows ``sparse`` vs ``default``). Masking itself is
    sb3-contrib's: masked logits are set to -1e8. One visible difference: in a row whose every
    action is masked both are uniform, but torch rounds the log-probabilities to 0 where
    log_softmax gives log(1/n).
    """

    def apply_masking(self, masks: MaybeMasks) -> None:
        if masks is None:
            super().apply_masking(None)
            return
        original = self._original_logits
        self.masks = th.as_tensor(masks, dtype=th.bool, device=original.device).reshape(
            original.shape
        )
        huge_neg = th.tensor(-1e8, dtype=original.dtype, device=original.device)
        # Batch and event shapes were set by the first initialisation and do not change, so
        # only the parameters are replaced (re-running Categorical.__init__ would logsumexp).
        self.__dict__.pop("probs", None)
        self.logits = th.where(self.masks, original, huge_neg).log_softmax(dim=-1)
        self._param = self.logits


class LogSoftmaxMaskableCategoricalDistribution(MaskableCategoricalDistribution):
    """:class:`MaskableCategoricalDistribution` whose distributions are
    :class:`LogSoftmaxMaskableCategorical`."""

    def proba_distribution(
        self, action_logits: th.Tensor
    ) -> LogSoftmaxMaskableCategoricalDistribution:
        reshaped = action_logits.view(-1, self.action_dim)
        self.distribution = LogSoftmaxMaskableCategorical(logits=reshaped)
        return self


class ActionScoresPolicy(_ActionScoresMixin, MaskableActorCriticPolicy):
    """MaskablePPO policy with per-action-score logits (see the module docstring).

    Takes :class:`MaskableActorCriticPolicy`'s arguments; ``net_arch`` sets the critic MLP
    (a list, or ``dict(vf=[...])``; ``pi`` is ignored). ``ortho_init`` defaults to False: the
    extractor's own initialisation is kept. The action distribution is
    :class:`LogSoftmaxMaskableCategoricalDistribution` (the same distribution as
    sb3-contrib's, faster with many masked actions).
    """

    def __init__(self, *args: Any, ortho_init: bool = False, **kwargs: Any):
        super().__init__(*args, ortho_init=ortho_init, **kwargs)
        self.action_dist = LogSoftmaxMaskableCategoricalDistribution(int(self.action_space.n))


class ActionScoresActorCriticPolicy(_ActionScoresMixin, ActorCriticPolicy):
    """The same for unmasked PPO (the env must then penalise illegal actions)."""

    def __init__(self, *args: Any, ortho_init: bool = False, **kwargs: Any):
        super().__init__(*args, ortho_init=ortho_init, **kwargs)
