"""servegym/Allocation-v1's default episode: the workflow rate ramps through the knee, and the
reward ranks allocations (the criteria of docs/envs/allocation-default-episode.md)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs.allocation import AllocationEnv
from envs.allocation.workloads import DEFAULT_WORKFLOW_RATE
from evaluation.config import env_defaults, parse_ramp
from evaluation.runs import run_episode
from heuristics import make_policy

#: The four policies the v1 criteria compare (the paper's K8s HPA and the equal split, our
#: demand-proportional reference, and Scepsy).
CRITERIA_POLICIES = ("scepsy", "k8s-hpa", "naive-equal", "demand-proportional")


def test_v1_ramps_the_rate_from_half_to_four_times_the_default_and_v0_keeps_one_period():
    v1 = gym.make("servegym/Allocation-v1").unwrapped
    base = DEFAULT_WORKFLOW_RATE["rag_reranker"]
    assert v1.periods == 6 and v1.period_seconds == 60.0
    assert v1._schedule() == pytest.approx([base * x for x in np.linspace(0.5, 4.0, 6)])
    v0 = gym.make("servegym/Allocation-v0").unwrapped
    assert (v0.periods, v0.period_seconds, v0.rate_ramp) == (1, 120.0, None)
    assert v0._schedule() == [base]


def test_v1_ramp_follows_the_workload_default_rate_and_gym_make_overrides_it():
    env = gym.make("servegym/Allocation-v1", workload="beam_search", periods=3).unwrapped
    base = DEFAULT_WORKFLOW_RATE["beam_search"]
    assert env._schedule() == pytest.approx([0.5 * base, 2.25 * base, 4.0 * base])


def test_arrivals_follow_the_ramp():
    env = AllocationEnv(rate_ramp=(0.5, 4.0), periods=2, period_seconds=100.0)
    env.reset(seed=1)
    arrivals = np.array([w.arrival for w in env.workflows])
    first, second = (arrivals < 100.0).sum(), (arrivals >= 100.0).sum()
    assert 25 < first < 75 and 320 < second < 480  # Poisson around 50 and 400


def test_evaluate_reads_v1_defaults_from_the_registered_id():
    d = env_defaults("allocation-v1")
    assert (d["rate_ramp"], d["periods"], d["period_seconds"]) == ((0.5, 4.0), 6, 60.0)
    assert env_defaults("allocation-v0")["periods"] == 1
    assert env_defaults("allocation")["periods"] == 6  # the plain name is the default version, v1
    assert envs.env_short_name("servegym/Allocation-v1") == "allocation-v1"
    assert parse_ramp("0.5:4") == (0.5, 4.0)
    with pytest.raises(ValueError, match="LO:HI"):
        parse_ramp("0.5")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rate_ramp": (0.5, 4.0), "rate_trace": "ragpulse_hourly", "periods": 4}, "give one"),
        ({"rate_ramp": (0.5,), "periods": 4}, "two numbers"),
        ({"rate_ramp": (0.0, 4.0), "periods": 4}, "> 0"),
        ({"rate_ramp": (0.5, 4.0), "periods": 1}, "periods >= 2"),
    ],
)
def test_bad_ramps_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AllocationEnv(**kwargs)


@pytest.mark.slow
def test_v1_checkers_pass_on_the_registered_id():
    from stable_baselines3.common.env_checker import check_env as sb3_check

    # Random actions on the menu are mostly masked: the checkers run in the penalize mode.
    check_env(gym.make("servegym/Allocation-v1", invalid_action="penalize").unwrapped)
    sb3_check(gym.make("servegym/Allocation-v1", invalid_action="penalize").unwrapped, warn=False)


@pytest.mark.slow
def test_v1_default_episode_separates_the_four_policies_on_a_heldout_seed():
    """On held-out seed 200 the best and worst of the four differ by >= 1.2x in goodput and none
    scores 0 (the issue's per-seed criterion; docs/envs/allocation-default-episode.md has all
    seeds)."""
    goodput = {}
    for name in CRITERIA_POLICIES:
        env = gym.make("servegym/Allocation-v1", decision_context=True)
        goodput[name] = run_episode(env, make_policy(name), seed=200)["metrics"]["goodput"]
    assert min(goodput.values()) > 0, goodput
    assert max(goodput.values()) >= 1.2 * min(goodput.values()), goodput
