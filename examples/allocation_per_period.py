"""Per allocation period of Allocation-v1: how many workflows arrive and how many of them finish
within their SLO, per second, for each policy (seed means). Shows where a policy's goodput is
lost on the ramp (the periods where arrivals exceed what it serves within the SLO)::

    python examples/allocation_per_period.py \\
        --policies demand-proportional,aegaeon-1p3d,scepsy,ckpt:checkpoints/allocation \\
        --seeds 2000000,2000001,2000002,2000003

A workflow counts in the period it arrives in; the goodput column is the env's metric (within-SLO
workflows per second of the whole episode).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policies", default="demand-proportional,scepsy")
    ap.add_argument("--seeds", default="2000000,2000001,2000002,2000003")
    ap.add_argument("--workload", default="rag_reranker")
    ap.add_argument("--workflow-rate", type=float, default=None, help="default: the workload's")
    args = ap.parse_args(argv)
    import numpy as np

    import evaluation
    from evaluation.runs import run_episode

    seeds = [int(s) for s in args.seeds.split(",")]
    extra = {} if args.workflow_rate is None else {"workflow_rate": args.workflow_rate}
    config = evaluation.EvalConfig(env="allocation-v1", quiet=True, **extra)
    env = evaluation.make_env(config, args.workload)
    base = env.unwrapped
    periods, length = base.periods, base.period_seconds
    print(f"per period: arrivals/s -> within SLO/s, mean over seeds {args.seeds}")
    for spec in args.policies.split(","):
        counts = np.zeros((periods, 2))
        goodput = []
        for seed in seeds:
            result = run_episode(env, evaluation.resolve_policy(spec, env, "allocation-v1"), seed)
            arrivals = np.array([w.arrival for w in env.unwrapped.workflows])
            if len(arrivals) != len(result["latencies"]):
                raise SystemExit(
                    "per-period counts need warmup_seconds=0 (every workflow measured)"
                )
            ok = np.array(result["latencies"]) <= np.array(result["slos"])
            period = np.minimum((arrivals // length).astype(int), periods - 1)
            for p in range(periods):
                counts[p] += [np.sum(period == p), np.sum(ok & (period == p))]
            goodput.append(result["metrics"]["goodput"])
        rates = counts / (len(seeds) * length)
        cells = "  ".join(f"P{p} {a:.2f}->{s:.2f}" for p, (a, s) in enumerate(rates))
        print(f"{spec:32s} goodput {np.mean(goodput):.3f}  {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
