"""Run the simulator without RL: a cluster, a workload and the default scheduler.

    python -m envs.sim.run --cluster hetero-1 --workload mixed --seed 0
    python -m envs.sim.run --cluster goodserve-4 --model llama3.1-8b --workload goodserve \
        --engine vllm
    python -m envs.sim.run --cluster hetero-1 --trace my_trace.jsonl

Prints Req95/Req99 (HexAgent §7.3), latency percentiles and per-role utilisation.
"""

from __future__ import annotations

import argparse
import json
import sys

from envs.sim.cluster import cluster_names, load_cluster
from envs.sim.engines import engine_names
from envs.sim.scheduler import DefaultScheduler, EarliestFinishScheduler
from envs.sim.simulation import Simulation, SimulationResult

SCHEDULERS = {"default": DefaultScheduler, "earliest-finish": EarliestFinishScheduler}


def load_workload(
    workload: str | None, trace: str | None, seed: int, count: int | None, model: str | None
) -> list:
    """Records from a trace file, or from a generator in :mod:`traces.generators`."""
    if trace:
        from traces.io import read_trace

        return read_trace(trace)
    from traces.generators import generate

    kwargs = {"model": model} if model else {}
    return generate(workload or "mixed", seed=seed, count=count, **kwargs)


def format_result(res: SimulationResult) -> str:
    """A short human-readable report."""
    lines = [
        f"workflows {len(res.workflows)}  calls {len(res.calls)}  simulated {res.end_time:.1f} s"
        f"  events {res.events}  invocations {res.invocations}  wall {res.wall_seconds:.2f} s"
    ]
    m = res.metrics
    if m:
        lines.append(
            f"Req95 {m['req95']:.3f}  Req99 {m['req99']:.3f}  mean C/H {m['mean_ratio']:.3f}  "
            f"attainment@2 {m['attainment_at_2']:.3f}"
        )
    ct = sorted(w.completion_time for w in res.workflows)
    if ct:
        lines.append(f"completion time p50 {ct[len(ct) // 2]:.2f} s  max {ct[-1]:.2f} s")
    lines.append(
        "utilisation " + "  ".join(f"{k} {v:.1%}" for k, v in sorted(res.utilisation.items()))
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cluster", default="hetero-1", help=f"preset or YAML path {cluster_names()}")
    ap.add_argument("--model", default=None, help="catalog model (default: the preset's)")
    ap.add_argument("--workload", default="mixed", help="generator name (traces.generators)")
    ap.add_argument("--trace", default=None, help="a servegym JSONL trace instead of a generator")
    ap.add_argument("--count", type=int, default=None, help="records to generate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--estimate-error", type=float, default=0.0)
    ap.add_argument("--scheduler", choices=sorted(SCHEDULERS), default="default")
    ap.add_argument(
        "--engine",
        choices=engine_names(),
        default=None,
        help="engine preset of monolithic instances (default: engine-neutral)",
    )
    ap.add_argument("--json", action="store_true", help="print metrics as JSON")
    args = ap.parse_args(argv)
    cluster = load_cluster(args.cluster, model=args.model)
    model = args.model or cluster.models[0]
    records = load_workload(args.workload, args.trace, args.seed, args.count, model)
    sim = Simulation(
        cluster, records, seed=args.seed, estimate_error=args.estimate_error, engine=args.engine
    )
    res = sim.run(SCHEDULERS[args.scheduler]())
    if args.json:
        print(json.dumps({"metrics": res.metrics, "utilisation": res.utilisation}, indent=2))
    else:
        print(f"cluster {cluster.name} ({model}), workload {args.trace or args.workload}")
        print(format_result(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
