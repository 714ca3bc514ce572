"""examples/allocation_per_period.py: per-period arrivals and within-SLO workflows add up to the
env's goodput."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "allocation_per_period", ROOT / "examples/allocation_per_period.py"
)
assert _spec is not None and _spec.loader is not None
per_period = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(per_period)


def test_the_periods_within_slo_sum_to_the_goodput(capsys: pytest.CaptureFixture[str]) -> None:
    assert per_period.main(["--policies", "naive-equal", "--seeds", "3"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("naive-equal")]
    goodput = float(re.search(r"goodput (\S+)", line).group(1))
    cells = [(float(a), float(s)) for a, s in re.findall(r"P\d (\S+)->(\S+)", line)]
    assert len(cells) == 6  # Allocation-v1's periods
    assert all(0 <= s <= a + 1e-9 for a, s in cells)
    assert cells[-1][0] > cells[0][0]  # the ramp
    assert sum(s for _, s in cells) / len(cells) == pytest.approx(goodput, abs=0.01)
