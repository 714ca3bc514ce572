"""Routers for ``servegym/Routing-v0`` (GoodServe's problem): the router base class and key
routers (:mod:`~heuristics.routing.base`), GoodServe itself (§3,
:mod:`~heuristics.routing.goodserve`), the paper's baselines (:mod:`~heuristics.routing.routers`)
and deployed systems' routing rules (:mod:`~heuristics.routing.deployed_routers`). Importing
this package registers them.
"""

from heuristics.routing import (  # noqa: F401  (register)
    deployed_routers,
    goodserve,
    routers,
)
