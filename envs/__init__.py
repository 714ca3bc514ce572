"""servegym environments. Importing this package registers them with Gymnasium.

import envs, gymnasium
env = gymnasium.make("servegym/PDCluster-v1", cluster="hetero-1", workload="mixed")
env = gymnasium.make("servegym/Routing-v1", cluster="goodserve-4", model="llama3.1-8b")
env = gymnasium.make("servegym/Allocation-v0", cluster="scepsy-16", gpus=4, workload="rag_reranker")
env = gymnasium.make("servegym/Allocation-v1")   # the workflow rate ramps through the knee
# an installed servegym registers the ids when gymnasium is imported (_servegym_register.py);
# from a source checkout without the import: gymnasium.make("envs:servegym/PDCluster-v0")

The registered ids are made for learners: ``info`` leaves out the decision context the experts
act on (``decision_context=True`` puts it back). Every other ``-v0`` default is the env class's
own; a ``-v1`` id changes the defaults in :data:`V1_KWARGS` (``-v0`` stays registered).
The rules every env follows (actions, masks, ``info``, rendering) are in :mod:`envs.common.base`.
"""

import re
import warnings
from typing import Any

from gymnasium.envs.registration import register, registry

# The -v0 ids stay registered on purpose (published v0 numbers stay checkable), so Gymnasium's
# "is out of date, consider upgrading" notice on making one is noise, not advice.
warnings.filterwarnings(
    "ignore", r".*The environment servegym/\w+-v0 is out of date", DeprecationWarning
)

#: Keyword arguments every registered id passes: ``gym.make(id)`` is for learners, so its
#: ``info`` leaves out the heavy decision context (``envs.common.base``); a policy that reads it
#: asks for it with ``gym.make(id, decision_context=True)``.
REGISTERED_KWARGS: dict[str, Any] = {"decision_context": False}

#: What each ``-v1`` id changes against the env class's defaults (which are ``-v0``'s); the
#: class docstrings' Version History says why and what it measurably does. Every ``-v1`` id
#: prices work with the ``smooth-roofline`` calibration (the simulator's default: the better
#: held-out errors); every ``-v0`` id keeps the class default ``roofline``.
V1_KWARGS: dict[str, dict[str, Any]] = {
    # a slot step (with keep) then a pair step instead of one Discrete(K·P·D) step per pick
    "servegym/PDCluster-v1": {"action_space": "two-step"},
    # the task-median SLO basis (GoodServe §5), which leaks no request's true output length
    "servegym/Routing-v1": {"slo_basis": "task"},
    # the workflow rate steps from 0.5 to 4 times the workload's default rate over 6 periods of
    # 60 s (Scepsy Fig. 6's throughput sweep as one episode)
    "servegym/Allocation-v1": {"rate_ramp": (0.5, 4.0), "periods": 6, "period_seconds": 60.0},
}
for _kwargs in V1_KWARGS.values():
    _kwargs["latency_calibration"] = "smooth-roofline"

for _id, _entry in (
    ("servegym/PDCluster-v0", "envs.pd_cluster:PDClusterEnv"),
    ("servegym/Routing-v0", "envs.routing:RoutingEnv"),
    ("servegym/Allocation-v0", "envs.allocation:AllocationEnv"),
    ("servegym/PDCluster-v1", "envs.pd_cluster:PDClusterEnv"),
    ("servegym/Routing-v1", "envs.routing:RoutingEnv"),
    ("servegym/Allocation-v1", "envs.allocation:AllocationEnv"),
):
    if _id not in registry:
        register(id=_id, entry_point=_entry, kwargs={**REGISTERED_KWARGS, **V1_KWARGS.get(_id, {})})

#: Short env names used by ``train.py`` and ``evaluate.py``: the gym id, and how their
#: command-line options map to the env's keyword arguments (one table for both scripts).
CLI_ENVS: dict[str, tuple[str, dict[str, str]]] = {
    "pd-cluster": (
        "servegym/PDCluster-v0",
        {
            "cluster": "cluster",
            "latency_calibration": "latency_calibration",
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
            "latency_calibration": "latency_calibration",
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
            "rate_ramp": "rate_ramp",
            "latency_calibration": "latency_calibration",
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


#: The version the plain short names (``routing``) and the scripts' defaults mean.
DEFAULT_VERSION = "v1"

# ``pd-cluster``, ``routing`` and ``allocation`` name the :data:`DEFAULT_VERSION` ids; the
# ``-v0`` and ``-v1`` short names name each id explicitly (``routing-v0`` reproduces v0).
for _short in ("pd-cluster", "routing", "allocation"):
    _gym_id, _options = CLI_ENVS.pop(_short)
    CLI_ENVS[f"{_short}-v0"] = (_gym_id, _options)
    CLI_ENVS[f"{_short}-v1"] = (_gym_id.replace("-v0", "-v1"), _options)
    CLI_ENVS[_short] = CLI_ENVS[f"{_short}-{DEFAULT_VERSION}"]


def versioned_name(name: str) -> str:
    """The explicit ``-vN`` short name of an env given by short name or Gymnasium id:
    ``routing`` -> ``routing-v1`` (:data:`DEFAULT_VERSION`), ``servegym/Routing-v0`` ->
    ``routing-v0``.

    :raises ValueError: for an unknown name (see :func:`env_short_name`).
    """
    short = env_short_name(name)
    if re.search(r"-v\d+$", short):
        return short
    return f"{short}-{DEFAULT_VERSION}"


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
    for short, (gym_id, _) in CLI_ENVS.items():  # the first short name of an id: its -vN name
        if bare == gym_id:
            return short
    known = list(dict.fromkeys([*CLI_ENVS, *(gym_id for gym_id, _ in CLI_ENVS.values())]))
    # suggest a family's plain name before its versioned aliases
    plain = [k for k in known if not k.endswith(("-v0", "-v1"))]
    hint = did_you_mean(name, plain) or did_you_mean(name, known)
    raise ValueError(f"unknown env {name!r}{hint}; known: {', '.join(known)}")
