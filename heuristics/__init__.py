"""Expert and baseline policies for servegym, each acting through the env's action space.

    from heuristics import make_policy, POLICIES
    policy = make_policy("hexagent")
    obs, info = env.reset(seed=0); policy.reset()
    action = policy.act(obs, info)

Registry names: ``hexagent``, ``per-call-fcfs``, ``workflow-fcfs``, ``workflow-llf``,
``atlas``, ``plas``, ``workflow-fcfs+hetero-placement``, ``hexagent-order+load-balanced``,
``random``. Each factory's docstring states its rule and source.
"""

from heuristics import autellix, fcfs, hexagent, llf, random_policy  # noqa: F401  (register)
from heuristics.base import (
    POLICIES,
    ComposedPolicy,
    KeyOrdering,
    OrderingRule,
    PlacementRule,
    Policy,
    make_policy,
    register,
)
from heuristics.placement import PLACEMENTS, heterogeneity_aware, load_balanced

__all__ = [
    "POLICIES",
    "PLACEMENTS",
    "ComposedPolicy",
    "KeyOrdering",
    "OrderingRule",
    "PlacementRule",
    "Policy",
    "heterogeneity_aware",
    "load_balanced",
    "make_policy",
    "register",
]
