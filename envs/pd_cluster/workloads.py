"""PDCluster-v0's workloads: HexAgent §7.1's (workflows per episode, arrival rate) per generator
and the default model; the workflow generators themselves are in :mod:`traces.generators`."""

from __future__ import annotations

#: The model when none is given: HexAgent's main model (§7.1).
DEFAULT_MODEL = "llama3.1-70b"

#: HexAgent §7.1 workloads: (workflows, arrival rate in workflows/s).
PAPER_WORKLOADS: dict[str, tuple[int, float]] = {
    "sharegpt": (100, 10.0),
    "bfcl": (400, 40.0),
    "lats": (100, 40.0),
    "mixed": (100, 10.0),
}
