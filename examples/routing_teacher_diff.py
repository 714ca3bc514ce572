"""Where a learned router's decisions differ from its teacher's, on Routing-v1 at the defaults.

Runs the learned policy's own episodes; at every decision it also asks the teacher what it would
do in that state (the teacher never acts). Prints, per decision kind (``route``, ``migrate``),
the share of decisions where the two agree, and per GPU type the share of the learned policy's
and the teacher's picks, then the learned episodes' goodput::

    python examples/routing_teacher_diff.py --policy ckpt:checkpoints/routing \\
        --teacher goodserve+queue-aware --seeds 1000000,1000001,1000002
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", required=True, help="the learned policy (ckpt:PATH)")
    ap.add_argument("--teacher", default="goodserve+queue-aware")
    ap.add_argument("--seeds", default="1000000,1000001,1000002")
    ap.add_argument("--env", default="routing-v1")
    args = ap.parse_args(argv)
    import gymnasium as gym
    import numpy as np

    import envs  # noqa: F401  (registers the environments)
    from envs.registry import family
    from evaluation.policies import resolve_policy

    gym_id = family(args.env).gym_id
    agree: Counter = Counter()
    seen: Counter = Counter()
    picks: dict[str, Counter] = {"learned": Counter(), "teacher": Counter()}
    goodputs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        env = gym.make(gym_id, decision_context=True)
        learned = resolve_policy(args.policy, env, args.env)
        teacher = resolve_policy(args.teacher, env, args.env)
        learned.reset()
        teacher.reset()
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            ctx = info["decision_context"]
            a, t = int(learned.act(obs, info)), int(teacher.act(obs, info))
            seen[ctx.kind] += 1
            agree[ctx.kind] += a == t
            if ctx.kind == "route":
                picks["learned"][ctx.gpus[a]] += 1
                picks["teacher"][ctx.gpus[t]] += 1
            obs, _, terminated, truncated, info = env.step(a)
            done = terminated or truncated
        goodputs.append(info["metrics"]["goodput"])
        env.close()
    for kind in sorted(seen):
        print(f"{kind}: {seen[kind]} decisions, teacher's choice in {agree[kind] / seen[kind]:.1%}")
    for who, counts in picks.items():
        n = sum(counts.values())
        shares = ", ".join(f"{g} {c / n:.1%}" for g, c in sorted(counts.items()))
        print(f"{who} routes to: {shares}")
    print(f"learned goodput {np.mean(goodputs):.3f} (seeds {args.seeds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
