"""servegym environments. Importing this package registers them with Gymnasium.

import envs, gymnasium
env = gymnasium.make("servegym/PDCluster-v0", cluster="hetero-1", workload="mixed")
env = gymnasium.make("servegym/Routing-v0", cluster="goodserve-4", model="llama3.1-8b")
env = gymnasium.make("servegym/Allocation-v0", cluster="scepsy-16", gpus=4, workload="rag_reranker")
env = gymnasium.make("servegym/Allocation-v1")   # the workflow rate ramps through the knee
# an installed servegym registers the ids when gymnasium is imported (_servegym_register.py);
# from a source checkout without the import: gymnasium.make("envs:servegym/PDCluster-v0")

The registered ids are made for learners: ``info`` leaves out the decision context the experts
act on (``decision_context=True`` puts it back); every other default is the env class's own,
except where a newer version of an env sets its own (:data:`ALLOCATION_V1_KWARGS`).
The rules every env follows (actions, masks, ``info``, rendering) are in :mod:`envs.common.base`.
"""

from typing import Any

from gymnasium.envs.registration import register, registry

#: Keyword arguments every registered id passes: ``gym.make(id)`` is for learners, so its
#: ``info`` leaves out the heavy decision context (``envs.common.base``); a policy that reads it
#: asks for it with ``gym.make(id, decision_context=True)``.
REGISTERED_KWARGS: dict[str, Any] = {"decision_context": False}

for _id, _entry in (
    ("servegym/PDCluster-v0", "envs.pd_cluster:PDClusterEnv"),
    ("servegym/Routing-v0", "envs.routing:RoutingEnv"),
    ("servegym/Allocation-v0", "envs.allocation:AllocationEnv"),
):
    if _id not in registry:
        register(id=_id, entry_point=_entry, kwargs=dict(REGISTERED_KWARGS))

#: ``servegym/Allocation-v1``'s defaults over the env class's (Allocation-v0's): the workflow rate
#: steps from 0.5 to 4 times the workload's default rate over 6 periods of 60 s (Scepsy Fig. 6's
#: throughput sweep as one episode). The class docstring's Version History says why and what it
#: measured. Arguments passed to ``gym.make`` override these.
ALLOCATION_V1_KWARGS: dict[str, Any] = {
    "rate_ramp": (0.5, 4.0),
    "periods": 6,
    "period_seconds": 60.0,
}
if "servegym/Allocation-v1" not in registry:
    register(
        id="servegym/Allocation-v1",
        entry_point="envs.allocation:AllocationEnv",
        kwargs={**REGISTERED_KWARGS, **ALLOCATION_V1_KWARGS},
    )

#: Short env names used by ``train.py`` and ``evaluate.py``: the gym id, and how their
#: command-line options map to the env's keyword arguments (one table for both scripts).
CLI_ENVS: dict[str, tuple[str, dict[str, str]]] = {
    "pd-cluster": (
        "servegym/PDCluster-v0",
        {
            "cluster": "cluster",
            "model": "model",
            "workload": "workload",
            "count": "workload_count",
            "load_scale": "load_scale",
            "estimate_error": "estimate_error",
            "output_predictor": "output_predictor",
            "slots": "slots",
            "tool_estimate": "tool_estimate",
            "planning_delay": "planning_delay",
            "prefix_cache": "prefix_cache",
            "prefix_cache_visible": "prefix_cache_visible",
            "reward": "reward",
        },
    ),
    "routing": (
        "servegym/Routing-v0",
        {
            "cluster": "cluster",
            "model": "model",
            "workload": "workload",
            "count": "workload_count",
            "load_scale": "load_scale",
            "slo_scale": "slo_scale",
            "slo_basis": "slo_basis",
            "instances": "instances",
            "output_predictor": "output_predictor",
            "predictor_error": "predictor_error",
            "engine": "engine",
            "prefill_mode": "prefill_mode",
            "token_budget": "token_budget",
            "check_interval": "check_interval",
            "migration": "migration",
            "reward": "reward",
        },
    ),
    "allocation": (
        "servegym/Allocation-v0",
        {
            "cluster": "cluster",
            "gpus": "gpus",
            "workload": "workload",
            "workflow_rate": "workflow_rate",
            "rate_trace": "rate_trace",
            "rate_window": "rate_window",
            "periods": "periods",
            "period_seconds": "period_seconds",
            "warmup_seconds": "warmup_seconds",
            "units_per_gpu": "units_per_gpu",
            "apl_info": "apl_info",
            "slo_scale": "slo_scale",
            "engine": "engine",
            "reward": "reward",
        },
    ),
}


CLI_ENVS["allocation-v1"] = (
    "servegym/Allocation-v1",
    {**CLI_ENVS["allocation"][1], "rate_ramp": "rate_ramp"},
)


def env_short_name(name: str) -> str:
    """The short name (``routing``) of an env given by short name or Gymnasium id
    (``servegym/Routing-v0``, also ``envs:servegym/Routing-v0``), as ``train.py --env`` and
    ``evaluate.py --env`` take it.

    :raises ValueError: for an unknown name, with the closest known names and all of them.
    """
    from envs.common.base import did_you_mean

    if name in CLI_ENVS:
        return name
    bare = name.removeprefix("envs:")
    for short, (gym_id, _) in CLI_ENVS.items():
        if bare == gym_id:
            return short
    known = [*CLI_ENVS, *(gym_id for gym_id, _ in CLI_ENVS.values())]
    raise ValueError(f"unknown env {name!r}{did_you_mean(name, known)}; known: {', '.join(known)}")
