"""HexAgent §7.1 "Mixed": ShareGPT, BFCL and LATS workflows interleaved on one arrival stream.

Each arrival picks its family uniformly at random (HexAgent gives no proportions; equal thirds
is our documented choice) and is built by that family's ``build_workflow`` with the family's
own fitted statistics, so every per-family target of ``sharegpt``, ``bfcl`` and ``lats`` holds
within its share.

Target statistics: family share 1/3 each; arrival rate 10 workflows/s (100 workflows,
HexAgent §7.1); per-family targets as in :mod:`~traces.generators.sharegpt`,
:mod:`~traces.generators.bfcl` and :mod:`~traces.generators.lats`.
"""

from __future__ import annotations

import numpy as np

from traces.generators._common import arrivals, check_count, load_stats
from traces.generators.bfcl import build_workflow as build_bfcl
from traces.generators.lats import build_workflow as build_lats
from traces.generators.sharegpt import build_workflow as build_sharegpt
from traces.schema import Workflow

FAMILIES = ("sharegpt", "bfcl", "lats")
DEFAULT_COUNT = 100
DEFAULT_RATE_PER_S = 10.0
DEFAULT_MODEL = "llama3.1-70b"


def generate_mixed(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrival_process: str = "poisson",
) -> list[Workflow]:
    """Interleaved ShareGPT / BFCL / LATS workflows.

    :param seed: RNG seed; same seed gives the same trace.
    :param count: number of workflows (default 100).
    :param rate: mean arrival rate in workflows/s (default 10).
    :param model: catalog model (default ``llama3.1-70b``).
    :param arrival_process: ``"poisson"`` or ``"bursty"``.
    """
    count = check_count(DEFAULT_COUNT if count is None else count)
    rng = np.random.default_rng(seed)
    times = arrivals(rng, count, DEFAULT_RATE_PER_S if rate is None else rate, arrival_process)
    model = model or DEFAULT_MODEL
    builders = {
        "sharegpt": build_sharegpt,
        "bfcl": build_bfcl,
        "lats": build_lats,
    }
    picks = rng.integers(0, len(FAMILIES), count)
    out = []
    for i in range(count):
        fam = FAMILIES[int(picks[i])]
        out.append(builders[fam](rng, f"mixed-{i}-{fam}", float(times[i]), model, load_stats(fam)))
    return out
