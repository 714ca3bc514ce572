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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.config import unique
from evaluation.report.stage import Stage, StageRun, stage
from evaluation.rows import headline_of, mean_metric

SEEDS = "1000000,1000001,1000002"
ROUTING_RULES = (
    "random-route,power-of-two,round-robin,least-request,lowest-tpm,preble,llumnix,llm-d,"
    "sglang-cache-aware,dynamo-kv,prefix-aware-low,earliest-finish,goodserve,goodserve+shorten,"
    "goodserve-no-migration,goodserve+queue-aware,implied-triage"
)
ROUTING_LEARNED = "ckpt:checkpoints/routing"
ORACLE = "py:agents/teachers.py:routing_hindsight_triage"
ALLOCATION_LEARNED = "ckpt:checkpoints/allocation"
PD_LEARNED = "ckpt:checkpoints/pd-cluster"
ALLOCATION_RULES = (
    "k8s-hpa,naive-equal,aegaeon-3p1d,aegaeon-2p2d,aegaeon-1p3d,ayo,demand-proportional,scepsy"
)
#: HexAgent and the earliest-finish baselines (the speed-blind ones trail them everywhere).
PD_RULES = (
    "per-call-fcfs+earliest-finish,workflow-fcfs+earliest-finish,workflow-llf+earliest-finish,"
    "atlas+earliest-finish,hexagent"
)


def _setting(row: dict, keys: Iterable[str]) -> str:
    parts = [f"{k} {row[k]}" for k in keys if row.get(k) is not None]
    return ", ".join(parts) or "default"


def _settings(path: Path, setting_keys: Iterable[str]) -> tuple[Any, list[tuple[str, list[dict]]]]:
    """The env's selection metric and the rows of ``path`` grouped by setting (``workload`` and
    ``setting_keys``), in file order."""
    rows = json.loads(path.read_text())
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(_setting(r, ("workload", *setting_keys)), []).append(r)
    return headline_of(rows).select_metric, list(groups.items())


def _percent(change: float) -> str:
    """A signed percentage to one decimal, a change that rounds to zero as ``±0.0 %``."""
    return "±0.0 %" if round(change, 1) == 0 else f"{change:+.1f} %"


def _means(subset: list[dict], metric: Any) -> dict[str, float]:
    workload = subset[0]["workload"]
    policies = unique(r["policy"] for r in subset)
    return {p: mean_metric(subset, workload, p, metric.key, metric.better) for p in policies}


def _best_rule(means: dict[str, float], metric: Any) -> str | None:
    """The best non-learned policy (the privileged oracle and checkpoints do not compete)."""
    rules = [p for p in means if not p.startswith(("ckpt:", "py:"))]
    return min(rules, key=lambda p: metric.sign(means[p])) if rules else None


def comparison(path: Path, learned: str, setting_keys: Iterable[str] = ()) -> str:
    """Per setting (``workload`` and ``setting_keys``), every policy's seed mean ± sd and
    per-seed values of the env's selection metric (Req99, goodput), best first, then the learned
    policy's improvement over the best non-learned one in the metric's direction
    (:meth:`Metric.improvement`)."""
    metric, groups = _settings(path, setting_keys)
    out = []
    for setting, subset in groups:
        means = _means(subset, metric)
        lines = [
            f"*{setting}* ({metric.key}, {metric.better} is better)",
            "",
            f"| policy | {metric.key} (mean ± sd) | per seed |",
            "|---|---|---|",
        ]
        for p in sorted(means, key=lambda p: metric.sign(means[p])):
            v = [r["metrics"].get(metric.key) for r in subset if r["policy"] == p]
            v = [math.nan if x is None else float(x) for x in v]
            sd = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
            name = f"**{p}**" if p == learned else p
            if p == ORACLE:
                name += " (privileged: reads true lengths)"
            lines.append(
                f"| {name} | {means[p]:.3f} ± {sd:.3f} | " + ", ".join(f"{x:.3f}" for x in v) + " |"
            )
        best = _best_rule(means, metric)
        if learned in means and best is not None:
            gain = metric.improvement(means[learned], means[best])
            lines += ["", f"Learned vs the best non-learned policy ({best}): **{_percent(gain)}**"]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def summary(parts: Iterable[tuple[str, Path, str, tuple[str, ...]]]) -> str:
    """One row per (family, setting): the learned policy, the best non-learned policy in that
    setting and the learned policy's improvement over it. ``parts``: (family, results.json,
    learned policy, setting keys)."""
    lines = [
        "| family | setting | metric | learned | best non-learned | learned vs best |",
        "|---|---|---|---|---|---|",
    ]
    for family, path, learned, keys in parts:
        metric, groups = _settings(path, keys)
        for setting, subset in groups:
            means = _means(subset, metric)
            best = _best_rule(means, metric)
            if learned not in means or best is None:
                continue
            gain = metric.improvement(means[learned], means[best])
            lines.append(
                f"| {family} | {setting} | {metric.key} ({metric.better} is better) | "
                f"{means[learned]:.3f} | {best} {means[best]:.3f} | **{_percent(gain)}** |"
            )
    return "\n".join(lines)


