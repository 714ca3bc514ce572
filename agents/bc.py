"""Behaviour cloning from any expert in ``heuristics/``, with optional DAgger rounds.

1. :func:`collect` runs episodes through the env and records, at every step, the observation,
   the action mask and the **expert's** action for that state (the expert reads
   ``info["decision_context"]`` like in evaluation). With ``learner=None`` the expert also acts
   (plain BC); with a learner, the learner acts with probability ``1 − beta`` (DAgger, Ross et
   al. 2011), so the data covers the states the learner itself reaches.
2. :func:`bc_train` fits the SB3 policy by supervised learning: masked cross-entropy on the
   expert's action plus (weighted) squared error of the critic on the discounted return-to-go,
   so RL fine-tuning starts from a matching actor *and* critic.

Written here instead of using ``imitation``: the loop is short, needs the action masks, and must
label states with experts that read the env's decision context rather than the observation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch as th


class PaddedRows:
    """A stack of equally shaped arrays that keeps each one without its trailing all-zero rows
    (axis 0), and pads them back with zeros when indexed.

    PDCluster's observation at K = 256 is ~78 kB and its mask 16 kB, but only the slots of
    waiting calls are filled (invalid slots are zero) and the legal actions of a flat mask end
    at the last valid slot: a HexAgent episode of BFCL at 100 workflows (5,080 states) takes
    33 MB instead of 482 MB (15×). Lossless: ``rows[idx]`` equals the dense stack's ``[idx]``.

    :param shape: the shape of one array.
    :param dtype: its dtype.
    """

    def __init__(self, shape: tuple[int, ...], dtype: Any, rows: list[np.ndarray] | None = None):
        self.row_shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.rows: list[np.ndarray] = [] if rows is None else rows

    def append(self, value: np.ndarray) -> None:
        """Keep ``value`` (of ``row_shape``) without its trailing all-zero rows.

        :raises ValueError: if its shape is not ``row_shape``.
        """
        value = np.asarray(value, dtype=self.dtype)
        if value.shape != self.row_shape:
            raise ValueError(f"expected an array of shape {self.row_shape}, got {value.shape}")
        if value.ndim == 0:
            self.rows.append(value.copy())
            return
        filled = np.flatnonzero(value.reshape(value.shape[0], -1).any(axis=1))
        self.rows.append(value[: filled[-1] + 1 if filled.size else 0].copy())

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.rows), *self.row_shape)

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in self.rows)

    def __getitem__(self, index: Any) -> np.ndarray:
        """The dense stack of the rows at ``index`` (an integer array, slice or int), then
        indexed by any further axes of a tuple ``index``."""
        rest: tuple[Any, ...] = ()
        if isinstance(index, tuple):
            index, rest = index[0], index[1:]
        picked = np.arange(len(self.rows))[index]
        single = picked.ndim == 0
        picked = np.atleast_1d(picked)
        out = np.zeros((picked.size, *self.row_shape), dtype=self.dtype)
        for j, i in enumerate(picked):
            row = self.rows[i]
            if row.ndim:
                out[j, : row.shape[0]] = row
            else:
                out[j] = row
        out = out[0] if single else out
        if not rest:
            return out
        if single:
            return out[rest]
        # The first axis was consumed: a fancy first index pairs with the others element-wise.
        if isinstance(index, slice) or np.ndim(index) == 0:
            return out[(slice(None), *rest)]
        return out[(np.arange(picked.size), *rest)]

    def __add__(self, other: PaddedRows) -> PaddedRows:
        if other.row_shape != self.row_shape:
            raise ValueError(f"cannot join rows of shape {self.row_shape} and {other.row_shape}")
        return PaddedRows(self.row_shape, self.dtype, self.rows + other.rows)


@dataclass
class Demonstrations:
    """Expert-labelled states.

    :param obs: observation key -> (N, ...) float32 rows (:class:`PaddedRows`).
    :param masks: (N, n_actions) legal actions (:class:`PaddedRows`).
    :param actions: (N,) the expert's action in each state.
    :param returns: (N,) discounted return-to-go of the trajectory that was executed.
    :param episodes: per-episode summaries (seed, steps, metrics, who acted).
    """

    obs: dict[str, PaddedRows]
    masks: PaddedRows
    actions: np.ndarray
    returns: np.ndarray
    episodes: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def __add__(self, other: Demonstrations) -> Demonstrations:
        return Demonstrations(
            obs={k: v + other.obs[k] for k, v in self.obs.items()},
            masks=self.masks + other.masks,
            actions=np.concatenate([self.actions, other.actions]),
            returns=np.concatenate([self.returns, other.returns]),
            episodes=self.episodes + other.episodes,
        )


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """Return-to-go G_t = Σ_{i≥t} γ^{i−t} r_i of one episode.

    :param rewards: the episode's rewards in order.
    :param gamma: discount factor in [0, 1].
    """
    out = np.zeros(len(rewards), dtype=np.float32)
    g = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + gamma * g
        out[t] = g
    return out


def policy_action(policy: Any, obs: dict[str, np.ndarray], mask: np.ndarray) -> int:
    """The SB3 policy's deterministic (argmax) legal action for one observation.

    :param policy: an SB3 policy (``model.policy``).
    :param obs: one observation (no batch axis).
    :param mask: its action mask.
    """
    action, _ = policy.predict(obs, deterministic=True, action_masks=mask)
    return int(action)


def collect(
    env: Any,
    expert_factory: Callable[[], Any],
    seeds: Sequence[int],
    gamma: float,
    learner: Any | None = None,
    beta: float = 1.0,
    rng: np.random.Generator | None = None,
    progress: Callable[[int], None] | None = None,
    keep: float = 1.0,
) -> Demonstrations:
    """Run one episode per seed and record expert-labelled states.

    :param env: an env whose ``info`` carries ``decision_context`` and ``action_mask`` (not the
        lean training wrapper).
    :param expert_factory: builds a fresh expert (``heuristics.make_policy`` partial).
    :param seeds: reset seeds, one episode each.
    :param gamma: discount for the recorded returns.
    :param learner: an SB3 policy that acts with probability ``1 − beta``; None = expert only.
    :param beta: probability that the expert's action is executed at a step.
    :param rng: draws the expert/learner coin (needed when ``learner`` is given).
    :param progress: called with the number of steps after each step (e.g. a tqdm update).
    :param keep: share of the visited states recorded, each kept with this probability (drawn
        from ``rng``); the expert labels every state either way, and the kept states' returns
        are those of the whole executed trajectory. Below 1 for long episodes (a 100-workflow
        PDCluster episode is ~150-230 k decisions).
    :raises ValueError: if ``learner`` is given or ``keep`` < 1 without ``rng``, or ``beta``
        or ``keep`` is outside [0, 1] (``keep`` must be positive).
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    if learner is not None and rng is None:
        raise ValueError("collect with a learner needs an rng for the expert/learner coin")
    if keep < 1.0 and rng is None:
        raise ValueError("collect with keep < 1 needs an rng to draw the kept states")
    space = env.observation_space
    if not hasattr(space, "spaces") or not hasattr(env.action_space, "n"):
        raise TypeError(
            f"collect needs a Dict observation space and a Discrete action space, got "
            f"{space} and {env.action_space}"
        )
    obs_buf = {k: PaddedRows(space[k].shape, np.float32) for k in space.spaces}
    masks = PaddedRows((int(env.action_space.n),), bool)
    actions, returns, episodes = [], [], []
    for seed in seeds:
        expert = expert_factory()
        expert.reset()
        obs, info = env.reset(seed=int(seed))
        rewards: list[float] = []
        kept: list[int] = []
        done = False
        while not done:
            label = int(expert.act(obs, info))
            mask = np.asarray(info["action_mask"], dtype=bool)
            if keep >= 1.0 or (rng is not None and rng.random() < keep):
                kept.append(len(rewards))
                for k, v in obs.items():
                    obs_buf[k].append(v)
                masks.append(mask)
                actions.append(label)
            act = label
            if learner is not None and rng is not None and rng.random() >= beta:
                act = policy_action(learner, obs, mask)
            obs, reward, terminated, truncated, info = env.step(act)
            rewards.append(float(reward))
            done = terminated or truncated
            if progress is not None:
                progress(1)
        returns.append(discounted_returns(rewards, gamma)[kept])
        episodes.append(
            {
                "seed": int(seed),
                "steps": len(rewards),
                "kept": len(kept),
                "return": float(sum(rewards)),
                "metrics": dict(info.get("metrics", {})),
                "beta": beta if learner is not None else 1.0,
            }
        )
    return Demonstrations(
        obs=obs_buf,
        masks=masks,
        actions=np.asarray(actions, dtype=np.int64),
        returns=np.concatenate(returns),
        episodes=episodes,
    )


