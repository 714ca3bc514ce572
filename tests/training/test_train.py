"""Specifications of train.py: a smoke run writes a loadable model, its config, the evaluation
report and an offline W&B run directory; options are validated before any work."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest

import train
import training
from agents import env_kwargs, load_policy, make_env, train_env_spec

SMOKE = [
    "--env", "pd-cluster", "--count", "4", "--slots", "4", "--bc-episodes", "1",
    "--bc-epochs", "1", "--timesteps", "256", "--n-envs", "2", "--vec", "dummy",
    "--eval-episodes", "1", "--eval-every", "128", "--ckpt-every", "128",
    "--baselines", "workflow-fcfs", "--hyperparams", '{"n_steps": 64, "batch_size": 64}',
    "--quiet",
]  # fmt: skip


@pytest.mark.slow
def test_smoke_run_writes_loadable_model_and_offline_wandb_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "run"
    assert train.main([*SMOKE, "--out", str(out), "--wandb", "offline"]) == 0
    for name in ("model.zip", "bc_model.zip", "config.json", "eval.json", "table.txt"):
        assert (out / name).is_file(), name
    assert list((out / "checkpoints").glob("*_steps.zip"))
    assert list((out / "wandb").glob("offline-run-*")), "no offline W&B run directory"
    report = json.loads((out / "eval.json").read_text())
    assert {"hexagent", "workflow-fcfs", f"ckpt:{out / 'model.zip'}"} <= set(report["final"])
    assert report["timing"]["env_steps"] >= 256
    spec = train_env_spec("pd-cluster")
    env = make_env(spec, env_kwargs(spec, {"count": 4, "slots": 4}))
    policy = load_policy(out / "model.zip", env)
    obs, info = env.reset(seed=0)
    assert info["action_mask"][policy.act(obs, info)]


@pytest.mark.slow
def test_tiny_config_trains_saves_reloads_and_acts_identically(tmp_path):
    """The issue-11 recipe at toy size, from a YAML file like examples/pd_learned_*.yaml: a
    realistic predictor, fewer validation than held-out seeds; the saved model, reloaded, gives
    the final table's numbers again and two loads act identically step by step."""
    import evaluation

    out = tmp_path / "run"
    cfg_file = tmp_path / "tiny.yaml"
    cfg_file.write_text(
        "count: 4\nslots: 4\noutput_predictor: task-mean\nbc_expert: atlas+earliest-finish\n"
        "bc_episodes: 1\nbc_epochs: 1\ntimesteps: 128\nn_envs: 1\nvec: dummy\n"
        "eval_episodes: 2\nval_episodes: 1\neval_every: 64\nckpt_every: 128\n"
        "baselines: [per-call-fcfs+earliest-finish]\n"
        'hyperparams: {"n_steps": 64, "batch_size": 64}\nquiet: true\nwandb: disabled\n'
    )
    assert train.main(["--config", str(cfg_file), "--out", str(out)]) == 0
    report = json.loads((out / "eval.json").read_text())
    assert report["eval_seeds"] == [1_000_000, 1_000_001]
    assert report["validation_seeds"] == [2_000_000]
    assert json.loads((out / "config.json").read_text())["output_predictor"] == "task-mean"
    ckpt = f"ckpt:{out / 'model.zip'}"
    rows = evaluation.evaluate(
        evaluation.EvalConfig(
            env="pd-cluster", workloads=("mixed",), policies=(ckpt,), seeds=(1_000_000, 1_000_001),
            count=4, slots=4, output_predictor="task-mean", out=str(tmp_path / "eval"), quiet=True,
        )
    )  # fmt: skip
    again = training.mean_metrics(rows, ckpt, evaluation.env_entry("pd-cluster").headline)
    assert again == pytest.approx(report["final"][ckpt], rel=0, abs=0)
    spec = train_env_spec("pd-cluster")
    kwargs = env_kwargs(spec, {"count": 4, "slots": 4, "output_predictor": "task-mean"})
    envs = [make_env(spec, kwargs) for _ in range(2)]
    policies = [load_policy(out / "model.zip", e) for e in envs]
    obs_info = [e.reset(seed=3) for e in envs]
    while True:
        actions = [p.act(obs, info) for p, (obs, info) in zip(policies, obs_info, strict=True)]
        assert actions[0] == actions[1]
        results = [e.step(actions[0]) for e in envs]
        if results[0][2] or results[0][3]:
            break
        obs_info = [(r[0], r[4]) for r in results]


