"""Simulator speed: events per wall second on a 1,000-workflow workload on ``hetero-1``.

    python -m benchmarks.sim_speed [--count 1000] [--workload mixed] [--cluster hetero-1]
                                   [--against REV --rounds 5] [--fresh]

Printed beside a bare ``heapq`` event loop that processes the same number of events in the same
run (each event: pop, a trivial callback, push of a successor), so the ratio is comparable across
machines. The simulation is timed twice: without standalone horizons (the event loop alone) and
with them (what an episode costs, including the H_w simulations). Each figure is the best of
``--repeat`` runs (as ``timeit`` reports), so other processes on the machine inflate it less.
The runs share one :class:`envs.sim.LatencyCache`, so every run after the first finds the
latency models' memos filled by the same workload; ``--fresh`` gives each run new latency
models instead (what an episode of a new workload or seed costs).

Targets: the event loop within 30x the bare loop's wall time, within
45x with horizons; each row ends with a PASS/FAIL line. On a shared machine the wall
ratio moves with the other processes' load (both loops are timed in the same run, but not at the
same instant), so each figure is printed with the process-CPU-time ratio beside it (``x heapq
cpu``: the same runs timed by ``time.process_time``) and the load average (``os.getloadavg``).

``--against REV`` times git revision ``REV``'s simulator too (``git archive`` into a temporary
directory), alternating with this tree's ``--rounds`` times, each a fresh process timing the event
loop (best of 2 runs, process CPU time): the ratio of the two means is the speed-up, and it holds
on a loaded machine, where the ratio to the heapq loop drifts with the load.

``--profile`` samples the event loop instead (``signal.setitimer`` every 0.5 ms of process CPU
time over ``--repeat`` runs) and prints each function's share of the samples, as the innermost
frame (self) and anywhere on the stack (inclusive): a profile without cProfile's per-call
overhead, which inflates small Python functions.
"""

from __future__ import annotations

import argparse
import heapq
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envs.sim import DefaultScheduler, LatencyCache, Simulation, load_cluster
from traces.generators import generate


def bare_heapq_loop(num_events: int, clock: Any = time.perf_counter) -> float:
    """Seconds (by ``clock``: wall by default) for a heapq loop to process ``num_events``
    timestamped events."""
    counter = 0
    heap: list[tuple[float, int, object]] = []

    def callback(t: float) -> float:
        return t + 0.001 * ((t * 7919.0) % 1.0 + 0.5)

    for i in range(64):
        heapq.heappush(heap, (i * 0.01, i, callback))
    start = clock()
    processed = 0
    while processed < num_events:
        t, _, fn = heapq.heappop(heap)
        counter += 1
        heapq.heappush(heap, (fn(t), counter, fn))
        processed += 1
    return clock() - start


#: One timing in a fresh process whose working directory holds the simulator to time.
_TIME_ONE = """
import os, sys, time
sys.path.insert(0, os.getcwd())
from envs.sim import DefaultScheduler, LatencyCache, Simulation, load_cluster
from traces.generators import generate
cluster, workload, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fresh = sys.argv[5] == "fresh"
cl = load_cluster(cluster)
records = generate(workload, seed=seed, count=count)
cache = LatencyCache()
best = float("inf")
for _ in range(1 if fresh else 2):
    sim = Simulation(cl, records, seed=seed, compute_horizons=False, latency_cache=cache)
    start = time.process_time()
    res = sim.run(DefaultScheduler())
    best = min(best, time.process_time() - start)
print(best, repr(res.end_time), res.events)
"""


