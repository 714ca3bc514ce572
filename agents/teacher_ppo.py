"""PPO that starts from a behaviour-cloned teacher and is held near it early (``teacher-ppo``).

After behaviour cloning (``agents.bc``) the actor imitates the teacher but the critic has seen
only the teacher's own returns; a PPO update taken with that critic's advantages moves the
actor away from the clone on noise. :class:`TeacherPPO` is sb3-contrib's ``MaskablePPO`` with
two additions:

1. **Critic warm-up.** The first updates of :meth:`TeacherPPO.learn` fit only the critic (the
   value MLP and value head; the shared features extractor and the actor are frozen) on the
   rollouts the cloned policy itself collects. With ``critic_reset`` (default) the first of
   them re-initialises the critic's layers and folds the standardisation of their input,
   measured on that rollout, into the first layer, and starts the head's bias at the mean
   return: after behaviour cloning the extractor's value features can be far larger than
   one (Routing: per-dimension sd ~4), so the critic's tanh layers are saturated, it outputs
   one constant and no gradient reaches it (explained variance 0 for a whole run). It fits
   for at least ``critic_warmup_min`` and at most ``critic_warmup_max`` rollouts, stopping
   once the critic's explained variance on the rollout just collected reaches
   ``critic_warmup_ev``. The actor is unchanged by this phase.
2. **A KL anchor to the clone.** When learning starts, a frozen copy of the policy (the clone)
   becomes the anchor; every PPO minibatch adds ``β · KL(π_θ ‖ π_anchor)`` (exact, over the
   legal actions of each state) to the loss. ``β`` falls linearly from ``kl_coef`` to
   ``kl_coef_final`` over the first ``kl_decay`` fraction of the PPO updates (counted after
   the warm-up; the run's rollouts less ``critic_warmup_max``) and stays there, so the policy
   stays near the teacher early and is free later.
3. **A critic that does not move the actor** (``detach_critic``, on by default): in the PPO
   updates too, the value loss trains the critic's own layers only, not the features extractor
   the actor shares with it. With undiscounted-scale returns (goodput rewards: hundreds) the
   value loss's gradient otherwise dominates the shared extractor's and drags the actor off
   the clone whatever the advantages say.

Everything else (clipping, GAE, value loss, ``target_kl`` early stop) is ``MaskablePPO``'s.
The anchor is not saved: a saved model loads as a plain ``MaskablePPO`` (``agents.load_model``)
for evaluation, and ``train.py --resume`` continues it without the anchor or the warm-up.
Logged to SB3's logger (hence W&B): ``teacher/kl`` (mean KL to the anchor over the last
update's minibatches), ``teacher/kl_coef`` (β), ``teacher/critic_warmup`` (1 during the
warm-up), ``train/explained_variance`` (every update).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib import MaskablePPO
from stable_baselines3.common.utils import explained_variance
from torch.nn import functional as F


def kl_coef_at(step: int, total: int, start: float, final: float, decay: float) -> float:
    """β after ``step`` of ``total`` PPO updates: linear from ``start`` to ``final`` over the
    first ``decay`` fraction of them, then ``final``.

    :param step: PPO updates done (0-based).
    :param total: PPO updates the run will do (>= 1).
    :param start: β at step 0.
    :param final: β from ``decay · total`` on.
    :param decay: fraction of the updates over which β falls, in [0, 1] (0: ``final`` at once).
    :raises ValueError: for a negative coefficient or ``decay`` outside [0, 1].
    """
    if start < 0 or final < 0:
        raise ValueError(f"KL coefficients must be >= 0, got {start} and {final}")
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"kl_decay must be in [0, 1], got {decay}")
    span = decay * max(1, total)
    if span <= 0 or step >= span:
        return float(final)
    return float(start + (final - start) * step / span)


def masked_kl(logits_p: th.Tensor, logits_q: th.Tensor) -> th.Tensor:
    """Per-row KL(p ‖ q) of two categorical distributions given as normalised log-probabilities
    (masked actions at a very negative log-probability in both): Σ_a p(a)(log p(a) − log q(a))
    over the actions p gives weight to.

    :param logits_p: (B, n) log-probabilities of p.
    :param logits_q: (B, n) log-probabilities of q (same masks).
    """
    p = logits_p.exp()
    diff = th.where(p > 0, logits_p - logits_q, th.zeros_like(logits_p))
    return (p * diff).sum(dim=-1)


class TeacherPPO(MaskablePPO):
    """``MaskablePPO`` with a critic warm-up and a decaying KL anchor to the starting policy
    (the module docstring has the algorithm).

    :param kl_coef: β at the first PPO update (0: no anchor).
    :param kl_coef_final: β after the decay.
    :param kl_decay: fraction of the PPO updates over which β falls from ``kl_coef`` to
        ``kl_coef_final``.
    :param critic_warmup_min: rollouts whose update fits only the critic, at least.
    :param critic_warmup_max: at most (0: no warm-up).
    :param critic_warmup_ev: the warm-up ends early once the critic's explained variance on the
        rollout just collected is at least this.
    :param critic_warmup_epochs: passes over a rollout in a warm-up update.
    :param critic_warmup_lr: Adam step size of the warm-up's own optimizer.
    :param detach_critic: the PPO value loss does not train the shared features extractor.
    :param critic_reset: the warm-up starts from a re-initialised critic on standardised inputs.
    :param args, kwargs: ``MaskablePPO``'s.
    """

    def __init__(
        self,
        *args: Any,
        kl_coef: float = 1.0,
        kl_coef_final: float = 0.0,
        kl_decay: float = 0.5,
        critic_warmup_min: int = 1,
        critic_warmup_max: int = 8,
        critic_warmup_ev: float = 0.3,
        critic_warmup_epochs: int = 10,
        critic_warmup_lr: float = 1e-3,
        detach_critic: bool = True,
        critic_reset: bool = True,
        **kwargs: Any,
    ) -> None:
        kl_coef_at(0, 1, kl_coef, kl_coef_final, kl_decay)  # checks the schedule's values
        if not 0 <= critic_warmup_min <= critic_warmup_max:
            raise ValueError(
                f"need 0 <= critic_warmup_min <= critic_warmup_max, got {critic_warmup_min} "
                f"and {critic_warmup_max}"
            )
        if critic_warmup_epochs < 1 or critic_warmup_lr <= 0:
            raise ValueError(
                f"critic_warmup_epochs must be >= 1 and critic_warmup_lr > 0, got "
                f"{critic_warmup_epochs} and {critic_warmup_lr}"
            )
        self.kl_coef = float(kl_coef)
        self.kl_coef_final = float(kl_coef_final)
        self.kl_decay = float(kl_decay)
        self.critic_warmup_min = int(critic_warmup_min)
        self.critic_warmup_max = int(critic_warmup_max)
        self.critic_warmup_ev = float(critic_warmup_ev)
        self.critic_warmup_epochs = int(critic_warmup_epochs)
        self.critic_warmup_lr = float(critic_warmup_lr)
        self.detach_critic = bool(detach_critic)
        self.critic_reset = bool(critic_reset)
        self.anchor: Any = None
        self._warmup_done = 0
        self._warming = True
        self._ppo_updates = 0
        self._ppo_total = 1
        super().__init__(*args, **kwargs)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "anchor", "_critic_opt"]

    # -- phases --------------------------------------------------------------------------------
    def set_anchor(self) -> None:
        """Freeze a copy of the current policy as the KL anchor (the clone, when called after
        behaviour cloning) and restart the warm-up and the β schedule."""
        self.anchor = copy.deepcopy(self.policy)
        self.anchor.set_training_mode(False)
        for p in self.anchor.parameters():
            p.requires_grad_(False)
        self._warmup_done = 0
        self._warming = self.critic_warmup_max > 0
        self._ppo_updates = 0

    def critic_parameters(self) -> list[th.nn.Parameter]:
        """The parameters only the critic uses: the value MLP, the value head and, when the
        policy does not share it, the critic's features extractor."""
        pol = self.policy
        modules = [pol.mlp_extractor.value_net, pol.value_net]
        if not getattr(pol, "share_features_extractor", True):
            modules.append(pol.vf_features_extractor)
        return [p for m in modules for p in m.parameters()]

    def learn(self, total_timesteps: int, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """``MaskablePPO.learn``; the first call anchors to the current policy
        (:meth:`set_anchor`)."""
        if self.anchor is None:
            self.set_anchor()
        rollouts = max(1, total_timesteps // (self.n_steps * self.n_envs))
        self._ppo_total = max(1, rollouts - self.critic_warmup_max)
        return super().learn(total_timesteps, *args, **kwargs)

    def train(self) -> None:
        """One update on the collected rollout: a critic-only fit during the warm-up, else a
        PPO update with the KL anchor."""
        if self._warming:
            self._train_critic()
            return
        self._train_ppo()

    def _critic_layers(self) -> list[th.nn.Linear]:
        """The critic's Linear layers in order (value MLP, then value head)."""
        pol = self.policy
        mods = [*pol.mlp_extractor.value_net.modules(), *pol.value_net.modules()]
        return [m for m in mods if isinstance(m, th.nn.Linear)]

    def reset_critic(self) -> None:
        """Re-initialise the critic's layers on standardised inputs (module docstring): the
        first Linear's input mean and sd over the rollout buffer are folded into its weights
        (w / sd, b − w·mean / sd) and the head's bias is the buffer's mean return."""
        layers = self._critic_layers()
        inputs: list[th.Tensor] = []
        hook = layers[0].register_forward_pre_hook(lambda _m, a: inputs.append(a[0].detach()))
        try:
            with th.no_grad():
                for data in self.rollout_buffer.get(self.batch_size):
                    features = self.policy.extract_features(
                        data.observations, self.policy.vf_features_extractor
                    )
                    self.policy.mlp_extractor.forward_critic(features)  # type: ignore[arg-type]
        finally:
            hook.remove()
        x = th.cat(inputs)
        mean, sd = x.mean(0), x.std(0).clamp_min(1e-3)
        with th.no_grad():
            for layer in layers:
                layer.reset_parameters()
            first = layers[0]
            first.weight.div_(sd)
            first.bias.sub_(first.weight @ mean)
            layers[-1].bias.fill_(float(np.mean(self.rollout_buffer.returns)))

    def _train_critic(self) -> None:
        buf = self.rollout_buffer
        ev_before = float(explained_variance(buf.values.flatten(), buf.returns.flatten()))
        if self.critic_reset and self._warmup_done == 0:
            self.reset_critic()
        params = self.critic_parameters()
        if not hasattr(self, "_critic_opt"):
            self._critic_opt = th.optim.Adam(params, lr=self.critic_warmup_lr)
        self.policy.set_training_mode(True)
        losses = []
        for _ in range(self.critic_warmup_epochs):
            for data in buf.get(self.batch_size):
                with th.no_grad():
                    features = self.policy.extract_features(
                        data.observations, self.policy.vf_features_extractor
                    )
                latent_vf = self.policy.mlp_extractor.forward_critic(features)  # type: ignore[arg-type]
                values = self.policy.value_net(latent_vf).flatten()
                loss = F.mse_loss(data.returns, values)
                self._critic_opt.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
                self._critic_opt.step()
                losses.append(loss.item())
        self.policy.set_training_mode(False)
        self._warmup_done += 1
        enough = self._warmup_done >= self.critic_warmup_min and ev_before >= self.critic_warmup_ev
        if enough or self._warmup_done >= self.critic_warmup_max:
            self._warming = False
        self.logger.record("teacher/critic_warmup", 1)
        self.logger.record("teacher/critic_warmup_rollouts", self._warmup_done)
        self.logger.record("train/value_loss", float(np.mean(losses)))
        self.logger.record("train/explained_variance", ev_before)
        self.logger.record("teacher/kl_coef", self.kl_coef)

    def current_kl_coef(self) -> float:
        """β for the next PPO update."""
        return kl_coef_at(
            self._ppo_updates, self._ppo_total, self.kl_coef, self.kl_coef_final, self.kl_decay
        )

    def _anchor_kl(self, data: Any, masks: Any, logits: th.Tensor | None = None) -> th.Tensor:
        """Mean KL(π_θ ‖ π_anchor) over the minibatch ``data`` (with gradient through π_θ, whose
        normalised masked log-probabilities are ``logits`` when given)."""
        if logits is None:
            dist = self.policy.get_distribution(data.observations, action_masks=masks)
            logits = dist.distribution.logits  # type: ignore[union-attr]
        with th.no_grad():
            ref = self.anchor.get_distribution(data.observations, action_masks=masks)
        return masked_kl(logits, ref.distribution.logits).mean()

    def _evaluate(self, obs: Any, actions: th.Tensor, masks: Any) -> tuple[Any, ...]:
        """``policy.evaluate_actions`` (values, log-probabilities, entropy) plus the masked
        log-probabilities of every action; with ``detach_critic`` the critic reads the shared
        features without passing its gradient to them."""
        pol = self.policy
        if not pol.share_features_extractor:
            pi_features, vf_features = pol.extract_features(obs)
        else:
            pi_features = vf_features = pol.extract_features(obs)
        if self.detach_critic:
            vf_features = vf_features.detach()
        latent_pi = pol.mlp_extractor.forward_actor(pi_features)
        latent_vf = pol.mlp_extractor.forward_critic(vf_features)
        dist = pol._get_action_dist_from_latent(latent_pi)
        dist.apply_masking(masks)
        values = pol.value_net(latent_vf)
        logits = dist.distribution.logits  # type: ignore[union-attr]
        return values, dist.log_prob(actions), dist.entropy(), logits

    def _train_ppo(self) -> None:
        # MaskablePPO.train (sb3-contrib 2.x) with the β·KL term added to the loss.
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        clip_range_vf = None
        if self.clip_range_vf is not None:
            clip_range_vf = self.clip_range_vf(self._current_progress_remaining)  # type: ignore[operator]
        beta = self.current_kl_coef()
        entropy_losses: list[float] = []
        pg_losses: list[float] = []
        value_losses: list[float] = []
        clip_fractions: list[float] = []
        kls: list[float] = []
        approx_kl_divs: list[float] = []
        continue_training = True
        loss = th.zeros(())
        for _epoch in range(self.n_epochs):
            approx_kl_divs = []
            for data in self.rollout_buffer.get(self.batch_size):
                actions = data.actions
                if isinstance(self.action_space, spaces.Discrete):
                    actions = data.actions.long().flatten()
                values, log_prob, entropy, logits = self._evaluate(
                    data.observations, actions, data.action_masks
                )
                values = values.flatten()
                advantages = data.advantages
                if self.normalize_advantage:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
                ratio = th.exp(log_prob - data.old_log_prob)
                loss_1 = advantages * ratio
                loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
                policy_loss = -th.min(loss_1, loss_2).mean()
                pg_losses.append(policy_loss.item())
                clip_fractions.append(th.mean((th.abs(ratio - 1) > clip_range).float()).item())
                if clip_range_vf is None:
                    values_pred = values
                else:
                    values_pred = data.old_values + th.clamp(
                        values - data.old_values, -clip_range_vf, clip_range_vf
                    )
                value_loss = F.mse_loss(data.returns, values_pred)
                value_losses.append(value_loss.item())
                entropy_loss = -th.mean(-log_prob) if entropy is None else -th.mean(entropy)
                entropy_losses.append(entropy_loss.item())
                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
                if self.anchor is not None and (beta > 0 or not kls):
                    kl = self._anchor_kl(data, data.action_masks, logits)
                    kls.append(kl.item())
                    if beta > 0:
                        loss = loss + beta * kl
                with th.no_grad():
                    log_ratio = log_prob - data.old_log_prob
                    approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio).cpu().numpy()
                    approx_kl_divs.append(float(approx_kl_div))
                if self.target_kl is not None and approx_kl_div > 1.5 * self.target_kl:
                    continue_training = False
                    break
                self.policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
            self._n_updates += 1
            if not continue_training:
                break
        self._ppo_updates += 1
        buf = self.rollout_buffer
        ev = explained_variance(buf.values.flatten(), buf.returns.flatten())
        self.logger.record("teacher/critic_warmup", 0)
        self.logger.record("teacher/kl_coef", beta)
        if kls:
            self.logger.record("teacher/kl", float(np.mean(kls)))
        self.logger.record("train/entropy_loss", float(np.mean(entropy_losses or [0.0])))
        self.logger.record("train/policy_gradient_loss", float(np.mean(pg_losses or [0.0])))
        self.logger.record("train/value_loss", float(np.mean(value_losses or [0.0])))
        self.logger.record("train/approx_kl", float(np.mean(approx_kl_divs or [0.0])))
        self.logger.record("train/clip_fraction", float(np.mean(clip_fractions or [0.0])))
        self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", ev)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)


def _signature() -> inspect.Signature:
    """``MaskablePPO.__init__``'s parameters followed by :class:`TeacherPPO`'s own keyword-only
    ones: what ``inspect.signature`` (``train.py``'s ``--hyperparams`` check) reports."""
    base = inspect.signature(MaskablePPO.__init__).parameters.values()
    own = inspect.signature(TeacherPPO.__init__).parameters.values()
    keyword = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return inspect.Signature([*base, *keyword])


TeacherPPO.__init__.__signature__ = _signature()  # type: ignore[attr-defined]
