"""``results/leaderboard.md`` from ``results.json`` files and their ``run.json`` provenance
(``evaluate.py --leaderboard``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from envs.registry import FAMILIES, EnvFamily, Metric
from evaluation.config import (
    ENV_FIELDS,
    FULL_SUITE_COMMAND,
    ROW_FIELDS,
    EvalConfig,
    EvaluationError,
    env_defaults,
    env_entry,
    fmt_value,
    unique,
)
from evaluation.results import provenance_path
from evaluation.rows import column_key, column_label, fmt_num


def _sortable(value: Any) -> tuple[int, float, str]:
    """A sort key for option values that may be numbers, strings or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return (1 if value is None else 0, 0.0, str(value))
    return (0, float(value), "")


def _hashable(value: Any) -> Any:
    """A row's option value as a dict key: JSON lists (``rate_ramp``) become tuples."""
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def load_leaderboard_rows(paths: Sequence[Path]) -> dict[tuple, tuple[list[dict], int]]:
    """The rows of ``paths`` keyed by (env, cluster, model, column, count, options, policy),
    each with the index of the file it came from; a later file replaces every seed of a
    policy's setting that an earlier one had (a rerun supersedes, seeds are not mixed).

    :raises EvaluationError: for a missing or malformed file, naming it.
    """
    merged: dict[tuple, tuple[list[dict], int]] = {}
    for index, path in enumerate(paths):
        try:
            rows = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise EvaluationError(f"--leaderboard: cannot read {path}: {exc}") from None
        needed = ("env", "cluster", "workload", "policy", "seed", "metrics")
        if not isinstance(rows, list) or not all(
            isinstance(r, dict) and all(k in r for k in needed) for r in rows
        ):
            raise EvaluationError(
                f"--leaderboard: {path} is not an evaluate.py results.json (a list of rows "
                f"with {', '.join(needed)})"
            )
        from_file: dict[tuple, list[dict]] = {}
        for row in rows:
            entry = env_entry(row["env"])
            options = tuple(
                (n, _hashable(row.get(n)))
                for n in ENV_FIELDS
                if n in entry.options and n not in ROW_FIELDS
            )
            sweep = column_key(row)[1]
            key = (
                row["env"], row["cluster"], row.get("model"), row["workload"], sweep,
                row.get("workload_count"), options, row["policy"],
            )  # fmt: skip
            from_file.setdefault(key, []).append(row)
        merged.update({key: (rs, index) for key, rs in from_file.items()})
    return merged


def _policy_kind(entry: EnvFamily, policy: str) -> str:
    if policy == entry.reference:
        return "expert"
    if policy in entry.baselines:
        return "paper baseline"
    if policy in entry.own_references:
        return "own reference"
    if policy in entry.ablations:
        return "ablation"
    return {"ckpt": "learned", "py": "plug-in", "alloc": "fixed allocation"}.get(
        policy.partition(":")[0] if ":" in policy else "", "heuristic"
    )


def _metric_cell(rows: Sequence[Mapping[str, Any]], metric: Metric) -> tuple[float, str]:
    """(mean, ``mean ± sample std``) of ``metric`` over ``rows`` (one per seed); a missing value
    (a run that did not finish) counts as the worst, as in :func:`mean_metric`."""
    worst = math.inf if metric.better == "lower" else -math.inf
    values = [
        worst if r["metrics"].get(metric.key) is None else float(r["metrics"][metric.key])
        for r in rows
    ]
    mean = float(np.mean(values))
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        return mean, fmt_num(mean)
    return mean, f"{fmt_num(mean)} ± {fmt_num(float(np.std(values, ddof=1)))}"


def _setting_label(env: str, workload_count: Any, options: tuple, swept: str | None) -> str:
    """``--count 40`` (or ``default count``) and the options (but the ``swept`` one, which the
    column label names) that differ from the env's defaults."""
    defaults = env_defaults(env)
    parts = []
    if "count" in env_entry(env).options:
        parts.append("default count" if workload_count is None else f"--count {workload_count}")
    parts += [
        f"--{n.replace('_', '-')} {fmt_value(v)}"
        for n, v in options
        if v is not None and v != defaults.get(n) and n != swept
    ]
    return ", ".join(parts) or "the env's defaults"


def _provenance_line(path: Path, sidecar: Mapping[str, Any] | None, policies: list[str]) -> str:
    which = f" ({', '.join(policies)})" if policies else ""
    if sidecar is None:
        return f"- provenance unknown{which}: {path.as_posix()} has no {provenance_path(path).name}"
    return (
        f"- `{sidecar.get('command', '?')}`{which}  \n"
        f"  commit `{sidecar.get('commit', 'unknown')}`, {sidecar.get('date', 'date unknown')}"
    )