def against(
    rev: str, rounds: int, cluster: str, workload: str, count: int, seed: int, fresh: bool = False
) -> None:
    """Time revision ``rev``'s event loop and this tree's alternately (see the module doc);
    ``fresh``: one run per process with new latency models instead of the best of two."""
    root = Path(__file__).resolve().parent.parent
    args = [cluster, workload, str(count), str(seed), "fresh" if fresh else "warm"]
    with tempfile.TemporaryDirectory(prefix="sim-speed-") as ref:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", ref], input=archive, check=True)
        times: dict[str, list[float]] = {rev: [], "this tree": []}
        ends: dict[str, set[str]] = {rev: set(), "this tree": set()}
        for _ in range(rounds):
            for label, cwd in ((rev, ref), ("this tree", str(root))):
                out = subprocess.run(
                    [sys.executable, "-c", _TIME_ONE, *args],
                    cwd=cwd,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.split()
                times[label].append(float(out[0]))
                ends[label].add(out[1])
    mean = {k: sum(v) / len(v) for k, v in times.items()}
    for label, vals in times.items():
        print(
            f"{label:<12} event loop CPU s over {rounds} rounds: mean {mean[label]:.3f}, "
            f"min {min(vals):.3f} (simulated end {', '.join(sorted(ends[label]))} s)"
        )
    print(
        f"this tree / {rev}: {mean['this tree'] / mean[rev]:.3f} of the CPU time (means), "
        f"{min(times['this tree']) / min(times[rev]):.3f} (minima); load average "
        f"{os.getloadavg()[0]:.2f}"
    )


def profile(cluster: Any, records: list, seed: int, repeat: int, top: int = 25) -> None:
    """Print the sampled self and inclusive shares of the event loop (see the module doc)."""
    import collections
    import signal

    cache = LatencyCache()
    Simulation(cluster, records, seed=seed, compute_horizons=False, latency_cache=cache).run(
        DefaultScheduler()
    )  # warm the latency models' memos, as the timed runs are
    own: collections.Counter[str] = collections.Counter()
    anywhere: collections.Counter[str] = collections.Counter()
    samples = [0]

    def sample(_sig: int, frame: Any) -> None:
        samples[0] += 1
        seen = set()
        inner = True
        while frame is not None:
            code = frame.f_code
            key = f"{Path(code.co_filename).name}:{code.co_name}"
            if inner:
                own[key] += 1
                inner = False
            if key not in seen:
                anywhere[key] += 1
                seen.add(key)
            frame = frame.f_back

    signal.signal(signal.SIGPROF, sample)
    signal.setitimer(signal.ITIMER_PROF, 0.0005, 0.0005)
    try:
        for _ in range(repeat):
            Simulation(
                cluster, records, seed=seed, compute_horizons=False, latency_cache=cache
            ).run(DefaultScheduler())
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
    n = max(1, samples[0])
    print(f"{samples[0]} samples of the event loop ({repeat} runs)")
    for title, counts in (("self", own), ("inclusive", anywhere)):
        print(f"{title}:")
        for key, k in counts.most_common(top):
            print(f"  {100 * k / n:5.1f} %  {key}")


def memo_stats(cluster: Any, records: list, seed: int, bound: int | None) -> None:
    """The latency models' ``decode_steps_time`` memo: its calls and hits by caller
    in a fresh run and in a rerun with the same latency models, the decode batch at segment
    starts, and the formula's, a miss's and a hit's cost on that run's keys."""
    import collections
    import timeit

    import envs.sim.latency.iteration as iteration
    from envs.sim.engines.batching import DecodeInstance

    if bound is not None:
        iteration._STEPS_MEMO_SIZE = bound
    memoised = iteration.IterationTimeMixin.decode_steps_time
    counts: collections.Counter[tuple[str, bool]] = collections.Counter()
    keys: list[tuple[int, int, int]] = []

    def counted(self: Any, b: int, c: int, n: int) -> float:
        counts[(sys._getframe(1).f_code.co_name, (b, c, n) in self._steps_memo)] += 1
        keys.append((b, c, n))
        return memoised(self, b, c, n)

    batches: list[int] = []
    start_segment = DecodeInstance._next_segment

    def next_segment(self: Any) -> None:
        start_segment(self)
        if self.seg_calls:
            batches.append(len(self.seg_calls))

    cache = LatencyCache()
    iteration.IterationTimeMixin.decode_steps_time = counted
    DecodeInstance._next_segment = next_segment
    try:
        for label in ("fresh run", "rerun, same latency models"):
            counts.clear()
            Simulation(
                cluster, records, seed=seed, compute_horizons=False, latency_cache=cache
            ).run(DefaultScheduler())
            total = sum(counts.values())
            hits = sum(k for (_, hit), k in counts.items() if hit)
            print(
                f"{label}: {total} decode_steps_time calls, {hits} hits "
                f"({100 * hits / max(1, total):.1f} %; memo bound {iteration._STEPS_MEMO_SIZE})"
            )
            for caller in sorted({c for c, _ in counts}):
                n_all = counts[(caller, True)] + counts[(caller, False)]
                print(f"  {caller:<24} {n_all:>8} calls {counts[(caller, True)]:>8} hits")
    finally:
        iteration.IterationTimeMixin.decode_steps_time = memoised
        DecodeInstance._next_segment = start_segment
    if batches:
        print(f"decode batch at segment starts: mean {sum(batches) / len(batches):.1f} calls")
    lat = cache.get(cluster.instances[-1], None)
    sample = list(dict.fromkeys(keys))[:20000]
    formula = timeit.timeit(lambda: [lat._decode_steps_time(*k) for k in sample], number=1)
    lat._steps_memo.clear()
    iteration._STEPS_MEMO_SIZE = 1 << 30  # no clearing while timed
    miss = timeit.timeit(lambda: [lat.decode_steps_time(*k) for k in sample], number=1)
    hit = timeit.timeit(lambda: [lat.decode_steps_time(*k) for k in sample], number=1)
    lat._steps_memo.clear()
    n = len(sample) / 1e6
    print(
        f"per call on {len(sample)} distinct keys of this run ({cluster.instances[-1].gpu}): "
        f"formula {formula / n:.2f} us, memo miss {miss / n:.2f} us, memo hit {hit / n:.2f} us"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cluster", default="hetero-1")
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is kept")
    ap.add_argument("--against", metavar="REV", help="also time git revision REV (see above)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds for --against")
    ap.add_argument("--profile", action="store_true", help="print a sampled profile instead")
    ap.add_argument(
        "--fresh", action="store_true", help="new latency models (empty memos) for every run"
    )
    ap.add_argument(
        "--memo-stats",
        action="store_true",
        help="print the decode-step memo's calls and hits by caller and its costs instead",
    )
    ap.add_argument(
        "--memo-bound", type=int, default=None, help="decode-step memo entries for --memo-stats"
    )
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be >= 1, got {args.repeat}")
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.against:
        against(
            args.against,
            args.rounds,
            args.cluster,
            args.workload,
            args.count,
            args.seed,
            args.fresh,
        )

    cluster = load_cluster(args.cluster)
    records = generate(args.workload, seed=args.seed, count=args.count)
    if args.profile:
        profile(cluster, records, args.seed, args.repeat, top=40)
        return
    if args.memo_stats:
        memo_stats(cluster, records, args.seed, args.memo_bound)
        return
    cache = LatencyCache()
    rows = []
    for label, horizons, target in (
        ("event loop only", False, 30.0),
        ("with H_w horizons", True, 45.0),
    ):
        walls, cpus = [], []
        for _ in range(args.repeat):
            if args.fresh:
                cache = LatencyCache()
            sim = Simulation(
                cluster, records, seed=args.seed, compute_horizons=horizons, latency_cache=cache
            )
            start, cpu = time.perf_counter(), time.process_time()
            res = sim.run(DefaultScheduler())
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
        rows.append((label, res, min(walls), min(cpus), target))
    base = rows[0][1]
    heap_wall = min(bare_heapq_loop(base.events) for _ in range(max(5, args.repeat)))
    heap_cpu = min(
        bare_heapq_loop(base.events, time.process_time) for _ in range(max(5, args.repeat))
    )
    n_calls = len(base.calls)
    print(
        f"workload {args.workload} x{len(records)} on {cluster.name}: {n_calls} LLM calls, "
        f"{base.events} events, {base.invocations} scheduler invocations, "
        f"{base.end_time:.1f} simulated s; latency models "
        f"{'new for every run (--fresh)' if args.fresh else 'shared by the runs'}"
    )
    print(
        f"{'run':<22}{'wall s':>9}{'events/s':>12}{'calls/s':>10}{'x heapq':>9}"
        f"{'x heapq cpu':>13}{'target':>8}"
    )
    for label, res, wall, cpu, target in rows:
        print(
            f"{label:<22}{wall:>9.2f}{res.events / wall:>12,.0f}{n_calls / wall:>10,.0f}"
            f"{wall / heap_wall:>9.1f}{cpu / heap_cpu:>13.1f}{f'<={target:g}':>8}"
        )
    print(
        f"{'bare heapq loop':<22}{heap_wall:>9.3f}{base.events / heap_wall:>12,.0f}"
        f"{'':>10}{1.0:>9.1f}{1.0:>13.1f}"
    )
    load = os.getloadavg()
    for label, _, wall, cpu, target in rows:
        ratio = wall / heap_wall
        print(
            f"{'PASS' if ratio <= target else 'FAIL'}: {label}: {ratio:.1f}x a bare heapq loop "
            f"over the same {base.events} events (target <= {target:g}x; CPU-time ratio "
            f"{cpu / heap_cpu:.1f}x; load average {load[0]:.2f}, {os.cpu_count()} CPUs)"
        )


if __name__ == "__main__":
    main()
