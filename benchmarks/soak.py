"""Soak: memory over one long episode and over many consecutive resets.

    python -m benchmarks.soak [--workflows 10000] [--resets 1000] [--every 10]
                             [--record-store disk|compact|objects] [--skip-resets]
                             [--rate WORKFLOWS_PER_S]

Two phases, each printing the process's resident memory (RSS, ``VmRSS`` of /proc/self/status;
``ru_maxrss``, the peak, where /proc is missing) at ``--every`` evenly spaced points, then the
growth from the first point to the last in MB and %:

1. **Long episode**: the bare simulator (:class:`envs.sim.Simulation`, its
   :class:`envs.sim.DefaultScheduler`, no RL) serving ``--workflows`` generated workflows on
   ``--cluster``, driven decision by decision; RSS after every tenth of the workflows has
   finished. ``--record-store`` (default ``disk``) is what the simulator keeps of a finished
   workflow (``Simulation(record_store=...)``): ``objects`` keeps every call object and run state
   until the episode ends, so that phase grows by design; ``compact`` packs a finished
   workflow's calls into 152-byte rows; ``disk`` appends those rows to a temporary file. The
   figure to read is the slope: the least-squares fit of RSS against finished workflows over
   the points after the first (warm-up: caches fill, the backlog builds), in bytes per workflow,
   printed with a PASS/FAIL line against the target (flat, read as a slope of at most
   ``--flat-bytes`` per workflow, 1 KB by default: under 10 MB over 10,000 workflows).
   Standalone horizons are off (``--horizons`` turns them on: one small simulation per distinct
   workflow, cached for the episode). Each point also prints the episode's live state: the
   workflows that arrived and have not finished, and their :class:`envs.sim.core.workflows.Call`
   objects (every revealed call of an unfinished workflow is live; a finished workflow's are
   packed). The default workload (``mixed`` at its 10 workflows/s) overloads ``hetero-1``
   (~2.2 workflows/s served), so that backlog grows until the arrivals end: memory the
   simulated system holds, not records. ``--rate`` sets the arrival rate (workflows/s; default:
   the generator's) to soak at a load the cluster sustains.
2. **Resets**: one ``servegym/PDCluster-v0`` env reset ``--resets`` times (a new seed each time:
   a new workload, a new simulation) and stepped ``--steps`` random legal actions after each
   reset; RSS after every tenth of the resets. Nothing of a finished episode should survive the
   next reset, so this phase should stay flat after the first point (warm caches).

Memory is measured after ``gc.collect()``, so it counts what is still referenced.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from envs.pd_cluster import PDClusterEnv
from envs.sim import DefaultScheduler, Simulation, load_cluster
from envs.sim.core.simulation import RECORD_STORES
from traces.generators import generate


def rss_mb() -> float:
    """Resident set size of this process in MB (peak RSS where /proc is unavailable)."""
    gc.collect()
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024.0 * 1024.0 if sys.platform == "darwin" else 1024.0)


def report(label: str, points: list[tuple[int, float]], unit: str) -> tuple[float, float]:
    """Print the growth from the first to the last point; returns (MB, %)."""
    first, last = points[0][1], points[-1][1]
    growth = last - first
    pct = 100.0 * growth / first if first else 0.0
    print(
        f"{label}: RSS {first:.1f} MB at {points[0][0]} {unit} -> {last:.1f} MB at "
        f"{points[-1][0]} {unit}; growth {growth:+.1f} MB ({pct:+.1f}%)"
    )
    return growth, pct


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of RSS (MB) against workflows done, in bytes per workflow, over the
    points after the first (NaN with fewer than two of them)."""
    pts = points[1:]
    if len(pts) < 2:
        return float("nan")
    x = np.array([p[0] for p in pts], dtype=float)
    y = np.array([p[1] for p in pts], dtype=float) * 1e6
    return float(np.polyfit(x, y, 1)[0])


def long_episode(
    cluster: str,
    workload: str,
    count: int,
    every: int,
    seed: int,
    horizons: bool,
    record_store: str = "disk",
    trace: bool = False,
    rate: float | None = None,
) -> list[tuple[int, float]]:
    """Phase 1: RSS while one simulation serves ``count`` workflows; with ``trace``, the
    ``tracemalloc`` growth by source line from the first mark (a tenth of the workflows done)
    to the end, largest first."""
    extra = {} if rate is None else {"rate": rate}
    records = generate(workload, seed=seed, count=count, **extra)
    sim = Simulation(
        load_cluster(cluster),
        records,
        seed=seed,
        compute_horizons=horizons,
        record_store=record_store,
    )
    scheduler = DefaultScheduler()
    marks = sorted({max(1, round(count * k / every)) for k in range(1, every + 1)})
    points = [(0, rss_mb())]
    print(f"  {0:>7} workflows done  RSS {points[0][1]:8.1f} MB")
    start = time.perf_counter()
    nxt = 0
    pending = True
    while pending:
        inv = sim.advance()
        pending = inv is not None
        if pending:
            sim.apply(scheduler.plan(sim, inv))
        while nxt < len(marks) and sim.finished_runs >= marks[nxt]:
            points.append((marks[nxt], rss_mb()))
            if trace and nxt == 0:
                tracemalloc.start()
                first = tracemalloc.take_snapshot()
            live = [r for r in sim.runs[: sim._next_arrival] if r.finish_time < 0]
            print(
                f"  {marks[nxt]:>7} workflows done  RSS {points[-1][1]:8.1f} MB  "
                f"sim t={sim.now:9.1f} s  live: {len(live):>5} workflows "
                f"{sum(len(r.calls) for r in live):>6} calls  "
                f"wall {time.perf_counter() - start:6.1f} s"
            )
            nxt += 1
    if trace:
        gc.collect()
        stats = tracemalloc.take_snapshot().compare_to(first, "lineno")
        total = sum(s.size_diff for s in stats)
        print(
            f"  tracemalloc growth from {marks[0]} workflows done to the end: {total / 1e6:.2f} MB"
        )
        for s in stats[:10]:
            frame = s.traceback[0]
            where = "/".join(Path(frame.filename).parts[-3:])
            print(
                f"    {s.size_diff / 1e6:7.2f} MB ({100 * s.size_diff / total:5.1f} %) "
                f"{s.count_diff:+8d} blocks  {where}:{frame.lineno}"
            )
    result = sim.result()
    done = sum(1 for w in result.workflows if w.finish < float("inf"))
    print(
        f"  {done} of {count} workflows finished, {len(result.calls)} calls, "
        f"{result.events} events, {time.perf_counter() - start:.1f} s wall"
    )
    return points


