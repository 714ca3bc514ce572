"""PDCluster environment speed: steps per second under a random masked policy and under HexAgent.

    python -m benchmarks.env_speed [--cluster hetero-1] [--workload mixed] [--episodes 2]

Also prints the share of step time spent building observations (``_observation``) and refreshing
the projected ratios and mask (``_refresh``), measured by timing those methods in the same run.
A training loop waits on the simulator when the env does fewer steps per second than the learner
consumes (SB3 PPO on 2 cores: ~1.2–2.5k steps/s).

Target (issue 14): ≥ 15,000 random-policy steps/s at K = 256 (the default slot count),
observation building included, judged on ``env-only/s`` (wall time minus the random policy's own
sampling); a closing line says PASS or FAIL.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import Any

import numpy as np

from envs.pd_cluster import PDClusterEnv

#: Issue 14's target: random-policy env steps per second at K = 256.
TARGET_STEPS_PER_S = 15_000


class _Timed:
    """Accumulate wall time of selected env methods by wrapping them on the instance."""

    def __init__(self, env: PDClusterEnv, names: list[str]):
        self.totals: dict[str, float] = defaultdict(float)
        for name in names:
            fn = getattr(env, name)

            def wrapped(*a: Any, _fn: Any = fn, _name: str = name, **kw: Any) -> Any:
                t = time.perf_counter()
                try:
                    return _fn(*a, **kw)
                finally:
                    self.totals[_name] += time.perf_counter() - t

            setattr(env, name, wrapped)


def run(policy_name: str, args: argparse.Namespace) -> dict[str, float]:
    env = PDClusterEnv(
        cluster=args.cluster, model=args.model, workload=args.workload, slots=args.slots
    )
    timer = _Timed(env, ["_observation", "_refresh"])
    if policy_name == "random":
        rng = np.random.default_rng(0)

        def act(obs: Any, info: dict[str, Any]) -> int:
            return int(rng.choice(np.flatnonzero(info["action_mask"])))

    else:
        from heuristics import make_policy

        policy = make_policy(policy_name)
        act = policy.act
    steps = 0
    act_time = 0.0
    start = time.perf_counter()
    for ep in range(args.episodes):
        obs, info = env.reset(seed=ep)
        done = False
        while not done:
            t = time.perf_counter()
            a = act(obs, info)
            act_time += time.perf_counter() - t
            obs, _, term, trunc, info = env.step(a)
            steps += 1
            done = term or trunc
    wall = time.perf_counter() - start
    env_time = wall - act_time
    return {
        "steps": steps,
        "steps_per_s": steps / wall,
        "env_steps_per_s": steps / env_time,
        "obs_share": timer.totals["_observation"] / env_time,
        "refresh_share": timer.totals["_refresh"] / env_time,
        "policy_share": act_time / wall,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cluster", default="hetero-1")
    ap.add_argument("--model", default="llama3.1-70b")
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--policies", default="random,hexagent")
    ap.add_argument("--slots", type=int, default=256, help="K, waiting calls per invocation")
    args = ap.parse_args(argv)
    print(
        f"PDCluster-v0 on {args.cluster} ({args.model}), workload {args.workload}, "
        f"{args.episodes} episodes per policy, K = {args.slots}"
    )
    print(
        f"{'policy':<12}{'steps':>8}{'steps/s':>10}{'env-only/s':>12}{'obs %':>8}"
        f"{'R+mask %':>10}{'policy %':>10}"
    )
    verdict = None
    for name in args.policies.split(","):
        r = run(name, args)
        print(
            f"{name:<12}{r['steps']:>8}{r['steps_per_s']:>10,.0f}{r['env_steps_per_s']:>12,.0f}"
            f"{r['obs_share']:>8.1%}{r['refresh_share']:>10.1%}{r['policy_share']:>10.1%}"
        )
        if name == "random" and args.slots == 256:
            ok = r["env_steps_per_s"] >= TARGET_STEPS_PER_S
            verdict = (
                f"{'PASS' if ok else 'FAIL'}: random policy {r['env_steps_per_s']:,.0f} env "
                f"steps/s at K = 256 (target >= {TARGET_STEPS_PER_S:,})"
            )
    if verdict is not None:
        print(verdict)


if __name__ == "__main__":
    main()
