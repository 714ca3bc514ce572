"""Domain randomisation for training (ours, no paper prescribes it): every episode
draws some env options afresh — load, length-predictor or estimate error, the cluster — so a
policy trained on many settings meets an unseen one less surprised.

A randomisation is a mapping ``option -> draw`` of training-config option names (``train.py``'s
``load_scale``, ``predictor_error``, ``cluster``, ...; ``envs.CLI_ENVS``), each draw one of

* ``{"uniform": [low, high]}``: a float uniformly in ``[low, high]``;
* ``{"choice": [a, b, ...]}``: one of the values, equally likely.

In a config file (``train.py --config``)::

    randomize:
      load_scale: {uniform: [0.7, 1.5]}
      predictor_error: {choice: [0.0, 0.2]}

:class:`DomainRandomized` rebuilds the env whenever a draw changes its options (the options
are constructor arguments). Every draw must keep the observation and action spaces (a policy
has one input and output size): a cluster with another instance count is rejected at the
first reset that draws it, naming the option and value. The draw of an episode reset with a
seed is a function of (randomisation seed, reset seed), so behaviour-cloning episodes and
seeded vectorised envs are reproducible; evaluation envs are never randomised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

#: The draw kinds a randomisation entry may use.
KINDS = ("uniform", "choice")


def check_randomization(randomize: Mapping[str, Any], options: Mapping[str, str]) -> None:
    """Reject a malformed randomisation before any env is built.

    :param randomize: option -> draw (module docstring).
    :param options: the env family's training option -> env keyword mapping.
    :raises ValueError: naming the offending option and what was expected.
    """
    if not isinstance(randomize, Mapping):
        raise ValueError(f"randomize: expected a mapping of option -> draw, got {randomize!r}")
    for name, draw in randomize.items():
        if name not in options:
            raise ValueError(
                f"randomize: {name!r} is not an option of this env (one of: "
                f"{', '.join(sorted(options))})"
            )
        if not isinstance(draw, Mapping) or len(draw) != 1 or next(iter(draw)) not in KINDS:
            raise ValueError(
                f"randomize.{name}: expected {{uniform: [low, high]}} or {{choice: [...]}}, "
                f"got {draw!r}"
            )
        kind, values = next(iter(draw.items()))
        if not isinstance(values, (list, tuple)) or not values:
            raise ValueError(f"randomize.{name}.{kind}: expected a non-empty list, got {values!r}")
        if kind == "uniform":
            ok = len(values) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)
                for v in values
            )
            if not ok or values[0] > values[1]:
                raise ValueError(
                    f"randomize.{name}.uniform: expected [low, high] with finite low <= high, "
                    f"got {values!r}"
                )


def draw_options(
    randomize: Mapping[str, Any], options: Mapping[str, str], rng: np.random.Generator
) -> dict[str, Any]:
    """One draw: env keyword -> value, for every randomised option (in sorted option order, so
    the same generator state gives the same draw)."""
    out: dict[str, Any] = {}
    for name in sorted(randomize):
        kind, values = next(iter(randomize[name].items()))
        if kind == "uniform":
            value: Any = float(rng.uniform(values[0], values[1]))
        else:
            value = values[int(rng.integers(len(values)))]
        out[options[name]] = value
    return out


class DomainRandomized(gym.Env):
    """An env whose options are redrawn at every reset (see the module docstring).

    :param make: builds the env from keyword arguments.
    :param kwargs: the env's keyword arguments apart from the randomised ones.
    :param randomize: option -> draw.
    :param options: the env family's training option -> env keyword mapping.
    :param seed: the randomisation seed.
    """

    def __init__(
        self,
        make: Callable[[dict[str, Any]], gym.Env],
        kwargs: Mapping[str, Any],
        randomize: Mapping[str, Any],
        options: Mapping[str, str],
        seed: int,
    ):
        check_randomization(randomize, options)
        self._make = make
        self._kwargs = dict(kwargs)
        self._randomize = dict(randomize)
        self._options = dict(options)
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        first = draw_options(self._randomize, self._options, np.random.default_rng(seed))
        self.drawn: dict[str, Any] = first
        self.env = make({**self._kwargs, **first})
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.metadata = self.env.metadata

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        rng = self._rng if seed is None else np.random.default_rng([self._seed, seed])
        drawn = draw_options(self._randomize, self._options, rng)
        if drawn != self.drawn:
            env = self._make({**self._kwargs, **drawn})
            for what in ("observation_space", "action_space"):
                if getattr(env, what) != getattr(self, what):
                    env.close()
                    raise ValueError(
                        f"randomize: the draw {drawn} changes the env's {what} "
                        f"({getattr(self, what)} -> {getattr(env, what)}); randomise only "
                        "options that keep the spaces (e.g. clusters with the same instance "
                        "count)"
                    )
            self.env.close()
            self.env, self.drawn = env, drawn
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        return self.env.step(action)

    def action_masks(self) -> np.ndarray:
        """The current env's legal actions (MaskablePPO's hook)."""
        return np.asarray(self.env.get_wrapper_attr("action_masks")(), dtype=bool)

    @property
    def unwrapped(self) -> gym.Env:
        return self.env.unwrapped

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()
