"""Run the simulator without RL: a cluster, a workload and the default scheduler.

    python -m envs.sim.core.run --cluster hetero-1 --workload mixed --seed 0
    python -m envs.sim.core.run --cluster goodserve-4 --model llama3.1-8b --workload goodserve \
        --engine vllm
    python -m envs.sim.core.run --cluster hetero-1 --trace my_trace.jsonl

Prints Req95/Req99 (HexAgent §7.3), latency percentiles and per-role utilisation.

A bad input (cluster file, trace, option) is reported as one ``envs.sim.core.run: error: ...`` line
naming the file, record and field, with exit status 2; nothing is written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from envs.sim.core.scheduler import DefaultScheduler, EarliestFinishScheduler
from envs.sim.core.simulation import Simulation, SimulationResult
from envs.sim.core.workflows import WorkloadError
from envs.sim.engines.presets import engine_names
from envs.sim.hardware.cluster import ClusterConfigError, ClusterSpec, cluster_names, load_cluster
from traces.generators import GENERATORS
from traces.validate import TraceValidationError

SCHEDULERS = {"default": DefaultScheduler, "earliest-finish": EarliestFinishScheduler}
#: What a bad cluster file, trace or option raises; reported without a traceback.
INPUT_ERRORS = (ClusterConfigError, TraceValidationError, WorkloadError)


def load_workload(
    workload: str | None,
    trace: str | None,
    seed: int,
    count: int | None,
    model: str | None,
    cluster: ClusterSpec | None = None,
) -> list:
    """Records from a trace file, or from a generator in :mod:`traces.generators`.

    :param cluster: if given, a trace may use only the models it serves.
    :raises TraceValidationError: for a bad or unreadable trace, naming file, line and field.
    """
    if trace:
        from traces.io import read_trace

        served = None if cluster is None else cluster.models
        where = None if cluster is None else f"the models cluster {cluster.name!r} serves"
        try:
            return read_trace(trace, known_models=served, models_from=where)
        except OSError as exc:
            raise TraceValidationError(
                f"cannot read the trace: {exc.strerror or exc}", source=trace
            ) from exc
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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _estimate_error(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and 0.0 <= value < 1.0):
        raise argparse.ArgumentTypeError(f"expected a relative error in [0, 1), got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m envs.sim.core.run",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    ap.add_argument("--cluster", default="hetero-1", help=f"preset or YAML path {cluster_names()}")
    ap.add_argument("--model", default=None, help="catalog model (default: the preset's)")
    ap.add_argument(
        "--workload", default="mixed", choices=sorted(GENERATORS), help="generator name"
    )
    ap.add_argument("--trace", default=None, help="a servegym JSONL trace instead of a generator")
    ap.add_argument("--count", type=_positive_int, default=None, help="records to generate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--estimate-error", type=_estimate_error, default=0.0)
    ap.add_argument("--scheduler", choices=sorted(SCHEDULERS), default="default")
    ap.add_argument(
        "--engine",
        choices=engine_names(),
        default=None,
        help="engine preset of monolithic instances (default: engine-neutral)",
    )
    ap.add_argument("--json", action="store_true", help="print metrics as JSON")
    args = ap.parse_args(argv)
    try:
        cluster = load_cluster(args.cluster, model=args.model)
        if not cluster.instances:
            raise ClusterConfigError(
                f"--cluster {args.cluster}: {cluster.name!r} is a GPU pool (architecture "
                f"{cluster.architecture!r}) without instances; the simulator runs a pd or "
                "monolithic cluster (pool clusters are for servegym/Allocation-v0)"
            )
        model = args.model or cluster.models[0]
        records = load_workload(args.workload, args.trace, args.seed, args.count, model, cluster)
        sim = Simulation(
            cluster, records, seed=args.seed, estimate_error=args.estimate_error, engine=args.engine
        )
    except INPUT_ERRORS as exc:
        print(f"envs.sim.core.run: error: {exc}", file=sys.stderr)
        return 2
    res = sim.run(SCHEDULERS[args.scheduler]())
    if args.json:
        print(json.dumps({"metrics": res.metrics, "utilisation": res.utilisation}, indent=2))
    else:
        print(f"cluster {cluster.name} ({model}), workload {args.trace or args.workload}")
        print(format_result(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
