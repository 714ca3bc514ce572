"""Evaluation grid, serially and as Ray tasks on this machine: the wall-time ratio and the
overhead Ray adds per task.

    python -m benchmarks.eval_scale [--workloads mixed,bfcl] [--policies per-call-fcfs,hexagent]
        [--seeds 0,1] [--count 30] [--cpus N]

Runs the same ``evaluate.py`` grid twice in one process: serially, then with ``--ray`` on a local
Ray with ``--cpus`` workers (default: all cores; started and with servegym imported before the
clock starts, as on a long-lived cluster), and checks that both give the same rows. Prints
the two wall times (Ray's start-up reported apart), the speed-up, and two per-task overheads:
an empty Ray task's round trip, and what each evaluation task costs beyond its episode (env
construction on the worker, shipping the config and the row back):
``(Ray wall × workers − Σ episode seconds) / tasks``. With W workers and tasks much longer than
the overhead, a grid of T equal tasks takes about ``ceil(T / W) × task`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

import evaluation


def _import_servegym() -> None:
    import evaluation  # noqa: F401
    import heuristics  # noqa: F401
    from envs import pd_cluster  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="mixed,bfcl")
    ap.add_argument("--policies", default="per-call-fcfs,hexagent")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--count", type=int, default=30)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    from agents.distributed import init_ray

    config = evaluation.EvalConfig(
        workloads=tuple(args.workloads.split(",")),
        policies=tuple(args.policies.split(",")),
        seeds=tuple(int(s) for s in args.seeds.split(",")),
        count=args.count,
        quiet=True,
    )
    start = time.perf_counter()
    serial = evaluation.evaluate(config)
    serial_wall = time.perf_counter() - start

    import ray

    start = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    init_wall = time.perf_counter() - start
    init_ray("local")
    noop = ray.remote(lambda: None)
    # Start the workers and import servegym in each (seconds of torch/sklearn imports that a
    # long-lived cluster pays once, not per grid).
    warm = ray.remote(_import_servegym)
    ray.get([warm.remote() for _ in range(4 * args.cpus)])
    start = time.perf_counter()
    ray.get([noop.remote() for _ in range(200)])
    noop_ms = (time.perf_counter() - start) / 200 * 1e3
    start = time.perf_counter()
    on_ray = evaluation.evaluate(replace(config, ray="local"))
    ray_wall = time.perf_counter() - start
    ray.shutdown()

    def canonical(rows: list[dict]) -> str:
        return json.dumps(
            [{k: v for k, v in r.items() if k != "wall_seconds"} for r in rows],
            sort_keys=True,
            default=float,
        )

    same = canonical(serial) == canonical(on_ray)
    episode = sum(r["wall_seconds"] for r in on_ray)
    tasks = len(on_ray)
    overhead = (ray_wall * args.cpus - episode) / tasks
    print(
        f"grid: {len(config.workloads)} workloads x {len(config.policies)} policies x "
        f"{len(config.seeds)} seeds = {tasks} runs of {args.count} workflows (pd-cluster)"
    )
    print(f"serial                 {serial_wall:8.1f} s")
    print(f"ray, {args.cpus} workers         {ray_wall:8.1f} s  (+ {init_wall:.1f} s ray.init)")
    print(f"speed-up               {serial_wall / ray_wall:8.2f}x")
    print(f"empty-task round trip  {noop_ms:8.2f} ms")
    print(f"overhead per task      {overhead:8.2f} s  (beyond its episode; env built per task)")
    print(f"same rows as serial    {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
