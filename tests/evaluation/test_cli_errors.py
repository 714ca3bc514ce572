"""Command-line and policy mistakes end in one clear error line that names the culprit and
what is allowed, never a traceback from deep inside."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers the servegym ids)
import evaluation
import training
from evaluation.cli import parse_args
from heuristics import make_policy


@pytest.mark.parametrize("seeds", ["-1", "0,-2", "0,x"])
def test_evaluate_rejects_negative_or_non_integer_seeds_with_an_argparse_error(seeds, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--seeds", seeds])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument --seeds: seeds must be integers >= 0" in err
    assert "Traceback" not in err


def test_train_rejects_a_negative_seed():
    with pytest.raises(training.TrainError, match="--seed must be an integer >= 0, got -1"):
        training.parse_args(["--seed", "-1"])


def test_a_policy_of_another_env_names_its_env_and_this_envs_policies():
    env = gym.make("servegym/Routing-v0", workload_count=5)
    with pytest.raises(evaluation.EvaluationError) as err:
        evaluation.resolve_policy("hexagent", env)
    text = str(err.value)
    assert "acts in 'pd-cluster'" in text and "goodserve" in text
    assert "hexagent" not in text.split("policies for env 'routing-v0':")[1]


def test_acting_on_another_envs_context_names_both_envs_not_the_option_already_set():
    env = gym.make("servegym/Routing-v0", workload_count=5, decision_context=True)
    obs, info = env.reset(seed=0)
    policy = make_policy("hexagent")
    policy.reset()
    with pytest.raises(ValueError) as err:
        policy.act(obs, info)
    text = str(err.value)
    assert "'pd-cluster'" in text and "this env is 'routing'" in text and "goodserve" in text
    assert "decision_context=True" not in text


def test_a_missing_context_says_how_to_get_it():
    policy = make_policy("goodserve")
    with pytest.raises(ValueError, match="decision_context=True"):
        policy.act({}, {"action_mask": None})
