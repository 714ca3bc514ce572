"""Plots of result rows: SLO attainment vs α (HexAgent Fig. 3), the selection metric vs a
swept option (GoodServe Fig. 6), and a y-vs-x metric curve through a sweep (Scepsy Fig. 6).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.config import unique
from evaluation.results import safe_name
from evaluation.rows import column_key, column_label, headline_of, mean_metric


def _save(fig: Any, path: Path) -> Path:
    """Lay ``fig`` out, write it to ``path`` at 120 dpi, close it; returns ``path``."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _distinct_colours(ax: Any, n: int) -> None:
    """One colour per line: matplotlib's default cycle repeats after 10."""
    import matplotlib.pyplot as plt

    cmap: Any = plt.get_cmap("tab10" if n <= 10 else "tab20")  # a ListedColormap
    ax.set_prop_cycle(color=cmap.colors)


def plot_attainment(
    rows: Sequence[dict[str, Any]], out_dir: str | Path, reference: str | None = None
) -> list[Path]:
    """SLO-attainment curves like HexAgent Fig. 3: one PNG per column (workload, sweep value),
    attainment vs α, one line per policy averaged over seeds, ``reference`` (default: the env's
    expert) bold. Returns the written paths.

    :raises ValueError: if runs of one column have different α grids.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entry = headline_of(rows)
    reference = reference or entry.reference
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for col in unique(column_key(r) for r in rows):
        col_rows = [r for r in rows if column_key(r) == col]
        label = column_label(col_rows[0])
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        _distinct_colours(ax, len(unique(r["policy"] for r in rows)))
        alpha_max = 1.5
        for policy in unique(r["policy"] for r in rows):
            runs = [r for r in col_rows if r["policy"] == policy]
            if not runs:
                continue
            alphas = np.asarray(runs[0]["attainment_curve"]["alpha"], dtype=float)
            curves = []
            for r in runs:
                a = np.asarray(r["attainment_curve"]["alpha"], dtype=float)
                if a.shape != alphas.shape or not np.allclose(a, alphas):
                    raise ValueError(
                        f"attainment curves of {label!r}/{policy!r} use different α grids "
                        f"(seed {r['seed']}: {a.size} points vs {alphas.size})"
                    )
                curves.append(np.asarray(r["attainment_curve"]["attainment"], dtype=float))
            mean = np.mean(curves, axis=0)
            # Zoom to where every policy reaches 99% attainment: long single-workflow tails
            # beyond it would squash the curves (the table reports them).
            done = np.flatnonzero(mean >= 0.99)
            alpha_max = max(alpha_max, alphas[done[0]] if done.size else alphas[-1])
            bold = policy == reference
            ax.plot(
                alphas, mean, label=policy, linewidth=2.4 if bold else 1.4, zorder=3 if bold else 2
            )
        for level in (0.95, 0.99):
            ax.axhline(level, color="grey", linestyle=":", linewidth=0.8)
            ax.annotate(
                f"{level:.0%}", (1.0, level), xycoords=("axes fraction", "data"),
                xytext=(2, 0), textcoords="offset points", va="center", fontsize=7, color="grey",
            )  # fmt: skip
        ax.set_xlim(1.0, min(alpha_max * 1.1, 20.0))
        ax.set_ylim(0.0, 1.02)
        ax.set_xlabel(entry.attainment_xlabel)
        ax.set_ylabel("SLO attainment (fraction)")
        first = col_rows[0]
        seeds = unique(r["seed"] for r in col_rows)
        ax.set_title(
            f"{label} — {first['cluster']}, {first['model']} "
            f"(mean over {len(seeds)} seed{'s' if len(seeds) > 1 else ''})"
        )
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        paths.append(_save(fig, out / f"attainment_{safe_name(label.replace(' ', '_'))}.png"))
    return paths


def plot_curve(
    rows: Sequence[dict[str, Any]], out_dir: str | Path, reference: str | None = None
) -> list[Path]:
    """With a sweep and an env entry with a ``curve``: y metric vs x metric, one line per policy
    through the swept values (mean over seeds), hollow markers where the run was not
    ``sustainable``; ``curve_<workload>.png``. Returns the written paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swept = [r for r in rows if r.get("sweep")]
    if not swept or headline_of(rows).curve is None:
        return []
    entry = headline_of(rows)
    assert entry.curve is not None
    xkey, ykey = entry.curve
    reference = reference or entry.reference
    values = unique(r["sweep"]["value"] for r in swept)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for workload in unique(r["workload"] for r in swept):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        _distinct_colours(ax, len(unique(r["policy"] for r in swept)))
        for policy in unique(r["policy"] for r in swept):
            pts = []
            for v in values:
                rs = [
                    r
                    for r in swept
                    if r["sweep"]["value"] == v
                    and r["workload"] == workload
                    and r["policy"] == policy
                ]
                if not rs:
                    continue
                x = float(np.mean([r["metrics"][xkey] for r in rs]))
                y = float(np.mean([r["metrics"][ykey] for r in rs]))
                ok = all(r["metrics"].get("sustainable", 1.0) for r in rs)
                pts.append((x, y, ok))
            if not pts:
                continue
            bold = policy == reference
            (line,) = ax.plot(
                [p[0] for p in pts], [p[1] for p in pts], label=policy,
                linewidth=2.4 if bold else 1.4, zorder=3 if bold else 2,
            )  # fmt: skip
            for x, y, ok in pts:
                ax.plot(
                    x, y, marker="o", color=line.get_color(),
                    markerfacecolor=line.get_color() if ok else "white", zorder=4,
                )  # fmt: skip
        ax.set_xlabel(f"{xkey} (achieved)")
        ax.set_ylabel(ykey)
        first = [r for r in swept if r["workload"] == workload][0]
        ax.set_title(f"{workload} — {first['cluster']} (hollow: not sustainable)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        paths.append(_save(fig, out / f"curve_{safe_name(workload)}.png"))
    return paths


def plot_sweep(
    rows: Sequence[dict[str, Any]], out_dir: str | Path, reference: str | None = None
) -> list[Path]:
    """With a sweep: the env's ``select`` metric (Routing: goodput; PDCluster: Req99) vs the swept
    value, one PNG per workload, one line per policy (mean over seeds), ``reference`` bold —
    GoodServe Fig. 6 (goodput vs SLO scale). Returns the written paths (none without a sweep)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swept = [r for r in rows if r.get("sweep")]
    if not swept:
        return []
    entry = headline_of(rows)
    reference = reference or entry.reference
    metric = entry.select_metric
    option = swept[0]["sweep"]["option"]
    values = unique(r["sweep"]["value"] for r in swept)
    numeric = all(isinstance(v, int | float) for v in values)
    xs = [float(v) for v in values] if numeric else list(range(len(values)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for workload in unique(r["workload"] for r in swept):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        _distinct_colours(ax, len(unique(r["policy"] for r in swept)))
        for policy in unique(r["policy"] for r in swept):
            ys = [
                mean_metric(
                    [r for r in swept if r["sweep"]["value"] == v],
                    workload,
                    policy,
                    metric.key,
                    metric.better,
                )
                for v in values
            ]
            bold = policy == reference
            ax.plot(
                xs, ys, marker="o", label=policy, linewidth=2.4 if bold else 1.4,
                zorder=3 if bold else 2,
            )  # fmt: skip
        if not numeric:
            ax.set_xticks(xs, [str(v) for v in values])
        unit = f" ({metric.unit})" if metric.unit else ""
        ax.set_xlabel(option)
        ax.set_ylabel(f"{metric.label}{unit}, {metric.better} is better")
        first = swept[0]
        seeds = unique(r["seed"] for r in swept if r["workload"] == workload)
        ax.set_title(
            f"{workload} — {first['cluster']}, {first['model']} "
            f"(mean over {len(seeds)} seed{'s' if len(seeds) > 1 else ''})"
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        paths.append(_save(fig, out / f"{metric.key}_vs_{option}_{safe_name(workload)}.png"))
    return paths
