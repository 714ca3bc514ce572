"""The Scepsy reproduction (docs/reproductions/scepsy.md) and the Allocation-v1 default episode
(docs/envs/allocation-default-episode.md): Scepsy against the paper's baselines by goodput on the
v1 ramp at 4, 8 and 16 GPUs, the v1 ranking criteria on held-out seeds 200-202, and K8s HPA's
timeline."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evaluation.report.stage import StageRun, stage

#: The paper's baselines (Scepsy §7.2), our reference, then Scepsy: the ramp table's columns.
POLICIES = (
    "scepsy",
    "k8s-hpa",
    "aegaeon-3p1d",
    "aegaeon-2p2d",
    "aegaeon-1p3d",
    "ayo",
    "naive-equal",
    "demand-proportional",
)
#: The four policies the Allocation-v1 criteria compare (the paper's K8s HPA and the equal
#: split, our demand-proportional reference and Scepsy).
CRITERIA_POLICIES = ("scepsy", "k8s-hpa", "naive-equal", "demand-proportional")
#: The workloads' default rates (wf/s; envs/allocation/workloads.py): the ramp's base at 4 GPUs,
#: scaled with the pool so the ramp per GPU is the same at every size.
BASE_RATE = {"rag_reranker": 1.0, "beam_search": 0.1}
SIZES = (4, 8, 16)
HELDOUT = "1000000"


def _rows(path: Path) -> list[dict[str, Any]]:
    rows = json.loads(path.read_text())
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected evaluate.py's list of result rows")
    return rows


def _goodput(rows: Sequence[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """policy -> seed -> goodput."""
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for r in rows:
        out[r["policy"]][int(r["seed"])] = float(r["metrics"]["goodput"])
    return out


def _policies(workload: str) -> tuple[str, ...]:
    """The ramp table's policies run on ``workload``: Ayo's allocation on beam search is the
    equal split's (both LLMs are engines), so it runs on RAG only."""
    return tuple(p for p in POLICIES if not (p == "ayo" and workload == "beam_search"))


def _ramp_command(workload: str, gpus: int) -> str:
    rate = BASE_RATE[workload] * gpus / 4
    return (
        f"evaluate.py --quiet --env allocation-v1 --workload {workload} --gpus {gpus} "
        f"--workflow-rate {rate:g} --seeds {HELDOUT} --policies {','.join(_policies(workload))} "
        f"--out {{out}}/{workload}-{gpus}"
    )


def _gpus_per_llm(allocations: Sequence[str]) -> str:
    """``llama3-8b 1 → 2 → 3 GPUs; ...``: each LLM's GPUs per period."""
    per: dict[str, list[str]] = defaultdict(list)
    for line in allocations:
        for part in line.split(": ", 1)[1].split("; "):
            model, rest = part.split(": ", 1)
            per[model].append(f"{float(rest.split()[0]):g}")
    return "; ".join(f"{m} {' → '.join(v)}" for m, v in per.items())


