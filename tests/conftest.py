"""Hypothesis profiles for the whole suite, and the fixtures tests in several folders share.

``default`` (loaded here, what ``make test`` runs): hypothesis' usual 100 examples for tests that
do not set their own, no deadline (the suite shares small CI machines; a wall-clock deadline makes
simulator tests flaky without finding bugs), and **derandomized**: every run tries the same
examples, so a red CI build is red again on re-run and a green one stays green until the code
changes. The example database is off for the same reason: a failure found on one machine must
not change what another machine runs. Fresh examples are the job of the ``long`` profile.

``long`` (``pytest --hypothesis-profile=long``): 500 examples for tests that do not set their own,
random (not derandomized) with the local example database, so repeated runs keep exploring and
replay what failed last time. ``tests/envs/test_invariants.py`` scales its per-test budgets by the
loaded profile's ``max_examples`` (5x under ``long``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=500,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("default")


#: The tiny PDCluster training MDP of :func:`ppo_parameters`: 4 workflows, 8 slots.
PPO_KWARGS = {"workload": "bfcl", "workload_count": 4, "slots": 8}
PPO_HYPERPARAMS = {"n_steps": 32, "batch_size": 32, "n_epochs": 1}


def _ppo_parameters(vec: str, seed: int = 3) -> dict[str, Any]:
    """The policy's parameters after 64 MaskablePPO steps on 2 envs of ``vec``."""
    import torch

    from agents import build_model, make_vec_env, train_env_spec

    torch.set_num_threads(1)
    env = make_vec_env("pd-cluster", PPO_KWARGS, 2, seed, vec)
    try:
        model = build_model(
            "maskable-ppo", env, train_env_spec("pd-cluster"), seed, PPO_HYPERPARAMS
        )
        model.learn(64)
        return {k: v.detach().clone() for k, v in model.policy.state_dict().items()}
    finally:
        env.close()


def _assert_same_parameters(a: dict[str, Any], b: dict[str, Any]) -> None:
    import torch

    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"parameter {k} differs"


@pytest.fixture(scope="session")
def ppo_parameters() -> Callable[..., dict[str, Any]]:
    """``(vec, seed=3) -> parameters`` of a seeded 64-step MaskablePPO run on 2 envs of the
    vector-env kind ``vec`` ("dummy", "subproc", "ray"): the serial and parallel rollout tests
    (training/test_parallel_rollouts.py, evaluation/test_ray.py) compare them."""
    return _ppo_parameters


@pytest.fixture(scope="session")
def assert_same_parameters() -> Callable[[dict[str, Any], dict[str, Any]], None]:
    """Asserts two :func:`ppo_parameters` results are bit-identical, naming the first that
    differs."""
    return _assert_same_parameters
