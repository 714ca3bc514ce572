"""How good are GoodServe's black-box estimates? Measured vs estimated latency per GPU.

    python -m benchmarks.routing_estimates [--policy goodserve] [--load-scale 0.35]
        [--slo-scale 2] [--model llama3.1-8b] [--predictor moe] [--seeds 0,1] [--no-checks]

Not a speed benchmark: an audit of the estimate T(r, g) = q_g + (L_in − H_rg)·p_g + L̂_out·d_g
(GoodServe §3.3 Eq. 2) that every routing decision in ``servegym/Routing-v0`` rests on. For each
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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="goodserve")
    p.add_argument("--model", default="llama3.1-8b")
    p.add_argument("--load-scale", type=float, default=0.35)
    p.add_argument("--slo-scale", type=float, default=2.0)
    p.add_argument("--predictor", default="moe")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--no-checks", action="store_true", help="no migration checks (τ off)")
    args = p.parse_args(argv)
    res = audit(
        args.policy,
        [int(s) for s in args.seeds.split(",")],
        model=args.model,
        load_scale=args.load_scale,
        slo_scale=args.slo_scale,
        output_predictor=args.predictor,
        workload_count=args.count,
        check_interval=None if args.no_checks else 50,
    )
    print(
        f"{args.policy}, {args.model}, load {args.load_scale:g}, SLO scale {args.slo_scale:g}, "
        f"predictor {args.predictor}, seeds {args.seeds}: means per request routed to each GPU "
        "(seconds; ratio = measured / estimated)"
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


if __name__ == "__main__":
    main()
