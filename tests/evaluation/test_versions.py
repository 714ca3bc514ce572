"""The plain env names (``pd-cluster``, ``routing``, ``allocation``) and the scripts' defaults
mean the ``-v1`` envs; ``-v0`` names keep meaning v0. A checkpoint trained on a family runs on
any version of it whose spaces it acts in, with a warning naming each difference from its
training setting; the v0 PDCluster checkpoint acts through v1's two-step space and makes the
same picks there as on v0."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

import evaluation
from agents.checkpoint import FlatOnTwoStep, load_policy
from envs import CLI_ENVS, versioned_name
from envs.registry import FAMILIES
from evaluation.cli import parse_args
from evaluation.command import main
from evaluation.resolve import checkpoint_warnings, resolve_config, trained_env
from evaluation.runs import run_episode
from training.cli import parse_args as train_args
from training.config import TrainConfig, resolve

ROOT = Path(__file__).resolve().parents[2]
IDS = {"pd-cluster": "PDCluster", "routing": "Routing", "allocation": "Allocation"}


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("short", IDS)
def test_plain_names_mean_v1_and_v0_names_mean_v0(short: str) -> None:
    v1, v0 = f"servegym/{IDS[short]}-v1", f"servegym/{IDS[short]}-v0"
    assert CLI_ENVS[short][0] == FAMILIES[short].gym_id == v1
    assert CLI_ENVS[f"{short}-v0"][0] == FAMILIES[f"{short}-v0"].gym_id == v0
    assert evaluation.env_entry(v0) is FAMILIES[f"{short}-v0"]
    assert versioned_name(short) == f"{short}-v1" and versioned_name(v0) == f"{short}-v0"
    assert evaluation.env_defaults(short)["latency_calibration"] == "smooth-roofline"
    assert evaluation.env_defaults(f"{short}-v0")["latency_calibration"] == "roofline"


def test_the_scripts_default_to_pd_cluster_v1_and_train_records_the_version() -> None:
    assert FAMILIES[evaluation.EvalConfig().env].gym_id == "servegym/PDCluster-v1"
    assert FAMILIES[parse_args([]).env].gym_id == "servegym/PDCluster-v1"
    assert resolve(TrainConfig()).env == "pd-cluster-v1"
    assert train_args(["--env", "routing"]).env == "routing-v1"
    v0 = train_args(["--env", "servegym/Routing-v0", "--latency-calibration", "smooth-roofline"])
    assert (v0.env, v0.latency_calibration) == ("routing-v0", "smooth-roofline")
    assert train_args(["--env", "routing-v0"]).latency_calibration == "roofline"
    assert train_args(["--env", "routing"]).latency_calibration == "smooth-roofline"


def test_old_configs_plain_names_are_v0() -> None:
    assert trained_env({"env": "routing"}) == "routing-v0"
    assert trained_env({"env": "routing-v1"}) == "routing-v1"
    assert trained_env({"env": "servegym/Allocation-v1"}) == "allocation-v1"


def _warnings(argv: list[str]) -> list[str]:
    parsed = parse_args(argv)
    adopted = evaluation.checkpoint_settings(parsed, resolve_config(parsed).policies or ())
    config = resolve_config(parsed.__class__(**{**parsed.__dict__, **adopted}))
    return checkpoint_warnings(config)


def test_a_checkpoint_on_another_version_or_setting_gets_a_warning_naming_each_difference() -> None:
    (line,) = _warnings(["--env", "routing", "--policies", "ckpt:checkpoints/routing-v0"])
    assert line.startswith("warning: ckpt:checkpoints/routing-v0")
    for diff in ("env routing-v0 -> routing-v1", "slo-basis request -> task",
                 "latency-calibration roofline -> smooth-roofline"):  # fmt: skip
        assert diff in line, diff
    (line,) = _warnings(["--env", "routing-v0", "--policies", "ckpt:checkpoints/routing-v0"])
    assert "env routing" not in line and "slo-basis" not in line and "count 200 ->" in line
    assert not _warnings(
        ["--env", "routing-v0", "--count", "200", "--policies", "ckpt:checkpoints/routing-v0"]
    )
    (line,) = _warnings(["--env", "allocation", "--policies", "ckpt:checkpoints/allocation-v0"])
    assert "periods 1 -> 6" in line and "workload beam_search (trained on rag_reranker)" in line


def test_a_checkpoint_of_another_family_is_still_refused() -> None:
    with pytest.raises(evaluation.EvaluationError, match="was trained on --env routing"):
        _warnings(["--env", "allocation", "--policies", "ckpt:checkpoints/routing-v0"])


def test_evaluate_prints_the_warning_and_runs(tmp_path: Path, capsys) -> None:
    argv = ["--env", "routing", "--count", "5", "--seeds", "0", "--quiet"]
    argv += ["--policies", "ckpt:checkpoints/routing-v0", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert "warning: ckpt:checkpoints/routing-v0" in capsys.readouterr().err
    rows = json.loads((tmp_path / "results.json").read_text())
    assert rows and rows[0]["policy"] == "ckpt:checkpoints/routing-v0"


def test_the_v0_pd_cluster_checkpoint_makes_the_same_picks_on_v1_as_on_v0() -> None:
    runs, policies = {}, {}
    for version in ("v0", "v1"):
        env = gym.make(
            f"servegym/PDCluster-{version}",
            latency_calibration="roofline",  # v1's id sets smooth-roofline: compare like for like
            workload="mixed",
            workload_count=4,
        ).unwrapped
        policies[version] = load_policy("checkpoints/pd-cluster-v0", env)
        if version == "v0":
            flat_obs, _ = env.reset(seed=1_000_000)
        else:
            env.reset(seed=1_000_000)
            obs, mask = env.flat_observation()
            assert {k: v.shape for k, v in obs.items()} == {k: v.shape for k, v in flat_obs.items()}
            assert all((obs[k] == flat_obs[k]).all() for k in obs)
            assert mask.shape == (env.K * env.P * env.D,)
        runs[version] = run_episode(env, policies[version], seed=1_000_000)
    assert isinstance(policies["v1"], FlatOnTwoStep) and not isinstance(
        policies["v0"], FlatOnTwoStep
    )
    v0, v1 = runs["v0"], runs["v1"]
    for key in ("metrics", "completion_times", "horizons", "invocations"):
        assert v0[key] == v1[key], key
    assert v1["steps"] > v0["steps"]  # a pair step after every prefill-stage slot step