def _routing(run: StageRun) -> str:
    return comparison(run.out / "default" / "results.json", ROUTING_LEARNED)


#: The generalisation runs: (family, output dir, learned policy, setting keys), one
#: evaluate.py command each (``_GENERALISATION_COMMANDS``, same order); each load sweep
#: includes the default load, so the summary table has the default beside 0.5× and 1.5×.
_GENERALISATION = (
    ("Routing-v1", "routing-load", ROUTING_LEARNED, ("load_scale",)),
    ("Routing-v1", "routing-workload", ROUTING_LEARNED, ()),
    ("Allocation-v1", "allocation-load", ALLOCATION_LEARNED, ("workflow_rate",)),
    ("Allocation-v1", "allocation-workload", ALLOCATION_LEARNED, ()),
    ("PDCluster-v1", "pd-load", PD_LEARNED, ("workload_count", "load_scale")),
    ("PDCluster-v1", "pd-workload", PD_LEARNED, ("workload_count",)),
)
_GENERALISATION_COMMANDS = (
    f"evaluate.py --quiet --env routing-v1 --sweep load_scale=0.175,0.35,0.525 --seeds {SEEDS} "
    f"--policies {ROUTING_RULES},{ROUTING_LEARNED} --out {{out}}/routing-load",
    f"evaluate.py --quiet --env routing-v1 --workload goodserve-sessions --seeds {SEEDS} "
    f"--policies {ROUTING_RULES},{ROUTING_LEARNED} --out {{out}}/routing-workload",
    f"evaluate.py --quiet --env allocation-v1 --workload rag_reranker "
    f"--sweep workflow_rate=0.5,1.0,1.5 --seeds {SEEDS} "
    f"--policies {ALLOCATION_RULES},{ALLOCATION_LEARNED} --out {{out}}/allocation-load",
    f"evaluate.py --quiet --env allocation-v1 --workload beam_search --seeds {SEEDS} "
    f"--policies {ALLOCATION_RULES},{ALLOCATION_LEARNED} --out {{out}}/allocation-workload",
    f"evaluate.py --quiet --env pd-cluster-v1 --workload mixed --count 40 "
    "--sweep load_scale=0.5,1.0,1.5 "
    f"--seeds {SEEDS} --policies {PD_RULES},{PD_LEARNED} --out {{out}}/pd-load",
    f"evaluate.py --quiet --env pd-cluster-v1 --workload bfcl --count 40 --seeds {SEEDS} "
    f"--policies {PD_RULES},{PD_LEARNED} --out {{out}}/pd-workload",
)


def _generalisation(run: StageRun) -> str:
    parts = [
        (fam, run.out / d / "results.json", ckpt, keys) for fam, d, ckpt, keys in _GENERALISATION
    ]
    details = [
        f"**{fam}, `{path.parent.name}`**\n\n" + comparison(path, ckpt, keys)
        for fam, path, ckpt, keys in parts
    ]
    return summary(parts) + "\n\n" + "\n\n".join(details)


def _allocation(run: StageRun) -> str:
    return comparison(run.out / "default" / "results.json", ALLOCATION_LEARNED)


def _pd(run: StageRun) -> str:
    return "\n\n".join(
        comparison(run.out / d / "results.json", PD_LEARNED, ("workload_count",))
        for d in ("default-100", "default")
    )