@pytest.mark.slow
def test_dagger_episodes_can_be_larger_than_the_training_episodes_and_subsampled(tmp_path):
    """``--dagger-count`` labels states of longer episodes than BC's; ``--dagger-keep`` keeps a
    drawn share of them (the report lists each DAgger episode's size, steps and kept states)."""
    out = tmp_path / "run"
    argv = [
        *SMOKE[: SMOKE.index("--timesteps")], "--timesteps", "0", "--dagger-rounds", "1",
        "--dagger-episodes", "1", "--dagger-count", "8", "--dagger-keep", "0.5",
        "--n-envs", "1", "--vec", "dummy", "--eval-episodes", "1", "--baselines",
        "workflow-fcfs", "--quiet", "--wandb", "disabled", "--out", str(out),
    ]  # fmt: skip
    assert train.main(argv) == 0
    bc = json.loads((out / "eval.json").read_text())["bc"]
    (expert,), (dagger,) = bc["expert_episodes"], bc["dagger_episodes"]
    assert expert["metrics"]["num_workflows"] == 4 and expert["kept"] == expert["steps"]
    assert dagger["metrics"]["num_workflows"] == 8
    assert 0 < dagger["kept"] < dagger["steps"]
    assert bc["samples"] == expert["steps"] + dagger["kept"]


def test_final_table_adds_the_best_model_only_when_it_is_not_the_final_one(tmp_path):
    for name in ("model.zip", "bc_model.zip", "best_model.zip"):
        (tmp_path / name).write_bytes(b"")
    ckpt = {n: f"ckpt:{tmp_path / n}.zip" for n in ("model", "bc_model", "best_model")}
    last_best = [{"step": 10}, {"step": 20, "saved_best": "x"}]
    earlier_best = [{"step": 10, "saved_best": "x"}, {"step": 20}]
    assert training.learned_rows(tmp_path, last_best, True) == [ckpt["bc_model"], ckpt["model"]]
    all_three = [ckpt["bc_model"], ckpt["best_model"], ckpt["model"]]
    assert training.learned_rows(tmp_path, earlier_best, True) == all_three
    assert training.learned_rows(tmp_path, earlier_best, False) == [
        ckpt["best_model"],
        ckpt["model"],
    ]
    assert training.learned_rows(tmp_path, [], True) == [ckpt["bc_model"], ckpt["model"]]


TRAIN_CONFIGS = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "examples").glob("*.yaml")
    if "program:" not in p.read_text()  # W&B sweep files configure train.py, they are not configs
)


@pytest.mark.parametrize("path", TRAIN_CONFIGS, ids=lambda p: p.name)
def test_committed_example_configs_still_parse(path):
    import yaml

    cfg = training.parse_args(["--config", str(path)])
    for key, value in yaml.safe_load(path.read_text()).items():
        expected = tuple(value) if isinstance(value, list) else value
        assert getattr(cfg, key.replace("-", "_")) == expected, key


def test_config_file_sets_defaults_and_flags_override_it(tmp_path):
    cfg_file = tmp_path / "c.json"
    cfg_file.write_text(json.dumps({"timesteps": 123, "bc-epochs": 3, "seed": 5}))
    cfg = training.parse_args(["--config", str(cfg_file), "--seed", "7"])
    assert (cfg.timesteps, cfg.bc_epochs, cfg.seed) == (123, 3, 7)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--env", "nope"], "not trainable"),
        (["--algo", "dqn"], "unknown"),
        (["--bc-expert", "oracle"], "unknown policy"),
        (["--bc-expert", "zz:x"], "unknown policy prefix"),
        (["--baselines", "atlas,atlas"], "more than once"),
        (["--n-envs", "0"], ">= 1"),
        (["--val-episodes", "0"], ">= 1"),
        (["--bc-vf-coef", "-0.1"], "bc-vf-coef must be >= 0"),
        (["--dagger-keep", "0"], "dagger-keep must be in"),
        (["--dagger-count", "0"], "dagger-count must be >= 1"),
        (["--env", "allocation", "--dagger-count", "5"], "does not take"),
        (["--observation", "extended"], "does not take --observation"),
    ],
)
def test_bad_options_are_rejected_before_any_work(argv, match):
    with pytest.raises(training.TrainError, match=match):
        training.parse_args(argv)


