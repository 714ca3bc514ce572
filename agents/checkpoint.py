"""Saved SB3 models as policies with the common ``reset()`` / ``act(obs, info)`` protocol, so
``evaluate.py`` runs them exactly like the heuristics (``--policies ckpt:runs/NAME/model.zip``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agents.algos import load_model

#: The model file a checkpoint directory (``ckpt:checkpoints/<family>``) holds.
MODEL_FILE = "model.zip"


def locate(path: str | Path) -> Path:
    """``path`` as given when it exists; else, when it names an env family (``routing``,
    ``pd-cluster``, ``allocation``), the shipped checkpoint of that family (``ckpt:routing``
    works from any directory and from an installed package, :func:`checkpoints.shipped`)."""
    p = Path(path)
    if p.exists() or len(p.parts) != 1:
        return p
    from checkpoints import shipped

    return shipped(str(path)) or p


def resolve_checkpoint(path: str | Path) -> Path:
    """The model file of ``path``: ``path`` itself when it is a file (``runs/x/model.zip``),
    ``path/model.zip`` when it is a directory (``checkpoints/routing``), or the shipped
    checkpoint of the env family ``path`` names (``routing``, :func:`locate`).

    :raises FileNotFoundError: if ``path`` does not exist, or is a directory without
        ``model.zip``.
    """
    p = locate(path)
    if p.is_dir():
        model = p / MODEL_FILE
        if not model.is_file():
            raise FileNotFoundError(
                f"checkpoint directory {str(p)!r} has no {MODEL_FILE} (a shipped checkpoint "
                f"holds {MODEL_FILE} and config.json; see checkpoints/README.md)"
            )
        return model
    if not p.exists():
        raise FileNotFoundError(f"no saved model at {str(p)!r} (a model.zip or a directory)")
    return p


def checkpoint_config(path: str | Path) -> Path:
    """Where the ``config.json`` of the run that wrote the checkpoint ``path`` lives: beside
    the model file (for a directory, inside it). It may not exist (a bare model file)."""
    p = locate(path)
    return p / "config.json" if p.is_dir() else p.parent / "config.json"


class SB3Policy:
    """A trained SB3 model acting deterministically (argmax over legal actions).

    :param model: the loaded SB3 model.
    :param name: display name (e.g. ``ckpt:runs/x/model.zip``).
    """

    def __init__(self, model: Any, name: str, observe: Any = None):
        from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

        self.model = model
        self.name = name
        self.masked = isinstance(model.policy, MaskableActorCriticPolicy)
        #: None: act on the env's observation; else a callable returning the observation the
        #: model was trained on (an opt-in observation option the env was not built with), read
        #: from the env the policy was loaded for -- load one policy per env (as evaluate.py does).
        self.observe = observe

    def reset(self) -> None:
        """Stateless: nothing to forget."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """The model's argmax action; masked models need ``info["action_mask"]``.

        :param obs: the env observation.
        :param info: the step's info dict.
        :raises ValueError: if a masked model gets no ``action_mask``.
        """
        if self.observe is not None:
            obs = self.observe()
        if not self.masked:
            action, _ = self.model.predict(obs, deterministic=True)
            return int(action)
        mask = info.get("action_mask") if isinstance(info, dict) else None
        if mask is None:
            raise ValueError(f"policy {self.name!r} needs info['action_mask'] to act")
        action, _ = self.model.predict(
            obs, deterministic=True, action_masks=np.asarray(mask, dtype=bool)
        )
        return int(action)


def load_policy(
    path: str | Path, env: Any | None = None, torch_threads: int | None = 1
) -> SB3Policy:
    """Load ``path`` (a ``model.zip``) as a :class:`SB3Policy`.

    :param path: a saved SB3 model, or a directory holding one as ``model.zip``
        (:func:`resolve_checkpoint`).
    :param env: if given, its observation and action spaces must match the model's.
    :param torch_threads: sets ``torch.set_num_threads`` for this process (None: leave it).
        One observation per call gains nothing from threads, and on a busy machine idle
        OpenMP threads spin-wait: with the default thread count a forward pass measured
        ~190 ms instead of ~1 ms.
    :raises FileNotFoundError: if ``path`` does not exist.
    :raises ValueError: if it is not an SB3 model, or its spaces do not match ``env``.
    """
    if torch_threads is not None:
        import torch

        torch.set_num_threads(torch_threads)
    model = load_model(str(resolve_checkpoint(path)))
    if env is not None:
        if flat_on_two_step(model, env):
            return FlatOnTwoStep(model, f"ckpt:{path}", env)
        if model.action_space != env.action_space:
            raise ValueError(
                f"model {str(path)!r} acts in {model.action_space} but the env's action space is "
                f"{env.action_space} (a different cluster or slot count?)"
            )
        if model.observation_space != env.observation_space:
            observe = trained_observation(path, model, env)
            if observe is None:
                raise ValueError(
                    f"model {str(path)!r} was trained on observations {model.observation_space}, "
                    f"the env gives {env.observation_space}"
                )
            return SB3Policy(model, f"ckpt:{path}", observe=observe)
    return SB3Policy(model, f"ckpt:{path}")


def trained_observation(path: str | Path, model: Any, env: Any) -> Any:
    """For a model trained with an opt-in observation option (``observation`` in the run's
    ``config.json``, e.g. Routing-v0's ``"extended"``) acting in an env built without it: a
    callable that returns the model's observation from the env's current state, or None when
    the run used no such option.

    :raises ValueError: if the option is set but the env cannot give that observation, or the
        result does not fit the model's observation space.
    """
    import json

    cfg_path = checkpoint_config(path)
    if not cfg_path.is_file():
        return None
    try:
        option = json.loads(cfg_path.read_text()).get("observation")
    except (OSError, ValueError, AttributeError):
        return None
    if option in (None, "default"):
        return None
    base = getattr(env, "unwrapped", env)
    method = getattr(base, f"_observation_{option}", None)
    if method is None:
        raise ValueError(
            f"model {str(path)!r} was trained with observation={option!r} ({cfg_path}); the env "
            f"{type(base).__name__} has no such observation option"
        )
    space = model.observation_space
    want = {k: s.shape for k, s in space.spaces.items()}
    have = {
        k: (*s.shape[:-1], s.shape[-1] + extra)
        for (k, s), extra in zip(
            env.observation_space.spaces.items(), _extended_widths(base, option), strict=True
        )
    }
    if want != have:
        raise ValueError(
            f"model {str(path)!r} was trained with observation={option!r} on shapes {want}; "
            f"this env's {option!r} observation has shapes {have} (another cluster size?)"
        )
    return method


def _extended_widths(env: Any, option: str) -> tuple[int, ...]:
    """Extra columns per observation key (in the space's key order) of ``option``."""
    from envs.routing.observation import EXTENDED_INSTANCE_FEATURES, EXTENDED_REQUEST_FEATURES

    extra = {"request": EXTENDED_REQUEST_FEATURES, "instances": EXTENDED_INSTANCE_FEATURES}
    return tuple(extra.get(k, 0) for k in env.observation_space.spaces)


def flat_on_two_step(model: Any, env: Any) -> bool:
    """Whether ``model`` was trained on PDCluster's flat space (v0: ``Discrete(K·P·D)`` and the
    flat observation) and ``env`` is the same cluster and slot count in the two-step space (v1)."""
    from envs.pd_cluster.observation import observation_space

    base = getattr(env, "unwrapped", env)
    if getattr(base, "action_space_name", None) != "two-step":
        return False
    K, P, D = base.K, base.P, base.D
    return bool(
        getattr(model.action_space, "n", None) == K * P * D
        and model.observation_space == observation_space(K, P, D, "flat")
    )


class FlatOnTwoStep(SB3Policy):
    """A model trained on PDCluster-v0's flat space acting in PDCluster-v1's two-step space.

    At a slot step it reads the flat observation and mask of the same decision from the env
    (``PDClusterEnv.flat_observation``: v1's observation drops the (K, P, D) ``ratio`` the model
    reads), takes its flat argmax ``k·P·D + p·D + d`` and steps slot ``k``; at the pair step that
    follows a prefill-stage slot step it steps ``p·D + d``. That is the rule the experts and
    baselines act by in both spaces, so the model makes the same picks on v1 as on v0 (same
    calibration) and never takes the keep action. The env is read directly: load one policy per
    env (as evaluate.py does).

    :param model: the loaded SB3 model (flat action space).
    :param name: display name.
    :param env: the two-step PDCluster env it acts in.
    """

    def __init__(self, model: Any, name: str, env: Any):
        super().__init__(model, name)
        self.env = getattr(env, "unwrapped", env)
        self._pair: int | None = None

    def reset(self) -> None:
        self._pair = None

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Slot ``k`` of the flat choice at a slot step, its pair ``p·D + d`` at the pair step."""
        if obs["step"][1] > 0:  # pair step of the slot chosen just before
            if self._pair is None:
                raise RuntimeError(f"policy {self.name!r} is at a pair step it did not start")
            pair, self._pair = self._pair, None
            return pair
        flat_obs, mask = self.env.flat_observation()
        if self.masked:
            action, _ = self.model.predict(flat_obs, deterministic=True, action_masks=mask)
        else:
            action, _ = self.model.predict(flat_obs, deterministic=True)
        slot, self._pair = divmod(int(action), self.env.P * self.env.D)
        return slot
