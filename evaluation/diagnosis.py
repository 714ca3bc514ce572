"""Notes under a table for columns too small or too idle to separate policies, and for
runs whose deployment is overloaded (Allocation-v0 ``sustainable = 0``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from evaluation.config import fmt_value, unique
from evaluation.rows import column_key, column_label, headline_of, mean_metric

#: :func:`diagnose` thresholds: a run whose arrivals span less than this share of its simulated
#: time is a burst; a column whose mean utilisation is below the other is idle.
BURST_SHARE = 0.25


IDLE_UTILISATION = 0.2


def diagnose(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Warnings for columns too small or too idle to separate policies: arrivals that come as
    a burst much shorter than the episode (the run measures draining one backlog), a cluster
    that is mostly idle (policies that differ only under contention look alike), and
    same-direction headline metrics (Req95, Req99) equal for most policies (too few workflows
    for the percentiles to differ), and every run reporting ``sustainable = 0`` (Allocation-v0:
    the policy's deployment is overloaded at this rate, so its goodput and latency measure a
    growing backlog, not its serving)."""
    entry = headline_of(rows)
    notes: list[str] = []
    for key in unique(column_key(r) for r in rows):
        rs = [r for r in rows if column_key(r) == key]
        label = column_label(rs[0])
        notes += overloaded_notes(rs, label)
        spans = [
            (max(r["arrivals"]) - min(r["arrivals"]), r["simulated_seconds"])
            for r in rs
            if r.get("arrivals") and r.get("simulated_seconds")
        ]
        if spans:
            span, sim = (float(np.mean(x)) for x in zip(*spans, strict=True))
            if span < BURST_SHARE * sim:
                notes.append(
                    f"{label}: arrivals span {span:.0f} s of a {sim:.0f} s episode (a burst): "
                    "the run measures how a backlog drains; more workflows (--count) or a "
                    "lower rate give a steadier load"
                )
        aggregate = [
            v for r in rs for k, v in r["utilisation"].items() if ":" not in k and v is not None
        ]
        if aggregate and float(np.mean(aggregate)) < IDLE_UTILISATION:
            notes.append(
                f"{label}: mean utilisation {float(np.mean(aggregate)):.0%}: the cluster is "
                "mostly idle, so policies that differ only under contention look alike "
                "(raise --load-scale, or --count if arrivals are a burst)"
            )
        for better in ("lower", "higher"):
            same = [m for m in entry.headline if m.better == better and not m.unit]
            if len(same) < 2:
                continue
            policies = unique(r["policy"] for r in rs)
            ties = [
                p
                for p in policies
                if len({round(mean_metric(rs, key[0], p, m.key, better), 9) for m in same}) == 1
            ]
            if len(ties) * 2 > len(policies):
                sizes = [len(r.get("completion_times") or r.get("latencies") or []) for r in rs]
                n = f" with {int(np.median(sizes))} workflows per run" if any(sizes) else ""
                notes.append(
                    f"{label}: {' = '.join(m.label for m in same)} for {len(ties)} of "
                    f"{len(policies)} policies{n}: the percentiles fall on the same few "
                    "workflows; more workflows per run (--count) separate them"
                )
    return notes


def overloaded_notes(rows: Sequence[dict[str, Any]], label: str) -> list[str]:
    """One note per (policy, seed) run of ``rows`` whose ``sustainable`` metric is 0
    (Allocation-v0: fewer than 99 % of the measured workflows finished, or the completions
    inside the measured window are under 90 % of the offered rate), saying which: a backlog the
    drain did not clear, or workflows that finished only after the window (a window not much
    longer than the latency cannot tell a slow deployment from an overloaded one). Runs whose
    rate ramps (``rate_ramp``: Allocation-v1's default) end overloaded by design; they get one
    note saying so instead."""
    out = []
    ramps = sorted({fmt_value(r["rate_ramp"]) for r in rows if r.get("rate_ramp")})
    if ramps:
        out.append(
            f"{label}: the workflow rate ramps ({', '.join(ramps)} x the base rate) through "
            "every policy's knee, so every run ends overloaded by design and none is "
            "sustainable; goodput counts the workflows served within their SLO on the way up"
        )
    for r in rows:
        m = r["metrics"]
        if m.get("sustainable", 1.0) or r.get("rate_ramp"):
            continue
        n = int(m.get("num_workflows", 0))
        done = int(m.get("num_completed", 0))
        offered = float(m.get("offered_rate", 0.0))
        achieved = float(m.get("throughput", 0.0))
        head = f"{label}: {r['policy']} (seed {r['seed']}) is NOT SUSTAINABLE"
        if done < n:
            why = f"overloaded, {done} of {n} measured workflows finished by the end of the drain"
        else:
            window = n / offered if offered > 0 else 0.0
            why = (
                f"all {n} finished, but only {achieved:.3g} wf/s of {offered:.3g} offered inside "
                f"the {window:.0f}-s window (mean latency {float(m.get('latency_mean', 0.0)):.0f}"
                " s; a window not much longer than the latency, or without --warmup-seconds, "
                "cannot tell a slow deployment from an overloaded one)"
            )
        out.append(
            f"{head}: {why}; its goodput and latency measure a backlog, not steady serving "
            "(lower --workflow-rate, add --gpus, or lengthen --periods/--warmup-seconds)"
        )
    return out
