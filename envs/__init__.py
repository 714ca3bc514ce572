"""servegym environments. Importing this package registers them with Gymnasium.

import envs, gymnasium
env = gymnasium.make("servegym/PDCluster-v0", cluster="hetero-1", workload="mixed")
# or, without the import: gymnasium.make("envs:servegym/PDCluster-v0")
"""

from gymnasium.envs.registration import register, registry

if "servegym/PDCluster-v0" not in registry:
    register(id="servegym/PDCluster-v0", entry_point="envs.pd_cluster:PDClusterEnv")

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
            "slots": "slots",
            "reward": "reward",
        },
    ),
}
