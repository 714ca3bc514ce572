"""Specifications of evaluate.py: runs, outputs, table shape, isolation between runs, errors.

The policies here are small stand-ins (first / last legal action) so the tests do not depend on
the heuristics package; they act only through ``env.step`` like every policy.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import evaluate
import evaluation
from evaluation import EvalConfig, EvaluationError

ROOT = Path(__file__).resolve().parents[2]
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
    """A ``resolve`` for :func:`evaluation.evaluate` that knows only the stand-ins."""
    if spec not in STAND_INS:
        raise EvaluationError(f"unknown policy {spec!r}; known: {', '.join(STAND_INS)}")
    return STAND_INS[spec]()


def tiny(**overrides: Any) -> EvalConfig:
    base = dict(workloads=("mixed",), policies=("first-legal", "hexagent"), seeds=(0,), count=COUNT)
    return EvalConfig(quiet=True, **{**base, **overrides})


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return evaluation.evaluate(tiny(workloads=("mixed", "bfcl"), seeds=(0, 1)), resolve=stand_in)


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
    alone = evaluation.evaluate(
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
    # first-legal is an outside policy: in the table, never the expert's baseline.
    table = evaluation.format_table(rows, command="python evaluate.py --seeds 0,1")
    lines = table.splitlines()
    assert any(line.startswith("first-legal") for line in lines)
    best = next(line for line in lines if line.startswith("best of paper's speed-blind baselines"))
    assert "first-legal" not in best and best.split()[-1] == "-"
    assert any(line.startswith("reduction (hexagent vs it)") for line in lines)
    assert "not compared against (expert, ablation, learned or outside): first-legal" in table
    assert any(line.startswith("utilisation") for line in lines)
    assert "regenerate: python evaluate.py --seeds 0,1" in table
    assert "mixed" in lines[2] and "bfcl" in lines[2]
    # As the reference, the outside policy is compared with the expert too.
    mine = evaluation.format_table(rows, reference="first-legal")
    assert any(line.startswith("reduction (first-legal vs hexagent)") for line in mine.splitlines())
    assert any(line.startswith("hexagent ") for line in mine.splitlines())


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
    assert evaluation.best_baseline(rows, "w") == "workflow-llf"
    table = evaluation.format_table(rows)
    assert "4.00 / 5.00 (workflow-llf)" in table
    assert "50.0% / 50.0%" in table


def test_writes_strict_json_csv_and_one_png_per_workload(
    rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    bad = dict(rows[0], metrics={**rows[0]["metrics"], "req99": math.inf, "x": math.nan})
    evaluation.write_results([bad, *rows[1:]], tmp_path / "r.json", tmp_path / "r.csv")
    loaded = json.loads((tmp_path / "r.json").read_text(), parse_constant=pytest.fail)
    assert len(loaded) == len(rows)
    assert loaded[0]["metrics"]["req99"] is None and loaded[0]["metrics"]["x"] is None
    with open(tmp_path / "r.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) and "metrics.req95" in table[0]
    pngs = evaluation.plot_attainment(rows, tmp_path)
    assert sorted(p.name for p in pngs) == ["attainment_bfcl.png", "attainment_mixed.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs)
    # A table can be rebuilt from the JSON alone.
    assert "best of paper's speed-blind baselines" in evaluation.format_table(loaded)


def test_unknown_workload_is_a_clear_error() -> None:
    with pytest.raises(EvaluationError, match="workload 'nope'"):
        evaluation.evaluate(tiny(workloads=("mixed", "nope")), resolve=stand_in)


def test_unknown_env_and_unsupported_prefix_are_clear_errors() -> None:
    with pytest.raises(EvaluationError, match="unknown env 'routing-x'"):
        evaluation.evaluate(tiny(env="routing-x"), resolve=stand_in)
    with pytest.raises(EvaluationError, match="no saved model"):
        evaluation.resolve_policy("ckpt:runs/model.zip", env=None)
    with pytest.raises(EvaluationError, match="unknown policy prefix 'sb3'"):
        evaluation.resolve_policy("sb3:x", env=None)


def test_default_out_dir_is_derived_from_options_without_timestamp() -> None:
    a = evaluation.default_out_dir(tiny())
    assert a == evaluation.default_out_dir(tiny())
    assert a != evaluation.default_out_dir(tiny(seeds=(1,)))
    assert a.parts[0] == "results" and "mixed" in a.name


def test_a_non_default_calibration_is_named_in_the_folder_and_the_command(monkeypatch) -> None:
    monkeypatch.delenv("SERVEGYM_LATENCY_CALIBRATION", raising=False)
    default_dir, default_cmd = evaluation.default_out_dir(tiny()), evaluation.command_for(tiny())
    assert "cal-" not in default_dir.name and default_cmd.startswith("python evaluate.py")
    monkeypatch.setenv("SERVEGYM_LATENCY_CALIBRATION", "roofline")
    variant_dir = evaluation.default_out_dir(tiny())
    assert variant_dir != default_dir and "cal-roofline" in variant_dir.name
    assert evaluation.command_for(tiny()) == "SERVEGYM_LATENCY_CALIBRATION=roofline " + default_cmd


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
    together = evaluation.evaluate(
        tiny(workloads=("mixed",), policies=("workflow-llf", "random", "hexagent"), count=10)
    )
    alone = evaluation.evaluate(tiny(workloads=("mixed",), policies=("hexagent",), count=10))
    [hexagent] = [r for r in together if r["policy"] == "hexagent"]
    assert alone[0]["metrics"] == hexagent["metrics"]
    assert alone[0]["completion_times"] == hexagent["completion_times"]


# -- env families as data: directions, sweeps, per-env defaults ------------------------------


def fake_family(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register an env family ``fake`` whose select metric is higher-is-better."""
    entry = evaluation.EnvFamily(
        gym_id="none", options={"cluster": "cluster", "slo_scale": "slo_scale"},
        headline=(evaluation.Metric("good", "good", "higher"), evaluation.Metric("bad", "bad")),
        select="good", reference="expert", cluster="c", model="m", workloads=("w",),
        baselines=("b1", "b2"), own_references=("ours",), ablations=("expert-lite",),
    )  # fmt: skip
    monkeypatch.setitem(evaluation.FAMILIES, "fake", entry)


