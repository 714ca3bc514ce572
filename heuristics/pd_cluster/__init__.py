"""Experts and baselines for ``servegym/PDCluster-v0`` (HexAgent's problem): each policy is an
ordering rule composed with a placement rule (:mod:`heuristics.pd_cluster.base`,
:mod:`~heuristics.pd_cluster.placement`). Importing this package registers them:
:mod:`~heuristics.pd_cluster.hexagent` (HexAgent §5), :mod:`~heuristics.pd_cluster.fcfs`,
:mod:`~heuristics.pd_cluster.llf`, :mod:`~heuristics.pd_cluster.autellix` (the paper's
baselines) and :mod:`~heuristics.pd_cluster.random_policy`.
"""

from heuristics.pd_cluster import (  # noqa: F401  (register)
    autellix,
    fcfs,
    hexagent,
    llf,
    random_policy,
)
