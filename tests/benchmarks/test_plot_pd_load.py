"""examples/plot_pd_load.py: merging load-sweep results and what it refuses."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("plot_pd_load", ROOT / "examples/plot_pd_load.py")
assert _spec is not None and _spec.loader is not None
plot_pd_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plot_pd_load)


def _row(policy: str, load: float, seed: int, req99: float | None, option="load_scale"):
    return {
        "cluster": "hetero-1",
        "workload": "mixed",
        "policy": policy,
        "seed": seed,
        "sweep": {"option": option, "value": load},
        "metrics": {"req99": req99},
    }


def test_later_files_override_earlier_runs_and_unfinished_runs_count_as_inf(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps([_row("atlas", 1.0, 0, 3.0), _row("atlas", 1.0, 1, 5.0)]))
    b.write_text(json.dumps([_row("atlas", 1.0, 1, 1.0), _row("hexagent", 1.0, 0, None)]))
    rows = plot_pd_load.load_rows([str(a), str(b)])
    assert len(rows) == 3
    atlas = [r for r in rows if r["policy"] == "atlas"]
    assert plot_pd_load._mean_req99(atlas, 1.0) == 2.0  # (3 + 1) / 2: b's seed 1 replaced a's
    hexagent = [r for r in rows if r["policy"] == "hexagent"]
    assert plot_pd_load._mean_req99(hexagent, 1.0) == math.inf
    assert math.isnan(plot_pd_load._mean_req99(hexagent, 2.0))
    out = plot_pd_load.plot(rows, tmp_path / "fig.png")
    assert out.stat().st_size > 0


def test_rows_of_another_sweep_are_refused(tmp_path):
    path = tmp_path / "slo.json"
    path.write_text(json.dumps([_row("atlas", 2.0, 0, 1.5, option="slo_scale")]))
    with pytest.raises(ValueError, match="not a load_scale sweep"):
        plot_pd_load.load_rows([str(path)])
