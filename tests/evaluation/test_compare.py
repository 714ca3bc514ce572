"""evaluation.compare: policies on identical episodes from Python, as rows and as the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evaluation import Comparison, EvaluationError, compare

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"workload_count": 20}


class FirstLegal:
    """A policy object: the first legal action."""

    name = "first-legal"

    def reset(self) -> None:
        pass

    def act(self, obs, info) -> int:
        return int(info["action_mask"].argmax())


def test_compare_runs_every_policy_on_the_same_episodes_and_tabulates_them() -> None:
    result = compare(
        ["goodserve", "least-request", FirstLegal()], env="routing-v0", seeds=[0, 1], **SMALL
    )
    assert isinstance(result, Comparison)
    rows, text = result
    assert [(r["policy"], r["seed"]) for r in rows] == [
        (p, s) for p in ("goodserve", "least-request", "first-legal") for s in (0, 1)
    ]
    for seed in (0, 1):
        counts = {r["metrics"]["num_requests"] for r in rows if r["seed"] == seed}
        assert counts == {20.0}
    assert "goodserve" in text and "first-legal" in text and "best of" in text
    again = compare(["least-request"], env="servegym/Routing-v0", seeds=[1], **SMALL)
    [row] = again.rows
    [same] = [r for r in rows if r["policy"] == "least-request" and r["seed"] == 1]
    assert row["metrics"] == same["metrics"]


def test_compare_names_what_is_wrong() -> None:
    with pytest.raises(EvaluationError, match="distinct"):
        compare(["goodserve", "goodserve"], env="routing", seeds=[0], **SMALL)
    with pytest.raises(EvaluationError, match="unknown env"):
        compare(["goodserve"], env="servegym/Routnig-v0", seeds=[0])
    with pytest.raises(EvaluationError, match="at least one seed"):
        compare(["goodserve"], env="routing", seeds=[])
    with pytest.raises(EvaluationError, match="act\\(obs, info\\)"):
        compare([42], env="routing", seeds=[0], **SMALL)


def test_ckpt_family_names_the_shipped_checkpoint() -> None:
    from agents.checkpoint import checkpoint_config, resolve_checkpoint
    from checkpoints import families, shipped

    assert families() == [
        "allocation",
        "allocation-v0",
        "pd-cluster",
        "pd-cluster-v0",
        "routing",
        "routing-v0",
    ]
    for family in families():
        assert resolve_checkpoint(family) == shipped(family) / "model.zip"
        assert checkpoint_config(family).is_file()
    assert shipped("nope") is None


@pytest.mark.slow
def test_quickstart_example_runs_as_written(tmp_path: Path) -> None:
    """examples/quickstart.py (the README's and Getting started's code), from another directory."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"},
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for policy in ("MaskablePPO", "ckpt:routing", "goodserve", "least-request"):
        assert any(line.startswith(policy) for line in out.stdout.splitlines()), policy
