"""Expert and baseline policies for servegym, each acting through the env's action space.

    from heuristics import make_policy, POLICIES
    policy = make_policy("hexagent")
    obs, info = env.reset(seed=0); policy.reset()
    action = policy.act(obs, info)

Registry names: ``hexagent``, ``per-call-fcfs``, ``workflow-fcfs``, ``workflow-llf``,
``atlas``, ``plas``, ``workflow-fcfs+hetero-placement``, ``hexagent-order+load-balanced``,
``random`` (``servegym/PDCluster-v0``); ``goodserve``, ``goodserve-no-migration``,
``random-route``, ``power-of-two``, ``round-robin``, ``least-request``, ``lowest-tpm``,
``preble``, ``llumnix``, ``earliest-finish``, ``goodserve+shorten``, ``goodserve+queue-aware``,
``prefix-aware-low``, ``llm-d``, ``sglang-cache-aware``, ``dynamo-kv`` (``servegym/Routing-v0``);
``scepsy``, ``scepsy-parallelism-only``, ``scepsy-fractional-only``, ``k8s-hpa``, ``naive-equal``,
``demand-proportional`` (``servegym/Allocation-v0``). ``policies_for(env)`` lists a family's.
Each factory's docstring states its rule and source.
"""

from heuristics import allocation, pd_cluster, routing  # noqa: F401  (register)
from heuristics.base import POLICIES, POLICY_ENVS, Policy, make_policy, policies_for, register
from heuristics.pd_cluster.base import ComposedPolicy, KeyOrdering, OrderingRule, PlacementRule
from heuristics.pd_cluster.placement import PLACEMENTS, heterogeneity_aware, load_balanced

__all__ = [
    "POLICIES",
    "POLICY_ENVS",
    "PLACEMENTS",
    "ComposedPolicy",
    "KeyOrdering",
    "OrderingRule",
    "PlacementRule",
    "Policy",
    "heterogeneity_aware",
    "load_balanced",
    "make_policy",
    "policies_for",
    "register",
]
