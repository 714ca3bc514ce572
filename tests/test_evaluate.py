"""Specifications of evaluate.py: runs, outputs, table shape, isolation between runs, errors.

The policies here are small stand-ins (first / last legal action) so the tests do not depend on
the heuristics package; they act only through ``env.step`` like every policy.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import evaluate
from evaluate import EvalConfig, EvaluationError

ROOT = Path(__file__).resolve().parents[1]
COUNT = 8


class FirstLegal:
    """Picks the lowest-index legal action."""

    name = "first-legal"

    def reset(self) -> None:
        pass

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        return int(np.flatnonzero(info["action_mask"])[0])


class LastLegal(FirstLegal):
    """Picks the highest-index legal action (a different placement and order)."""

    name = "last-legal"

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        return int(np.flatnonzero(info["action_mask"])[-1])


STAND_INS = {"first-legal": FirstLegal, "last-legal": LastLegal, "hexagent": LastLegal}


def stand_in(spec: str, env: Any) -> Any:
    """A ``resolve`` for :func:`evaluate.evaluate` that knows only the stand-ins."""
    if spec not in STAND_INS:
        raise EvaluationError(f"unknown policy {spec!r}; known: {', '.join(STAND_INS)}")
    return STAND_INS[spec]()


def tiny(**overrides: Any) -> EvalConfig:
    base = dict(workloads=("mixed",), policies=("first-legal", "hexagent"), seeds=(0,), count=COUNT)
    return EvalConfig(quiet=True, **{**base, **overrides})


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return evaluate.evaluate(tiny(workloads=("mixed", "bfcl"), seeds=(0, 1)), resolve=stand_in)


def test_one_row_per_workload_policy_seed_with_required_keys(rows: list[dict[str, Any]]) -> None:
    assert len(rows) == 2 * 2 * 2
    assert {(r["workload"], r["policy"], r["seed"]) for r in rows} == {
        (w, p, s) for w in ("mixed", "bfcl") for p in ("first-legal", "hexagent") for s in (0, 1)
    }
    required = {"env", "cluster", "model", "workload", "policy", "seed", "metrics"}
    required |= {"utilisation", "attainment_curve", "wall_seconds", "steps"}
    for r in rows:
        assert required <= set(r)
        assert {"req95", "req99"} <= set(r["metrics"])
        assert set(r["attainment_curve"]) == {"alpha", "attainment"}
        assert r["env"] == "pd-cluster" and r["cluster"] == "hetero-1"
        assert r["steps"] > 0 and r["wall_seconds"] > 0
        assert r["metrics"]["num_workflows"] == COUNT


def test_policy_alone_gives_identical_metrics_to_policy_with_others(
    rows: list[dict[str, Any]],
) -> None:
    alone = evaluate.evaluate(
        tiny(workloads=("bfcl",), policies=("hexagent",), seeds=(1,)), resolve=stand_in
    )
    [with_others] = [
        r for r in rows if (r["workload"], r["policy"], r["seed"]) == ("bfcl", "hexagent", 1)
    ]
    assert alone[0]["metrics"] == with_others["metrics"]
    assert alone[0]["steps"] == with_others["steps"]
    assert alone[0]["completion_times"] == with_others["completion_times"]


def test_same_seed_gives_same_workload_for_every_policy(rows: list[dict[str, Any]]) -> None:
    for w in ("mixed", "bfcl"):
        for s in (0, 1):
            horizons = [r["horizons"] for r in rows if r["workload"] == w and r["seed"] == s]
            assert horizons[0] == horizons[1]


def test_table_has_policy_rows_best_baseline_and_reduction(rows: list[dict[str, Any]]) -> None:
    table = evaluate.format_table(rows, command="python evaluate.py --seeds 0,1")
    lines = table.splitlines()
    assert any(line.startswith("first-legal") for line in lines)
    best = next(line for line in lines if line.startswith("best baseline"))
    assert "(first-legal)" in best
    assert any(line.startswith("reduction (hexagent)") and "%" in line for line in lines)
    assert any(line.startswith("utilisation") for line in lines)
    assert "regenerate: python evaluate.py --seeds 0,1" in table
    assert "mixed" in lines[2] and "bfcl" in lines[2]


def test_reduction_is_relative_to_best_baseline_by_req99() -> None:
    def row(policy: str, r95: float, r99: float) -> dict[str, Any]:
        return {
            "env": "pd-cluster", "cluster": "c", "model": "m", "workload": "w", "seed": 0,
            "policy": policy, "metrics": {"req95": r95, "req99": r99},
            "utilisation": {"prefill": 0.5, "decode": 0.5},
        }  # fmt: skip

    rows = [
        row("workflow-fcfs", 3.0, 8.0),
        row("workflow-llf", 4.0, 5.0),  # best by Req99 despite the worse Req95
        row("workflow-fcfs+hetero-placement", 1.0, 1.0),  # ablation: not a baseline
        row("hexagent", 2.0, 2.5),
    ]
    assert evaluate.best_baseline(rows, "w") == "workflow-llf"
    table = evaluate.format_table(rows)
    assert "4.00 / 5.00 (workflow-llf)" in table
    assert "50.0% / 50.0%" in table


def test_writes_strict_json_csv_and_one_png_per_workload(
    rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    bad = dict(rows[0], metrics={**rows[0]["metrics"], "req99": math.inf, "x": math.nan})
    evaluate.write_results([bad, *rows[1:]], tmp_path / "r.json", tmp_path / "r.csv")
    loaded = json.loads((tmp_path / "r.json").read_text(), parse_constant=pytest.fail)
    assert len(loaded) == len(rows)
    assert loaded[0]["metrics"]["req99"] is None and loaded[0]["metrics"]["x"] is None
    with open(tmp_path / "r.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) and "metrics.req95" in table[0]
    pngs = evaluate.plot_attainment(rows, tmp_path)
    assert sorted(p.name for p in pngs) == ["attainment_bfcl.png", "attainment_mixed.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs)
    # A table can be rebuilt from the JSON alone.
    assert "best baseline" in evaluate.format_table(loaded)


def test_unknown_workload_is_a_clear_error() -> None:
    with pytest.raises(EvaluationError, match="workload 'nope'"):
        evaluate.evaluate(tiny(workloads=("mixed", "nope")), resolve=stand_in)


def test_unknown_env_and_unsupported_prefix_are_clear_errors() -> None:
    with pytest.raises(EvaluationError, match="unknown env 'routing-x'"):
        evaluate.evaluate(tiny(env="routing-x"), resolve=stand_in)
    with pytest.raises(EvaluationError, match="no saved model"):
        evaluate.resolve_policy("ckpt:runs/model.zip", env=None)
    with pytest.raises(EvaluationError, match="unknown policy prefix 'sb3'"):
        evaluate.resolve_policy("sb3:x", env=None)


def test_default_out_dir_is_derived_from_options_without_timestamp() -> None:
    a = evaluate.default_out_dir(tiny())
    assert a == evaluate.default_out_dir(tiny())
    assert a != evaluate.default_out_dir(tiny(seeds=(1,)))
    assert a.parts[0] == "results" and "mixed" in a.name


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), *args],
        capture_output=True, text=True, cwd=cwd, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args, culprit",
    [
        (("--workload", "nope", "--policies", "hexagent"), "workload 'nope'"),
        (("--workload", "mixed", "--policies", "no-such-policy"), "no-such-policy"),
        (("--policies", "ckpt:model.zip", "--workload", "mixed"), "no saved model"),
    ],
)
def test_cli_bad_name_exits_nonzero_without_traceback(
    args: tuple[str, ...], culprit: str, tmp_path: Path
) -> None:
    proc = run_cli(*args, "--count", "4", "--seeds", "0", "--quiet", cwd=tmp_path)
    assert proc.returncode != 0
    assert culprit in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()


def test_real_heuristics_give_identical_metrics_alone_and_together() -> None:
    pytest.importorskip("heuristics.base", reason="heuristics package not available")
    together = evaluate.evaluate(
        tiny(workloads=("mixed",), policies=("workflow-llf", "random", "hexagent"), count=10)
    )
    alone = evaluate.evaluate(tiny(workloads=("mixed",), policies=("hexagent",), count=10))
    [hexagent] = [r for r in together if r["policy"] == "hexagent"]
    assert alone[0]["metrics"] == hexagent["metrics"]
    assert alone[0]["completion_times"] == hexagent["completion_times"]