def fake_row(policy: str, good: float, bad: float, sweep: float | None = None) -> dict[str, Any]:
    row = {
        "env": "fake", "cluster": "c", "model": "m", "workload": "w", "seed": 0,
        "policy": policy, "metrics": {"good": good, "bad": bad},
        "utilisation": {"monolithic": 0.5, "0:h800": 0.9, "1:a40": 0.1},
    }  # fmt: skip
    if sweep is not None:
        row["sweep"] = {"option": "slo_scale", "value": sweep}
    return row


def test_higher_is_better_metric_picks_the_max_baseline_and_reports_a_positive_gain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_family(monkeypatch)
    rows = [
        fake_row("b1", 2.0, 0.5),
        fake_row("ours", 4.0, 0.2),  # our own reference: the best baseline
        fake_row("b2", 3.0, 0.1),
        fake_row("expert-lite", 9.0, 0.0),  # an ablation of the expert: never a baseline
        fake_row("expert", 5.0, 0.1),
    ]
    assert evaluation.best_baseline(rows, "w") == "ours"
    assert evaluation.best_baseline(rows, "w", candidates=("b1", "b2")) == "b2"
    table = evaluation.format_table(rows)
    lines = table.splitlines()
    paper = lines.index(next(x for x in lines if x.startswith("best of paper baselines")))
    assert "3.00 / 0.10 (b2)" in lines[paper]
    assert "66.7% / 0.0%" in lines[paper + 1]  # (5 − 3) / 3 and (0.1 − 0.1) / 0.1
    assert lines[paper + 2].startswith("best of all references") and "(ours)" in lines[paper + 2]
    gain = lines[paper + 3]
    assert gain.startswith("gain (expert vs it)")
    assert "25.0% / 50.0%" in gain  # (5 − 4) / 4 and (0.2 − 0.1) / 0.2, both positive
    assert "good (higher is better) / bad (lower is better)" in lines[0]
    assert "our own strong reference ours" in table
    assert "not compared against (expert, ablation, learned or outside): expert-lite" in table
    util = next(line for line in table.splitlines() if line.startswith("utilisation"))
    assert util.split() == ["utilisation", "(monolithic)", "50%"]  # no per-instance keys


