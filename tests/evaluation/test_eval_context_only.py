"""Evaluation runs a context-only PDCluster policy on an env that skips the observation
(``reset(options={"observations": False})``, :func:`evaluation.runs.episode_options`) with the
same results as with observations, and the env's own setting comes back for the next policy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import evaluation
from envs.pd_cluster import PDClusterEnv
from evaluation import EvalConfig
from evaluation.runs import episode_options, make_env, run_one
from heuristics import make_policy


class ReadsObservation:
    """Wraps a policy and hides its ``context_only`` (as a learned policy would have none)."""

    def __init__(self, policy: Any):
        self.policy, self.name = policy, policy.name
        self.observed: list[float] = []  # the observation's total at every step

    def reset(self) -> None:
        self.policy.reset()

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        self.observed.append(float(sum(np.abs(v).sum() for v in obs.values())))
        return self.policy.act(obs, info)


def test_reset_option_turns_observations_off_for_that_episode_only() -> None:
    env = PDClusterEnv(workload="mixed", workload_count=4)
    obs, _ = env.reset(seed=0, options={"observations": False})
    assert all(not v.any() for v in obs.values())
    obs, _ = env.reset(seed=0)  # no option: the constructor's setting (observations on)
    assert obs["slots"].any() and obs["ratio"].any()
    off = PDClusterEnv(workload="mixed", workload_count=4, observations=False)
    obs, _ = off.reset(seed=0, options={"observations": True})
    assert obs["slots"].any()


@pytest.mark.parametrize(
    "options, match",
    [({"observation": False}, "unknown reset option"), ({"observations": 0}, "True or False")],
)
def test_bad_reset_options_are_clear_errors(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PDClusterEnv(workload="mixed", workload_count=2).reset(seed=0, options=options)


def test_only_context_only_policies_on_pdcluster_get_the_option() -> None:
    pd_env = PDClusterEnv(workload="mixed", workload_count=2)
    for name in ("hexagent", "random", "per-call-fcfs", "atlas+earliest-finish", "workflow-llf"):
        assert episode_options(pd_env, make_policy(name)) == {"observations": False}, name
    assert episode_options(pd_env, ReadsObservation(make_policy("hexagent"))) == {}
    routing = make_env(EvalConfig(env="routing", count=4), "sharegpt")
    assert episode_options(routing, make_policy("hexagent")) == {}  # no such reset option


@pytest.mark.parametrize("spec", ["hexagent", "workflow-llf"])
def test_results_are_identical_with_and_without_observations(spec: str) -> None:
    config = evaluation.resolve_config(
        EvalConfig(env="pd-cluster-v0", workloads=("mixed",), policies=(spec,), seeds=(0,), count=8)
    )
    env = make_env(config, "mixed")
    wrapped: list[ReadsObservation] = []

    def with_obs(s: str, e: Any) -> Any:
        wrapped.append(ReadsObservation(make_policy(s)))
        return wrapped[-1]

    seen: list[Any] = []

    def context_only(s: str, e: Any) -> Any:
        policy = make_policy(s)
        act = policy.act
        policy.act = lambda obs, info: seen.append(obs["ratio"].any()) or act(obs, info)
        return policy

    # the same env for both, in both orders: the option does not leak into the next episode
    a = run_one(config, "mixed", {}, spec, 0, env, with_obs)
    b = run_one(config, "mixed", {}, spec, 0, env, context_only)
    c = run_one(config, "mixed", {}, spec, 0, env, with_obs)
    assert seen and not any(seen)  # the context-only run saw only blank observations
    assert all(total > 0 for w in wrapped for total in w.observed)  # the others real ones
    for row in (a, c):
        assert {k: v for k, v in row.items() if k != "wall_seconds"} == {
            k: v for k, v in b.items() if k != "wall_seconds"
        }


def test_blank_observations_are_read_only_zeros_that_no_two_steps_share() -> None:
    from gymnasium.utils.passive_env_checker import data_shares_objects

    env = PDClusterEnv(workload="mixed", workload_count=3, observations=False)
    previous, info = env.reset(seed=0)
    for _ in range(3):
        obs, *_, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
        assert env.observation_space.contains(obs)
        assert not data_shares_objects(previous, obs)  # Gymnasium's checker warns otherwise
        assert all(not a.any() and not a.flags.writeable for a in obs.values())
        previous = obs
