"""``servegym/PDCluster-v0``: HexAgent's problem (papers/000), ordering and placing the LLM calls
of agentic workflows on a heterogeneous prefill-decode cluster. The Gym class and its docstring
table are in :mod:`envs.pd_cluster.env`.
"""

from envs.pd_cluster.env import (
    DEFAULT_MODEL,
    INSTANCE_FEATURES,
    PAPER_WORKLOADS,
    SLOT_FEATURES,
    DecisionContext,
    PDClusterEnv,
    capacity_timeline,
    earliest_feasible_start,
)

__all__ = [
    "DEFAULT_MODEL",
    "INSTANCE_FEATURES",
    "PAPER_WORKLOADS",
    "SLOT_FEATURES",
    "DecisionContext",
    "PDClusterEnv",
    "capacity_timeline",
    "earliest_feasible_start",
]