def test_missing_higher_is_better_value_counts_as_worst(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_family(monkeypatch)
    rows = [fake_row("b1", 1.0, 0.5), fake_row("b2", 1.0, 0.5), fake_row("expert", 2.0, 0.1)]
    rows[0]["metrics"]["good"] = None  # as read back from JSON
    assert evaluation.best_baseline(rows, "w") == "b2"


def test_sweep_gives_one_column_per_workload_and_value_and_a_sweep_plot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_family(monkeypatch)
    rows = []
    for value, scale in ((1.0, 1.0), (2.0, 2.0)):
        rows += [
            fake_row("b1", 1.0 * scale, 0.5, value),
            fake_row("b2", 2.0 * scale, 0.4, value),
            fake_row("expert", 3.0 * scale, 0.1, value),
        ]
    for r in rows:
        r["attainment_curve"] = {"alpha": [1.0, 2.0], "attainment": [0.5, 1.0]}
    table = evaluation.format_table(rows)
    header = table.splitlines()[2]
    assert "w slo_scale=1" in header and "w slo_scale=2" in header
    gain = next(line for line in table.splitlines() if line.startswith("gain (expert vs it)"))
    assert gain.count("50.0%") == 2  # 3 vs 2 and 6 vs 4
    [png] = evaluation.plot_sweep(rows, tmp_path)
    assert png.name == "good_vs_slo_scale_w.png" and png.read_bytes()[:4] == b"\x89PNG"
    attainment = evaluation.plot_attainment(rows, tmp_path)
    assert len(attainment) == 2
    assert evaluation.plot_sweep([fake_row("b1", 1, 1)], tmp_path) == []  # no sweep: no plot


def test_real_sweep_runs_one_env_per_value_and_rows_carry_the_value() -> None:
    rows = evaluation.evaluate(
        tiny(sweep=evaluation.Sweep("load_scale", (0.5, 1.0))), resolve=stand_in
    )
    assert [(r["load_scale"], r["sweep"]["value"]) for r in rows if r["policy"] == "hexagent"] == [
        (0.5, 0.5),
        (1.0, 1.0),
    ]
    header = evaluation.format_table(rows).splitlines()[2]
    assert "mixed load_scale=0.5" in header and "mixed load_scale=1" in header


def test_per_env_defaults_fill_unset_options() -> None:
    pd = evaluation.resolve_config(EvalConfig(env="pd-cluster"))
    assert (pd.cluster, pd.model, pd.reference) == ("hetero-1", "llama3.1-70b", "hexagent")
    assert pd.workloads == ("sharegpt", "bfcl", "lats", "mixed")
    assert pd.policies == evaluation.PAPER_POLICIES and pd.slots == 256 and pd.load_scale == 1.0
    assert pd.slo_scale is None
    routing = evaluation.resolve_config(EvalConfig(env="routing-v0"))
    assert (routing.cluster, routing.model, routing.reference) == (
        "goodserve-4",
        "llama3.1-8b",
        "goodserve",
    )
    assert routing.workloads == ("goodserve",) and routing.slots is None
    assert routing.policies[-3:] == ("earliest-finish", "implied-triage", "goodserve")
    assert evaluation.FAMILIES["routing"].select_metric.better == "higher"


def test_every_cli_env_has_a_family_and_every_option_a_config_field() -> None:
    from envs import CLI_ENVS

    assert set(evaluation.FAMILIES) == set(CLI_ENVS)
    for name, (_, options) in CLI_ENVS.items():
        assert set(options) - {"workload", "reward"} <= set(evaluation.ENV_FIELDS), name


@pytest.mark.parametrize(
    "config, match",
    [
        (EvalConfig(env="routing", slots=8), "does not take --slots"),
        (EvalConfig(env="pd-cluster", slo_scale=2.0), "does not take --slo-scale"),
        (EvalConfig(sweep=evaluation.Sweep("slo_scale", (1.0,))), "--sweep slo_scale"),
        (EvalConfig(load_scale=1.0, sweep=evaluation.Sweep("load_scale", (1.0,))), "both given"),
    ],
)
def test_an_option_the_env_does_not_take_is_an_error(config: EvalConfig, match: str) -> None:
    with pytest.raises(EvaluationError, match=match):
        evaluation.resolve_config(config)


def test_parse_sweep_uses_the_option_type() -> None:
    assert evaluation.parse_sweep("slo-scale=1,1.5") == evaluation.Sweep("slo_scale", (1.0, 1.5))
    assert evaluation.parse_sweep("migration=token,kv").values == ("token", "kv")
    with pytest.raises(Exception, match="OPTION=V1"):
        evaluation.parse_sweep("nope=1")


def test_policies_of_another_env_are_rejected_listing_only_this_envs() -> None:
    pytest.importorskip("heuristics.base", reason="heuristics package not available")
    env = evaluation.make_env(tiny(), "mixed")
    with pytest.raises(EvaluationError, match="for env 'pd-cluster'") as err:
        evaluation.resolve_policy("goodserve", env)
    assert "hexagent" in str(err.value) and "round-robin" not in str(err.value)


def test_help_lists_each_envs_options_and_defaults(tmp_path: Path) -> None:
    proc = run_cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for text in ("pd-cluster", "routing", "--slots 256", "--slo-scale", "--sweep", "goodput"):
        assert text in proc.stdout, text


def test_cli_option_the_env_does_not_take_exits_without_traceback(tmp_path: Path) -> None:
    proc = run_cli("--env", "routing", "--slots", "4", "--quiet", cwd=tmp_path)
    assert proc.returncode == 2 and "does not take --slots" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- the real Routing env (skipped while it cannot be built) ---------------------------------


def routing_available() -> bool:
    try:
        import gymnasium as gym

        import envs  # noqa: F401

        env = gym.make("servegym/Routing-v0", workload_count=4, output_predictor="oracle")
        env.reset(seed=0)
        env.close()
        return True
    except Exception:
        return False


needs_routing = pytest.mark.skipif(not routing_available(), reason="Routing-v0 not buildable")


@needs_routing
def test_routing_sweep_table_rows_and_goodput_plot(tmp_path: Path) -> None:
    pytest.importorskip("heuristics.routing.goodserve", reason="routing heuristics not available")
    config = EvalConfig(
        env="routing", policies=("round-robin", "earliest-finish", "goodserve"), seeds=(0,),
        count=12, output_predictor="oracle", sweep=evaluation.Sweep("slo_scale", (1.0, 2.0)),
        quiet=True,
    )  # fmt: skip
    rows = evaluation.evaluate(config)
    assert len(rows) == 3 * 2
    for r in rows:
        assert {"goodput", "slo_violation_ratio", "migrations"} <= set(r["metrics"])
        assert "monolithic" in r["utilisation"] and any(":" in k for k in r["utilisation"])
        assert r["slo_scale"] == r["sweep"]["value"] and len(r["latencies"]) == 12
    table = evaluation.format_table(rows, command=evaluation.command_for(config))
    assert "gain (goodserve vs it)" in table and "utilisation (monolithic)" in table
    assert "--sweep slo_scale=1,2" in table
    [png] = evaluation.plot_sweep(rows, tmp_path)
    assert png.name == "goodput_vs_slo_scale_goodserve.png"


def test_diagnose_names_bursts_idle_clusters_and_tied_percentiles() -> None:
    def row(policy: str, r95: float, r99: float, arrivals: list[float], util: float) -> dict:
        return {
            "env": "pd-cluster", "cluster": "c", "model": "m", "workload": "w", "seed": 0,
            "policy": policy, "metrics": {"req95": r95, "req99": r99},
            "utilisation": {"prefill": util, "decode": util, "0:h100": 1.0},
            "arrivals": arrivals, "simulated_seconds": 100.0,
            "completion_times": [1.0] * 40,
        }  # fmt: skip

    burst = [row(p, 1.5, 1.5, [0.0, 4.0], 0.1) for p in ("atlas", "hexagent", "mine")]
    notes = evaluation.diagnose(burst)
    assert any("arrivals span 4 s of a 100 s episode" in n for n in notes)
    assert any("mean utilisation 10%" in n for n in notes)
    assert any("Req95 = Req99 for 3 of 3 policies with 40 workflows" in n for n in notes)
    assert any(line.startswith("note: w:") for line in evaluation.format_table(burst).splitlines())
    steady = [row(p, 1.2 + i, 1.5 + i, [0.0, 90.0], 0.6) for i, p in enumerate(("a", "b"))]
    assert evaluation.diagnose(steady) == []


def test_checkpoint_settings_come_from_its_config_json_and_conflicts_are_named(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env": "pd-cluster", "slots": 16, "count": 30}))
    spec = f"ckpt:{run / 'model.zip'}"
    cfg = evaluation.resolve_config(evaluation.EvalConfig(policies=("hexagent", spec)))
    assert cfg.slots == 16  # adopted: the env's default would be 256
    assert cfg.count is None  # workload options are the command's, not the checkpoint's
    assert "--slots 16" in evaluation.command_for(cfg)
    with pytest.raises(
        evaluation.EvaluationError, match="trained with --slots 16.*pass --slots 16"
    ):
        evaluation.resolve_config(evaluation.EvalConfig(policies=(spec,), slots=256))
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"env": "pd-cluster", "slots": 8}))
    with pytest.raises(evaluation.EvaluationError, match="different --slots"):
        evaluation.resolve_config(
            evaluation.EvalConfig(policies=(spec, f"ckpt:{other / 'model.zip'}"))
        )
    (other / "config.json").write_text(json.dumps({"env": "routing"}))
    with pytest.raises(evaluation.EvaluationError, match="trained on --env routing"):
        evaluation.resolve_config(evaluation.EvalConfig(policies=(f"ckpt:{other / 'model.zip'}",)))


