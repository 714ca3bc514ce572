"""How heavy a step's ``info`` is, with and without the decision context, and what it costs a
vectorised learner.

    python -m benchmarks.info_weight [--env servegym/PDCluster-v0] [--steps 400]

Prints, for ``gym.make(id)`` (the registered default: no context in ``info``) and
``gym.make(id, decision_context=True)`` (what policies use): the mean pickled size of a step's
``info`` and observation over the first steps of a seeded episode, and the steps per second of
one env and of ``gymnasium.vector.AsyncVectorEnv`` with 2 envs, both under uniformly random
legal actions (the worker pickles every step's ``info`` to the learner's process). A closing line
says PASS when the default ``info`` pickles to less than its observation.
"""

from __future__ import annotations

import argparse
import pickle
import time
from typing import Any

import gymnasium as gym
import numpy as np

import envs  # noqa: F401  (registers the servegym ids)


def sizes(env_id: str, kwargs: dict[str, Any], steps: int) -> tuple[float, float]:
    """Mean pickled bytes of ``info`` and of the observation over ``steps`` steps (seed 0)."""
    env = gym.make(env_id, **kwargs)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=0)
    info_b, obs_b = [], []
    for _ in range(steps):
        info_b.append(len(pickle.dumps(info)))
        obs_b.append(len(pickle.dumps(obs)))
        obs, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        if term or trunc:
            obs, info = env.reset(seed=1)
    env.close()
    return float(np.mean(info_b)), float(np.mean(obs_b))


def single_speed(env_id: str, kwargs: dict[str, Any], steps: int) -> float:
    env = gym.make(env_id, **kwargs)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    for _ in range(50):  # warm the env's caches (latency tables, horizons) before timing
        _, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
    start = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        if term or trunc:
            _, info = env.reset(seed=1)
    elapsed = time.perf_counter() - start
    env.close()
    return steps / elapsed


def _make(env_id: str, kwargs: dict[str, Any]) -> Any:
    return lambda: gym.make(env_id, **kwargs)


def async_speed(env_id: str, kwargs: dict[str, Any], steps: int, n: int = 2) -> float:
    """Env steps per second (all ``n`` envs) of ``AsyncVectorEnv`` under random legal actions."""
    vec = gym.vector.AsyncVectorEnv([_make(env_id, kwargs) for _ in range(n)])
    rng = np.random.default_rng(0)
    _, info = vec.reset(seed=list(range(n)))
    start = time.perf_counter()
    for _ in range(steps // n):
        masks = info["action_mask"]
        actions = [int(rng.choice(np.flatnonzero(m))) for m in masks]
        _, _, _, _, info = vec.step(np.array(actions))
    elapsed = time.perf_counter() - start
    vec.close()
    return (steps // n) * n / elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="servegym/PDCluster-v0")
    p.add_argument("--steps", type=int, default=400)
    args = p.parse_args(argv)
    print(f"{args.env}, registered defaults, {args.steps} random legal steps (seed 0)")
    head = ("info", "info KB", "obs KB", "1 env steps/s", "async x2 steps/s")
    print(f"{head[0]:<28} {head[1]:>8} {head[2]:>8} {head[3]:>14} {head[4]:>17}")
    default_info = default_obs = 0.0
    for label, kwargs in (
        ("gym.make(id)", {}),
        ("decision_context=True", {"decision_context": True}),
    ):
        info_b, obs_b = sizes(args.env, kwargs, min(args.steps, 100))
        one = single_speed(args.env, kwargs, args.steps)
        two = async_speed(args.env, kwargs, args.steps)
        if not kwargs:
            default_info, default_obs = info_b, obs_b
        print(f"{label:<28} {info_b / 1e3:8.1f} {obs_b / 1e3:8.1f} {one:14.0f} {two:17.0f}")
    ok = default_info < default_obs
    print(f"{'PASS' if ok else 'FAIL'}: the default info pickles to {default_info / 1e3:.1f} KB, "
          f"the observation to {default_obs / 1e3:.1f} KB")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