def resets(
    cluster: str, workload: str, count: int, n: int, steps: int, every: int
) -> list[tuple[int, float]]:
    """Phase 2: RSS over ``n`` consecutive resets of one PDCluster-v0 env."""
    env = PDClusterEnv(cluster=cluster, workload=workload, workload_count=count, slots=16)
    rng = np.random.default_rng(0)
    marks = sorted({max(1, round(n * k / every)) for k in range(1, every + 1)})
    points = []
    start = time.perf_counter()
    for i in range(1, n + 1):
        env.reset(seed=i)
        for _ in range(steps):
            action = int(rng.choice(np.flatnonzero(env.action_masks())))
            *_, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        if i in marks:
            points.append((i, rss_mb()))
            print(
                f"  {i:>7} resets  RSS {points[-1][1]:8.1f} MB  "
                f"wall {time.perf_counter() - start:6.1f} s"
            )
    return points


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cluster", default="hetero-1")
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--workflows", type=int, default=10_000, help="phase 1 episode length")
    ap.add_argument("--resets", type=int, default=1000, help="phase 2 reset count")
    ap.add_argument("--reset-workflows", type=int, default=5, help="workflows per reset episode")
    ap.add_argument("--steps", type=int, default=20, help="random legal steps after each reset")
    ap.add_argument("--every", type=int, default=10, help="RSS points per phase")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--horizons", action="store_true", help="phase 1 computes H_w as well")
    ap.add_argument(
        "--rate",
        type=float,
        default=None,
        help="phase 1 arrival rate in workflows/s (default: the workload generator's)",
    )
    ap.add_argument(
        "--record-store",
        choices=RECORD_STORES,
        default="disk",
        help="what phase 1's simulator keeps of a finished workflow",
    )
    ap.add_argument(
        "--flat-bytes",
        type=float,
        default=1000.0,
        help="phase 1 passes when RSS grows by at most this many bytes per workflow",
    )
    ap.add_argument("--skip-resets", action="store_true", help="run phase 1 only")
    ap.add_argument(
        "--trace",
        action="store_true",
        help="phase 1 prints the tracemalloc growth by line after the first mark (slow)",
    )
    args = ap.parse_args(argv)

    start = time.perf_counter()
    if args.rate is not None and not args.rate > 0:
        ap.error(f"--rate must be > 0 workflows/s, got {args.rate}")
    rate = "the generator's rate" if args.rate is None else f"{args.rate:g} workflows/s"
    print(
        f"phase 1: one episode of {args.workflows} {args.workload} workflows on {args.cluster} "
        f"at {rate} (bare Simulation, DefaultScheduler, horizons "
        f"{'on' if args.horizons else 'off'}, record store {args.record_store})"
    )
    p1 = long_episode(
        args.cluster,
        args.workload,
        args.workflows,
        args.every,
        args.seed,
        args.horizons,
        args.record_store,
        args.trace,
        args.rate,
    )
    p2 = None
    if not args.skip_resets:
        print(
            f"phase 2: {args.resets} resets of PDCluster-v0 ({args.reset_workflows} workflows, "
            f"{args.steps} random legal steps each)"
        )
        p2 = resets(
            args.cluster, args.workload, args.reset_workflows, args.resets, args.steps, args.every
        )
    print("summary")
    g1, _ = report("  long episode", p1, "workflows")
    per_wf = 1e6 * g1 / max(1, p1[-1][0])
    print(f"    = {per_wf:.0f} bytes per workflow from the first point to the last")
    s = slope(p1)
    verdict = "PASS" if s <= args.flat_bytes else "FAIL"
    print(
        f"  {verdict}: long-episode slope {s:+.0f} bytes per workflow after the first point "
        f"(target: flat, <= {args.flat_bytes:g} bytes per workflow; record store "
        f"{args.record_store})"
    )
    if p2 is not None:
        report("  resets", p2, "resets")
    print(f"  total wall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
