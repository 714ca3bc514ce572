"""Routing-v1's default is a sound benchmark: its SLO basis (the task's median run-alone latency,
GoodServe §5) puts no function of a request's true output length in the observation, and at the
default a good and a bad router earn different rewards."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the environments)
from evaluation.runs import run_episode
from heuristics import make_policy
from traces.schema import Request

MODEL = "llama3.1-8b"


def _burst(last_output: int) -> list[Request]:
    """Five ``code`` requests 20 ms apart; only the last one's true output length varies. It is
    the longest either way, so the task's median run-alone latency stays that of the third."""
    outputs = [300, 400, 500, 600, last_output]
    prompts = ["Write a simple lookup SQL query.", "Solve a very hard programming problem."]
    return [
        Request(f"r{i}", 0.02 * i, MODEL, 2000 + 300 * i, out, "code", prompts[i % 2])
        for i, out in enumerate(outputs)
    ]


def _route_observations(trace: list[Request], **kw) -> list[dict[str, np.ndarray]]:
    """The observations of the route decisions (all made within 0.1 s, before any request
    finishes), each request routed to the first legal instance."""
    env = gym.make("servegym/Routing-v1", trace=trace, **kw)
    obs, info = env.reset(seed=0)
    out = []
    for _ in trace:
        out.append(obs)
        obs, _, terminated, _, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
        if terminated:
            break
    assert len(out) == len(trace)
    return out


@pytest.mark.parametrize("slo_basis", [None, "request"])
def test_requests_that_differ_only_in_true_output_length_look_identical_at_the_default(
    slo_basis,
):
    kw = {} if slo_basis is None else {"slo_basis": slo_basis}
    short = _route_observations(_burst(700), **kw)
    long = _route_observations(_burst(2500), **kw)
    same = all(
        np.array_equal(a[key], b[key]) for a, b in zip(short, long, strict=True) for key in a
    )
    # the default (task median) hides the length; the per-request basis (v0) leaks it
    assert same == (slo_basis is None)


@pytest.mark.parametrize("observation", ["extended", "queue"])
def test_the_opt_in_observations_leak_no_true_output_length_at_the_default(observation):
    short = _route_observations(_burst(700), observation=observation)
    long = _route_observations(_burst(2500), observation=observation)
    assert short[0]["instances"].shape[1] > 14  # the option's columns are there
    for a, b in zip(short, long, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_queue_observation_shows_the_prefill_queue_the_emas_lag():
    obs = _route_observations(_burst(700), observation="queue")
    # after four requests went to instance 0 (and none finished), instance 0's prefill wait
    # column (the first queue column, after 14 default and 4 extended ones) is positive and
    # the other instances' is zero
    wait = obs[-1]["instances"][:, 18]
    assert wait[0] > 0 and not wait[1:].any()


def test_a_good_and_a_bad_router_earn_different_rewards_at_the_default():
    returns = {}
    for name in ("goodserve", "random-route"):
        env = gym.make("servegym/Routing-v1", decision_context=True)
        returns[name] = run_episode(env, make_policy(name), seed=100)["episode_return"]
    # the goodput reward: +1 per request within its SLO (measured: 345 vs 257 of 500)
    assert returns["goodserve"] > 1.15 * returns["random-route"]


@pytest.mark.parametrize(
    "name, family, basis",
    [
        ("routing-v1", "routing-v1", "task"),
        ("servegym/Routing-v1", "routing", "task"),
        ("routing-v0", "routing-v0", "request"),
        ("servegym/Routing-v0", "routing-v0", "request"),
        ("routing", "routing", "task"),
    ],
)
def test_evaluate_takes_each_version_by_name_or_id_with_its_own_defaults(name, family, basis):
    from evaluation import resolve_config
    from evaluation.cli import parse_args

    config = parse_args(["--env", name])
    assert config.env in (name, family)
    assert resolve_config(config).slo_basis == basis


@pytest.mark.parametrize(
    "name, trained",
    [
        ("routing-v1", "routing-v1"),
        ("servegym/PDCluster-v1", "pd-cluster-v1"),
        ("pd-cluster-v0", "pd-cluster-v0"),
        ("servegym/Routing-v0", "routing-v0"),
    ],
)
def test_train_takes_each_version_by_name_or_id(name, trained):
    from training.cli import parse_args

    assert parse_args(["--env", name]).env == trained
