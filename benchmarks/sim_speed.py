"""Simulator speed: events per wall second on a 1,000-workflow workload on ``hetero-1``.

    python -m benchmarks.sim_speed [--count 1000] [--workload mixed] [--cluster hetero-1]

Printed beside a bare ``heapq`` event loop that processes the same number of events in the same
run (each event: pop, a trivial callback, push of a successor), so the ratio is comparable across
machines. The simulation is timed twice: without standalone horizons (the event loop alone) and
with them (what an episode costs, including the H_w simulations). Each figure is the best of
``--repeat`` runs (as ``timeit`` reports), so other processes on the machine inflate it less.

Targets (issue 14): the event loop within 30x the bare loop's wall time, within 45x with horizons.
"""

from __future__ import annotations

import argparse
import heapq
import time

from envs.sim import DefaultScheduler, LatencyCache, Simulation, load_cluster
from traces.generators import generate


def bare_heapq_loop(num_events: int) -> float:
    """Wall seconds for a heapq loop to process ``num_events`` timestamped events."""
    counter = 0
    heap: list[tuple[float, int, object]] = []

    def callback(t: float) -> float:
        return t + 0.001 * ((t * 7919.0) % 1.0 + 0.5)

    for i in range(64):
        heapq.heappush(heap, (i * 0.01, i, callback))
    start = time.perf_counter()
    processed = 0
    while processed < num_events:
        t, _, fn = heapq.heappop(heap)
        counter += 1
        heapq.heappush(heap, (fn(t), counter, fn))
        processed += 1
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cluster", default="hetero-1")
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is kept")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be >= 1, got {args.repeat}")

    cluster = load_cluster(args.cluster)
    records = generate(args.workload, seed=args.seed, count=args.count)
    cache = LatencyCache()
    rows = []
    for label, horizons, target in (
        ("event loop only", False, 30.0),
        ("with H_w horizons", True, 45.0),
    ):
        walls = []
        for _ in range(args.repeat):
            sim = Simulation(
                cluster, records, seed=args.seed, compute_horizons=horizons, latency_cache=cache
            )
            start = time.perf_counter()
            res = sim.run(DefaultScheduler())
            walls.append(time.perf_counter() - start)
        rows.append((label, res, min(walls), target))
    base = rows[0][1]
    heap_wall = min(bare_heapq_loop(base.events) for _ in range(max(5, args.repeat)))
    n_calls = len(base.calls)
    print(
        f"workload {args.workload} x{len(records)} on {cluster.name}: {n_calls} LLM calls, "
        f"{base.events} events, {base.invocations} scheduler invocations, "
        f"{base.end_time:.1f} simulated s"
    )
    print(f"{'run':<22}{'wall s':>9}{'events/s':>12}{'calls/s':>10}{'x heapq':>9}{'target':>8}")
    for label, res, wall, target in rows:
        ratio = wall / heap_wall
        verdict = "met" if ratio <= target else "missed"
        print(
            f"{label:<22}{wall:>9.2f}{res.events / wall:>12,.0f}{n_calls / wall:>10,.0f}"
            f"{ratio:>9.1f}{f'<={target:g}':>8} {verdict}"
        )
    print(
        f"{'bare heapq loop':<22}{heap_wall:>9.3f}{base.events / heap_wall:>12,.0f}"
        f"{'':>10}{1.0:>9.1f}"
    )


if __name__ == "__main__":
    main()
