"""Reading result rows: table columns, the env family of the rows, per-policy means over
seeds, the best baseline of a column and the reference's reduction (gain) against it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from envs.registry import EnvFamily, Metric
from evaluation.config import canonical_env, env_entry, fmt_value, unique
from evaluation.policies import comparison_sets


def column_key(row: Mapping[str, Any]) -> tuple[str, Any]:
    """(workload, sweep value or None): the table column a row belongs to."""
    sweep = row.get("sweep") or {}
    return row["workload"], sweep.get("value")


def column_label(row: Mapping[str, Any]) -> str:
    """``mixed``, or ``goodserve slo_scale=1.5`` with a sweep."""
    sweep = row.get("sweep")
    if not sweep:
        return row["workload"]
    return f"{row['workload']} {sweep['option']}={fmt_value(sweep['value'])}"


def entry_name_of(rows: Sequence[Mapping[str, Any]]) -> str:
    """The :data:`FAMILIES` name of ``rows`` (see :func:`headline_of`)."""
    return canonical_env(unique(r["env"] for r in rows)[0])


def headline_of(rows: Sequence[Mapping[str, Any]]) -> EnvFamily:
    """The :data:`FAMILIES` entry of ``rows`` (all from one env family).

    :raises ValueError: if the rows mix env families.
    """
    names = unique(r["env"] for r in rows)
    if len(names) != 1:
        raise ValueError(f"rows from several envs {names}; tabulate one env at a time")
    return env_entry(names[0])


def mean_metric(
    rows: Sequence[dict[str, Any]], workload: str, policy: str, key: str, better: str = "lower"
) -> float:
    """Mean of ``metrics[key]`` over the seeds of (workload, policy); nan if there are none.

    A missing value (None, as read back from JSON) counts as the worst value in the ``better``
    direction (inf for lower-is-better): the run did not finish.
    """
    worst = math.inf if better == "lower" else -math.inf
    vals = [
        worst if r["metrics"].get(key) is None else float(r["metrics"][key])
        for r in rows
        if r["workload"] == workload and r["policy"] == policy
    ]
    return float(np.mean(vals)) if vals else math.nan


def best_baseline(
    rows: Sequence[dict[str, Any]],
    workload: str,
    reference: str | None = None,
    candidates: Sequence[str] | None = None,
) -> str | None:
    """The candidate that is best on ``workload`` by the env's ``select`` metric in its
    direction (PDCluster: lowest Req99; Routing: highest goodput); ties by the other headline
    metrics, then name. None if no candidate ran.

    :param rows: rows of one env family and one sweep value.
    :param reference: the reference policy (None: the env's); never its own baseline.
    :param candidates: the policies that may be best (None: the strongest set of
        :func:`comparison_sets`, the paper's baselines and our own references).
    """
    entry = headline_of(rows)
    reference = reference or entry.reference
    if candidates is None:
        candidates = comparison_sets(entry, reference)[-1][1]
    metrics = [entry.select_metric, *(m for m in entry.headline if m.key != entry.select)]
    scored = [
        (*(m.sign(mean_metric(rows, workload, p, m.key, m.better)) for m in metrics), p)
        for p in unique(r["policy"] for r in rows)
        if p in candidates and p != reference
        and any(r["workload"] == workload and r["policy"] == p for r in rows)
    ]  # fmt: skip
    return min(scored)[-1] if scored else None


def reduction(reference: float, baseline: float) -> float:
    """Relative reduction of ``reference`` vs ``baseline`` in percent (HexAgent Table 2)."""
    return Metric("x", "x", "lower").improvement(reference, baseline)


def gain(reference: float, baseline: float) -> float:
    """Relative gain of ``reference`` over ``baseline`` in percent (higher is better)."""
    return Metric("x", "x", "higher").improvement(reference, baseline)


def fmt_num(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if math.isinf(x) else f"{x:.2f}")


def fmt_pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{round(x, 1) + 0.0:.1f}%"  # + 0.0: no "-0.0%"
