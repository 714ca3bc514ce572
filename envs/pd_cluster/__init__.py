"""``servegym/PDCluster-v0``: HexAgent's problem, ordering and placing the LLM calls
of agentic workflows on a heterogeneous prefill-decode cluster. The Gym class and its docstring
table are in :mod:`envs.pd_cluster.env`; it delegates to :mod:`~envs.pd_cluster.builder` (the
decision context at an invocation), :mod:`~envs.pd_cluster.projection` (decode KV projection
and R(c, p, d)), :mod:`~envs.pd_cluster.observation` and :mod:`~envs.pd_cluster.results`
(rewards, metrics, ``info``).
"""

from envs.pd_cluster.context import DecisionContext
from envs.pd_cluster.env import PDClusterEnv
from envs.pd_cluster.observation import INSTANCE_FEATURES, SLOT_FEATURES
from envs.pd_cluster.projection import capacity_timeline, earliest_feasible_start
from envs.pd_cluster.workloads import DEFAULT_MODEL, PAPER_WORKLOADS

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
