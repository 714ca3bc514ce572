"""Fixtures of the agents' tests: the small PDCluster episode both factorised-head test modules
(test_factored_policy.py, test_factored_buffer.py) act on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from agents import TRAIN_ENVS, env_kwargs, make_env
from heuristics import make_policy


@pytest.fixture(scope="session")
def factored_spec() -> Any:
    """The PDCluster training spec the factorised head is built for."""
    return TRAIN_ENVS["pd-cluster-v0"]


@pytest.fixture(scope="session")
def factored_kwargs(factored_spec: Any) -> dict[str, Any]:
    """A small PDCluster episode: hetero-1, the mixed workload, 6 workflows, 8 slots."""
    return env_kwargs(
        factored_spec, {"cluster": "hetero-1", "workload": "mixed", "count": 6, "slots": 8}
    )


@pytest.fixture(scope="module")
def factored_env(factored_spec: Any, factored_kwargs: dict[str, Any]) -> Iterator[Any]:
    """The episode's env, one per test module."""
    env = make_env(factored_spec, factored_kwargs)
    yield env
    env.close()


@pytest.fixture(scope="module")
def factored_steps(factored_env: Any) -> list:
    """``(observation, action mask)`` of HexAgent's first 12 steps on seeds 0 and 1 (several
    slots are open at once)."""
    out = []
    for seed in (0, 1):
        expert = make_policy("hexagent")
        expert.reset()
        obs, info = factored_env.reset(seed=seed)
        for _ in range(12):
            out.append((obs, np.asarray(info["action_mask"], dtype=bool)))
            obs, _, term, trunc, info = factored_env.step(expert.act(obs, info))
            if term or trunc:
                break
    return out
