"""What a new user meets in the first hour (issue 34): names resolve or get a did-you-mean, gym
ids work wherever an env is named, tables define their metrics and label what could be misread,
result folders have clean names, and train.py compares a clone with its teacher."""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest

import evaluation
import training

TINY = dict(seeds=(0,), count=4, quiet=True)


@pytest.mark.parametrize(
    ("option", "value", "suggestion"),
    [
        ("workloads", ("goodserv",), "'goodserve'"),
        ("policies", ("goodserv",), "'goodserve'"),
        ("cluster", "goodserve4", "'goodserve-4'"),
    ],
)
def test_misspelt_routing_names_get_did_you_mean_with_the_valid_names(option, value, suggestion):
    config = evaluation.EvalConfig(env="routing", **{**TINY, option: value})
    with pytest.raises(evaluation.EvaluationError) as err:
        evaluation.evaluate(config)
    message = str(err.value)
    assert f"did you mean {suggestion}" in message  # first (closest) suggestion
    assert "known:" in message and suggestion.strip("'") in message.split("known:")[1]
    assert "load_scale" not in message  # not the unrelated error users used to get


@pytest.mark.parametrize(
    ("name", "short", "recorded"),
    [
        ("routing", "routing", "routing-v1"),
        ("servegym/Routing-v0", "routing-v0", "routing-v0"),
        ("envs:servegym/PDCluster-v0", "pd-cluster-v0", "pd-cluster-v0"),
        ("servegym/Allocation-v0", "allocation-v0", "allocation-v0"),
        ("servegym/Allocation-v1", "allocation", "allocation-v1"),
    ],
)
def test_env_is_accepted_by_gym_id_or_short_name(name, short, recorded):
    """evaluate.py takes the short name (the plain one for the default version, v1); train.py
    records the explicit version (its config.json says which version trained the model)."""
    assert evaluation.canonical_env(name) == short
    assert evaluation.parse_args(["--env", name]).env == short
    assert training.parse_args(["--env", name]).env == recorded


def test_misspelt_env_names_the_closest_and_all_envs():
    with pytest.raises(evaluation.EvaluationError, match=r"did you mean 'routing'\?.*known: "):
        evaluation.canonical_env("routng")
    with pytest.raises(training.TrainError, match=r"not trainable \(did you mean 'routing'\?\)"):
        training.check_config(training.TrainConfig(env="routng"))


def row(policy: str, goodput: float, workload: str = "goodserve") -> dict[str, Any]:
    return {
        "env": "routing", "cluster": "goodserve-4", "model": "llama3.1-8b", "workload": workload,
        "seed": 0, "policy": policy, "metrics": {"goodput": goodput, "slo_violation_ratio": 0.1},
        "utilisation": {"monolithic": 0.5},
    }  # fmt: skip


def test_routing_table_names_the_workload_column_and_defines_its_metrics():
    table = evaluation.format_table([row("round-robin", 1.0), row("goodserve", 2.0)])
    header = next(line for line in table.splitlines() if line.startswith("policy"))
    assert header.split(None, 1)[1].strip() == "goodserve (workload)"
    assert "goodput: requests finished within their E2E SLO" in table
    assert "gain (goodserve vs it)" in table


def test_no_gain_line_when_the_reference_did_not_run():
    table = evaluation.format_table([row("round-robin", 1.0), row("least-request", 2.0)])
    assert "gain (" not in table
    assert "no gain lines: the reference goodserve did not run" in table
    assert "best of paper baselines" in table  # the best baseline still shows


def test_pd_table_footer_defines_req95_and_req99():
    rows = [
        {**row("hexagent", 0.0, "mixed"), "env": "pd-cluster", "metrics": {"req95": 2, "req99": 3}},
        {**row("atlas", 0.0, "mixed"), "env": "pd-cluster", "metrics": {"req95": 3, "req99": 4}},
    ]
    table = evaluation.format_table(rows)
    assert "Req95 / Req99: the smallest α such that 95 % / 99 % of workflows finish" in table
    assert "mixed (workload)" not in table  # a workload not named like a policy stays as is


def test_results_folder_names_never_contain_none():
    name = evaluation.default_out_dir(
        evaluation.EvalConfig(env="allocation", policies=("naive-equal",), seeds=(0,))
    ).name
    assert "None" not in name and "__" not in name
    assert name.startswith("allocation_scepsy-16_rag_reranker")


def test_reference_option_sets_the_gain_lines_and_keeps_the_expert_in_the_table():
    cfg = training.parse_args(["--env", "servegym/Routing-v0", "--reference", "least-request"])
    assert cfg.reference == "least-request" and cfg.bc_expert == "goodserve"
    baselines = training.baselines_of(cfg)
    assert "least-request" not in baselines and "goodserve" in baselines
    ecfg = training.eval_config(cfg, (*baselines, "least-request"))
    assert ecfg.reference == "least-request"
    assert training.parse_args(["--env", "routing"]).reference == "goodserve"  # the expert