def _bfcl_trace(path: Path, count: int = 6) -> list[Any]:
    from traces.generators import generate
    from traces.io import write_trace

    records = generate("bfcl", seed=5, count=count)
    write_trace(records, path)
    return records


def test_trace_file_runs_end_to_end_and_its_regenerate_line_reproduces_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _bfcl_trace(tmp_path / "calls.jsonl")
    monkeypatch.chdir(tmp_path)
    argv = ["--workload", "calls.jsonl", "--policies", "per-call-fcfs", "--seeds", "0"]
    assert evaluate.main([*argv, "--count", "5", "--load-scale", "2", "--quiet"]) == 0
    first = capsys.readouterr().out
    assert "trace calls.jsonl: --count 5: the first 5 records" in first
    assert "arrival times divided by 2" in first
    regen = next(line for line in first.splitlines() if line.startswith("regenerate: "))
    assert "--workload calls.jsonl" in regen and "--model llama3.1-70b" in regen
    again = regen.removeprefix("regenerate: python evaluate.py ").split()
    assert evaluate.main([*again, "--quiet"]) == 0
    second = capsys.readouterr().out

    def row(out: str) -> str:
        return next(line for line in out.splitlines() if line.startswith("per-call-fcfs "))

    assert row(first) == row(second)
    [result] = json.loads(next(tmp_path.glob("results/*/results.json")).read_text())
    assert result["workload"] == "calls.jsonl"


