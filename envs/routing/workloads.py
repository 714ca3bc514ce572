"""Routing-v0's workloads and SLO settings: the GoodServe request generators' rates at load scale 1
(the Mooncake conversation trace's), the default episode size and load, the SLO's reference GPU
(GoodServe §4) and bases, and the checks a replayed request trace must pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envs.sim.hardware.cluster import ClusterSpec
from traces.generators.goodserve import paper_rate
from traces.generators.goodserve_sessions import default_rate as sessions_rate

TASKS = ("sql", "code", "swe")
#: GoodServe §4: the mid-tier GPU whose run-alone latency defines the SLO.
SLO_REFERENCE_GPU = "a800"
SLO_BASES = ("request", "task")
#: Requests per episode when neither ``workload_count`` nor a trace is given.
DEFAULT_COUNT = 500
#: ``load_scale`` of the generated workload when none is given (see RoutingEnv).
DEFAULT_LOAD_SCALE = 0.35
#: Arrival rate (requests/s) at ``load_scale`` 1 of each generator: the Mooncake conversation
#: trace's rate, read from the generators' statistics files (their single source of truth).
PAPER_RATES = {"goodserve": paper_rate(), "goodserve-sessions": sessions_rate()}


def check_requests(records: Sequence[Any]) -> None:
    """Routing serves requests: a workflow record must be a single LLM call.

    :raises ValueError: naming the first record that is a multi-node workflow or a tool.
    """
    for i, rec in enumerate(records):
        nodes = getattr(rec, "nodes", None)
        if nodes is not None and (len(nodes) != 1 or getattr(nodes[0], "kind", "") != "llm"):
            raise ValueError(
                f"record {i} ({rec.id!r}) is a workflow of {len(nodes)} node(s); Routing-v0 routes "
                "single requests (servegym.request/1 records or one-LLM-call workflows). Use "
                "servegym/PDCluster-v0 for workflow DAGs"
            )


def reference_tp(cluster: ClusterSpec, gpu: str) -> int:
    """TP of ``gpu`` instances in the cluster, else 1."""
    for s in cluster.instances:
        if s.gpu == gpu:
            return s.tp
    return 1