def test_existing_run_directory_needs_resume(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    assert train.main(["--out", str(tmp_path), "--wandb", "disabled"]) == 2
    assert "--resume" in capsys.readouterr().err


def test_per_env_defaults_fill_unset_options():
    pd = training.parse_args(["--env", "pd-cluster"])
    assert (pd.cluster, pd.model, pd.workload, pd.count, pd.slots) == (
        "hetero-1", "llama3.1-70b", "mixed", 30, 16,
    )  # fmt: skip
    assert pd.bc_expert == "hexagent" and pd.slo_scale is None
    routing = training.resolve(training.TrainConfig(env="routing"))
    assert (routing.cluster, routing.model, routing.workload) == (
        "goodserve-4", "llama3.1-8b", "goodserve",
    )  # fmt: skip
    assert routing.bc_expert == "goodserve" and routing.slots is None


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--env", "routing", "--slots", "4"], "does not take --slots"),
        (["--env", "pd-cluster", "--slo-scale", "2"], "does not take --slo-scale"),
        (["--env", "routing", "--bc-expert", "hexagent"], "for env 'routing-v1'"),
        (["--env", "pd-cluster", "--baselines", "round-robin"], "for env 'pd-cluster-v1'"),
    ],
)
def test_options_and_policies_of_another_env_are_rejected(argv, match):
    with pytest.raises(training.TrainError, match=match):
        training.parse_args(argv)


def test_help_lists_each_trainable_envs_defaults(capsys):
    with pytest.raises(SystemExit):
        training.parse_args(["--help"])
    out = capsys.readouterr().out
    for text in ("pd-cluster", "routing", "RoutingScorer", "--bc-expert goodserve", "goodput"):
        assert text in out, text


def test_routing_smoke_run_selects_by_goodput(tmp_path, capsys):
    pytest.importorskip("heuristics.routing.goodserve", reason="routing heuristics not available")
    import gymnasium as gym

    import envs  # noqa: F401

    try:
        gym.make("servegym/Routing-v0", workload_count=4, output_predictor="oracle").reset(seed=0)
    except Exception as exc:  # the env is still being written
        pytest.skip(f"Routing-v0 not buildable: {exc}")
    out = tmp_path / "run"
    argv = [
        "--env", "routing", "--count", "8", "--output-predictor", "oracle", "--bc-episodes", "1",
        "--bc-epochs", "1", "--bc-expert", "earliest-finish", "--timesteps", "128", "--n-envs",
        "2", "--vec", "dummy", "--eval-episodes", "1", "--eval-every", "64", "--ckpt-every",
        "128", "--baselines", "round-robin", "--hyperparams", '{"n_steps": 32, "batch_size": 32}',
        "--quiet", "--wandb", "disabled", "--out", str(out),
    ]  # fmt: skip
    assert train.main(argv) == 0
    report = json.loads((out / "eval.json").read_text())
    assert {"goodserve", "round-robin", f"ckpt:{out / 'model.zip'}"} <= set(report["final"])
    assert set(report["final"]["goodserve"]) == {"goodput", "slo_violation_ratio"}
    assert "gain (goodserve vs it)" in (out / "table.txt").read_text()
    assert (out / "best_model.zip").is_file()
    # model selection never looks at the held-out seeds of the final table
    assert not set(report["validation_seeds"]) & set(report["eval_seeds"])
    assert set(report["validation_references"]) >= {"goodserve"}
    # the clone beside its teacher (earliest-finish), on validation and held-out seeds
    assert set(report["bc"]["teacher_eval"]) == {"goodput", "slo_violation_ratio"}
    assert "clone vs teacher earliest-finish (held-out seeds): goodput" in capsys.readouterr().out


