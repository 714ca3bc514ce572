"""The speed and memory benchmarks (docs/benchmarks/index.md, docs/reliability.md).

Each benchmark times its subject against a reference measured in the same run (a bare heapq
loop, another configuration) and prints its target's PASS/FAIL line; on a shared machine the
absolute rates move with the load (each header prints the load average), the ratios less.
"""

from __future__ import annotations

from evaluation.report.stage import stage

STAGES = [
    stage(
        "bench-sim-speed",
        "Simulator events per second against a bare heapq loop (1,000 workflows, hetero-1)",
        "benchmarks/index.md",
        1.2,
        "-m benchmarks.sim_speed --repeat 2",
    ),
    stage(
        "bench-env-speed",
        "PDCluster env steps per second at K = 256 (random policy, HexAgent)",
        "benchmarks/index.md",
        1.8,
        "-m benchmarks.env_speed --episodes 1",
    ),
    stage(
        "bench-scheduler-overhead",
        "HexAgent planning time per invocation on hetero-1 (HexAgent Table 6)",
        "benchmarks/index.md",
        3.8,
        "-m benchmarks.scheduler_overhead --clusters hetero-1",
    ),
    stage(
        "bench-routing-scale",
        "GoodServe routing at 512 instances and 10,000 requests/s",
        "benchmarks/index.md",
        1.8,
        "-m benchmarks.routing_scale --instances 512 --rps 10000",
    ),
    stage(
        "bench-train-speed",
        "PPO env steps per second at K = 256: the flat and the factorised head, 8 envs",
        "benchmarks/index.md",
        1.5,
        "-m benchmarks.train_speed --slots 256 --configs default,factored --envs 8",
    ),
    stage(
        "bench-soak",
        "Memory over a 10,000-workflow episode, at the default rate and at 1.5 workflows/s",
        "reliability.md",
        5,
        "-m benchmarks.soak --skip-resets",
        "-m benchmarks.soak --skip-resets --rate 1.5",
    ),
]