def curve(key: str, higher_is_better: bool, episodes: str) -> Callable[[StageRun], str]:
    """A renderer of a training run's validation curve (``run/eval_history.json``) against its
    teacher's line (``run/eval.json``'s behaviour-cloning record): the clone, then every
    evaluation of the RL phase, each as a change over the teacher in ``key``'s direction."""

    def render(run: StageRun) -> str:
        history = json.loads((run.out / "run" / "eval_history.json").read_text())
        bc = json.loads((run.out / "run" / "eval.json").read_text())["bc"]
        teacher = bc["teacher_eval"][key]

        def vs(v: float) -> str:
            change = (v / teacher - 1) * 100
            return _percent(change if higher_is_better else -change)

        lines = [f"| RL env steps | validation {key} | vs the teacher |", "|---|---|---|"]
        lines.append(f"| 0 (the clone) | {bc['eval'][key]:.3f} | {vs(bc['eval'][key])} |")
        for h in history:
            best = " (best so far)" if h.get("saved_best") else ""
            lines.append(f"| {h['global_step']:,}{best} | {h[key]:.3f} | {vs(h[key])} |")
        better = "higher" if higher_is_better else "lower"
        return (
            f"Validation seeds 2,000,000+ ({episodes}); the teacher scores {teacher:.3f} "
            f"({key}, {better} is better; a positive change is an improvement).\n\n"
            + "\n".join(lines)
        )

    return render


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


def curve_stage(
    name: str, family: str, config: str, figure: str, minutes: float, render: Any
) -> Stage:
    """The stage that retrains a shipped checkpoint from its example ``config`` and draws its
    validation curve against the teacher's line into ``docs/<figure>``."""
    return stage(
        name,
        f"The {family} checkpoint's training run: teacher-ppo's validation curve against the "
        "teacher's line",
        "training.md",
        minutes,
        f"train.py --config examples/{config} --wandb disabled --quiet --out {{out}}/run",
        f"examples/plot_teacher_ppo.py {{out}}/run --out {{out}}/{figure}",
        render=render,
        figures=[(figure, f"docs/{figure}")],
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
        "training-generalisation",
        "The shipped checkpoints at 0.5×, 1× and 1.5× the default load and on a second workload",
        "training.md",
        40,
        *_GENERALISATION_COMMANDS,
        render=_generalisation,
    ),
    curve_stage(
        "training-routing-curve",
        "Routing-v1",
        "train_routing_v1_teacher_ppo.yaml",
        "teacher_ppo_curves.png",
        15,
        curve("goodput", True, "200-request episodes"),
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
        "PDCluster-v1 at its default (Mixed, 100 workflows) and at 40 workflows on BFCL and "
        "Mixed: the shipped checkpoint beside HexAgent and the earliest-finish baselines",
        "training.md",
        30,
        # the default episode: the learned policy takes minutes per 100-workflow episode
        f"evaluate.py --quiet --env pd-cluster-v1 --workload mixed --seeds {SEEDS} "
        f"--policies {PD_RULES},{PD_LEARNED} --out {{out}}/default-100",
        f"evaluate.py --quiet --env pd-cluster-v1 --workload bfcl,mixed --count 40 --seeds {SEEDS} "
        f"--policies {PD_RULES},{PD_LEARNED},{PD_LEARNED}-v0 --out {{out}}/default",
        render=_pd,
    ),
    curve_stage(
        "training-pd-curve",
        "PDCluster-v1",
        "train_pd-cluster_v1_teacher_ppo.yaml",
        "pd_teacher_ppo_curves.png",
        15,
        curve("req99", False, "Mixed, 40 workflows, 2 episodes"),
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
        "Rollout collection: envs in this process, in SubprocVecEnv workers and in Ray actors",
        "training.md",
        6,
        "-m benchmarks.rollout_scale --env routing-v1,pd-cluster-v1 --workers 1,2 "
        "--backends dummy,subproc,ray --steps 2000",
        "-m benchmarks.rollout_scale --env allocation-v1 --workers 1,2 "
        "--backends dummy,subproc,ray --steps 150",
    ),
    stage(
        "training-allocation-v1",
        "Allocation-v1 at its default: the shipped checkpoint (and the v0-trained one) beside "
        "every allocator",
        "training.md",
        10,
        f"evaluate.py --quiet --env allocation-v1 --seeds {SEEDS} --policies "
        f"{ALLOCATION_RULES},{ALLOCATION_LEARNED},{ALLOCATION_LEARNED}-v0 --out {{out}}/default",
        render=_allocation,
    ),
    stage(
        "training-allocation-periods",
        "Allocation-v1 per period: workflows arriving and served within their SLO (held-out seeds)",
        "training.md",
        2,
        "examples/allocation_per_period.py --policies demand-proportional,aegaeon-1p3d,scepsy,"
        f"{ALLOCATION_LEARNED} --seeds {SEEDS}",
    ),
    curve_stage(
        "training-allocation-curve",
        "Allocation-v1",
        "train_allocation_v1_teacher_ppo.yaml",
        "allocation_teacher_ppo_curves.png",
        25,
        curve("goodput", True, "RAG + reranker, 4 episodes"),
    ),
]