def test_allocation_smoke_run_trains_without_special_casing(tmp_path, monkeypatch):
    # Scepsy (the expert every run evaluates) profiles its LLMs on first use (minutes); the
    # wiring under test does not depend on which allocation it picks, so it plans like the
    # demand-proportional reference here.
    from heuristics.allocation import DemandProportional, ScepsyPolicy

    monkeypatch.setattr(ScepsyPolicy, "plan", DemandProportional.plan)
    out = tmp_path / "run"
    argv = [
        "--env", "allocation-v0", "--gpus", "4", "--periods", "2", "--period-seconds", "20",
        "--workflow-rate", "1.0", "--bc-episodes", "1", "--bc-epochs", "1",
        "--bc-expert", "demand-proportional", "--timesteps", "64", "--n-envs", "2", "--vec",
        "dummy", "--eval-episodes", "1", "--eval-every", "32", "--ckpt-every", "64",
        "--baselines", "naive-equal", "--hyperparams", '{"n_steps": 16, "batch_size": 16}',
        "--quiet", "--wandb", "disabled", "--out", str(out),
    ]  # fmt: skip
    assert train.main(argv) == 0
    report = json.loads((out / "eval.json").read_text())
    assert {"scepsy", "naive-equal", f"ckpt:{out / 'model.zip'}"} <= set(report["final"])
    assert set(report["final"]["scepsy"]) == {"goodput", "latency_mean"}
    config = json.loads((out / "config.json").read_text())
    assert config["rate_trace"] == "ragpulse_hourly" and config["gpus"] == 4


def test_help_documents_every_option_with_its_allowed_values(capsys):
    with pytest.raises(SystemExit):
        training.parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    # argparse may wrap a hyphenated name after its hyphen ("maskable-ppo- factored")
    assert "One of: maskable-ppo, maskable-ppo-factored, ppo, teacher-ppo" in out.replace("- ", "-")
    assert "One of: subproc, dummy" in out
    assert "py:MODULE:FACTORY" in out and "every policy: atlas" in out
    for option in ("--hidden", "--vec", "--bc-expert", "--baselines", "--algo"):
        after = out.split(option.upper().lstrip("-").replace("-", "_"), 1)[1]
        assert not after.lstrip().startswith("(default"), f"{option} has no description"


def test_naming_the_expert_in_baselines_is_not_an_error(capsys):
    cfg = training.parse_args(["--baselines", "per-call-fcfs,hexagent", "--bc-expert", "hexagent"])
    assert training.baselines_of(cfg) == ("per-call-fcfs",)
    assert "hexagent is the expert" in capsys.readouterr().out


def test_a_plugin_that_cannot_load_fails_before_out_is_created(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--bc-expert", f"py:{tmp_path / 'missing.py'}:make", "--out", str(out)]
    assert train.main([*argv, "--wandb", "disabled"]) == 2
    assert "--bc-expert" in capsys.readouterr().err and not out.exists()


def test_a_run_failing_before_its_first_model_leaves_nothing_behind(tmp_path, monkeypatch, capsys):
    import evaluation

    def fail(*args, **kwargs):
        raise evaluation.EvaluationError("simulated failure in the reference evaluation")

    monkeypatch.setattr(evaluation, "evaluate", fail)
    out = tmp_path / "run"
    assert train.main([*SMOKE, "--out", str(out), "--wandb", "disabled"]) == 2
    err = capsys.readouterr().err
    assert "simulated failure" in err and "Traceback" not in err
    assert not out.exists()  # so a retry is not blocked by a half-written run


def test_wandb_runs_do_not_advertise_weave_for_our_agents_package(tmp_path, monkeypatch):
    # wandb mistakes our ``agents`` package for OpenAI's Agents SDK and prints a Weave advert.
    from agents.wandb_utils import init_run

    monkeypatch.delenv("WANDB_DISABLE_WEAVE", raising=False)
    init_run("disabled", tmp_path, {}, name="x").finish()
    assert os.environ["WANDB_DISABLE_WEAVE"] == "true"
    monkeypatch.setenv("WANDB_DISABLE_WEAVE", "false")  # a user's own choice wins
    init_run("disabled", tmp_path, {}, name="x").finish()
    assert os.environ["WANDB_DISABLE_WEAVE"] == "false"
