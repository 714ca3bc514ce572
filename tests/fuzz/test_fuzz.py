"""Specification of how servegym meets bad inputs: the fuzz corpus in ``tests/fuzz/`` (issue 13).

Every case of ``tests/fuzz/MANIFEST.yaml`` (a malformed trace, cluster file, train config or
checkpoint, or a bad option) must be rejected by its Python entry point with the project's input
error, and by every command line it is fed to with a non-zero exit, one message on stderr naming
the file, record and field (or the option), no traceback, in under a second of the command's
own work, leaving no output behind.

The command lines run in-process (``main(argv)`` with stderr captured, ``SystemExit`` caught):
what a subprocess adds is interpreter start-up and imports (~5 s for ``evaluate.py`` and
``train.py``), which would swamp the one-second budget and the suite's run time. Four real
subprocesses, one per command, check that the top-level error handling holds there too. The
reader is also fuzzed for a few seconds (``tests/fuzz/fuzz_reader.py`` runs longer).
"""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from tests.fuzz.fuzz_reader import check_one, hypothesis_inputs

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "tests" / "fuzz"
CASES: list[dict[str, Any]] = yaml.safe_load((FUZZ / "MANIFEST.yaml").read_text())["cases"]
#: Wall-clock budget of one rejection, seconds (the command's own work, imports excluded).
BUDGET_S = 1.0
#: Files of tests/fuzz/ that are not cases.
NOT_CASES = {"MANIFEST.yaml", "fuzz_reader.py", "test_fuzz.py", "__pycache__"}


def _case_id(case: dict[str, Any]) -> str:
    return case["case"] or case["name"]


def _rel(case: dict[str, Any]) -> str:
    return f"tests/fuzz/{case['case']}" if case["case"] else ""


def _command(line: str, case: dict[str, Any], out: Path) -> tuple[str, list[str]]:
    """(program, argv) of a manifest command line, writing any output under ``out``."""
    program, *argv = shlex.split(line.replace("{case}", _rel(case)))
    if program == "evaluate.py":
        argv += ["--quiet", "--out", str(out)]
    elif program == "train.py":
        argv += ["--quiet", "--wandb", "disabled", "--vec", "dummy", "--out", str(out)]
    return program, argv


def _main(program: str) -> Callable[[list[str]], int]:
    if program == "traces.validate":
        from traces.validate import main
    elif program == "envs.sim.core.run":
        from envs.sim.core.run import main
    elif program == "evaluate.py":
        from evaluate import main
    elif program == "train.py":
        from train import main
    else:
        raise AssertionError(f"unknown program {program!r} in MANIFEST.yaml")
    return main


@pytest.fixture(scope="module", autouse=True)
def warm_imports() -> None:
    """Import what the commands import lazily, so the budget measures their own work."""
    import evaluate  # noqa: F401
    import evaluation  # noqa: F401
    import train  # noqa: F401
    import training  # noqa: F401
    from agents import TRAIN_ENVS  # noqa: F401
    from agents.algos import algo_spec
    from envs.sim.hardware.catalog import model_names
    from heuristics import POLICIES  # noqa: F401

    algo_spec("maskable-ppo").load_class()
    model_names()


@pytest.fixture(autouse=True)
def in_project_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_every_corpus_file_is_in_the_manifest_and_every_case_exists() -> None:
    listed = {c["case"] for c in CASES if c["case"]}
    present = {p.name for p in FUZZ.iterdir()} - NOT_CASES
    assert present == listed
    assert len({_case_id(c) for c in CASES}) == len(CASES), "duplicate case ids"
    for case in CASES:
        assert case["run"] and case["expect"], _case_id(case)


def _api_error(case: dict[str, Any]) -> BaseException:
    """Run the case's Python entry point; return the error it raised."""
    import evaluation
    import training
    from envs.sim.hardware.cluster import ClusterConfigError, load_cluster
    from traces import TraceValidationError, read_trace

    path = _rel(case)
    api = case["api"]
    if api == "read_trace":
        with pytest.raises(TraceValidationError) as info:
            read_trace(path)
    elif api == "load_cluster":
        with pytest.raises(ClusterConfigError) as info:
            load_cluster(path)
    elif api == "train_config":
        with pytest.raises(training.TrainError) as info:
            training.load_config_file(path)
    elif api == "checkpoint":
        from agents.algos import load_model

        with pytest.raises((evaluation.EvaluationError, ValueError, FileNotFoundError)) as info:
            config = evaluation.EvalConfig(env="pd-cluster")
            evaluation.checkpoint_settings(config, [f"ckpt:{path}/model.zip"])
            load_model(f"{path}/model.zip")
    else:
        raise AssertionError(f"unknown api {api!r} in MANIFEST.yaml")
    return info.value


@pytest.mark.parametrize("case", [c for c in CASES if c["api"]], ids=_case_id)
def test_python_entry_point_raises_the_input_error_naming_file_record_and_field(
    case: dict[str, Any],
) -> None:
    start = time.perf_counter()
    err = _api_error(case)
    elapsed = time.perf_counter() - start
    message = str(err)
    missing = [s for s in case["expect"] if s not in message]
    assert not missing, f"{message!r} lacks {missing}"
    assert elapsed < BUDGET_S, f"took {elapsed:.2f} s"


