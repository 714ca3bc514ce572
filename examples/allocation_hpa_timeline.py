"""K8s HPA on the Allocation env over time: replicas, GPU utilisation and queue per LLM per period.

Scepsy §7.2 blames Kubernetes' loss on oscillation: "scaling up too much and then scaling down
because the request queues are empty, therefore ending up oscillating between allocations". This
runs the ``k8s-hpa`` baseline (``heuristics/allocation/baselines.py``: the HPA rule on measured GPU
utilisation, 15-s syncs, cold starts, 300-s scale-down stabilisation) at one constant rate and
plots, per LLM and per sync period, the replicas it runs, the utilisation it measured and the
calls in flight per replica, with Scepsy's allocation for the same rate as a dashed line.

    python examples/allocation_hpa_timeline.py --workload rag_reranker --gpus 4 \\
        --workflow-rate 1.0 --periods 40 --seed 1000000 --out docs/allocation_hpa_timeline.png

``--latency-calibration`` prices the work as the env's option does (``roofline``, the class
default and Allocation-v0's; ``smooth-roofline``, Allocation-v1's).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from envs.allocation import AllocationEnv
from heuristics.allocation import KubernetesHPA, ScepsyPolicy


def hpa_timeline(
    workload: str,
    gpus: int,
    rate: float,
    periods: int,
    period_s: float,
    seed: int,
    latency_calibration: str = "roofline",
) -> dict[str, Any]:
    """Run ``k8s-hpa`` and return per-period ``time`` (s), and per LLM ``replicas``,
    ``busy`` (measured GPU utilisation, 0–1) and ``in_flight`` (calls per replica), plus
    ``scepsy``: the replicas Scepsy's search gives each LLM at ``rate``."""
    env = AllocationEnv(
        workload=workload,
        gpus=gpus,
        workflow_rate=rate,
        periods=periods,
        period_seconds=period_s,
        latency_calibration=latency_calibration,
    )
    policy = KubernetesHPA()
    policy.reset()
    obs, info = env.reset(seed=seed)
    out: dict[str, Any] = {"time": [], "replicas": {}, "busy": {}, "in_flight": {}}
    done = False
    while not done:
        ctx = info["decision_context"]
        if ctx.current == 0 and ctx.previous is not None:
            out["time"].append(ctx.time)
            for m in ctx.models:
                met = ctx.llm_metrics.get(m)
                out["replicas"].setdefault(m, []).append(ctx.previous.get(m).replicas)
                out["busy"].setdefault(m, []).append(met.busy_fraction if met else 0.0)
                out["in_flight"].setdefault(m, []).append(met.in_flight if met else 0.0)
        obs, _, done, _, info = env.step(policy.act(obs, info))
    out["metrics"] = info["metrics"]
    scepsy_env = AllocationEnv(
        workload=workload, gpus=gpus, workflow_rate=rate, latency_calibration=latency_calibration
    )
    _, sinfo = scepsy_env.reset(seed=seed)
    plan = ScepsyPolicy().plan(sinfo["decision_context"])
    out["scepsy"] = {
        a.model: a.replicas * a.tp * a.share_units / plan.units_per_gpu for a in plan.llms
    }
    return out


def plot(tl: dict[str, Any], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(tl["replicas"])
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    for k, m in enumerate(models):
        c = f"C{k}"
        axes[0].step(tl["time"], tl["replicas"][m], where="post", color=c, label=f"{m} (HPA)")
        axes[0].axhline(tl["scepsy"][m], color=c, ls="--", lw=1, label=f"{m} (Scepsy, GPUs)")
        axes[1].plot(tl["time"], tl["busy"][m], color=c, marker=".", label=m)
        axes[2].plot(tl["time"], tl["in_flight"][m], color=c, marker=".", label=m)
    axes[0].set_ylabel("HPA pods = GPUs")
    axes[1].set_ylabel("measured utilisation")
    axes[1].axhline(0.7, color="grey", ls=":", lw=1)
    axes[2].set_ylabel("calls in flight / replica")
    axes[2].set_xlabel("simulated time (s)")
    axes[0].legend(fontsize=7, ncol=2)
    axes[1].legend(fontsize=7)
    axes[0].set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="rag_reranker")
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--workflow-rate", type=float, default=1.0)
    ap.add_argument("--periods", type=int, default=40)
    ap.add_argument("--period-seconds", type=float, default=15.0)
    ap.add_argument("--seed", type=int, default=1_000_000)
    ap.add_argument("--latency-calibration", default="roofline")
    ap.add_argument("--out", default="docs/allocation_hpa_timeline.png")
    a = ap.parse_args(argv)
    tl = hpa_timeline(
        a.workload,
        a.gpus,
        a.workflow_rate,
        a.periods,
        a.period_seconds,
        a.seed,
        a.latency_calibration,
    )
    for m in tl["replicas"]:
        rs = tl["replicas"][m]
        changes = sum(1 for x, y in zip(rs, rs[1:], strict=False) if x != y)
        print(f"{m}: HPA pods {rs} ({changes} changes); Scepsy {tl['scepsy'][m]:g} GPUs")
    m = tl["metrics"]
    print(
        f"HPA goodput {m['goodput']:.3f} wf/s, mean latency {m['latency_mean']:.1f} s, "
        f"reconfigurations {m['reconfigurations']:.0f}"
    )
    title = (
        f"K8s HPA, {a.workload}, {a.gpus} GPUs, {a.workflow_rate:g} wf/s, seed {a.seed} "
        f"({a.periods} syncs of {a.period_seconds:g} s, {a.latency_calibration})"
    )
    plot(tl, a.out, title)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
