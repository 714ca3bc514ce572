"""The offline sweep runner reads W&B sweep files as W&B does (grid / random, values and
distributions, the command's fixed flags), rejects malformed ones by name, runs one process per
configuration with W&B's ``--name=value`` flags, and ranks runs by the sweep metric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agents import sweeps

ROOT = Path(__file__).resolve().parents[2]

#: Stands in for train.py: writes an eval_history.json whose req99 is the --bc-lr it was given.
FAKE_TRAIN = """
import json, sys
from pathlib import Path
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
if args.get("fail") == "1":
    sys.exit("boom")
out = Path(args["out"]); out.mkdir(parents=True, exist_ok=True)
lr = float(args["bc-lr"])
(out / "eval_history.json").write_text(json.dumps([{"req99": 10 * lr}, {"req99": lr}]))
(out / "argv.json").write_text(json.dumps(sys.argv[1:]))
"""


def test_the_example_sweep_loads_and_samples_reproducibly() -> None:
    spec = sweeps.load_sweep(ROOT / "examples" / "sweep.yaml")
    first = sweeps.configurations(spec, runs=5, seed=0)
    assert first == sweeps.configurations(spec, runs=5, seed=0)
    assert first != sweeps.configurations(spec, runs=5, seed=1)
    for config in first:
        assert 0.001 <= config["bc_lr"] <= 0.01 and config["bc_epochs"] in (4, 8, 16)
    flags = sweeps.fixed_flags(spec)
    assert "--timesteps=2048" in flags and not any(f.startswith("--wandb") for f in flags)


def test_grid_sweeps_enumerate_every_combination() -> None:
    spec = {"method": "grid", "parameters": {"a": {"values": [1, 2]}, "b": {"value": "x"}}}
    assert sweeps.configurations(spec, runs=None) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]


METRIC = "metric: {name: eval/req99, goal: minimize}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("method: bayes\n" + METRIC + "parameters: {a: {values: [1]}}", "method must be"),
        ("method: grid\nparameters: {a: {values: [1]}}", "metric must be"),
        ("method: grid\n" + METRIC + "parameters: {}", "non-empty"),
        (
            "method: random\n" + METRIC
            + "parameters: {a: {distribution: log_uniform_values, min: 0, max: 1}}",
            "parameter 'a'",
        ),
        (
            "method: grid\n" + METRIC + "parameters: {a: {distribution: uniform, min: 0, max: 1}}",
            "grid sweeps need values",
        ),
    ],
)  # fmt: skip
def test_malformed_sweep_files_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(sweeps.SweepError, match=message) as err:
        sweeps.load_sweep(path)
    assert "bad.yaml" in str(err.value)


def test_runs_are_ranked_by_the_metric_and_failures_are_reported(tmp_path: Path) -> None:
    program = tmp_path / "fake_train.py"
    program.write_text(FAKE_TRAIN)
    results = []
    for i, lr in enumerate((0.5, 0.2)):
        argv = sweeps.train_argv({"bc_lr": lr}, tmp_path / f"run-{i}", ["--count=4"])
        results.append(sweeps.run_configuration(argv, "eval/req99", "minimize", program))
    assert [r["value"] for r in results] == [0.5, 0.2]  # best (lowest) of each run's history
    argv = json.loads((tmp_path / "run-1" / "argv.json").read_text())
    assert argv == ["--count=4", "--bc-lr=0.2", f"--out={tmp_path / 'run-1'}", "--wandb=offline"]
    failed = sweeps.run_configuration(
        sweeps.train_argv({"fail": 1}, tmp_path / "run-x", []), "eval/req99", "minimize", program
    )
    assert failed["error"].startswith("exit 1: boom")


def test_the_cli_rejects_a_bad_file_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"method": "grid"}))
    assert sweeps.main([str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert "agents.sweeps: error" in err and "metric must be" in err