def test_trace_source_applies_count_load_scale_and_model_to_a_trace(tmp_path: Path) -> None:
    from envs.common.workloads import TraceSource
    from traces.schema import LLMNode

    records = _bfcl_trace(tmp_path / "calls.jsonl")
    src = TraceSource("bfcl", str(tmp_path / "calls.jsonl"), count=4, load_scale=2.0)
    got = src.records(seed=0)
    assert [r.id for r in got] == [r.id for r in records[:4]]
    assert [r.arrival for r in got] == [r.arrival / 2.0 for r in records[:4]]
    assert got == src.records(seed=123)  # a trace does not depend on the seed
    other = TraceSource("bfcl", records, model_override="qwen3-235b-a22b").records(seed=0)
    models = {n.model for r in other for n in r.nodes if isinstance(n, LLMNode)}
    assert models == {"qwen3-235b-a22b"}
    with pytest.raises(ValueError, match="has 6 records; workload count 7 asks for more"):
        TraceSource("bfcl", records, count=7).records(seed=0)
    with pytest.raises(ValueError, match="does not apply to a trace"):
        TraceSource("bfcl", records, rate=2.0)


def test_trace_errors_name_the_file_and_envs_without_traces_refuse_them(tmp_path: Path) -> None:
    _bfcl_trace(tmp_path / "calls.jsonl")
    with pytest.raises(EvaluationError, match="no such trace file"):
        evaluation.evaluate(tiny(workloads=(str(tmp_path / "missing.jsonl"),)), resolve=stand_in)
    with pytest.raises(EvaluationError, match="does not replay trace files"):
        evaluation.evaluate(
            EvalConfig(env="allocation", workloads=(str(tmp_path / "calls.jsonl"),), quiet=True)
        )


def test_a_trace_naming_a_model_outside_the_simulator_catalog_is_refused(tmp_path: Path) -> None:
    # the simulator catalog's model names, checked as the file is read (traces.models)
    from traces.io import write_trace

    path = tmp_path / "calls.jsonl"
    records = _bfcl_trace(path)
    renamed = [
        dataclasses.replace(r, nodes=[_rename(n, "gpt-9") for n in r.nodes]) for r in records
    ]
    write_trace(renamed, path, validate=False)
    with pytest.raises(EvaluationError, match=r"unknown model.*the catalog models.*gpt-9"):
        evaluation.evaluate(tiny(workloads=(str(path),)), resolve=stand_in)


def _rename(node: Any, model: str) -> Any:
    from traces.schema import LLMNode

    return dataclasses.replace(node, model=model) if isinstance(node, LLMNode) else node
