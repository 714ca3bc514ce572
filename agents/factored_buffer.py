"""A rollout buffer that keeps what the factorised PDCluster head's update reads.

sb3-contrib's ``MaskableDictRolloutBuffer`` stores, for every env step, the whole observation
and the whole action mask: at K = 256 on Hetero-1 the ``ratio`` observation is K·P·D = 16,384
float32 and the mask another 16,384 float32, 128 KB per step, allocated, filled, swapped,
gathered per minibatch and copied into torch every update. :meth:`FactoredActionPolicy.
evaluate_actions <agents.factored.FactoredActionPolicy.evaluate_actions>` of a stored action
a = k·P·D + j reads only

* the slot features, instance features and stage (kept whole: 12 KB at K = 256),
* the ``ratio`` row of slot k (its P × D pairs: the pair head of the taken slot),
* which slots have a legal pair (the slot head's mask, K bools),
* the mask row of slot k (the pair head's mask, P·D bools),

so :class:`FactoredRolloutBuffer` stores exactly those (:class:`TakenSlotRows`, taken from the
step's observation, action and mask when the step is added) and hands them to
``evaluate_actions`` in place of the full mask. The log-probabilities and values are the
ones the full observation and mask give, bit for bit (``tests/agents/test_factored_buffer.py``): the
same numbers go through the same operations. Everything else (returns, advantages, the
minibatch permutation drawn from numpy's global RNG) is sb3-contrib's.

Used by the algorithm ``maskable-ppo-factored`` (:mod:`agents.algos`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.buffers import (
    MaskableDictRolloutBuffer,
    MaskableDictRolloutBufferSamples,
)
from stable_baselines3.common.buffers import DictRolloutBuffer


class TakenSlotRows(NamedTuple):
    """The parts of the observation and action mask of a batch of steps that the factorised
    head needs to score the action taken at each step (module docstring).

    :param ratio: (B, P, D) the observation's ``ratio`` row of the taken slot.
    :param slot_open: (B, K) bool, slots with at least one legal pair.
    :param pair_mask: (B, P·D) bool, the action mask's row of the taken slot.
    """

    ratio: th.Tensor
    slot_open: th.Tensor
    pair_mask: th.Tensor


def open_slots(masks: np.ndarray, n_slots: int, n_pairs: int) -> np.ndarray:
    """(B, K) bool: which slots of the flat action masks ``masks`` (B·K·n_pairs bools, e.g.
    (B, K·n_pairs)) have a legal pair. A slot's row is read as whole 8-byte words where its
    length allows (``any`` over 8 words instead of 64 bools: the same result, ~10x faster)."""
    m = np.ascontiguousarray(masks, dtype=bool).reshape(-1, n_slots, n_pairs)
    if n_pairs % 8 == 0:
        m = m.view(np.uint64)
    return np.asarray(m.any(axis=-1))


class FactoredRolloutBuffer(MaskableDictRolloutBuffer):
    """``MaskableDictRolloutBuffer`` storing :class:`TakenSlotRows` instead of the ``ratio``
    observation and the full action mask (module docstring). Samples carry them in the
    ``action_masks`` field. Needs a PDCluster ``Dict`` observation with a ``ratio`` entry of
    shape (K, P, D) and a ``Discrete(K·P·D)`` action space.

    :raises ValueError: for another observation or action space.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
    ):
        is_dict = isinstance(observation_space, spaces.Dict)
        ratio = observation_space.spaces.get("ratio") if is_dict else None
        shape = None if ratio is None else ratio.shape
        if shape is None or len(shape) != 3:
            raise ValueError(
                f"FactoredRolloutBuffer needs a Dict observation with a (K, P, D) 'ratio' entry "
                f"(servegym/PDCluster-v0), got {observation_space}"
            )
        k, p, d = shape
        if not isinstance(action_space, spaces.Discrete) or int(action_space.n) != k * p * d:
            raise ValueError(
                f"FactoredRolloutBuffer needs Discrete({k * p * d}) actions (K·P·D for ratio "
                f"shape {shape}), got {action_space}"
            )
        self.n_slots, self.pair_shape, self.n_pairs = k, (p, d), p * d
        super().__init__(
            buffer_size, observation_space, action_space, device, gae_lambda, gamma, n_envs
        )

    def reset(self) -> None:
        shapes = self.obs_shape
        self.obs_shape = {key: shape for key, shape in shapes.items() if key != "ratio"}
        try:
            DictRolloutBuffer.reset(self)  # not the full (n_steps, n_envs, K·P·D) mask
        finally:
            self.obs_shape = shapes
        self.mask_dims = self.n_slots * self.n_pairs
        size = (self.buffer_size, self.n_envs)
        self.ratio_rows = np.zeros((*size, *self.pair_shape), dtype=np.float32)
        self.slot_open = np.ones((*size, self.n_slots), dtype=bool)
        self.pair_mask = np.ones((*size, self.n_pairs), dtype=bool)

    def add(  # type: ignore[override]
        self,
        obs: dict[str, np.ndarray],
        action: np.ndarray,
        reward: np.ndarray,
        episode_start: np.ndarray,
        value: th.Tensor,
        log_prob: th.Tensor,
        action_masks: np.ndarray | None = None,
    ) -> None:
        """sb3-contrib's ``add``; keeps the taken slot's ``ratio`` and mask rows instead of the
        ``ratio`` observation and the whole mask."""
        slot = np.asarray(action).reshape(self.n_envs).astype(np.int64) // self.n_pairs
        env = np.arange(self.n_envs)
        self.ratio_rows[self.pos] = np.asarray(obs["ratio"])[env, slot]
        if action_masks is None:
            self.slot_open[self.pos] = True
            self.pair_mask[self.pos] = True
        else:
            m = np.asarray(action_masks, dtype=bool).reshape(
                self.n_envs, self.n_slots, self.n_pairs
            )
            self.slot_open[self.pos] = open_slots(m, self.n_slots, self.n_pairs)
            self.pair_mask[self.pos] = m[env, slot]
        DictRolloutBuffer.add(self, obs, action, reward, episode_start, value, log_prob)

    def get(  # type: ignore[override]
        self, batch_size: int | None = None
    ) -> Generator[MaskableDictRolloutBufferSamples, None, None]:
        assert self.full, ""
        indices = np.random.permutation(self.buffer_size * self.n_envs)
        if not self.generator_ready:
            for key, obs in self.observations.items():
                self.observations[key] = self.swap_and_flatten(obs)
            names = ["actions", "values", "log_probs", "advantages", "returns"]
            for name in names + ["ratio_rows", "slot_open", "pair_mask"]:
                self.__dict__[name] = self.swap_and_flatten(self.__dict__[name])
            self.generator_ready = True
        if batch_size is None:
            batch_size = self.buffer_size * self.n_envs
        start = 0
        while start < self.buffer_size * self.n_envs:
            yield self._get_samples(indices[start : start + batch_size])
            start += batch_size

    def _get_samples(  # type: ignore[override]
        self, batch_inds: np.ndarray, env: Any = None
    ) -> MaskableDictRolloutBufferSamples:
        def t(x: np.ndarray) -> th.Tensor:
            # x is a fresh array (fancy indexing copies): share it instead of copying again
            return th.from_numpy(x).to(self.device)

        rows = TakenSlotRows(
            t(self.ratio_rows[batch_inds]),
            t(self.slot_open[batch_inds]),
            t(self.pair_mask[batch_inds]),
        )
        return MaskableDictRolloutBufferSamples(
            observations={key: t(obs[batch_inds]) for key, obs in self.observations.items()},
            actions=t(self.actions[batch_inds]),
            old_values=t(self.values[batch_inds].flatten()),
            old_log_prob=t(self.log_probs[batch_inds].flatten()),
            advantages=t(self.advantages[batch_inds].flatten()),
            returns=t(self.returns[batch_inds].flatten()),
            action_masks=rows,  # type: ignore[arg-type]
        )
