"""PDCluster environment speed: steps per second under a random masked policy and under HexAgent.

    python -m benchmarks.env_speed [--cluster hetero-1] [--workload mixed] [--episodes 2]
        [--reference DIR] [--count N] [--no-observations] [--split]

Rates are env steps per second of the env alone (the policy's own time taken out), on two clocks:
``cpu steps/s`` from the CPU time of the benchmark's thread (``time.thread_time``: what one
quiet core gives, nearly independent of other processes on a shared machine) and
``wall steps/s`` from wall time (what you get on this machine now; the header prints the load
average). Also printed: the share of the env's CPU time spent building observations
(``_observation``) and refreshing the projected ratios and mask (``_refresh``), measured by
timing those methods in the same run.

``--split`` prints, per policy, the share of the env's CPU time in each of its step's parts
(:data:`SPLIT_METHODS`, nested calls counted once, in the outermost; ``sim.advance`` is the
simulator between invocations): the profile that says where a step's time goes. ``--count``
sets the workflows per episode (30: the training benchmark's episodes, whose invocations are
small), ``--no-observations`` runs the env with ``observations=False`` (for the HexAgent row).

``--reference DIR`` times a reference version of the code in the same run: DIR is an exported
tree (e.g. ``git archive main | tar -x -C /tmp/ref``); each policy's episodes run there in a
subprocess (``PYTHONPATH=DIR``, this file's measurement loop) right before they run here, and
``x ref`` is the reference's CPU time per step over this code's (house rule: speed figures are
ratios against a reference measured side by side).

Target: ≥ 15,000 random-policy env steps/s at K = 256 (the default slot count),
observation building included, judged on the CPU-time rate; a closing line says PASS or FAIL. A
training loop waits on the simulator when the env does fewer steps per second than the learner
consumes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

import numpy as np

#: The target: random-policy env steps per second at K = 256.
TARGET_STEPS_PER_S = 15_000
#: The parts of a step ``--split`` times: per step (legal action, pick, R and mask refresh,
#: observation, info, rewards) and per invocation (turning picks into a plan, building the next
#: decision context and its features, the simulator up to the next invocation).
SPLIT_METHODS = (
    "_legal_action",
    "_pick",
    "_refresh",
    "_observation",
    "_info",
    "_collect_rewards",
    "_finish_invocation",
    "_build_context",
    "_invocation_features",
    "sim.advance",
)


class _Timed:
    """Accumulate the CPU time of selected env methods by wrapping them on the instance.

    :param exclusive: count a call nested in another timed call only in the outer one (for
        shares that add up); otherwise each method counts its nested calls too.
    """

    def __init__(self, env: Any, names: list[str], exclusive: bool = False):
        self.totals: dict[str, float] = defaultdict(float)
        depth = [0]
        for name in names:
            fn = getattr(env, name)

            def wrapped(*a: Any, _fn: Any = fn, _name: str = name, **kw: Any) -> Any:
                depth[0] += 1
                t = time.thread_time()
                try:
                    return _fn(*a, **kw)
                finally:
                    depth[0] -= 1
                    if not exclusive or depth[0] == 0:
                        self.totals[_name] += time.thread_time() - t

            setattr(env, name, wrapped)


def run(policy_name: str, args: argparse.Namespace) -> dict[str, float]:
    """Steps, rates and shares of ``args.episodes`` episodes of ``policy_name``."""
    from envs.pd_cluster import PDClusterEnv

    kwargs: dict[str, Any] = {"workload_count": args.count} if args.count else {}
    if args.no_observations:
        kwargs["observations"] = False
    env = PDClusterEnv(
        cluster=args.cluster, model=args.model, workload=args.workload, slots=args.slots, **kwargs
    )
    timer = _Timed(env, ["_observation", "_refresh"])
    split = None
    if args.split:
        split = _Timed(env, [m for m in SPLIT_METHODS if not m.startswith("sim.")], True)
    if policy_name == "random":
        rng = np.random.default_rng(0)

        def act(obs: Any, info: dict[str, Any]) -> int:
            return int(rng.choice(np.flatnonzero(info["action_mask"])))

    else:
        from heuristics import make_policy

        policy = make_policy(policy_name)
        act = policy.act
    steps = 0
    act_cpu = act_wall = 0.0
    start, start_cpu = time.perf_counter(), time.thread_time()
    for ep in range(args.episodes):
        obs, info = env.reset(seed=ep)
        if split is not None:
            _time_simulator(env, split)
        done = False
        while not done:
            t, tc = time.perf_counter(), time.thread_time()
            a = act(obs, info)
            act_wall += time.perf_counter() - t
            act_cpu += time.thread_time() - tc
            obs, _, term, trunc, info = env.step(a)
            steps += 1
            done = term or trunc
    wall = time.perf_counter() - start - act_wall
    cpu = time.thread_time() - start_cpu - act_cpu
    shares = {k: v / cpu for k, v in split.totals.items()} if split is not None else {}
    if shares:  # resets (workload, horizons), step()'s own lines, the timers themselves
        shares["other"] = 1.0 - sum(shares.values())
    return {
        "split": shares,
        "steps": steps,
        "cpu_steps_per_s": steps / cpu,
        "wall_steps_per_s": steps / wall,
        "obs_share": timer.totals["_observation"] / cpu,
        "refresh_share": timer.totals["_refresh"] / cpu,
        "policy_share": act_cpu / (cpu + act_cpu),
    }


def _time_simulator(env: Any, split: _Timed) -> None:
    """Add the CPU time of the episode's simulator between invocations (``env.sim.advance``) to
    ``split`` as ``sim.advance``."""
    advance = env.sim.advance

    def timed() -> Any:
        t = time.thread_time()
        try:
            return advance()
        finally:
            split.totals["sim.advance"] += time.thread_time() - t

    env.sim.advance = timed


def run_reference(policy_name: str, args: argparse.Namespace) -> dict[str, float]:
    """:func:`run` on the code in ``args.reference``, in a subprocess."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.reference)}
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--json",
        "--policies",
        policy_name,
        "--cluster",
        args.cluster,
        "--model",
        args.model,
        "--workload",
        args.workload,
        "--episodes",
        str(args.episodes),
        "--slots",
        str(args.slots),
        "--count",
        str(args.count),
    ]
    cmd += ["--no-observations"] if args.no_observations else []
    cmd += ["--split"] if args.split else []
    out = subprocess.run(cmd, env=env, cwd=args.reference, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the reference run in {args.reference} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])[policy_name]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cluster", default="hetero-1")
    ap.add_argument("--model", default="llama3.1-70b")
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--policies", default="random,hexagent")
    ap.add_argument("--slots", type=int, default=256, help="K, waiting calls per invocation")
    ap.add_argument("--reference", help="an exported tree of the code to compare with")
    ap.add_argument("--count", type=int, default=0, help="workflows per episode (0: paper's)")
    ap.add_argument("--no-observations", action="store_true", help="observations=False")
    ap.add_argument("--split", action="store_true", help="print each step part's CPU share")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.json:  # the reference's subprocess: one JSON line
        print(json.dumps({name: run(name, args) for name in args.policies.split(",")}))
        return
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"PDCluster-v0 on {args.cluster} ({args.model}), workload {args.workload}, "
        f"{args.episodes} episodes per policy, K = {args.slots}, "
        f"{args.count or 'paper'} workflows, observations "
        f"{'off' if args.no_observations else 'on'}; load average {load} on "
        f"{os.cpu_count()} cores"
    )
    print(
        f"{'policy':<12}{'steps':>8}{'cpu steps/s':>13}{'wall steps/s':>14}{'obs %':>8}"
        f"{'R+mask %':>10}{'policy %':>10}"
        + (f"{'ref cpu/s':>11}{'x ref':>7}" if args.reference else "")
    )
    verdict = None
    for name in args.policies.split(","):
        ref = run_reference(name, args) if args.reference else None
        r = run(name, args)
        line = (
            f"{name:<12}{r['steps']:>8}{r['cpu_steps_per_s']:>13,.0f}"
            f"{r['wall_steps_per_s']:>14,.0f}{r['obs_share']:>8.1%}{r['refresh_share']:>10.1%}"
            f"{r['policy_share']:>10.1%}"
        )
        if ref is not None:
            if ref["steps"] != r["steps"]:
                raise SystemExit(f"{name}: {ref['steps']} reference steps but {r['steps']} here")
            ratio = r["cpu_steps_per_s"] / ref["cpu_steps_per_s"]
            line += f"{ref['cpu_steps_per_s']:>11,.0f}{ratio:>6.2f}x"
        print(line, flush=True)
        for label, res in (("", r), ("reference ", ref)):
            if res is not None and res["split"]:
                parts = sorted(res["split"].items(), key=lambda kv: -kv[1])
                print(f"  {label}split: " + ", ".join(f"{k} {v:.1%}" for k, v in parts))
        if name == "random" and args.slots == 256:
            ok = r["cpu_steps_per_s"] >= TARGET_STEPS_PER_S
            verdict = (
                f"{'PASS' if ok else 'FAIL'}: random policy {r['cpu_steps_per_s']:,.0f} env "
                f"steps/s (CPU time) at K = 256 (target >= {TARGET_STEPS_PER_S:,})"
            )
    if verdict is not None:
        print(verdict)


if __name__ == "__main__":
    main()