@dataclass
class BCEpoch:
    """One epoch of :func:`bc_train`: mean loss terms and accuracy over the epoch's batches.

    :param epoch: 1-based epoch index.
    :param loss: total loss (cross-entropy + ``vf_coef`` · value loss).
    :param policy_loss: masked cross-entropy of the expert action (nats).
    :param value_loss: mean squared error of the critic on the return-to-go.
    :param accuracy: fraction of states where the argmax legal action is the expert's.
    """

    epoch: int
    loss: float
    policy_loss: float
    value_loss: float
    accuracy: float


def _batch(demos: Demonstrations, idx: np.ndarray, device: th.device) -> tuple[Any, ...]:
    obs = {k: th.as_tensor(v[idx], device=device) for k, v in demos.obs.items()}
    masks = th.as_tensor(demos.masks[idx], device=device)
    actions = th.as_tensor(demos.actions[idx], device=device)
    returns = th.as_tensor(demos.returns[idx], device=device)
    return obs, masks, actions, returns


def _is_masked(policy: Any) -> bool:
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    return isinstance(policy, MaskableActorCriticPolicy)


def _evaluate(
    policy: Any, obs: Any, actions: th.Tensor, masks: th.Tensor
) -> tuple[th.Tensor, th.Tensor]:
    if _is_masked(policy):
        values, log_prob, _ = policy.evaluate_actions(obs, actions, action_masks=masks)
    else:
        values, log_prob, _ = policy.evaluate_actions(obs, actions)
    return values, log_prob


