"""Why routers miss SLOs on Routing-v0, counted per request.

For each policy and seed, one episode at the env's defaults (or the options given); every
request is classed by the task, the GPU it finished on, whether it met its SLO and, if not, why:

* ``alone-miss``: even run alone on the GPU it finished on (prefill + batch-1 decode, the SLO's
  own run-alone model for that GPU) it would have missed -- the routing choice doomed it, no
  queue needed (α × A800 run-alone < run-alone on a slower GPU);
* ``doomed``: it misses even alone on the fastest GPU of the cluster (no router can save it);
* ``queue`` / ``slow-decode``: otherwise, the larger overshoot of the wait before the first
  prefill or of the rest (prefill + decode beyond run-alone on its GPU: batching, preemption,
  migration), both in seconds.

It reads true output lengths (never shown to a policy). Prints counts and the seed means::

    python examples/routing_misses.py --policies preble,least-request --seeds 0,1,2,3,4,5
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from typing import Any

import numpy as np


def _gpu_run_alone(env: Any) -> dict[str, Any]:
    """Per GPU type of the cluster, ``(L_in, L_out) -> seconds`` alone on it (batch 1)."""
    from envs.common.run_alone import RunAloneLatency
    from envs.sim.engines.presets import resolve_token_budget

    out: dict[str, Any] = {}
    for spec in env.cluster.instances:
        if spec.gpu in out:
            continue
        lat = env._latency_cache.get(spec, env.engine)
        budget = resolve_token_budget(env.engine, lat.gpu, env.token_budget)
        out[spec.gpu] = RunAloneLatency(lat, env.prefill_mode, budget)
    return out


def classify(policy_name: str, seed: int, **env_kwargs: Any) -> dict[str, Any]:
    """One episode under ``policy_name``: per-request classes and the episode metrics."""
    from envs.routing import RoutingEnv
    from evaluation import run_episode
    from evaluation.policies import resolve_policy

    env = RoutingEnv(**env_kwargs)
    episode = run_episode(env, resolve_policy(policy_name, env, "routing"), seed)
    sim = env.sim
    alone = _gpu_run_alone(env)
    gpu_of = {s.index: s.gpu for s in env.cluster.instances}
    counts: Counter = Counter()
    for run in sim.runs:
        c = next(x for x in sim.calls if x.workflow is run)
        i = run.index
        lat, slo = float(env._latencies[i]), float(env._slo[i])
        gpu = gpu_of.get(c.decode_instance if c.decode_instance is not None else -1, "none")
        task = c.node.task
        if lat <= slo:
            counts[(task, gpu, "met")] += 1
            continue
        best_alone = min(f(c.input_tokens, c.output_tokens) for f in alone.values())
        if best_alone > slo:
            cause = "doomed"
        elif gpu in alone and alone[gpu](c.input_tokens, c.output_tokens) > slo:
            cause = "alone-miss"
        else:
            wait = max(0.0, c.prefill_start - run.arrival) if c.prefill_start >= 0 else lat
            own = alone[gpu](c.input_tokens, c.output_tokens) if gpu in alone else 0.0
            rest = lat - wait - own
            cause = "queue" if wait >= rest else "slow-decode"
        counts[(task, gpu, cause)] += 1
    return {"metrics": episode["metrics"], "counts": counts}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--policies", default="preble,least-request")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--count", type=int, default=None)
    ap.add_argument("--env-kwargs", default="{}", help="JSON of further RoutingEnv options")
    ap.add_argument("--json", default=None, help="also write the counts here")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    kwargs = json.loads(args.env_kwargs)
    if args.count is not None:
        kwargs["workload_count"] = args.count
    report: dict[str, Any] = {}
    for name in args.policies.split(","):
        total: Counter = Counter()
        goodputs = []
        for s in seeds:
            res = classify(name, s, **kwargs)
            total.update(res["counts"])
            goodputs.append(res["metrics"]["goodput"])
        n = len(seeds)
        by_cause: dict[str, float] = defaultdict(float)
        by_gpu: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        by_task: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for (task, gpu, cause), v in total.items():
            by_cause[cause] += v / n
            by_gpu[gpu][cause] += v / n
            by_task[task][cause] += v / n
        print(f"\n{name}: goodput {np.mean(goodputs):.3f} ± {np.std(goodputs):.3f} over {n} seeds")
        print("  per episode:", {k: round(v, 1) for k, v in sorted(by_cause.items())})
        for label, table in (("GPU", by_gpu), ("task", by_task)):
            for key, row in sorted(table.items()):
                print(f"  {label} {key:>6}:", {k: round(v, 1) for k, v in sorted(row.items())})
        report[name] = {
            "goodput": goodputs,
            "counts": {"|".join(k): v for k, v in total.items()},
        }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
