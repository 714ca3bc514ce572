"""The learned policies (docs/training.md, checkpoints/README.md): the shipped checkpoints at
the v1 defaults beside every non-learned policy, the Routing checkpoint's generalisation, and its
learning curve against the teacher's line.

Held-out seeds 1,000,000–1,000,002 throughout (training draws seeds below 1,000,000; model
selection uses 2,000,000+). The non-learned rows are every registered policy of the family and
our references, so "best non-learned" is the strongest rule we have, whichever it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from evaluation.config import unique
from evaluation.report.stage import StageRun, stage
from evaluation.rows import headline_of, mean_metric

SEEDS = "1000000,1000001,1000002"
ROUTING_RULES = (
    "random-route,power-of-two,round-robin,least-request,lowest-tpm,preble,llumnix,llm-d,"
    "sglang-cache-aware,dynamo-kv,prefix-aware-low,earliest-finish,goodserve,goodserve+shorten,"
    "goodserve-no-migration,goodserve+queue-aware,implied-triage"
)
ROUTING_LEARNED = "ckpt:checkpoints/routing"
ORACLE = "py:agents/teachers.py:routing_hindsight_triage"
ALLOCATION_RULES = (
    "k8s-hpa,naive-equal,aegaeon-3p1d,aegaeon-2p2d,aegaeon-1p3d,ayo,demand-proportional,scepsy"
)
PD_RULES = (
    "per-call-fcfs,workflow-fcfs,workflow-llf,atlas,per-call-fcfs+earliest-finish,"
    "workflow-fcfs+earliest-finish,workflow-llf+earliest-finish,atlas+earliest-finish,hexagent"
)


def _setting(row: dict, keys: Iterable[str]) -> str:
    parts = [f"{k} {row[k]}" for k in keys if row.get(k) is not None]
    return ", ".join(parts) or "default"


def comparison(path: Path, learned: str, setting_keys: Iterable[str] = ()) -> str:
    """Per setting (``workload`` and ``setting_keys``), every policy's seed mean ± sd and
    per-seed values of the env's selection metric (Req99, goodput), best first, then the learned
    policy's improvement over the best non-learned one in the metric's direction
    (:meth:`Metric.improvement`; the privileged oracle and other checkpoints do not compete)."""
    rows = json.loads(path.read_text())
    metric = headline_of(rows).select_metric
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(_setting(r, ("workload", *setting_keys)), []).append(r)
    out = []
    for setting, subset in groups.items():
        workload = subset[0]["workload"]
        policies = unique(r["policy"] for r in subset)
        means = {p: mean_metric(subset, workload, p, metric.key, metric.better) for p in policies}
        lines = [
            f"*{setting}* ({metric.key}, {metric.better} is better)",
            "",
            f"| policy | {metric.key} (mean ± sd) | per seed |",
            "|---|---|---|",
        ]
        for p in sorted(policies, key=lambda p: metric.sign(means[p])):
            v = [r["metrics"].get(metric.key) for r in subset if r["policy"] == p]
            v = [math.nan if x is None else float(x) for x in v]
            sd = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
            name = f"**{p}**" if p == learned else p
            if p == ORACLE:
                name += " (privileged: reads true lengths)"
            lines.append(
                f"| {name} | {means[p]:.3f} ± {sd:.3f} | " + ", ".join(f"{x:.3f}" for x in v) + " |"
            )
        rules = [p for p in policies if not p.startswith(("ckpt:", "py:"))]
        if learned in means and rules:
            best = min(rules, key=lambda p: metric.sign(means[p]))
            gain = metric.improvement(means[learned], means[best])
            lines += ["", f"Learned vs the best non-learned policy ({best}): **{gain:+.1f} %**"]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def _routing(run: StageRun) -> str:
    return comparison(run.out / "default" / "results.json", ROUTING_LEARNED)


def _routing_generalisation(run: StageRun) -> str:
    parts = [
        comparison(run.out / "load" / "results.json", ROUTING_LEARNED, ("load_scale",)),
        comparison(run.out / "sessions" / "results.json", ROUTING_LEARNED),
    ]
    return "\n\n".join(parts)


def _allocation(run: StageRun) -> str:
    return comparison(run.out / "default" / "results.json", "ckpt:checkpoints/allocation")


def _pd(run: StageRun) -> str:
    return comparison(
        run.out / "default" / "results.json",
        "ckpt:checkpoints/pd-cluster",
        ("workload_count",),
    )


def _curve(run: StageRun) -> str:
    history = json.loads((run.out / "run" / "eval_history.json").read_text())
    bc = json.loads((run.out / "run" / "eval.json").read_text())["bc"]
    teacher, clone = bc["teacher_eval"]["goodput"], bc["eval"]["goodput"]
    lines = ["| RL env steps | validation goodput | vs the teacher |", "|---|---|---|"]
    lines.append(f"| 0 (the clone) | {clone:.3f} | {(clone / teacher - 1) * 100:+.1f} % |")
    for h in history:
        g = h["goodput"]
        best = " (best so far)" if h.get("saved_best") else ""
        lines.append(f"| {h['global_step']:,}{best} | {g:.3f} | {(g / teacher - 1) * 100:+.1f} % |")
    return (
        f"Validation seeds 2,000,000+ (200-request episodes); the teacher scores {teacher:.3f}."
        "\n\n" + "\n".join(lines)
    )


def _cleanrl(run: StageRun) -> str:
    r = json.loads((run.out / "run" / "result.json").read_text())
    seeds = f"{r['seeds'][0]:,}–{r['seeds'][-1]:,}"
    return (
        "| env | episode | env steps | training (min) | total (min) | learned | expert | "
        "gap | within 10 % |\n|---|---|---|---|---|---|---|---|---|\n"
        f"| {r['env']} | {r['workload_count']} | {r['timesteps']:,} | {r['train_minutes']} | "
        f"{r['total_minutes']} | {r['metric']} {r['learned']:.3f} | {r['expert']} "
        f"{r['expert_value']:.3f} | {r['gap_vs_expert'] * 100:+.1f} % | "
        f"{'yes' if r['within_10pct'] else 'no'} |\n\nHeld-out seeds {seeds}; {r['metric']}: "
        f"{r['better']} is better."
    )


STAGES = [
    stage(
        "training-routing-v1",
        "Routing-v1 at its default: the shipped checkpoint beside every non-learned router",
        "training.md",
        3,
        f"evaluate.py --quiet --env routing-v1 --seeds {SEEDS} --policies "
        f"{ROUTING_RULES},{ROUTING_LEARNED},{ORACLE} --out {{out}}/default",
        render=_routing,
    ),
    stage(
        "training-routing-generalisation",
        "The Routing-v1 checkpoint at 0.5× and 1.5× the default load and on an unseen workload",
        "training.md",
        6,
        f"evaluate.py --quiet --env routing-v1 --sweep load_scale=0.175,0.525 --seeds {SEEDS} "
        f"--policies {ROUTING_RULES},{ROUTING_LEARNED} --out {{out}}/load",
        f"evaluate.py --quiet --env routing-v1 --workload goodserve-sessions --seeds {SEEDS} "
        f"--policies {ROUTING_RULES},{ROUTING_LEARNED} --out {{out}}/sessions",
        render=_routing_generalisation,
    ),
    stage(
        "training-routing-curve",
        "The Routing-v1 checkpoint's training run: teacher-ppo's validation curve against the "
        "teacher's line",
        "training.md",
        15,
        "train.py --config examples/train_routing_v1_teacher_ppo.yaml --wandb disabled --quiet "
        "--out {out}/run",
        "examples/plot_teacher_ppo.py {out}/run --out {out}/teacher_ppo_curves.png",
        render=_curve,
        figures=[("teacher_ppo_curves.png", "docs/teacher_ppo_curves.png")],
    ),
    stage(
        "training-routing-teacher-diff",
        "Where the Routing-v1 checkpoint's decisions differ from its teacher's (held-out seeds)",
        "training.md",
        2,
        f"examples/routing_teacher_diff.py --policy {ROUTING_LEARNED} "
        f"--teacher goodserve+queue-aware --seeds {SEEDS}",
    ),
    stage(
        "training-pd-v1",
        "PDCluster-v1, BFCL and Mixed at 40 workflows: the shipped (v0-trained) checkpoint "
        "beside HexAgent and the earliest-finish baselines",
        "training.md",
        15,
        f"evaluate.py --quiet --env pd-cluster-v1 --workload bfcl,mixed --count 40 --seeds {SEEDS} "
        "--policies per-call-fcfs+earliest-finish,workflow-fcfs+earliest-finish,"
        "workflow-llf+earliest-finish,atlas+earliest-finish,hexagent,ckpt:checkpoints/pd-cluster "
        "--out {out}/default",
        render=_pd,
    ),
    stage(
        "training-cleanrl-routing",
        "The standard-client recipe on Routing-v1: stock MaskablePPO, 12,288 steps, against "
        "GoodServe",
        "training.md",
        12,
        "examples/cleanrl_ppo.py --env routing-v1 --timesteps 12288 --minutes 30 "
        "--eval-seeds 1000000,1000001,1000002,1000003,1000004 --out {out}/run",
        render=_cleanrl,
    ),
    stage(
        "training-cleanrl-pd",
        "The standard-client recipe on PDCluster-v1: stock MaskablePPO, 8,192 steps, against "
        "HexAgent",
        "training.md",
        15,
        "examples/cleanrl_ppo.py --env pd-cluster-v1 --timesteps 8192 --minutes 30 --out {out}/run",
        render=_cleanrl,
    ),
    stage(
        "training-rollout-scale",
        "Rollout collection with 1 env in this process and 2 SubprocVecEnv workers",
        "training.md",
        3,
        "-m benchmarks.rollout_scale --env routing-v1,pd-cluster-v1 --workers 1,2 "
        "--backends dummy,subproc --steps 2000",
    ),
    stage(
        "training-allocation-v1",
        "Allocation-v1 at its default: the shipped (v0-trained) checkpoint beside every allocator",
        "training.md",
        10,
        f"evaluate.py --quiet --env allocation-v1 --seeds {SEEDS} --policies "
        f"{ALLOCATION_RULES},ckpt:checkpoints/allocation --out {{out}}/default",
        render=_allocation,
    ),
]
