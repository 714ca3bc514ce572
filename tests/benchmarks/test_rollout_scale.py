"""Specifications of benchmarks/rollout_scale.py: every row names its env and, with the serial
``dummy`` reference measured, its ratio to one env in this process."""

from __future__ import annotations

import pytest

from benchmarks import rollout_scale


@pytest.mark.slow  # subprocess envs: 1-2 minutes on a loaded machine
def test_rows_carry_the_ratio_to_one_serial_env(capsys):
    rows = rollout_scale.run("routing-v1", [1, 2], steps=3, backends=["subproc", "dummy"])
    assert [(r["backend"], r["workers"]) for r in rows] == [
        ("dummy", 1), ("dummy", 2), ("subproc", 1), ("subproc", 2),
    ]  # fmt: skip
    assert rows[0]["vs_serial"] == 1.0
    for row in rows:
        assert row["env"] == "routing-v1"
        assert row["vs_serial"] == pytest.approx(
            row["env_steps_per_s"] / rows[0]["env_steps_per_s"], rel=0.05, abs=0.01
        )  # both sides rounded
    assert "one env in this process" in capsys.readouterr().out
