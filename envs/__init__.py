"""servegym environments. Importing this package registers them with Gymnasium.

import envs, gymnasium
env = gymnasium.make("servegym/PDCluster-v0", cluster="hetero-1", workload="mixed")
# or, without the import: gymnasium.make("envs:servegym/PDCluster-v0")
"""

from gymnasium.envs.registration import register, registry

if "servegym/PDCluster-v0" not in registry:
    register(id="servegym/PDCluster-v0", entry_point="envs.pd_cluster:PDClusterEnv")