def bc_accuracy(policy: Any, demos: Demonstrations, idx: np.ndarray | None = None) -> float:
    """Fraction of states (all, or those in ``idx``) where the policy's argmax legal action is
    the expert's.

    :param policy: an SB3 actor-critic policy.
    :param demos: labelled states.
    :param idx: indices to score (None: all).
    """
    idx = np.arange(len(demos)) if idx is None else np.asarray(idx)
    if idx.size == 0:
        return float("nan")
    hits = 0
    with th.no_grad():
        for start in range(0, idx.size, 512):
            obs, masks, actions, _ = _batch(demos, idx[start : start + 512], policy.device)
            if _is_masked(policy):
                dist = policy.get_distribution(obs, action_masks=masks)
            else:
                dist = policy.get_distribution(obs)
            hits += int((dist.distribution.probs.argmax(dim=-1) == actions).sum())
    return hits / idx.size


def bc_train(
    policy: Any,
    demos: Demonstrations,
    epochs: int = 10,
    batch_size: int = 256,
    learning_rate: float = 1e-3,
    vf_coef: float = 0.5,
    seed: int = 0,
    on_epoch: Callable[[BCEpoch], None] | None = None,
    accuracy_sample: int = 2048,
) -> list[BCEpoch]:
    """Supervised pre-training of an SB3 actor-critic policy on ``demos``.

    :param policy: ``model.policy`` (a maskable or ordinary SB3 actor-critic policy).
    :param demos: the labelled states.
    :param epochs: passes over the data.
    :param batch_size: states per gradient step.
    :param learning_rate: Adam step size (its own optimizer; the RL optimizer is untouched).
    :param vf_coef: weight of the critic's squared error.
    :param seed: shuffling seed.
    :param on_epoch: called after every epoch (logging).
    :param accuracy_sample: states (a fixed random subset) on which accuracy is measured.
    :return: one :class:`BCEpoch` per epoch.
    :raises ValueError: on an empty dataset or non-positive sizes.
    """
    if len(demos) == 0:
        raise ValueError("behaviour cloning needs at least one demonstration")
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be >= 1, got {epochs}, {batch_size}")
    device = policy.device
    optimizer = th.optim.Adam(policy.parameters(), lr=learning_rate)
    shuffle = np.random.default_rng(seed)
    policy.set_training_mode(True)
    history = []
    n = len(demos)
    probe = np.random.default_rng(seed + 1).permutation(n)[:accuracy_sample]
    for epoch in range(1, epochs + 1):
        order = shuffle.permutation(n)
        sums = np.zeros(3)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            obs, masks, actions, returns = _batch(demos, idx, device)
            values, log_prob = _evaluate(policy, obs, actions, masks)
            policy_loss = -log_prob.mean()
            value_loss = th.mean((values.flatten() - returns) ** 2)
            loss = policy_loss + vf_coef * value_loss
            optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()
            m = len(idx)
            sums += np.array([loss.item() * m, policy_loss.item() * m, value_loss.item() * m])
        mean = sums / n
        accuracy = bc_accuracy(policy, demos, probe)
        record = BCEpoch(epoch, float(mean[0]), float(mean[1]), float(mean[2]), accuracy)
        history.append(record)
        if on_epoch is not None:
            on_epoch(record)
    policy.set_training_mode(False)
    return history