def format_leaderboard(paths: Sequence[Path], out: Path) -> str:
    """The leaderboard markdown of the results files ``paths`` (later files override earlier
    ones, see :func:`load_leaderboard_rows`): a section per env × cluster × model, a table per
    workload setting with one row per policy, best-first by the env's ``select`` metric (ties
    by the other headline metrics, then name), cells mean ± sample standard deviation over the
    seeds listed; below each table the command, commit and date of the runs. Deterministic:
    the same files give the same bytes."""
    merged = load_leaderboard_rows(paths)
    sidecars: dict[int, Mapping[str, Any] | None] = {}
    for index, path in enumerate(paths):
        side = provenance_path(path)
        try:
            sidecars[index] = json.loads(side.read_text()) if side.is_file() else None
        except ValueError as exc:
            raise EvaluationError(f"--leaderboard: {side} is not JSON: {exc}") from None
    used = sorted({index for _, index in merged.values()})
    tables_seen = {key[:7] for key in merged}
    default_seeds = len(EvalConfig().seeds)
    reduced = sum(
        1
        for table in tables_seen
        if table[5] is not None
        or any(len(rows) < default_seeds for k, (rows, _) in merged.items() if k[:7] == table)
    )
    regenerate = f"python evaluate.py --leaderboard {out.as_posix()} " + " ".join(
        p.as_posix() for p in paths
    )
    lines = [
        "# servegym leaderboard",
        "",
        "Generated from `evaluate.py` results files and their `run.json` provenance by one "
        "command; do not edit by hand. Per env × cluster preset × model, one table per "
        "workload setting; rows are best-first by the env's selection metric, cells are the "
        "mean ± sample standard deviation over the seeds listed. A table's heading gives its "
        "`--count` when one was set (workflows or requests per episode instead of the env's "
        "default) and the options that differ from the env's defaults.",
        "",
        *(
            [
                f"**Reduced-size runs.** {reduced} of {len(tables_seen)} tables ran fewer seeds "
                f"than evaluate.py's default ({','.join(map(str, EvalConfig().seeds))}) or an "
                "explicit `--count`: they show how the policies compare on a short run, not the "
                "papers' settings, and their ± spans are wide. The paper-size PDCluster suite "
                f"is `{FULL_SUITE_COMMAND}`.",
                "",
            ]
            if reduced
            else []
        ),
        "Regenerate (each `evaluate.py` run writes `results.json` and `run.json` in its "
        "`--out` folder, by default `results/<name from its options>/`):",
        "",
        "```bash",
        *unique(str(sc["command"]) for i in used if (sc := sidecars[i]) and "command" in sc),
        regenerate,
        "```",
    ]
    env_order = {name: i for i, name in enumerate(FAMILIES)}
    sections = sorted(
        {k[:3] for k in merged},
        key=lambda s: (env_order.get(s[0], len(env_order)), s[1], _sortable(s[2])),
    )
    for env, cluster, model in sections:
        entry = env_entry(env)
        lines += [
            "",
            f"## {env} · {cluster}" + (f" · {model}" if model else ""),
            "",
            f"`{entry.gym_id}`; headline as in {entry.paper}; best first by {entry.select} "
            f"({entry.select_metric.better} is better).",
        ]
        tables = sorted(
            {k[3:7] for k in merged if k[:3] == (env, cluster, model)},
            key=lambda t: (t[0], _sortable(t[1]), _sortable(t[2]), repr(t[3])),
        )
        for workload, sweep, count, options in tables:
            cells = {
                k[7]: v for k, v in merged.items() if k[:7] == (env, cluster, model, workload,
                                                                 sweep, count, options)
            }  # fmt: skip
            first = next(iter(cells.values()))[0][0]
            swept = (first.get("sweep") or {}).get("option")
            metrics = [entry.select_metric, *(m for m in entry.headline if m.key != entry.select)]
            ranked = []
            for policy, (rows, index) in cells.items():
                scored = {m.key: _metric_cell(rows, m) for m in entry.headline}
                order = tuple(m.sign(scored[m.key][0]) for m in metrics)
                ranked.append((order, policy, rows, index, scored))
            ranked.sort(key=lambda t: (t[0], t[1]))
            head = [
                f"{m.label} ({m.unit + ', ' if m.unit else ''}{m.better} is better)"
                for m in entry.headline
            ]
            lines += [
                "",
                f"### {column_label(first)}: {_setting_label(env, count, options, swept)}",
                "",
                "| # | policy | kind | " + " | ".join(head) + " | seeds | wall s / run |",
                "|---|---|---|" + "---|" * len(head) + "---|---|",
            ]
            for rank, (_, policy, rows, _, scored) in enumerate(ranked, 1):
                seeds = ",".join(str(s) for s in sorted(r["seed"] for r in rows))
                wall = [r["wall_seconds"] for r in rows if r.get("wall_seconds") is not None]
                wall_cell = f"{np.mean(wall):.1f}" if wall else "-"
                lines.append(
                    f"| {rank} | `{policy}` | {_policy_kind(entry, policy)} | "
                    + " | ".join(scored[m.key][1] for m in entry.headline)
                    + f" | {seeds} | {wall_cell} |"
                )
            sources = sorted({index for *_, index, _ in ranked})
            lines += ["", "Produced by:"]
            for index in sources:
                policies = (
                    sorted(p for _, p, _, i, _ in ranked if i == index) if len(sources) > 1 else []
                )
                lines.append(_provenance_line(paths[index], sidecars[index], policies))
    lines += ["", f"Regenerate this file: `{regenerate}`"]
    return "\n".join(lines) + "\n"
