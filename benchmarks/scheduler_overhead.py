"""HexAgent planning time per scheduler invocation (compare HexAgent Table 6: 7.1–14.7 ms).

    python -m benchmarks.scheduler_overhead [--clusters hetero-1,hetero-2]
        [--models llama3.1-70b,qwen3-235b-a22b] [--workloads mixed,bfcl] [--observations]
        [--reference DIR] [--split]

Planning time of an invocation = everything HexAgent's planner does for it (Algorithm 1 lines
9–23): building the simulated state Ŝ and the per-call estimates, recomputing the projected
ratios after every pick, the policy's choices and turning the picks into a plan. The simulator's
own event processing between invocations is excluded. HexAgent acts on the decision context
alone, so the env runs with ``observations=False`` (its actions and plans are identical, see
``tests/envs/pd_cluster/test_pd_step_caches.py``); ``--observations`` also builds the learner's
observation
at every step and counts it. Times are CPU time of the benchmark's thread (``time.thread_time``:
what a quiet core gives; the header prints the load average).

``--reference DIR`` also times an exported tree of the code (e.g. ``git archive main | tar -x -C
/tmp/ref``) on the same episodes, in a subprocess right before each row (``PYTHONPATH=DIR``, this
file's measurement loop; a tree without ``observations=False`` builds observations), and prints
its mean and the speed-up. ``--split`` prints, per row, the shares of the planning time (context
build, R and mask refresh, pick, plan, observation, HexAgent's own choices), the picks per
invocation and the share of the time in invocations of more than 32 picks.

Target: mean ≤ 1 ms and p99 ≤ 10 ms per invocation on every default workload; each
row and a closing line say PASS or FAIL against it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

PLANNER_METHODS = ("_build_context", "_refresh", "_pick", "_finish_invocation", "_observation")
#: The target, milliseconds per invocation.
TARGET_MEAN_MS = 1.0
TARGET_P99_MS = 10.0


def measure(
    cluster: str,
    model: str,
    workload: str,
    seed: int,
    observations: bool,
    split: dict[str, Any] | None = None,
) -> list[float]:
    """Planning CPU seconds of every invocation of one episode.

    :param split: if given, filled with each planner method's CPU seconds (nested calls counted
        in the outermost; ``policy``: HexAgent's own choices) and ``picks``, the steps of every
        invocation."""
    from envs.pd_cluster import PDClusterEnv
    from heuristics import make_policy

    kwargs: dict[str, Any] = {}
    if "observations" in inspect.signature(PDClusterEnv).parameters:
        kwargs["observations"] = observations
    env = PDClusterEnv(cluster=cluster, model=model, workload=workload, **kwargs)
    per_inv: list[float] = []
    picks: list[int] = []
    parts: dict[str, float] = dict.fromkeys(PLANNER_METHODS + ("policy",), 0.0)
    depth = [0]  # a planner method called by another one (e.g. _refresh by _build_context)
    clock = time.thread_time

    def wrap(name: str) -> None:
        fn = getattr(env, name)

        def timed(*a: Any, **kw: Any) -> Any:
            if name == "_build_context":
                per_inv.append(0.0)
                picks.append(0)
            depth[0] += 1
            t = clock()
            try:
                return fn(*a, **kw)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    dt = clock() - t
                    per_inv[-1] += dt
                    parts[name] += dt

        setattr(env, name, timed)

    for name in PLANNER_METHODS:
        wrap(name)
    policy = make_policy("hexagent")
    policy.reset()
    obs, info = env.reset(seed=seed)
    done = False
    while not done:
        t = clock()
        a = policy.act(obs, info)
        dt = clock() - t
        per_inv[-1] += dt
        parts["policy"] += dt
        picks[-1] += 1
        obs, _, term, trunc, info = env.step(a)
        done = term or trunc
    if split is not None:
        split.update(parts, picks=picks)
    return per_inv


def split_line(per_inv: list[float], split: dict[str, Any]) -> str:
    """``--split``'s line for a row: where the planning time goes (shares of it), the picks per
    invocation, and the share of the time spent in invocations of more than
    :data:`~heuristics.pd_cluster.hexagent.DEFAULT_THRESHOLD` picks (HexAgent's one-pass mode)."""
    from heuristics.pd_cluster.hexagent import DEFAULT_THRESHOLD

    total = sum(per_inv)
    picks = np.array(split["picks"])
    big = sum(t for t, k in zip(per_inv, picks.tolist(), strict=True) if k > DEFAULT_THRESHOLD)
    names = {
        "_build_context": "context",
        "_refresh": "R+mask refresh",
        "_pick": "pick",
        "_finish_invocation": "plan",
        "_observation": "observation",
        "policy": "HexAgent",
    }
    shares = ", ".join(f"{label} {split[k] / total:.1%}" for k, label in names.items())
    return (
        f"    split: {shares}; picks per invocation mean {picks.mean():.1f}, median "
        f"{np.median(picks):.0f}, max {picks.max()}; {big / total:.1%} of the time in the "
        f"{(picks > DEFAULT_THRESHOLD).mean():.1%} of invocations with > {DEFAULT_THRESHOLD} "
        f"picks; {total / picks.sum() * 1e6:.1f} us per pick"
    )


def measure_reference(
    reference: str, cluster: str, model: str, workload: str, seed: int, observations: bool
) -> list[float]:
    """:func:`measure` on the code in ``reference``, in a subprocess."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(reference)}
    cmd = [sys.executable, os.path.abspath(__file__), "--json", "--clusters", cluster]
    cmd += ["--models", model, "--workloads", workload, "--seed", str(seed)]
    cmd += ["--observations"] if observations else []
    out = subprocess.run(cmd, env=env, cwd=reference, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the reference run in {reference} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clusters", default="hetero-1,hetero-2")
    ap.add_argument("--models", default="llama3.1-70b,qwen3-235b-a22b")
    ap.add_argument("--workloads", default="mixed,bfcl")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--observations", action="store_true", help="build and count observations")
    ap.add_argument("--reference", help="an exported tree of the code to compare with")
    ap.add_argument(
        "--split", action="store_true", help="print where each row's planning time goes"
    )
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.json:  # the reference's subprocess: one row's invocation times as a JSON list
        c, m, w = args.clusters, args.models, args.workloads
        print(json.dumps(measure(c, m, w, args.seed, args.observations)))
        return
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"HexAgent planning CPU time per invocation, observations "
        f"{'built' if args.observations else 'off'}; load average {load} on {os.cpu_count()} cores"
    )
    print(
        f"{'cluster':<10}{'model':<17}{'workload':<10}{'invocations':>12}{'median ms':>11}"
        f"{'p99 ms':>9}{'mean ms':>9}"
        + (f"{'ref mean':>10}{'x ref':>7}" if args.reference else "")
        + "  target"
    )
    worst_mean = worst_p99 = 0.0
    for cluster in args.clusters.split(","):
        for model in args.models.split(","):
            for workload in args.workloads.split(","):
                ref = None
                if args.reference:
                    ref = np.array(
                        measure_reference(
                            args.reference, cluster, model, workload, args.seed, args.observations
                        )
                    )
                split: dict[str, Any] = {}
                per_inv = measure(cluster, model, workload, args.seed, args.observations, split)
                t = np.array(per_inv) * 1e3
                mean, p99 = float(t.mean()), float(np.percentile(t, 99))
                worst_mean, worst_p99 = max(worst_mean, mean), max(worst_p99, p99)
                ok = mean <= TARGET_MEAN_MS and p99 <= TARGET_P99_MS
                line = (
                    f"{cluster:<10}{model:<17}{workload:<10}{len(t):>12}"
                    f"{np.median(t):>11.3f}{p99:>9.3f}{mean:>9.3f}"
                )
                if ref is not None:
                    if len(ref) != len(t):
                        raise SystemExit(
                            f"{cluster}/{model}/{workload}: {len(ref)} reference invocations but "
                            f"{len(t)} here"
                        )
                    ref_mean = float(ref.mean()) * 1e3
                    line += f"{ref_mean:>10.3f}{ref_mean / mean:>6.2f}x"
                print(line + f"  {'PASS' if ok else 'FAIL'}", flush=True)
                if args.split:
                    print(split_line(per_inv, split), flush=True)
    ok = worst_mean <= TARGET_MEAN_MS and worst_p99 <= TARGET_P99_MS
    print(
        f"{'PASS' if ok else 'FAIL'}: worst mean {worst_mean:.3f} ms (target <= "
        f"{TARGET_MEAN_MS:g}), worst p99 {worst_p99:.3f} ms (target <= {TARGET_P99_MS:g})"
    )
    print(
        "HexAgent Table 6 (SGLang prototype, ms/invocation): Llama 10.2 / 7.1, Qwen 14.7 / 11.5 "
        "on Hetero-1 / Hetero-2"
    )


if __name__ == "__main__":
    main()
