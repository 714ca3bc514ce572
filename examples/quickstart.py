import gymnasium as gym
from sb3_contrib import MaskablePPO

import evaluation

# Train a router on short episodes (50 requests) of GoodServe's problem.
env = gym.make("servegym/Routing-v1", workload_count=50)
model = MaskablePPO("MultiInputPolicy", env, n_steps=128, batch_size=64, seed=0)
model.learn(total_timesteps=256)

# Compare it with the shipped router, the expert and a baseline
# on the same held-out episodes.
policies = [model, "ckpt:routing", "goodserve", "least-request"]
seeds = [1_000_000, 1_000_001]
result = evaluation.compare(policies, "servegym/Routing-v1", seeds, workload_count=50)
print(result.text)
