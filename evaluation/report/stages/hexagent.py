"""HexAgent's reproduction (docs/reproductions/hexagent.md) and PDCluster-v1's action space
(docs/envs/v1-changes.md): both baseline families at the paper's setup, and the two-step
space's speed and episode lengths."""

from __future__ import annotations

import json

import numpy as np

from evaluation.policies import comparison_sets
from evaluation.report.stage import StageRun, stage, text_block
from evaluation.rows import best_baseline, headline_of, mean_metric
from evaluation.tables import format_table

# The paper's speed-blind baselines, the same orderings with earliest-finish placement, HexAgent.
_ORDERINGS = ("per-call-fcfs", "workflow-fcfs", "workflow-llf", "atlas")
FAMILIES = ",".join([*_ORDERINGS, *(f"{p}+earliest-finish" for p in _ORDERINGS), "hexagent"])
_PAPER_WORKLOADS = ("sharegpt", "bfcl", "lats", "mixed")


def _table2_means(rows: list[dict]) -> str:
    """HexAgent §7.4 Table 2's summary: Req95 / Req99 averaged over the workloads, each
    workload's baseline being its strongest (lowest Req99) of a comparison set."""
    entry = headline_of(rows)
    workloads = list(dict.fromkeys(r["workload"] for r in rows))

    def mean(pick: dict[str, str]) -> list[float]:
        return [
            float(np.mean([mean_metric(rows, w, pick[w], m.key) for w in workloads]))
            for m in entry.headline
        ]

    ours = mean({w: entry.reference for w in workloads})
    lines = [
        f"| mean over {', '.join(workloads)} | Req95 / Req99 | {entry.reference}'s reduction |",
        "|---|---|---|",
        f"| {entry.reference} | {ours[0]:.2f} / {ours[1]:.2f} | |",
    ]
    for label, candidates in comparison_sets(entry, entry.reference):
        best = {w: best_baseline(rows, w, entry.reference, candidates) or "" for w in workloads}
        theirs = mean(best)
        cut = " / ".join(f"{1 - a / b:.1%}" for a, b in zip(ours, theirs, strict=True))
        lines.append(
            f"| best of {label}, per workload | {theirs[0]:.2f} / {theirs[1]:.2f} | {cut} |"
        )
    return "\n".join(lines)


def _merged_table(run: StageRun) -> str:
    """One table over every ``results.json`` the stage's commands wrote (one per workload),
    then the Table 2 summary."""
    rows = [
        row
        for path in sorted(run.out.glob("*/results.json"))
        for row in json.loads(path.read_text())
    ]
    order = {w: i for i, w in enumerate(_PAPER_WORKLOADS)}
    rows.sort(key=lambda r: order.get(r["workload"], len(order)))
    return text_block(format_table(rows)) + "\n\n" + _table2_means(rows)


STAGES = [
    stage(
        "hexagent-families",
        "HexAgent vs both baseline families on PDCluster-v1 (hetero-1, Llama-3.1-70B, ShareGPT, "
        "BFCL and Mixed at the paper's workflow counts and rates, seed 0)",
        "reproductions/hexagent.md",
        15,
        *(
            f"evaluate.py --quiet --env pd-cluster-v1 --cluster hetero-1 --model llama3.1-70b "
            f"--workload {w} --policies {FAMILIES} --seeds 0 --out {{out}}/{w}"
            for w in ("sharegpt", "mixed", "bfcl")
        ),
        render=_merged_table,
    ),
    stage(
        "pd-action-space",
        "PDCluster-v1 with the flat (PDCluster-v0's) and the two-step action space: stock "
        "MaskablePPO steps/s (K = 256) and the length of one default episode (seed 0)",
        "envs/v1-changes.md",
        5,
        "-m benchmarks.pd_action_space --episodes 0 --exit-zero",
    ),
]
