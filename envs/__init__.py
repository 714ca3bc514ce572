"""servegym environments. Importing this package registers them with Gymnasium.

import envs, gymnasium
env = gymnasium.make("servegym/PDCluster-v0", cluster="hetero-1", workload="mixed")
env = gymnasium.make("servegym/Routing-v0", cluster="goodserve-4", model="llama3.1-8b")
env = gymnasium.make("servegym/Allocation-v0", cluster="scepsy-16", gpus=4, workload="rag_reranker")
# or, without the import: gymnasium.make("envs:servegym/PDCluster-v0")
"""

from gymnasium.envs.registration import register, registry

if "servegym/PDCluster-v0" not in registry:
    register(id="servegym/PDCluster-v0", entry_point="envs.pd_cluster:PDClusterEnv")
if "servegym/Routing-v0" not in registry:
    register(id="servegym/Routing-v0", entry_point="envs.routing:RoutingEnv")
if "servegym/Allocation-v0" not in registry:
    register(id="servegym/Allocation-v0", entry_point="envs.allocation:AllocationEnv")

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
