"""HexAgent's greedy / one-pass switch: what the threshold costs and buys.

    python -m benchmarks.hexagent_threshold [--workloads bfcl,mixed] [--seeds 0,1,2]
        [--thresholds 0,32,none] [--cluster hetero-1] [--model llama3.1-70b] [--count N]

HexAgent §5.3 says "for small queues ... greedy" (re-rank the remaining calls after every pick) and
"for larger queues ... one-pass ordering" (rank once per invocation) without giving the queue length
where it switches. ``heuristics.pd_cluster.hexagent.DEFAULT_THRESHOLD`` is servegym's choice; this
benchmark measures it against always-one-pass (0) and always-greedy (``none``): Req95 / Req99 (mean
over seeds) and the wall time per scheduler invocation of the whole decision loop (the env's
projection and the policy, i.e. the planner's work; the simulator's events between invocations are
included, so read the times as ratios between rows of one run).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from envs.pd_cluster import PDClusterEnv


def _threshold(text: str) -> int:
    return 10**9 if text.strip().lower() == "none" else int(text)


def run(
    cluster: str, model: str, workload: str, count: int | None, threshold: int, seeds: list[int]
) -> dict[str, float]:
    """Mean Req95, Req99 and ms per invocation of HexAgent with ``threshold`` over ``seeds``."""
    from evaluation.runs import run_episode
    from heuristics import make_policy

    env = PDClusterEnv(cluster=cluster, model=model, workload=workload, workload_count=count)
    req95, req99, wall, invocations = [], [], 0.0, 0
    for seed in seeds:
        policy = make_policy("hexagent", threshold=threshold)
        start = time.perf_counter()
        out = run_episode(env, policy, seed)
        wall += time.perf_counter() - start
        invocations += out["invocations"]
        req95.append(out["metrics"]["req95"])
        req99.append(out["metrics"]["req99"])
    return {
        "req95": float(np.mean(req95)),
        "req99": float(np.mean(req99)),
        "ms_per_invocation": 1e3 * wall / max(1, invocations),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="bfcl,mixed")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument(
        "--thresholds",
        default="0,32,none",
        help="comma-separated waiting-call thresholds; 'none' = always greedy",
    )
    ap.add_argument("--cluster", default="hetero-1")
    ap.add_argument("--model", default="llama3.1-70b")
    ap.add_argument("--count", type=int, default=None, help="workflows (default: the paper's)")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    labels = [t.strip() for t in args.thresholds.split(",")]
    print(
        f"HexAgent threshold on {args.cluster} / {args.model}, seeds {seeds} "
        f"(count {args.count or 'paper'})"
    )
    print(f"{'workload':10s} {'threshold':>9s} {'Req95':>7s} {'Req99':>7s} {'ms/inv':>8s}")
    for workload in args.workloads.split(","):
        for label in labels:
            r = run(args.cluster, args.model, workload, args.count, _threshold(label), seeds)
            print(
                f"{workload:10s} {label:>9s} {r['req95']:7.3f} {r['req99']:7.3f} "
                f"{r['ms_per_invocation']:8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
