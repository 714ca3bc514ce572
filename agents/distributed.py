"""Past one machine on Ray (docs/design.md, "Beyond one machine"): the Ray connection and training
envs as Ray actors.

* :func:`init_ray` connects once per process: ``"local"`` starts Ray on this machine's cores,
  anything else is a cluster address (``auto``, ``ray://HOST:10001``).
* evaluation grids (``evaluate.py --ray``) run one task per run through
  ``evaluation.ray_grid.evaluate_task``, connected by :func:`init_ray`.
* :class:`RayVecEnv` is an SB3 ``VecEnv`` whose envs live in Ray actors (``train.py --ray``), with
  the same auto-reset and info conventions as SB3's ``SubprocVecEnv``.

On a cluster every node needs servegym installed (``pip install -e '.[ray]'`` in the same
checkout path) and the driver's working directory on the path, e.g. submit with ``ray job submit
--working-dir . -- python evaluate.py --ray auto ...``. Ray is an optional dependency
(``pip install 'servegym[ray]'``); nothing here imports it until it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices


def init_ray(address: str | None = "local") -> Any:
    """The ``ray`` module, connected: a local Ray on this machine's cores for ``"local"`` or
    None, else the cluster at ``address``. Reuses an existing connection.

    :raises ImportError: with the install command when Ray is not installed.
    """
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            "Ray is not installed: pip install -e '.[ray]' (or pip install 'ray[default]')"
        ) from exc
    if not ray.is_initialized():
        target = None if address in (None, "local") else address
        # no dashboard and no worker log forwarding: Ray's start-up chatter would bury the table
        ray.init(
            address=target, include_dashboard=False, log_to_driver=False, configure_logging=False
        )
    return ray


def stack_observations(observations: Sequence[Any], space: gym.Space) -> Any:
    """One observation per env -> the batch a ``VecEnv`` returns: a dict of stacked arrays for
    a ``Dict`` space, a tuple of them for a ``Tuple`` space, else one stacked array (as SB3's
    ``SubprocVecEnv`` stacks them)."""
    if isinstance(space, gym.spaces.Dict):
        return {key: np.stack([o[key] for o in observations]) for key in space.spaces}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(np.stack([o[i] for o in observations]) for i in range(len(space.spaces)))
    return np.stack(observations)


class _EnvHost:
    """The body of a Ray actor that owns one env (SB3 ``SubprocVecEnv``'s worker loop as
    methods)."""

    def __init__(self, make: Callable[[], gym.Env]):
        env = make()
        if not isinstance(env, gym.Env):
            raise TypeError(f"an env constructor must return a gymnasium.Env, got {env!r}")
        self.env = env

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.env.observation_space, self.env.action_space

    def step(self, action: Any) -> tuple[Any, Any, bool, dict[str, Any], dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        done = terminated or truncated
        info["TimeLimit.truncated"] = truncated and not terminated
        reset_info: dict[str, Any] = {}
        if done:  # keep the final observation, then start the next episode
            info["terminal_observation"] = obs
            obs, reset_info = self.env.reset()
        return obs, reward, done, info, reset_info

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict]:
        return self.env.reset(seed=seed, **({"options": options} if options else {}))

    def env_method(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        return self.env.get_wrapper_attr(name)(*args, **kwargs)

    def get_attr(self, name: str) -> Any:
        return self.env.get_wrapper_attr(name)

    def has_attr(self, name: str) -> bool:
        try:
            self.env.get_wrapper_attr(name)
        except AttributeError:
            return False
        return True

    def set_attr(self, name: str, value: Any) -> None:
        setattr(self.env, name, value)

    def is_wrapped(self, wrapper_class: type[gym.Wrapper]) -> bool:
        from stable_baselines3.common.env_util import is_wrapped

        return is_wrapped(self.env, wrapper_class)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class RayVecEnv(VecEnv):
    """``len(env_fns)`` envs, each in its own Ray actor (one CPU each), stepped in parallel.

    :param env_fns: env constructors (picklable: they are shipped to the actors).
    :param address: Ray address for :func:`init_ray` (``"local"``: this machine).
    :raises ValueError: if the Ray cluster has fewer CPUs than envs (the actors would wait for
        CPUs forever).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], address: str | None = "local"):
        ray = init_ray(address)
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < len(env_fns):
            raise ValueError(
                f"the Ray cluster has {cpus:g} CPUs, fewer than the {len(env_fns)} envs asked "
                "for (one CPU per env actor): lower --n-envs or add nodes"
            )
        self._ray = ray
        self._stack = stack_observations
        host = ray.remote(num_cpus=1)(_EnvHost)
        self.actors = [host.remote(fn) for fn in env_fns]
        observation_space, action_space = ray.get(self.actors[0].spaces.remote())
        self._pending: list[Any] | None = None
        self.closed = False
        super().__init__(len(env_fns), observation_space, action_space)

    def step_async(self, actions: np.ndarray) -> None:
        self._pending = [a.step.remote(act) for a, act in zip(self.actors, actions, strict=True)]

    def step_wait(self) -> Any:
        assert self._pending is not None, "step_wait() without step_async()"
        results = self._ray.get(self._pending)
        self._pending = None
        obs, rews, dones, infos, reset_infos = zip(*results, strict=True)
        self.reset_infos = list(reset_infos)
        return self._stack(obs, self.observation_space), np.stack(rews), np.stack(dones), infos

    def reset(self) -> Any:
        results = self._ray.get(
            [a.reset.remote(self._seeds[i], self._options[i]) for i, a in enumerate(self.actors)]
        )
        obs, reset_infos = zip(*results, strict=True)
        self.reset_infos = list(reset_infos)
        self._reset_seeds()
        self._reset_options()
        return self._stack(obs, self.observation_space)

    def close(self) -> None:
        if self.closed:
            return
        if self._pending is not None:
            self._ray.get(self._pending)
        self._ray.get([a.close.remote() for a in self.actors])
        for a in self.actors:
            self._ray.kill(a)
        self.closed = True

    def _targets(self, indices: VecEnvIndices) -> list[Any]:
        return [self.actors[i] for i in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return self._ray.get([a.render.remote() for a in self.actors])

    def has_attr(self, attr_name: str) -> bool:
        return all(self._ray.get([a.has_attr.remote(attr_name) for a in self.actors]))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._ray.get([a.get_attr.remote(attr_name) for a in self._targets(indices)])

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._ray.get([a.set_attr.remote(attr_name, value) for a in self._targets(indices)])

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        return self._ray.get(
            [
                a.env_method.remote(method_name, method_args, method_kwargs)
                for a in self._targets(indices)
            ]
        )

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        return self._ray.get([a.is_wrapped.remote(wrapper_class) for a in self._targets(indices)])
