"""What every servegym env shares: the masked-action protocol, the common options, and decision
contexts that compare by value.

An env subclasses :class:`ServegymEnv`, calls :meth:`ServegymEnv._init_common` from its
``__init__`` (after building its action and observation spaces), keeps ``self._mask`` up to date,
and implements :meth:`ServegymEnv._explain_invalid`. :meth:`ServegymEnv._legal_action` turns a
step's action into a legal one (or raises) and :meth:`ServegymEnv._truncated` applies
``max_steps``, so the envs' ``step`` methods read the same way.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from envs.rewards import make_reward
from envs.workloads import episode_seed

INVALID_ACTIONS = ("raise", "penalize")


class DecisionContextBase:
    """Mixin for the dataclass an env puts in ``info["decision_context"]``: equality compares
    every field, arrays by value (declare the dataclass with ``eq=False`` to keep it)."""

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for f in fields(self):  # type: ignore[arg-type]
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray):
                if not np.array_equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None  # type: ignore[assignment]


class ServegymEnv(gym.Env):
    """Base of the servegym envs (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}
    _mask: np.ndarray

    def _init_common(
        self,
        reward: str,
        reward_kwargs: dict[str, Any] | None,
        invalid_action: str,
        invalid_penalty: float,
        max_steps: int | None,
        workload_seed: int | None,
        render_mode: str | None,
    ) -> None:
        """Check and store the options every env takes; start with an all-false mask.

        :raises ValueError: for an unknown reward or reward option, ``invalid_action`` or
            ``render_mode``.
        """
        make_reward(reward, 1, **(reward_kwargs or {}))  # fail fast on a bad name or option
        if invalid_action not in INVALID_ACTIONS:
            raise ValueError(
                f"invalid_action must be 'raise' or 'penalize', got {invalid_action!r}"
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} not in {self.metadata['render_modes']}")
        self.reward_name = reward
        self.reward_kwargs = dict(reward_kwargs or {})
        self.invalid_action = invalid_action
        self.invalid_penalty = invalid_penalty
        self.max_steps = max_steps
        self.workload_seed = workload_seed
        self.render_mode = render_mode
        self._mask = np.zeros(self.action_space.n, dtype=bool)  # type: ignore[attr-defined]

    def _begin_episode(self, seed: int | None, source: Any) -> list[Any]:
        """Seed the env (``gym.Env.reset``), pick the episode's workload seed
        (:func:`envs.workloads.episode_seed`) and return its records from ``source`` (a
        :class:`envs.workloads.TraceSource`); resets the step counter."""
        gym.Env.reset(self, seed=seed)
        self._workload_seed = episode_seed(self, seed, self.workload_seed)
        self._steps = 0
        return source.records(self._workload_seed)

    @staticmethod
    def _check_predictor(name: str) -> None:
        """:raises ValueError: if ``name`` is not in :data:`envs.predictors.PREDICTORS`."""
        from envs.predictors import PREDICTORS

        if name not in PREDICTORS:
            raise ValueError(f"unknown output_predictor {name!r}; known: {sorted(PREDICTORS)}")

    def action_masks(self) -> np.ndarray:
        """Legal actions now (sb3-contrib MaskablePPO convention)."""
        return self._mask.copy()

    def _legal_action(self, action: int) -> tuple[int, float]:
        """``(action, penalty)``: the action if legal; else raise (``invalid_action="raise"``)
        or the first legal action and ``−invalid_penalty``."""
        action = int(action)
        if 0 <= action < self._mask.size and self._mask[action]:
            return action, 0.0
        if self.invalid_action == "raise":
            raise ValueError(self._explain_invalid(action))
        return int(np.flatnonzero(self._mask)[0]), -self.invalid_penalty

    def _truncated(self, terminated: bool, steps: int) -> bool:
        return (not terminated) and self.max_steps is not None and steps >= self.max_steps

    def export_timeline(self, path: str | Path) -> Path:
        """Write the episode so far as a Chrome-trace / Perfetto JSON timeline: per-instance
        prefill, KV-transfer and decode slices, queue counters and workflow spans with C_w and
        H_w (see :mod:`envs.sim.timeline`). Open it at ui.perfetto.dev or ``chrome://tracing``.

        :return: the path written.
        :raises RuntimeError: before the first ``reset``.
        """
        sim = getattr(self, "sim", None)
        if sim is None:
            raise RuntimeError(
                f"{type(self).__name__} has no episode to export yet: call reset() (and step) first"
            )
        from envs.sim.timeline import write_timeline

        return write_timeline(sim.result(), sim.cluster, path)

    def _explain_invalid(self, action: int) -> str:
        """Why ``action`` is not legal now, naming the offending value."""
        raise NotImplementedError

    def _terminal_observation(self) -> dict[str, np.ndarray]:
        """All-zero observation returned with the terminal step."""
        space = self.observation_space
        assert isinstance(space, gym.spaces.Dict)
        return {k: np.zeros(s.shape, dtype=np.float32) for k, s in space.items()}
