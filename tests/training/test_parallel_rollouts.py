"""A seeded PPO run gives the same model whether its training envs step in this process
(``DummyVecEnv``) or in subprocesses (``SubprocVecEnv``): rollouts are a function of the seeds
only (issue 33). The Ray version is in tests/test_ray.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from agents import build_model, make_vec_env, train_env_spec

#: A tiny PDCluster training MDP: 4 workflows, 8 slots.
KWARGS = {"workload": "bfcl", "workload_count": 4, "slots": 8}
HP = {"n_steps": 32, "batch_size": 32, "n_epochs": 1}


def trained_parameters(vec: str, seed: int = 3) -> dict[str, Any]:
    """The policy's parameters after 64 MaskablePPO steps on 2 envs of ``vec``."""
    torch.set_num_threads(1)
    env = make_vec_env("pd-cluster", KWARGS, 2, seed, vec)
    try:
        model = build_model("maskable-ppo", env, train_env_spec("pd-cluster"), seed, HP)
        model.learn(64)
        return {k: v.detach().clone() for k, v in model.policy.state_dict().items()}
    finally:
        env.close()


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"parameter {k} differs"


@pytest.mark.slow  # two subprocess envs start and import torch: ~8 s of CPU
def test_seeded_ppo_is_the_same_serially_and_in_subprocesses() -> None:
    serial = trained_parameters("dummy")
    parallel = trained_parameters("subproc")
    assert_same(serial, parallel)
    # and the run did learn something seed-dependent (the check is not vacuous)
    other = trained_parameters("dummy", seed=4)
    assert any(not torch.equal(serial[k], other[k]) for k in serial)


def test_vec_envs_are_seeded_per_env_so_workloads_differ() -> None:
    env = make_vec_env("pd-cluster", KWARGS, 2, 0, "dummy")
    try:
        obs = env.reset()
        assert not all(np.array_equal(obs[k][0], obs[k][1]) for k in obs)
    finally:
        env.close()
