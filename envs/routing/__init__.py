"""``servegym/Routing-v0``: GoodServe's problem, routing each request of a stream to
one instance of a heterogeneous monolithic cluster and migrating requests at risk. The Gym class
and its docstring table are in :mod:`envs.routing.env`; what a router knows is
:class:`~envs.routing.context.RoutingContext`; :mod:`envs.routing.diagnosis` explains where the
requests' time went. The env delegates its observation, rewards / metrics / ``info`` and
rendering to :mod:`~envs.routing.observation`, :mod:`~envs.routing.results` and
:mod:`~envs.routing.render`; :mod:`~envs.routing.workloads` holds the rates and SLO settings.
"""

from envs.routing.context import InstanceMonitor, RoutingContext
from envs.routing.diagnosis import RoutingDiagnosis
from envs.routing.env import RoutingEnv
from envs.routing.workloads import (
    DEFAULT_COUNT,
    DEFAULT_LOAD_SCALE,
    PAPER_RATES,
    SLO_REFERENCE_GPU,
)

__all__ = [
    "DEFAULT_COUNT",
    "DEFAULT_LOAD_SCALE",
    "PAPER_RATES",
    "SLO_REFERENCE_GPU",
    "InstanceMonitor",
    "RoutingContext",
    "RoutingDiagnosis",
    "RoutingEnv",
]
