"""Which envs can be trained, and how to build them for training and evaluation.

A new env family (Routing, Allocation) is one ``envs.registry`` entry (its Gymnasium id, which
options it takes, its training defaults) and one :data:`TRAIN_ENVS` extractor: its features
extractor and policy head.
What the family is *compared on* — the expert, the baselines, the headline metrics and which
direction is better — is declared once, in ``envs.registry``, which ``train.py`` reads, so
training selects its best checkpoint by the same rule as the evaluation tables. Nothing in
``train.py`` names an env.

Seeds: training workloads come from reset seeds in ``[0, EVAL_SEED_BASE)``, drawn by
:class:`TrainingSeeds`; held-out evaluation (the final tables) uses seeds ``EVAL_SEED_BASE + i``,
so a policy is never evaluated on a workload it trained on; evaluation *during* training (the
best checkpoint, learning curves) uses a third set, ``VALIDATION_SEED_BASE + i``, so that no
choice is ever made on the held-out seeds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from agents.extractors import (
    PDClusterScorer,
    PDClusterTwoStepScorer,
    RoutingScorer,
    SetPoolingExtractor,
)
from envs import DEFAULT_VERSION
from envs.registry import FAMILIES

#: First held-out evaluation seed; training resets draw seeds below it.
EVAL_SEED_BASE = 1_000_000
#: First validation seed (model selection during training), disjoint from both sets above.
VALIDATION_SEED_BASE = 2_000_000


@dataclass(frozen=True)
class TrainEnvSpec:
    """How to train on one env family.

    :param gym_id: the Gymnasium id.
    :param options: training-config option -> env keyword argument (e.g. ``count`` ->
        ``workload_count``; ``envs.registry``). Options not listed are not passed.
    :param extractor: features extractor class.
    :param extractor_kwargs: its keyword arguments.
    :param action_scores: the extractor outputs per-action scores (use
        :class:`agents.policies.ActionScoresPolicy`); else SB3's default MLP head.
    :param defaults: training defaults of options (``workload``, ``count``, ...) that differ
        from the evaluation defaults (``EnvFamily.train_defaults``): shorter episodes, fewer
        slots. Unset options not listed here take the env family's evaluation default
        (``envs.registry``) or the env's own.
    :param reward_scale: training envs (BC demonstrations and RL) see the env's reward times
        this (:class:`ScaledReward`), so that returns, and the critic's squared error that
        shares the features extractor with the policy, stay of order one. Evaluation reads the
        env's metrics, never the scaled reward.
    """

    gym_id: str
    options: Mapping[str, str]
    extractor: type[BaseFeaturesExtractor]
    extractor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    action_scores: bool = True
    defaults: Mapping[str, Any] = field(default_factory=dict)
    reward_scale: float = 1.0


#: Per trainable env family: its features extractor and policy head. Its Gymnasium id, options,
#: training defaults and reward scale are the family's (``envs.registry``).
_EXTRACTORS: dict[str, tuple[type[BaseFeaturesExtractor], dict[str, Any], bool]] = {
    "pd-cluster-v0": (PDClusterScorer, {"hidden": 32}, True),
    "routing-v0": (RoutingScorer, {"hidden": 32}, True),
    "allocation-v0": (SetPoolingExtractor, {"hidden": 32, "valid_columns": {"llms": 0}}, False),
    # PDCluster-v1's two-step space: a slot score per slot (+ keep), a pair score per (p, d)
    "pd-cluster-v1": (PDClusterTwoStepScorer, {"hidden": 32}, True),
    "routing-v1": (RoutingScorer, {"hidden": 32}, True),
}
_EXTRACTORS["allocation-v1"] = _EXTRACTORS["allocation-v0"]  # v1 changes the episode, not spaces
for _short in ("pd-cluster", "routing", "allocation"):  # the plain name: the default version
    _EXTRACTORS[_short] = _EXTRACTORS[f"{_short}-{DEFAULT_VERSION}"]

#: Training-only env options (not ``evaluate.py`` flags): Routing-v0's opt-in observation
#: (a ``ckpt:`` policy trained with it computes it itself, ``agents.checkpoint``).
_TRAIN_ONLY_OPTIONS: dict[str, dict[str, str]] = {
    "routing": {"observation": "observation"},
    "routing-v0": {"observation": "observation"},
    "routing-v1": {"observation": "observation"},
}

TRAIN_ENVS: dict[str, TrainEnvSpec] = {
    name: TrainEnvSpec(
        gym_id=FAMILIES[name].gym_id,
        options={**FAMILIES[name].options, **_TRAIN_ONLY_OPTIONS.get(name, {})},
        extractor=extractor,
        extractor_kwargs=extractor_kwargs,
        action_scores=action_scores,
        defaults=FAMILIES[name].train_defaults,
        reward_scale=FAMILIES[name].train_reward_scale,
    )
    for name, (extractor, extractor_kwargs, action_scores) in _EXTRACTORS.items()
}

#: Generic fallback when an env has no specialised extractor (documented for new envs).
GENERIC_EXTRACTOR = SetPoolingExtractor


def train_env_spec(name: str) -> TrainEnvSpec:
    """The :data:`TRAIN_ENVS` entry for ``name``.

    :raises ValueError: for an unknown name, listing the known ones.
    """
    if name not in TRAIN_ENVS:
        raise ValueError(f"unknown env {name!r}; trainable envs: {', '.join(sorted(TRAIN_ENVS))}")
    return TRAIN_ENVS[name]


def env_kwargs(spec: TrainEnvSpec, options: Mapping[str, Any]) -> dict[str, Any]:
    """Env keyword arguments from training options (None values are left to the env default).

    :param spec: the env family.
    :param options: training options by name (a superset of ``spec.options`` is fine).
    """
    return {
        kw: options[name]
        for name, kw in spec.options.items()
        if name in options and options[name] is not None
    }


class TrainingSeeds(gym.Wrapper):
    """Resets without a seed draw the workload seed from ``[0, EVAL_SEED_BASE)``.

    The env itself would draw from ``[0, 2³¹)``, which could (rarely) hit a held-out seed.

    :param env: the env.
    :param seed: seeds this wrapper's generator.
    """

    def __init__(self, env: gym.Env, seed: int):
        super().__init__(env)
        self._seeds = np.random.default_rng(seed)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is None:
            seed = int(self._seeds.integers(0, EVAL_SEED_BASE))
        return self.env.reset(seed=seed, options=options)


class ScaledReward(gym.RewardWrapper):
    """The env's reward times ``scale`` (:attr:`TrainEnvSpec.reward_scale`); ``info`` and the
    episode metrics are untouched."""

    def __init__(self, env: gym.Env, scale: float):
        super().__init__(env)
        self.scale = float(scale)

    def reward(self, reward: Any) -> Any:
        return reward * self.scale

    def action_masks(self) -> np.ndarray:
        return self.env.unwrapped.action_masks()  # type: ignore[attr-defined]


class LeanInfo(gym.Wrapper):
    """Drops the per-step ``decision_context`` and ``action_mask`` and the episode-end
    per-workflow / per-request lists from ``info`` (learned policies read the observation and
    ``action_masks()``), so vectorised workers do not pickle them. ``metrics`` and the other
    episode-end entries pass through."""

    DROP = ("decision_context", "action_mask", "completion_times", "horizons", "latencies", "slos")

    def _lean(self, info: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in info.items() if k not in self.DROP}

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        return obs, self._lean(info)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._lean(info)

    def action_masks(self) -> np.ndarray:
        return self.env.unwrapped.action_masks()  # type: ignore[attr-defined]


def make_env(
    spec: TrainEnvSpec,
    kwargs: Mapping[str, Any],
    seed: int | None = None,
    lean: bool = False,
    randomize: Mapping[str, Any] | None = None,
    randomize_seed: int = 0,
) -> gym.Env:
    """One env of the family, optionally wrapped for training.

    :param spec: the env family.
    :param kwargs: env keyword arguments (see :func:`env_kwargs`).
    :param seed: if given, wrap in :class:`TrainingSeeds` seeded with it.
    :param lean: wrap in :class:`LeanInfo` and SB3's ``Monitor`` (for vectorised training).
    :param randomize: domain randomisation, option -> draw (:mod:`agents.randomize`); the env's
        options are redrawn at every reset. None or empty: a fixed env.
    :param randomize_seed: the randomisation's seed.

    The family's :attr:`TrainEnvSpec.reward_scale` applies to every env made here. Unless
    ``lean``, its ``info`` carries the decision context (experts act on it: BC, DAgger).
    """
    import envs  # noqa: F401  (registers the servegym ids)

    build = functools.partial(_build_env, spec, lean)
    if randomize:
        from agents.randomize import DomainRandomized

        env: gym.Env = DomainRandomized(build, kwargs, randomize, spec.options, randomize_seed)
    else:
        env = build(kwargs)
    if seed is not None:
        env = TrainingSeeds(env, seed)
    if lean:
        from stable_baselines3.common.monitor import Monitor

        env = Monitor(LeanInfo(env))
    return env


def _build_env(spec: TrainEnvSpec, lean: bool, kwargs: Mapping[str, Any]) -> gym.Env:
    env = gym.make(spec.gym_id, **{"decision_context": not lean, **kwargs})
    if spec.reward_scale != 1.0:
        env = ScaledReward(env, spec.reward_scale)
    return env


def _worker_env(
    spec_name: str,
    kwargs: dict[str, Any],
    seed: int,
    threads: int | None,
    randomize: Mapping[str, Any] | None = None,
) -> gym.Env:
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    spec = train_env_spec(spec_name)
    return make_env(spec, kwargs, seed=seed, lean=True, randomize=randomize, randomize_seed=seed)


def make_vec_env(
    spec_name: str,
    kwargs: Mapping[str, Any],
    n_envs: int,
    seed: int,
    vec: str = "subproc",
    ray_address: str | None = None,
    randomize: Mapping[str, Any] | None = None,
) -> Any:
    """``n_envs`` training envs, env i seeded with ``seed + i`` (workloads differ per env).

    :param spec_name: a key of :data:`TRAIN_ENVS`.
    :param kwargs: env keyword arguments.
    :param n_envs: number of envs.
    :param seed: base seed.
    :param vec: ``subproc`` (one process per env, ``torch`` limited to 1 thread there),
        ``dummy`` (all in this process) or ``ray`` (one Ray actor per env,
        :class:`agents.distributed.RayVecEnv`, also with ``torch`` limited to 1 thread).
    :param ray_address: with ``vec="ray"``: ``local`` / None (this machine) or a cluster address.
    :param randomize: domain randomisation of every env (:mod:`agents.randomize`), env i's
        draws seeded with ``seed + i``.
    :raises ValueError: for an unknown ``vec``.
    """
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    spec = train_env_spec(spec_name)
    if randomize:
        from agents.randomize import check_randomization

        check_randomization(randomize, spec.options)
    threads = 1 if vec in ("subproc", "ray") else None
    dr = dict(randomize) if randomize else None
    fns: list[Callable[[], gym.Env]] = [
        functools.partial(_worker_env, spec_name, dict(kwargs), seed + i, threads, dr)
        for i in range(n_envs)
    ]
    if vec == "subproc":
        return SubprocVecEnv(fns)
    if vec == "dummy":
        return DummyVecEnv(fns)
    if vec == "ray":
        from agents.distributed import RayVecEnv

        return RayVecEnv(fns, ray_address)
    raise ValueError(f"vec must be 'subproc', 'dummy' or 'ray', got {vec!r}")


def eval_seeds(n: int) -> tuple[int, ...]:
    """The first ``n`` held-out evaluation seeds."""
    return tuple(EVAL_SEED_BASE + i for i in range(n))


def validation_seeds(n: int) -> tuple[int, ...]:
    """The first ``n`` validation seeds (evaluation during training, best-checkpoint choice)."""
    return tuple(VALIDATION_SEED_BASE + i for i in range(n))
