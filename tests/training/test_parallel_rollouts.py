"""A seeded PPO run gives the same model whether its training envs step in this process
(``DummyVecEnv``) or in subprocesses (``SubprocVecEnv``): rollouts are a function of the seeds
only (issue 33). The Ray version is in tests/evaluation/test_ray.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from agents import make_vec_env

#: The tiny PDCluster training MDP of the ``ppo_parameters`` fixture (tests/conftest.py).
KWARGS = {"workload": "bfcl", "workload_count": 4, "slots": 8}


@pytest.mark.slow  # two subprocess envs start and import torch: ~8 s of CPU
def test_seeded_ppo_is_the_same_serially_and_in_subprocesses(
    ppo_parameters: Any, assert_same_parameters: Any
) -> None:
    serial = ppo_parameters("dummy")
    parallel = ppo_parameters("subproc")
    assert_same_parameters(serial, parallel)
    # and the run did learn something seed-dependent (the check is not vacuous)
    other = ppo_parameters("dummy", seed=4)
    assert any(not torch.equal(serial[k], other[k]) for k in serial)


def test_vec_envs_are_seeded_per_env_so_workloads_differ() -> None:
    env = make_vec_env("pd-cluster", KWARGS, 2, 0, "dummy")
    try:
        obs = env.reset()
        assert not all(np.array_equal(obs[k][0], obs[k][1]) for k in obs)
    finally:
        env.close()
