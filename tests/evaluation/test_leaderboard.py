"""results/leaderboard.md from evaluate.py results: provenance sidecars (run.json), one section
per env × cluster × model, best-first tables, later files overriding earlier ones, and
byte-identical regeneration."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import evaluate
import evaluation

ROOT = Path(__file__).resolve().parents[2]


def pd_row(policy: str, seed: int, req95: float, req99: float | None, **extra) -> dict:
    return {
        "env": "pd-cluster", "cluster": "hetero-1", "model": "llama3.1-70b",
        "workload": "mixed", "policy": policy, "seed": seed, "workload_count": 5,
        "metrics": {"req95": req95, "req99": req99}, "utilisation": {}, "wall_seconds": 0.5,
        **extra,
    }  # fmt: skip


def routing_row(policy: str, seed: int, goodput: float, violations: float) -> dict:
    return {
        "env": "routing", "cluster": "goodserve-4", "model": "llama3.1-8b",
        "workload": "goodserve", "policy": policy, "seed": seed, "workload_count": None,
        "metrics": {"goodput": goodput, "slo_violation_ratio": violations},
        "utilisation": {}, "wall_seconds": 1.0,
    }  # fmt: skip


def write_run(directory: Path, rows: list[dict], sidecar: dict | None) -> Path:
    directory.mkdir(parents=True)
    path = directory / "results.json"
    path.write_text(json.dumps(rows))
    if sidecar is not None:
        (directory / "run.json").write_text(json.dumps(sidecar))
    return path


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    first = write_run(
        tmp_path / "first",
        [
            pd_row("per-call-fcfs", 0, 1.5, 2.0), pd_row("per-call-fcfs", 1, 1.7, 2.2),
            pd_row("hexagent", 0, 1.1, 1.2), pd_row("hexagent", 1, 1.1, 1.4),
            pd_row("atlas", 0, 1.3, 1.6), pd_row("atlas", 1, 1.3, 1.6),
            routing_row("round-robin", 0, 0.5, 0.3), routing_row("goodserve", 0, 0.8, 0.1),
        ],
        {"command": "python evaluate.py --first", "commit": "abc123",
         "date": "2030-01-02T03:04:05Z"},
    )  # fmt: skip
    # A rerun of atlas alone, without provenance: it replaces both of atlas's earlier seeds.
    second = write_run(tmp_path / "second", [pd_row("atlas", 7, 1.0, 1.05)], None)
    return first, second


def build(tmp_path: Path, *paths: Path) -> str:
    out = tmp_path / "board" / "leaderboard.md"
    assert evaluate.main(["--leaderboard", str(out), *map(str, paths)]) == 0
    return out.read_text()


def table(text: str, heading: str) -> list[str]:
    """The policy column of the table under ``heading``, top to bottom."""
    section = text.split(heading, 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    return re.findall(r"^\| \d+ \| `([^`]+)` \|", section, re.M)


def test_sections_per_env_cluster_model_and_rows_best_first(
    tmp_path: Path, two_runs: tuple[Path, Path]
) -> None:
    text = build(tmp_path, two_runs[0])
    assert text.startswith("# servegym leaderboard\n")
    assert text.index("## pd-cluster · hetero-1 · llama3.1-70b") < text.index(
        "## routing · goodserve-4 · llama3.1-8b"
    )
    # PDCluster: lowest Req99 first; Routing: highest goodput first.
    assert table(text, "### mixed: --count 5") == ["hexagent", "atlas", "per-call-fcfs"]
    assert table(text, "### goodserve: default count") == ["goodserve", "round-robin"]
    # mean ± sample standard deviation over the seeds, and the seeds themselves
    assert "| 1 | `hexagent` | expert | 1.10 ± 0.00 | 1.30 ± 0.14 | 0,1 | 0.5 |" in text
    assert "| `per-call-fcfs` | paper baseline |" in text
    assert "**Reduced-size runs.** 2 of 2 tables" in text


def test_provenance_lines_name_command_commit_and_date_or_say_unknown(
    tmp_path: Path, two_runs: tuple[Path, Path]
) -> None:
    first, second = two_runs
    text = build(tmp_path, first, second)
    assert "- `python evaluate.py --first` (hexagent, per-call-fcfs)" in text
    assert "commit `abc123`, 2030-01-02T03:04:05Z" in text
    assert f"- provenance unknown (atlas): {second.as_posix()} has no run.json" in text
    # The header's reproduce block: the runs' commands, then this file's own command.
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert block[0] == "python evaluate.py --first"
    assert block[-1].startswith("python evaluate.py --leaderboard ")


def test_a_later_file_overrides_every_seed_of_the_same_setting_and_policy(
    tmp_path: Path, two_runs: tuple[Path, Path]
) -> None:
    first, second = two_runs
    text = build(tmp_path, first, second)
    assert table(text, "### mixed: --count 5") == ["atlas", "hexagent", "per-call-fcfs"]
    assert "| 1 | `atlas` | paper baseline | 1.00 | 1.05 | 7 |" in text
    assert "1.30 ± 0.00" not in text  # the earlier atlas seeds are gone
    # The other order: the earlier atlas is back.
    again = build(tmp_path, second, first)
    assert "| 2 | `atlas` | paper baseline | 1.30 ± 0.00 | 1.60 ± 0.00 | 0,1 |" in again


def test_a_different_count_is_a_separate_table_not_an_override(tmp_path: Path) -> None:
    small = write_run(tmp_path / "small", [pd_row("hexagent", 0, 1.1, 1.2)], None)
    big = write_run(tmp_path / "big", [pd_row("hexagent", 0, 1.3, 1.5, workload_count=None)], None)
    text = build(tmp_path, small, big)
    assert table(text, "### mixed: --count 5") == ["hexagent"]
    assert table(text, "### mixed: default count") == ["hexagent"]


def test_an_unfinished_run_ranks_last(tmp_path: Path) -> None:
    path = write_run(
        tmp_path / "r",
        [pd_row("hexagent", 0, 1.1, None), pd_row("per-call-fcfs", 0, 1.9, 2.5)],
        None,
    )
    text = build(tmp_path, path)
    assert table(text, "### mixed: --count 5") == ["per-call-fcfs", "hexagent"]
    assert "| 2 | `hexagent` | expert | 1.10 | inf |" in text


def test_regenerating_from_the_same_files_gives_the_same_bytes(
    tmp_path: Path, two_runs: tuple[Path, Path]
) -> None:
    assert build(tmp_path, *two_runs) == build(tmp_path, *two_runs)


def test_bad_inputs_stop_with_the_file_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "rows"}')
    out = tmp_path / "lb.md"
    assert evaluate.main(["--leaderboard", str(out), str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err and not out.exists()
    assert evaluate.main(["--leaderboard", str(out), str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_git_commit_is_unknown_outside_a_checkout_and_a_hash_inside(tmp_path: Path) -> None:
    assert evaluation.git_commit(tmp_path) == "unknown"
    if (ROOT / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", evaluation.git_commit(ROOT))


def test_evaluate_writes_run_json_beside_results_and_keeps_rows_free_of_provenance(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    argv = ["--workload", "mixed", "--count", "3", "--seeds", "0", "--policies",
            "per-call-fcfs", "--quiet", "--out", str(out)]  # fmt: skip
    assert evaluate.main(argv) == 0
    sidecar = json.loads((out / "run.json").read_text())
    config = evaluation.parse_args(argv)
    assert sidecar["command"] == f"{evaluation.command_for(config)} --out {out}"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", sidecar["date"])
    assert sidecar["commit"]
    rows = json.loads((out / "results.json").read_text())
    assert not {"command", "commit", "date"} & set(rows[0])
    text = build(tmp_path, out / "results.json")
    assert sidecar["command"] in text and sidecar["date"] in text


def test_a_list_valued_option_is_a_setting_like_any_other(tmp_path):
    """Allocation-v1's rate_ramp is a list in results.json; the leaderboard keys settings on it."""
    from evaluation.leaderboard import load_leaderboard_rows

    row = {
        "env": "allocation-v1", "cluster": "scepsy-16", "model": None, "workload": "rag_reranker",
        "policy": "scepsy", "seed": 0, "rate_ramp": [0.5, 4.0], "metrics": {"goodput": 1.0},
    }  # fmt: skip
    path = tmp_path / "results.json"
    path.write_text(json.dumps([row, {**row, "seed": 1}]))
    ((rows, index),) = load_leaderboard_rows([path]).values()
    assert len(rows) == 2 and index == 0