def _runs() -> list[Any]:
    params = []
    for case in CASES:
        for line in case["run"]:
            marks = []
            if case.get("pending"):
                marks.append(pytest.mark.xfail(strict=True, reason=case["pending"]))
            program = line.split()[0]
            params.append(pytest.param(case, line, id=f"{_case_id(case)}-{program}", marks=marks))
    return params


@pytest.mark.parametrize(("case", "line"), _runs())
def test_command_line_exits_with_one_clear_error_and_writes_nothing(
    case: dict[str, Any], line: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    program, argv = _command(line, case, out)
    main = _main(program)
    stderr, stdout = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with redirect_stderr(stderr), redirect_stdout(stdout):
        try:
            status = main(argv)
        except SystemExit as exit_:  # argparse rejects a bad option this way
            status = exit_.code
    elapsed = time.perf_counter() - start
    message = stderr.getvalue()
    assert status not in (0, None), f"accepted: {stdout.getvalue()[-300:]}"
    missing = [s for s in case["expect"] if s not in message]
    assert not missing, f"{message!r} lacks {missing}"
    assert "Traceback" not in message
    assert elapsed < BUDGET_S, f"took {elapsed:.2f} s"
    assert not out.exists(), f"left {sorted(p.name for p in out.iterdir())} behind"


SMOKE = [
    ("traces.validate", "trace-cycle.jsonl", ["-m", "traces.validate", "{case}"], 1),
    (
        "envs.sim.core.run",
        "trace-invalid-utf8.jsonl",
        ["-m", "envs.sim.core.run", "--trace", "{case}"],
        2,
    ),
    (
        "evaluate.py",
        "cluster-model-does-not-fit.yaml",
        ["evaluate.py", "--cluster", "{case}", "--policies", "per-call-fcfs", "--seeds", "0"],
        2,
    ),
    ("train.py", "train-config-wrong-type.yaml", ["train.py", "--config", "{case}"], 2),
]


def test_real_subprocesses_exit_cleanly_without_a_traceback(tmp_path: Path) -> None:
    by_name = {c["case"]: c for c in CASES}
    procs = []
    for program, name, args, status in SMOKE:
        out = tmp_path / program
        argv = [a.replace("{case}", f"tests/fuzz/{name}") for a in args]
        if program in ("evaluate.py", "train.py"):
            argv += ["--out", str(out)]
        proc = subprocess.Popen(
            [sys.executable, *argv],
            cwd=ROOT,
            env={**os.environ, "WANDB_MODE": "disabled"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append((proc, by_name[name], status, out))
    for proc, case, status, out in procs:
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == status, stderr
        assert "Traceback" not in stderr
        assert all(s in stderr for s in case["expect"]), stderr
        assert len(stderr.strip().splitlines()) <= 2, stderr  # one error (YAML errors wrap)
        assert not out.exists()


def test_checkpoint_for_another_slot_count_is_rejected_by_both_commands(tmp_path: Path) -> None:
    """A real model trained with 2 slots, without the config.json that would name them."""
    import evaluate
    import train
    from agents import build_model, env_kwargs, make_env, train_env_spec

    spec = train_env_spec("pd-cluster-v0")  # the flat space: K·P·D actions
    env = make_env(spec, env_kwargs(spec, {"slots": 2, "count": 2, "workload": "sharegpt"}))
    model_zip = tmp_path / "slots2" / "model.zip"
    model_zip.parent.mkdir()
    build_model("maskable-ppo", env, spec, seed=0, net_arch=[8]).save(str(model_zip))
    env.close()
    out = tmp_path / "out"
    commands = [
        (
            evaluate.main,
            ["--env", "pd-cluster-v0", "--policies", f"ckpt:{model_zip}", "--workload", "sharegpt"],
        ),
        (
            train.main,
            [
                "--env",
                "pd-cluster-v0",
                "--bc-expert",
                f"ckpt:{model_zip}",
                "--wandb",
                "disabled",
                "--vec",
                "dummy",
            ],
        ),
    ]
    for main, argv in commands:
        stderr = io.StringIO()
        start = time.perf_counter()
        with redirect_stderr(stderr), redirect_stdout(io.StringIO()):
            status = main([*argv, "--count", "2", "--quiet", "--out", str(out)])
        elapsed = time.perf_counter() - start
        message = stderr.getvalue()
        assert status == 2 and str(model_zip) in message and "slot count" in message, message
        assert "Discrete(128)" in message  # 2 slots x 8x8 (prefill, decode) pairs
        assert elapsed < BUDGET_S and not out.exists()


@settings(
    max_examples=150,
    deadline=int(BUDGET_S * 1000),
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=hypothesis_inputs())
def test_reader_parses_or_rejects_every_input_with_a_trace_validation_error(data: bytes) -> None:
    assert check_one(data) in ("valid", "rejected")
