"""examples/cleanrl_ppo.py: a few hundred stock MaskablePPO steps on each documented env, saved,
reloaded as ``ckpt:`` and compared with the family's expert."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("cleanrl_ppo", ROOT / "examples/cleanrl_ppo.py")
assert _spec is not None and _spec.loader is not None
cleanrl_ppo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cleanrl_ppo)


@pytest.mark.slow  # two short trainings and four episodes: ~1 minute
@pytest.mark.parametrize(
    ("env", "expert"), [("routing-v1", "goodserve"), ("pd-cluster-v1", "hexagent")]
)
def test_a_short_run_trains_saves_and_compares_with_the_expert(tmp_path, env, expert):
    out = tmp_path / "run"
    argv = [
        "--env", env, "--count", "5", "--timesteps", "256", "--n-steps", "64", "--n-envs", "2",
        "--eval-seeds", "1000000", "--out", str(out),
    ]  # fmt: skip
    report = cleanrl_ppo.main(argv)
    assert (out / "model.zip").is_file()
    assert json.loads((out / "result.json").read_text()) == report
    assert report["timesteps"] >= 256
    assert report["expert"] == expert
    assert report["workload_count"] == 5
    assert report["learned"] > 0 and report["expert_value"] > 0


def test_bad_budgets_are_refused_naming_the_option(capsys):
    with pytest.raises(SystemExit):
        cleanrl_ppo.main(["--minutes", "0"])
    assert "--minutes (0.0) must be > 0" in capsys.readouterr().err
