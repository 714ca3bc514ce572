"""The small PDCluster episode both factorised-head test modules act on (not a test module)."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents import TRAIN_ENVS, env_kwargs
from heuristics import make_policy

SPEC = TRAIN_ENVS["pd-cluster"]
KWARGS = env_kwargs(SPEC, {"cluster": "hetero-1", "workload": "mixed", "count": 6, "slots": 8})


def hexagent_steps(env: Any, seeds: tuple[int, ...] = (0, 1), steps: int = 12) -> list:
    """``(observation, action mask)`` of HexAgent's first ``steps`` steps on each seed (several
    slots are open at once)."""
    out = []
    for seed in seeds:
        expert = make_policy("hexagent")
        expert.reset()
        obs, info = env.reset(seed=seed)
        for _ in range(steps):
            out.append((obs, np.asarray(info["action_mask"], dtype=bool)))
            obs, _, term, trunc, info = env.step(expert.act(obs, info))
            if term or trunc:
                break
    return out
