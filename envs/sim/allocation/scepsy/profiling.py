"""Scepsy §4 step 3: per-LLM throughput–latency profiles by replaying traced requests.

"For each LLM, Scepsy replays all the requests for a given LLM across all execution traces, at
varying arrival rates, and maintaining inter-request dependencies within each trace [...] sweeps
the arrival rate from low load to saturation (i.e., maximum throughput), and for each point
records latency at various percentile points and on average. The replay is repeated at multiple
tensor parallelism degrees" (§4). Here one replica of LLM ``m`` at a (TP, GPU share) runs alone
in the simulator (:func:`profile_llm`); :func:`profile_set` covers every feasible (TP, share).

**Projection** (:func:`project_workflow`). Each traced workflow is projected onto ``m``'s calls:
an ``m``-call's parents become its *nearest* ``m``-ancestors, reached through any chain of
non-``m`` nodes (other LLMs, tools); calls without an ``m``-ancestor are sources. A beam-search
step's 8 generator calls thus still arrive together, and step ``s+1``'s only after *all* of step
``s``'s have finished (through the verifiers and the select tool). Replaying calls one at a time
loses this burstiness and under-predicts latency.

**Gaps.** We keep the traced time the workflow spent outside ``m`` as :class:`ToolNode` delays:
a call with ``m``-parents waits ``gap = start − max(parents' end)`` after its last ``m``-parent
finishes (e.g. the verifier call and the select tool between two generator steps), and a source
waits its traced offset from the workflow's first ``m``-call. Without the gaps a workflow's
``m``-calls would arrive in back-to-back bursts that ``m`` never sees in deployment, where the
other LLMs take real time; the paper replays real traces, whose timing includes those gaps. The
gaps are the reference deployment's (no contention there), so they do not grow with load.
Calls sharing parents and a gap share one delay node. ``keep_gaps=False`` drops them.

**Replay** (:func:`replay_point`). The projected workflows are drawn by cycling through seeded
permutations of all projections (every traced workflow is replayed, equally often) and arrive as
a Poisson process conditioned on its count: sorted uniform arrival times on ``[0, T]``,
``T = calls / rate``, so the offered LLM call rate over ``[0, T]`` is exactly ``rate``
(``= λ_w · n_m``). Enough workflows are drawn that ``T`` spans ``warmup_spans + span_factor``
call-weighted projected-workflow spans (capped by ``max_calls``). The measurement window is
``[t0, T]`` with ``t0`` the warm-up (the system starts empty); a point's latency statistics are
over the calls revealed in the window (reveal to last token, queueing included). The simulation
stops at ``T + max(T/4, 2 · longest span)``; window calls unfinished then count with their
censored latency.

**Knee rule** (:func:`knee_throughput`). A point is *sustained* when the replica is still at the
knee of its throughput–latency curve, where the queue is stable: at least ``1 − tolerance``
(default 99 %) of the calls *offered* in the window — those whose open-loop time falls in it —
have finished by the end of the replay (the window's end plus the drain below; counting only
completions *inside* the window would charge long workflows, whose last calls shift past the
window end under any load, with a deficit of ~1 % that is not backlog), no window call is left
unfinished, and the window calls' median latency is at most ``latency_factor`` (default 2) × the
*unloaded* median: the median call latency when every projected workflow runs alone on this
replica (:func:`isolated_timing`). A call's open-loop time is its workflow's arrival plus the
call's offset when the projected workflow runs alone on this replica (a quarter GPU stretches
every workflow, and only contention should count as falling behind). Completions cannot be
compared with *reveals*: dependent calls are revealed only as fast as their parents complete.
Borderline failures are confirmed with a second seed (``confirm``). The sweep starts at
``start`` (5 %) of a rough capacity (:func:`burst_capacity`: every workflow at once), multiplies
the rate by ``growth`` (1.6) until a point is not sustained (divides while even the first is
not), then bisects (``refine`` geometric midpoints) between the last sustained and the first
unsustained rate. ``T_m`` (``max_throughput``) is the completion rate ``rate · min(1, finished
/ offered)`` at the highest swept rate at and below which every point is sustained. Scepsy §4
sweeps "from low load to saturation (i.e., maximum throughput)" without saying where saturation
is read; reading it at deep backlog (≥ 90 % completion, no latency
bound) credited a quarter-GPU verifier share with ~1.26× the rate it serves with a stable queue,
because throughput keeps creeping up with the backlog's batch size. The knee is where a
deployment planned on ``T_m`` still has bounded latency. Points above ``T_m`` are kept (for
plots); :meth:`LLMProfile.latency` treats rates ``>= T_m`` as saturated.

**Co-located shares** (``neighbour``). A share below one GPU is an MPS partition: its SMs and
memory are its own, HBM bandwidth is contended with whatever shares the GPU
(:func:`envs.sim.latency.model.contended_bandwidth_shares`). A share alone would be profiled with
the whole GPU's bandwidth, which the deployed replica has only while its neighbours idle. So by
default (``neighbour="busy"``) a sub-GPU share is profiled as one of a co-located pair: the rest
of each of its GPUs is an MPS partition that is busy throughout (it keeps its demand on HBM);
the profile is what the share sustains when the GPU is fully used, the regime the search plans
for. ``"idle"`` profiles the share alone on its GPU (the optimistic bound) and ``"static"`` with
bandwidth proportional to the share (the model before MPS partitions; its cache keys are the old
ones). Whole-GPU profiles are the same in every mode.

**Cache.** :func:`profile_set` stores each profile as JSON under
``$SERVEGYM_CACHE/scepsy-profiles`` (default ``~/.cache/servegym/scepsy-profiles``), keyed by a
hash of the full configuration (model, GPU, TP, share, engine, the trace's content hash and
provenance, every replay parameter and :data:`PROFILE_VERSION`). A hit skips the simulation.

The method lives in :mod:`~envs.sim.allocation.scepsy.projection`,
:mod:`~envs.sim.allocation.scepsy.replay`, :mod:`~envs.sim.allocation.scepsy.sweep`
(:func:`profile_llm`) and :mod:`~envs.sim.allocation.scepsy.profiles` (:func:`profile_set`, the
cache, :data:`PROFILE_VERSION`); this module is the CLI.

CLI::

    python -m envs.sim.allocation.scepsy.profiling --workload rag_reranker --units-per-gpu 4 \\
        --tp 1 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from envs.sim.allocation.allocations import TP_DEGREES
from envs.sim.allocation.scepsy.apl import ProfileSet
from envs.sim.allocation.scepsy.profiles import profile_set
from envs.sim.allocation.scepsy.replay import NEIGHBOURS
from envs.sim.allocation.scepsy.sweep import ReplayConfig
from envs.sim.latency.efficiency import CALIBRATION_VARIANTS, ROOFLINE_CALIBRATION_VARIANT


# -- CLI ------------------------------------------------------------------------------------
def format_table(profiles: ProfileSet) -> str:
    """``model  tp  share  T_m  L(low)  L_p99(low)`` rows, sorted."""
    rows = [f"{'model':<20} {'tp':>2} {'share':>5} {'T_m/s':>9} {'L_low_s':>9} {'p99_low_s':>9}"]
    for (m, tp, f), p in sorted(profiles.profiles.items()):
        low = p.points[0]
        rows.append(
            f"{m:<20} {tp:>2} {f:>5.2f} {p.max_throughput:>9.3f} {low.mean:>9.4f} {low.p99:>9.4f}"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m envs.sim.allocation.scepsy.profiling",
        description="Scepsy §4 step 3: per-LLM throughput-latency profiles by trace replay.",
    )
    ap.add_argument("--workload", nargs="+", required=True, help="registered workload name(s)")
    ap.add_argument("--units-per-gpu", type=int, default=4)
    ap.add_argument("--tp", type=int, nargs="+", default=list(TP_DEGREES))
    ap.add_argument("--models", nargs="+", default=None)
    ap.add_argument("--gpu", default="rtx-a6000")
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--count", type=int, default=None, help="workflows to trace per workload")
    ap.add_argument("--seed", type=int, default=0, help="workload generator seed")
    ap.add_argument("--max-calls", type=int, default=ReplayConfig.max_calls)
    ap.add_argument("--no-gaps", action="store_true", help="replay without the traced gaps")
    ap.add_argument(
        "--neighbour",
        choices=NEIGHBOURS,
        default="busy",
        help="what shares the rest of a sub-GPU share's GPUs (default: a busy partition)",
    )
    ap.add_argument(
        "--calibration",
        choices=sorted(CALIBRATION_VARIANTS),
        default=ROOFLINE_CALIBRATION_VARIANT,
        help="per-op calibration the replays price with (default: roofline, the one "
        "servegym/Allocation-v0 pins, so these profiles are the ones it reads)",
    )
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="worker processes (default: up to 2; results do not depend on it)",
    )
    ap.add_argument("--out", default=None, help="write the ProfileSet as JSON here")
    a = ap.parse_args(argv)
    cfg = ReplayConfig(
        min_calls=min(ReplayConfig.min_calls, a.max_calls),
        max_calls=a.max_calls,
        keep_gaps=not a.no_gaps,
    )
    t = time.perf_counter()
    ps = profile_set(
        a.workload,
        a.models,
        a.tp,
        gpu=a.gpu,
        units_per_gpu=a.units_per_gpu,
        engine=a.engine,
        count=a.count,
        seed=a.seed,
        config=cfg,
        cache_dir=a.cache_dir,
        use_cache=not a.no_cache,
        jobs=a.jobs,
        neighbour=a.neighbour,
        calibration_variant=a.calibration,
    )
    print(format_table(ps))
    print(f"{len(ps)} profiles in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    if a.out:
        ps.save(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
