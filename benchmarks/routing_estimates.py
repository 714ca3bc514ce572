"""How good are GoodServe's black-box estimates, and why do requests miss? Three audits.

    python -m benchmarks.routing_estimates [--env routing-v1] [--policy goodserve]
        [--load-scale 0.35] [--slo-scale 2] [--model llama3.1-8b] [--predictor moe]
        [--seeds 0,1] [--no-checks] [--workload goodserve]
    python -m benchmarks.routing_estimates --diagnose --policies preble,goodserve [...]
    python -m benchmarks.routing_estimates --capacity --policy least-request --loads 0.1,0.5,1

``--env``: ``routing-v1`` (the default: the task-median SLO basis and the ``smooth-roofline``
calibration of ``envs.V1_KWARGS``) or ``routing-v0`` (the env class's defaults).
``--diagnose``: per policy, the episode-end ``info["diagnosis"]``
(:mod:`envs.routing.diagnosis`) averaged over the seeds: migrations attempted (of them on queued
requests), requests moved and how many of those met their SLO, misses by cause (under-prediction,
queueing, prefill, decode) and the routing-time prediction error per task class.
``--capacity``: per load scale, the policy's median and p90 latency, utilisation and SLO
violations (the load the cluster preset sustains).

The default audit:

Not a speed benchmark: an audit of the estimate T(r, g) = q_g + (L_in − H_rg)·p_g + L̂_out·d_g
(GoodServe §3.3 Eq. 2) that every routing decision of GoodServe rests on. For each
request it records, at its routing decision, the estimate for the chosen instance and its three
terms, then compares them with what happened to the request (times from the simulator's call
records: queueing = first prefill chunk − arrival, prefill = first chunk → last chunk, decode =
the rest, which after a migration includes the transfer and the target's queue). One row per GPU
type, means over the requests routed there; ``ratio`` = measured / estimated (> 1: the estimate
was optimistic, the request took longer than the router expected).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from envs import V1_KWARGS

# What each --env passes on top of RoutingEnv's own defaults (which are Routing-v0's).
_ENV_KWARGS: dict[str, dict[str, Any]] = {
    "routing-v0": {},
    "routing-v1": dict(V1_KWARGS["servegym/Routing-v1"]),
}


def audit(policy_name: str, seeds: list[int], **env_kwargs: Any) -> dict[str, dict[str, float]]:
    """Per-GPU means of measured and estimated latency terms (see the module docstring)."""
    from envs.routing import RoutingEnv
    from heuristics import make_policy

    env = RoutingEnv(**env_kwargs)
    rows: dict[str, list[tuple[float, ...]]] = {}
    for seed in seeds:
        policy = make_policy(policy_name)
        policy.reset()
        obs, info = env.reset(seed=seed)
        est: dict[str, tuple[int, float, float, float, float]] = {}
        done = False
        while not done:
            ctx = info["decision_context"]
            a = policy.act(obs, info)
            if ctx.kind == "route":
                pre = ctx.p[a] * max(0.0, ctx.input_tokens - ctx.prefix_hit_tokens[a])
                dec = ctx.predicted_output_tokens * ctx.d[a]
                est[ctx.call_id] = (a, ctx.estimate[a], ctx.q[a], pre, dec)
            obs, _, term, trunc, info = env.step(a)
            done = term or trunc
        assert env.sim is not None
        for c in env.sim.calls:
            a, t_est, q, pre, dec = est[c.id]
            rows.setdefault(env.sim.monolithic[a].gpu, []).append(
                (
                    c.decode_end - c.revealed_at,
                    t_est,
                    c.prefill_start - c.revealed_at,
                    q,
                    c.prefill_end - c.prefill_start,
                    pre,
                    c.decode_end - c.decode_start,
                    dec,
                    c.output_tokens,
                    c.predicted_output_tokens,
                    float(c.migrations > 0),
                )
            )
    keys = (
        "latency", "estimate", "queue", "q_g", "prefill", "prefill_est", "decode", "decode_est",
        "output_tokens", "predicted_tokens", "migrated",
    )  # fmt: skip
    out = {}
    for gpu, r in rows.items():
        m = np.asarray(r).mean(axis=0)
        out[gpu] = {"requests": float(len(r)), **dict(zip(keys, m.tolist(), strict=True))}
        out[gpu]["ratio"] = out[gpu]["latency"] / out[gpu]["estimate"]
    return out


def _episode(policy_name: str, seed: int, **env_kwargs: Any) -> dict[str, Any]:
    """The final ``info`` of one Routing episode under ``policy_name``."""
    from envs.routing import RoutingEnv
    from heuristics import make_policy

    env = RoutingEnv(**env_kwargs)
    policy = make_policy(policy_name)
    policy.reset()
    obs, info = env.reset(seed=seed)
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(policy.act(obs, info))
        done = term or trunc
    return info


def diagnose(policies: list[str], seeds: list[int], **env_kwargs: Any) -> dict[str, dict]:
    """Per policy, the seed mean of goodput, violation ratio and every diagnosis entry."""
    out = {}
    for name in policies:
        infos = [_episode(name, s, **env_kwargs) for s in seeds]
        row = {
            "goodput": float(np.mean([i["metrics"]["goodput"] for i in infos])),
            "violations": float(np.mean([i["metrics"]["slo_violation_ratio"] for i in infos])),
        }
        for k in infos[0]["diagnosis"]:
            row[k] = float(np.mean([i["diagnosis"][k] for i in infos]))
        out[name] = row
    return out


def capacity(policy: str, loads: list[float], seeds: list[int], **env_kwargs: Any) -> list:
    """Per load scale: median / p90 latency (s), utilisation, violation ratio (seed means)."""
    rows = []
    for load in loads:
        infos = [_episode(policy, s, load_scale=load, **env_kwargs) for s in seeds]
        lat = [np.asarray(i["latencies"]) for i in infos]
        rows.append(
            (
                load,
                float(np.mean([np.median(x) for x in lat])),
                float(np.mean([np.quantile(x, 0.9) for x in lat])),
                float(np.mean([i["utilisation"]["monolithic"] for i in infos])),
                float(np.mean([i["metrics"]["slo_violation_ratio"] for i in infos])),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="routing-v1", choices=sorted(_ENV_KWARGS))
    p.add_argument("--policy", default="goodserve")
    p.add_argument("--model", default="llama3.1-8b")
    p.add_argument("--load-scale", type=float, default=0.35)
    p.add_argument("--slo-scale", type=float, default=2.0)
    p.add_argument("--predictor", default="moe")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--no-checks", action="store_true", help="no migration checks (τ off)")
    p.add_argument(
        "--running-checks-only", action="store_true", help="risk-check running requests only"
    )
    p.add_argument("--workload", default="goodserve", help="generator (default: the paper's)")
    p.add_argument("--diagnose", action="store_true", help="misses by cause etc., per policy")
    p.add_argument("--policies", default="preble,goodserve", help="with --diagnose")
    p.add_argument("--capacity", action="store_true", help="latency vs load for --policy")
    p.add_argument("--loads", default="0.1,0.2,0.35,0.5,0.7,1.0", help="with --capacity")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    common = dict(
        **_ENV_KWARGS[args.env],
        model=args.model,
        workload=args.workload,
        slo_scale=args.slo_scale,
        output_predictor=args.predictor,
        workload_count=args.count,
        check_interval=None if args.no_checks else 50,
        check_queued=not args.running_checks_only,
    )
    if args.diagnose:
        res = diagnose(args.policies.split(","), seeds, load_scale=args.load_scale, **common)
        _print_diagnosis(res, args)
        return
    if args.capacity:
        loads = [float(x) for x in args.loads.split(",")]
        print(
            f"{args.env}, {args.policy}, workload {args.workload}, {args.model}, "
            f"SLO scale {args.slo_scale:g}, seeds {args.seeds}: seed means"
        )
        print(f"{'load':>5} {'req/s':>6} {'p50 s':>6} {'p90 s':>6} {'util':>5} {'viol':>5}")
        from envs.routing import PAPER_RATES

        for load, p50, p90, util, viol in capacity(args.policy, loads, seeds, **common):
            rate = load * PAPER_RATES[args.workload]
            print(f"{load:5.2f} {rate:6.2f} {p50:6.2f} {p90:6.2f} {util:5.0%} {viol:5.0%}")
        return
    res = audit(args.policy, seeds, load_scale=args.load_scale, **common)
    print(
        f"{args.env}, {args.policy}, {args.model}, load {args.load_scale:g}, "
        f"SLO scale {args.slo_scale:g}, predictor {args.predictor}, seeds {args.seeds}: "
        "means per request routed to each GPU (seconds; ratio = measured / estimated)"
    )
    print(
        f"{'gpu':10} {'n':>5} {'latency':>8} {'est T':>7} {'ratio':>6} | {'queue':>6} "
        f"{'q_g':>6} | {'prefill':>7} {'est':>6} | {'decode':>7} {'est':>6} | {'L_out':>6} "
        f"{'L^_out':>6} | {'migr':>5}"
    )
    for gpu, r in res.items():
        print(
            f"{gpu:10} {r['requests']:5.0f} {r['latency']:8.2f} {r['estimate']:7.2f} "
            f"{r['ratio']:6.2f} | {r['queue']:6.2f} {r['q_g']:6.2f} | {r['prefill']:7.2f} "
            f"{r['prefill_est']:6.2f} | {r['decode']:7.2f} {r['decode_est']:6.2f} | "
            f"{r['output_tokens']:6.0f} {r['predicted_tokens']:6.0f} | {r['migrated']:5.0%}"
        )


def _print_diagnosis(res: dict[str, dict], args: argparse.Namespace) -> None:
    print(
        f"{args.env}, workload {args.workload}, {args.model}, load {args.load_scale:g}, "
        f"SLO scale {args.slo_scale:g}, predictor {args.predictor}, seeds {args.seeds}: "
        f"seed means per episode ({args.count} requests)"
    )
    print(
        "| policy | goodput | viol. | migr. attempted (queued) | moved / met | misses | "
        "under-pred. | queueing | prefill | decode |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in res.items():
        print(
            f"| {name} | {r['goodput']:.3f} | {r['violations']:.3f} | "
            f"{r['migrations_attempted']:.0f} ({r['migrations_attempted_queued']:.0f}) | "
            f"{r['migrated_requests']:.0f} / {r['migrated_met']:.0f} | {r['misses']:.0f} | "
            f"{r['miss_under_prediction']:.0%} | {r['miss_queueing']:.0%} | "
            f"{r['miss_prefill']:.0%} | {r['miss_decode']:.0%} |"
        )
    first = next(iter(res.values()))
    tasks = sorted(k.removeprefix("prediction_nmae_") for k in first if "prediction_nmae_" in k)
    print(
        "prediction error at routing (normalised MAE / bias): "
        + "; ".join(
            f"{t} {first['prediction_nmae_' + t]:.2f} / {first['prediction_bias_' + t]:+.0%}"
            for t in tasks
        )
    )


if __name__ == "__main__":
    main()
