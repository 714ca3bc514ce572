"""The printed table, shaped like HexAgent Tables 1–3: rows = policies, columns = workloads ×
sweep values, cells = the env family's headline metrics averaged over seeds, then the best of
the paper's baselines (and of all references) and the reference's reduction or gain vs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from envs.registry import EnvFamily, Metric
from evaluation.config import EvaluationError, unique
from evaluation.diagnosis import diagnose
from evaluation.policies import comparison_sets, heuristic_names
from evaluation.rows import (
    best_baseline,
    column_key,
    column_label,
    entry_name_of,
    fmt_num,
    fmt_pct,
    headline_of,
    mean_metric,
)


def _title(headline: Sequence[Metric]) -> str:
    """``Req95 / Req99 (lower is better)``, or each metric's direction when they differ."""

    def unit(m: Metric) -> str:
        return f"{m.unit}; " if m.unit else ""

    if len({m.better for m in headline}) == 1 and not any(m.unit for m in headline):
        return f"{' / '.join(m.label for m in headline)} ({headline[0].better} is better)"
    return " / ".join(f"{m.label} ({unit(m)}{m.better} is better)" for m in headline)


def format_table(
    rows: Sequence[dict[str, Any]], reference: str | None = None, command: str | None = None
) -> str:
    """A HexAgent Tables 1–3 shaped table of ``rows`` (from :func:`evaluate` or the JSON).

    Rows: every policy, then for each set of :func:`comparison_sets` that ran a "best of ..."
    row (best by the env's ``select`` metric, its name in brackets) and the ``reference``'s
    "reduction" vs it (% per headline metric; "gain" when the select metric is
    higher-is-better; positive = the reference is better); with a ``reference`` other than the
    env's expert, also its reduction vs the expert. Columns: workloads (× sweep values). Cells:
    mean over seeds of the headline metrics. Below: the mean utilisation of all runs per column
    (the env's aggregate keys, not per-instance ``i:gpu`` keys), which policies each comparison
    covers, and ``command``.
    """
    if not rows:
        raise ValueError("format_table needs at least one row")
    entry = headline_of(rows)
    reference = reference or entry.reference
    headline = entry.headline
    keys = unique(column_key(r) for r in rows)
    by_col = {k: [r for r in rows if column_key(r) == k] for k in keys}
    labels = {k: column_label(by_col[k][0]) for k in keys}
    policies = unique(r["policy"] for r in rows)
    # A workload named like a policy (Routing's "goodserve" mix) says it is the workload.
    try:
        named_like_a_policy = set(heuristic_names("", entry_name_of(rows))) | set(policies)
    except (EvaluationError, KeyError):  # an env family without registered heuristics
        named_like_a_policy = set(policies)
    labels = {k: f"{v} (workload)" if k[0] in named_like_a_policy else v for k, v in labels.items()}
    seeds = unique(r["seed"] for r in rows)

    def cell(col: tuple[str, Any], policy: str) -> str:
        rs, workload = by_col[col], col[0]
        if not any(r["policy"] == policy for r in rs):
            return "-"
        return " / ".join(
            fmt_num(mean_metric(rs, workload, policy, m.key, m.better)) for m in headline
        )

    body = [[p, *(cell(k, p) for k in keys)] for p in policies]
    verb = "gain" if entry.select_metric.better == "higher" else "reduction"

    def improvement_row(label: str, against: Callable[[list[dict], str], str | None]) -> list:
        out = [label]
        for k in keys:
            rs, workload = by_col[k], k[0]
            other = against(rs, workload)
            if other is None or not any(r["policy"] == reference for r in rs):
                out.append("-")
                continue
            out.append(
                " / ".join(
                    fmt_pct(
                        m.improvement(
                            mean_metric(rs, workload, reference, m.key, m.better),
                            mean_metric(rs, workload, other, m.key, m.better),
                        )
                    )
                    for m in headline
                )
            )
        return out

    compared: list[list[str]] = []
    ran = reference in policies  # without the reference, no improvement line says anything
    for set_label, candidates in comparison_sets(entry, reference):
        if set_label != entry.baselines_label and not any(
            p in entry.own_references for p in policies
        ):
            continue  # no own reference ran: the row pair would repeat the paper's
        best_row = [f"best of {set_label}"]
        for k in keys:
            best = best_baseline(by_col[k], k[0], reference, candidates)
            best_row.append("-" if best is None else f"{cell(k, best)} ({best})")
        compared.append(best_row)
        if ran:
            compared.append(
                improvement_row(
                    f"{verb} ({reference} vs it)",
                    lambda rs, w, c=candidates: best_baseline(rs, w, reference, c),  # type: ignore[misc]
                )
            )
    if ran and reference != entry.reference and entry.reference in policies:
        compared.append(
            improvement_row(
                f"{verb} ({reference} vs {entry.reference})", lambda rs, w: entry.reference
            )
        )
    util_keys = unique(k for r in rows for k in r["utilisation"] if ":" not in k)
    util_row = [f"utilisation ({' / '.join(util_keys)})"]
    for k in keys:
        util = [r["utilisation"] for r in by_col[k]]
        means = [np.mean([u[key] for u in util if u.get(key) is not None]) for key in util_keys]
        util_row.append(" / ".join(f"{m:.0%}" for m in means))

    header = ["policy", *(labels[k] for k in keys)]
    table = [header, *body, *compared, util_row]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]

    def fmt(line: list[str]) -> str:
        return "  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip()

    first = rows[0]
    title = (
        f"{_title(headline)}, mean over seeds {','.join(map(str, seeds))}: "
        f"{first['env']} {first['cluster']}"
        + (f" {first['model']}" if first.get("model") else "")
        + (f" {first['gpus']} GPUs" if first.get("gpus") else "")
    )
    rule = "-" * max(len(fmt(line)) for line in table)
    lines = [title, rule, fmt(header), rule, *(fmt(b) for b in body), rule]
    lines += [*(fmt(c) for c in compared), fmt(util_row), rule]
    lines += _footnotes(rows, entry, reference, policies, ran, verb, command)
    return "\n".join(lines)


def _footnotes(
    rows: Sequence[dict[str, Any]],
    entry: EnvFamily,
    reference: str,
    policies: Sequence[str],
    ran: bool,
    verb: str,
    command: str | None,
) -> list[str]:
    """The lines below :func:`format_table`'s table: the metrics, what the improvement lines
    mean, which policies each comparison covers, the diagnosis notes and the command."""
    headline = entry.headline
    lines: list[str] = []
    direction = ", in the metric's own direction" if len({m.better for m in headline}) > 1 else ""
    if entry.metrics_note:
        lines.append(entry.metrics_note)
    if ran:
        lines.append(
            f"{verb}: % by which {reference} beats the policy above it on each metric{direction} "
            f"(positive = better); {entry.baselines_label}: {', '.join(entry.baselines)}"
        )
    else:
        lines.append(
            f"no {verb} lines: the reference {reference} did not run; "
            f"{entry.baselines_label}: {', '.join(entry.baselines)}"
        )
    own = [p for p in entry.own_references if p in policies]
    if own:
        note = entry.references_note.format(refs=", ".join(own))
        lines.append(note.replace("reference(s)", "references" if len(own) > 1 else "reference"))
    candidates_all = {p for _, ps in comparison_sets(entry, reference) for p in ps}
    outside = [p for p in policies if p != reference and p not in candidates_all]
    if outside:
        lines.append(
            f"not compared against (expert, ablation, learned or outside): {', '.join(outside)}"
        )
    lines += [f"note: {n}" for n in diagnose(rows)]
    if command:
        lines.append(f"regenerate: {command}")
    return lines
