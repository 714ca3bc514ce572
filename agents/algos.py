"""SB3 / sb3-contrib algorithm builders, by name (Vidur-style registry of small variants).

    model = build_model("maskable-ppo", vec_env, TRAIN_ENVS["pd-cluster"], seed=0)

Another algorithm is one :func:`register_algo` call: a class, whether it uses action masks, and
its default hyperparameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm

from agents.envs import TrainEnvSpec
from agents.factored import FactoredActionPolicy
from agents.factored_buffer import FactoredRolloutBuffer
from agents.policies import ActionScoresActorCriticPolicy, ActionScoresPolicy


@dataclass(frozen=True)
class AlgoSpec:
    """One trainable algorithm.

    :param cls_path: ``module:Class`` of the SB3 algorithm (imported when used).
    :param masked: it takes ``action_masks`` (sb3-contrib convention); else the env must
        penalise illegal actions (``invalid_action="penalize"``).
    :param policy: policy class for envs whose extractor gives per-action scores.
    :param defaults: default hyperparameters (overridable per run).
    :param machinery: other constructor arguments, which change how the algorithm is computed
        but not what it computes (e.g. ``rollout_buffer_class``); ``hyperparams`` of
        :func:`build_model` override them too.
    """

    cls_path: str
    masked: bool
    policy: type
    defaults: Mapping[str, Any] = field(default_factory=dict)
    machinery: Mapping[str, Any] = field(default_factory=dict)

    def load_class(self) -> type[BaseAlgorithm]:
        import importlib

        module, _, name = self.cls_path.partition(":")
        return getattr(importlib.import_module(module), name)


#: Defaults tuned on training seeds for PDCluster (short episodes of sparse, delayed rewards:
#: long horizon, small policy steps so RL fine-tuning does not undo behaviour cloning).
PPO_DEFAULTS: dict[str, Any] = {
    "n_steps": 512,
    "batch_size": 256,
    "n_epochs": 4,
    "learning_rate": 1e-4,
    "gamma": 0.999,
    "gae_lambda": 0.95,
    "clip_range": 0.1,
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "target_kl": 0.02,
}

ALGOS: dict[str, AlgoSpec] = {}


def register_algo(name: str, spec: AlgoSpec) -> None:
    """Register ``spec`` under ``name``.

    :raises ValueError: if the name is taken.
    """
    if name in ALGOS:
        raise ValueError(f"algorithm {name!r} is already registered")
    ALGOS[name] = spec


register_algo(
    "maskable-ppo",
    AlgoSpec(
        "sb3_contrib:MaskablePPO", masked=True, policy=ActionScoresPolicy, defaults=PPO_DEFAULTS
    ),
)
register_algo(
    "maskable-ppo-factored",
    AlgoSpec(
        "sb3_contrib:MaskablePPO",
        masked=True,
        policy=FactoredActionPolicy,
        defaults=PPO_DEFAULTS,
        # the taken slot's rows instead of the whole ratio observation and mask (same numbers)
        machinery={"rollout_buffer_class": FactoredRolloutBuffer},
    ),
)
register_algo(
    "ppo",
    AlgoSpec(
        "stable_baselines3:PPO",
        masked=False,
        policy=ActionScoresActorCriticPolicy,
        defaults=PPO_DEFAULTS,
    ),
)
register_algo(
    "teacher-ppo",
    AlgoSpec(
        "agents.teacher_ppo:TeacherPPO",
        masked=True,
        policy=ActionScoresPolicy,
        # MaskablePPO's defaults plus the warm-up and KL anchor's (agents.teacher_ppo)
        defaults=PPO_DEFAULTS,
    ),
)


def algo_spec(name: str) -> AlgoSpec:
    """The :data:`ALGOS` entry for ``name``, or a clear error listing the known ones."""
    if name not in ALGOS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGOS))}")
    return ALGOS[name]


def build_model(
    algo: str,
    env: Any,
    env_spec: TrainEnvSpec,
    seed: int,
    hyperparams: Mapping[str, Any] | None = None,
    extractor_kwargs: Mapping[str, Any] | None = None,
    net_arch: list[int] | None = None,
    device: str = "cpu",
) -> BaseAlgorithm:
    """A fresh SB3 model for ``env``.

    :param algo: a key of :data:`ALGOS`.
    :param env: a (vectorised) env of the family ``env_spec``.
    :param env_spec: the env family (its extractor and head).
    :param seed: SB3 seed (torch, numpy, action sampling).
    :param hyperparams: overrides of the algorithm's defaults.
    :param extractor_kwargs: overrides of the extractor's keyword arguments.
    :param net_arch: critic (and, without action scores, actor) hidden widths.
    :param device: torch device.
    """
    spec = algo_spec(algo)
    hp = {**spec.machinery, **spec.defaults, **(hyperparams or {})}
    arch = net_arch if net_arch is not None else [64, 64]
    policy_kwargs: dict[str, Any] = {
        "features_extractor_class": env_spec.extractor,
        "features_extractor_kwargs": {**env_spec.extractor_kwargs, **(extractor_kwargs or {})},
    }
    if env_spec.action_scores:
        policy: Any = spec.policy
        policy_kwargs["net_arch"] = {"pi": [], "vf": arch}
    else:
        policy = "MultiInputPolicy"
        policy_kwargs["net_arch"] = {"pi": arch, "vf": arch}
    return spec.load_class()(
        policy, env, seed=seed, device=device, policy_kwargs=policy_kwargs, verbose=0, **hp
    )


def load_model(path: str, device: str = "cpu") -> BaseAlgorithm:
    """Load a saved model; the algorithm follows from the saved policy class (a maskable policy
    loads as MaskablePPO, any other as PPO).

    :param path: a ``.zip`` written by ``model.save``.
    :param device: torch device.
    :raises FileNotFoundError: if ``path`` does not exist.
    :raises ValueError: if the file is not an SB3 model.
    """
    from pathlib import Path

    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
    from stable_baselines3.common.save_util import load_from_zip_file

    if not Path(path).is_file():
        raise FileNotFoundError(f"no saved model at {path!r}")
    try:
        data, _, _ = load_from_zip_file(path, device=device, load_data=True)
    except Exception as exc:  # a zip that is not an SB3 save fails in many ways
        raise ValueError(f"{path!r} is not a saved SB3 model: {exc}") from exc
    policy_class = (data or {}).get("policy_class")
    if not isinstance(policy_class, type):
        raise ValueError(f"{path!r} has no loadable policy class (got {policy_class!r})")
    masked = issubclass(policy_class, MaskableActorCriticPolicy)
    cls = algo_spec("maskable-ppo" if masked else "ppo").load_class()
    return cls.load(path, device=device)