def _ramp_table(run: StageRun) -> str:
    """Goodput per (workload, pool) and policy, with Scepsy's ratio over each baseline, then
    Scepsy's allocation per period (its APL's choice as the rate ramps) and K8s HPA's GPUs."""
    head = ["workload, GPUs (ramp, wf/s)", *(f"`{p}`" for p in POLICIES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    plans = []
    for workload in BASE_RATE:
        for gpus in SIZES:
            rows = _rows(run.out / f"{workload}-{gpus}" / "results.json")
            by = {r["policy"]: r for r in rows}
            rate = BASE_RATE[workload] * gpus / 4
            lo, hi = rows[0]["rate_ramp"]
            cells = [f"{workload}, {gpus} ({lo * rate:g} → {hi * rate:g})"]
            ours = by["scepsy"]["metrics"]["goodput"]
            for p in POLICIES:
                if p not in by:
                    cells.append("= `naive-equal`")
                    continue
                m = by[p]["metrics"]
                g, lat = m["goodput"], m["latency_mean"]
                ratio = "" if p == "scepsy" else f" ({ours / g:.2f}×)" if g > 0 else " (∞)"
                cells.append(f"{g:.3f} / {lat:.1f}{ratio}")
            lines.append("| " + " | ".join(cells) + " |")
            plans.append(
                f"- {workload}, {gpus} GPUs: `scepsy` "
                + "; ".join(_distinct(by["scepsy"]["allocations"]))
                + f". `k8s-hpa` GPUs per period: {_gpus_per_llm(by['k8s-hpa']['allocations'])}."
            )
    return (
        "Cells: goodput over the ramp episode (workflows/s within SLO) / mean latency of the "
        "finished workflows (s); in brackets Scepsy's goodput over the policy's.\n\n"
        + "\n".join(lines)
        + "\n\nThe allocations (Scepsy's each time it changes, in period order; K8s HPA's GPUs per "
        "LLM per period):\n\n" + "\n".join(plans)
    )


def _distinct(allocations: Sequence[str]) -> list[str]:
    """``period k: ...`` lines whose allocation differs from the period before, labelled with
    the periods they hold for."""
    out: list[tuple[list[int], str]] = []
    for line in allocations:
        head, plan = line.split(": ", 1)
        period = int(head.split()[1])
        if out and out[-1][1] == plan:
            out[-1][0].append(period)
        else:
            out.append(([period], plan))
    return [
        f"periods {ps[0]}-{ps[-1]}: {plan}" if len(ps) > 1 else f"period {ps[0]}: {plan}"
        for ps, plan in out
    ]


def criteria(goodput: dict[str, dict[int, float]]) -> list[tuple[str, bool]]:
    """The Allocation-v1 criteria over :data:`CRITERIA_POLICIES`' goodput per seed, each with
    whether it holds: on every seed and on the mean, best / worst >= 1.2 and the worst > 0;
    each policy's seed-to-seed spread (max - min) below the gap between the best and the worst
    mean."""
    missing = [p for p in CRITERIA_POLICIES if p not in goodput]
    if missing:
        raise ValueError(f"the criteria need runs of {missing}")
    seeds = sorted(set.intersection(*(set(goodput[p]) for p in CRITERIA_POLICIES)))
    mean = {p: sum(goodput[p][s] for s in seeds) / len(seeds) for p in CRITERIA_POLICIES}
    checks = []
    for label, values in [("mean", mean)] + [
        (f"seed {s}", {p: goodput[p][s] for p in CRITERIA_POLICIES}) for s in seeds
    ]:
        best, worst = max(values.values()), min(values.values())
        ratio = best / worst if worst > 0 else float("inf")
        checks.append((f"{label}: best / worst = {ratio:.2f} (≥ 1.2)", ratio >= 1.2))
        checks.append((f"{label}: worst = {worst:.3f} wf/s (> 0)", worst > 0))
    gap = max(mean.values()) - min(mean.values())
    for p in CRITERIA_POLICIES:
        spread = max(goodput[p][s] for s in seeds) - min(goodput[p][s] for s in seeds)
        checks.append((f"`{p}`: seed spread {spread:.3f} < gap {gap:.3f}", spread < gap))
    return checks


def _criteria_table(run: StageRun) -> str:
    """Goodput / mean latency per policy and seed with the mean, then each criterion."""
    rows = _rows(run.out / "heldout" / "results.json")
    seeds = sorted({int(r["seed"]) for r in rows})
    cell: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for r in rows:
        cell[r["policy"]][int(r["seed"])] = (r["metrics"]["goodput"], r["metrics"]["latency_mean"])
    head = ["policy", *(f"seed {s}" for s in seeds), "mean"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p, d in cell.items():
        g = [d[s][0] for s in seeds]
        lat = [d[s][1] for s in seeds]
        cells = [f"{d[s][0]:.3f} / {d[s][1]:.1f}" for s in seeds]
        cells.append(f"{sum(g) / len(g):.3f} / {sum(lat) / len(lat):.1f}")
        lines.append("| " + " | ".join([f"`{p}`", *cells]) + " |")
    checks = criteria({p: {s: v[0] for s, v in d.items()} for p, d in cell.items()})
    verdict = "\n".join(f"- {'PASS' if ok else 'FAIL'}: {text}" for text, ok in checks)
    return (
        "Cells: goodput (workflows/s within SLO) / mean latency of the finished workflows (s).\n\n"
        + "\n".join(lines)
        + f"\n\nCriteria over {', '.join(f'`{p}`' for p in CRITERIA_POLICIES)}:\n\n"
        + verdict
    )


_CRITERIA_RUN = (
    "evaluate.py --quiet --env allocation-v1 --workload {workload} --seeds 200,201,202 "
    "--policies {policies} --out {{out}}/heldout"
)
_RAG_POLICIES = (
    "scepsy,k8s-hpa,naive-equal,demand-proportional,aegaeon-3p1d,aegaeon-2p2d,aegaeon-1p3d,ayo,"
    "scepsy-reactive,scepsy-sticky,scepsy-parallelism-only,scepsy-fractional-only"
)

# The ramp stage's minutes include Scepsy profiling its LLMs for the smooth-roofline calibration
# (about 15 of them, once per machine: cached in ~/.cache/servegym/scepsy-profiles).
STAGES = [
    stage(
        "scepsy-ramp-goodput",
        "Scepsy against K8s HPA, Aegaeon, Ayo and the equal split on Allocation-v1 at 4, 8 and "
        "16 GPUs (the rate ramp scaled with the pool; held-out seed 1,000,000)",
        "reproductions/scepsy.md",
        28,
        *(_ramp_command(w, g) for w in BASE_RATE for g in SIZES),
        render=_ramp_table,
    ),
    stage(
        "allocation-v1-criteria",
        "Allocation-v1 default episode on held-out seeds 200-202 (RAG + reranker, 4 GPUs)",
        "envs/allocation-default-episode.md",
        2,
        _CRITERIA_RUN.format(workload="rag_reranker", policies=_RAG_POLICIES),
        render=_criteria_table,
    ),
    stage(
        "scepsy-hpa-timeline",
        "K8s HPA at a constant 4 RAG workflows/s on 8 GPUs (smooth-roofline, held-out seed "
        "1,000,000)",
        "reproductions/scepsy.md",
        1,
        "examples/allocation_hpa_timeline.py --workload rag_reranker --gpus 8 --workflow-rate 4 "
        "--latency-calibration smooth-roofline --out {out}/hpa_timeline.png",
        figures=[("hpa_timeline.png", "docs/allocation_hpa_timeline.png")],
    ),
]
