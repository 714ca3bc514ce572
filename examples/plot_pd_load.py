"""Req99 against load for every PDCluster policy, one panel per (cluster, workload).

    python examples/plot_pd_load.py RESULTS.json [...] --out results/pd_req99_vs_load.png

Reads the ``results.json`` of ``evaluate.py --sweep load_scale=...`` runs (several files are
merged: e.g. two policy subsets, or one run per cluster) and draws Req99 (mean over seeds; log
scale when a panel spans more than 3×) against ``load_scale``. The paper's speed-blind
baselines are dashed, their earliest-finish (speed-aware) variants solid in the same colour,
HexAgent bold: where a dashed line and its solid twin part, placement explains the gap; where
the solid lines part from each other, ordering does. ``evaluate.py --env pd-cluster-v1
--sweep load_scale=0.5,1,2,4 --out DIR`` makes the inputs (``DIR/results.json``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

SPEED_AWARE = "+earliest-finish"


def load_rows(paths: list[str]) -> list[dict[str, Any]]:
    """The load-sweep rows of every file (later files override earlier ones run for run)."""
    rows: dict[tuple, dict[str, Any]] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for row in data:
            sweep = row.get("sweep") or {}
            if sweep.get("option") != "load_scale":
                raise ValueError(f"{path}: a row of {row['policy']!r} is not a load_scale sweep")
            key = (row["cluster"], row["workload"], row["policy"], sweep["value"], row["seed"])
            rows[key] = row
    if not rows:
        raise ValueError(f"no rows in {paths}")
    return list(rows.values())


def _mean_req99(rows: list[dict[str, Any]], load: float) -> float:
    """Mean Req99 over the seeds run at ``load``; a run without one (it did not finish) counts
    as inf; nan when nothing ran there."""
    vals = [
        math.inf if r["metrics"].get("req99") is None else float(r["metrics"]["req99"])
        for r in rows
        if float(r["sweep"]["value"]) == load
    ]
    return sum(vals) / len(vals) if vals else math.nan


def _style(policy: str, reference: str) -> dict[str, Any]:
    if policy == reference:
        return {"linewidth": 2.6, "color": "black", "zorder": 4}
    return {"linestyle": "-" if policy.endswith(SPEED_AWARE) else "--", "linewidth": 1.4}


def plot(rows: list[dict[str, Any]], out: Path, reference: str = "hexagent") -> Path:
    """One panel per (cluster, workload); returns the written path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    clusters = sorted({r["cluster"] for r in rows})
    workloads = sorted({r["workload"] for r in rows})
    policies = sorted({r["policy"] for r in rows}, key=lambda p: (p == reference, p))
    colours = plt.get_cmap("tab10")
    base_colour = {
        p: colours(i % 10)
        for i, p in enumerate(sorted({p.removesuffix(SPEED_AWARE) for p in policies}))
    }
    fig, axes = plt.subplots(
        len(clusters),
        len(workloads),
        figsize=(4.2 * len(workloads), 3.4 * len(clusters)),
        squeeze=False,
    )
    for i, cluster in enumerate(clusters):
        for j, workload in enumerate(workloads):
            ax = axes[i][j]
            cell = [r for r in rows if r["cluster"] == cluster and r["workload"] == workload]
            loads = sorted({float(r["sweep"]["value"]) for r in cell})
            for policy in policies:
                ys = [_mean_req99([r for r in cell if r["policy"] == policy], x) for x in loads]
                if all(math.isnan(y) for y in ys):
                    continue
                style = _style(policy, reference)
                style.setdefault("color", base_colour[policy.removesuffix(SPEED_AWARE)])
                ax.plot(loads, ys, marker="o", markersize=3, label=policy, **style)
            ax.set_xscale("log", base=2)
            finite = [y for line in ax.get_lines() for y in line.get_ydata() if math.isfinite(y)]
            if finite and max(finite) > 3 * min(finite):
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
                ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
            ax.set_xticks(loads, [f"{x:g}" for x in loads])
            seeds = sorted({r["seed"] for r in cell})
            ax.set_title(f"{workload} · {cluster} ({len(seeds)} seed{'s' * (len(seeds) > 1)})")
            ax.set_xlabel("load_scale (× the paper's arrival rate)")
            ax.set_ylabel("Req99 (lower is better)")
            ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=8)
    fig.tight_layout(rect=(0, 0.06 + 0.02 * (len(labels) // 5), 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="results.json files of load_scale sweeps")
    ap.add_argument("--out", default="results/pd_req99_vs_load.png")
    ap.add_argument("--reference", default="hexagent")
    args = ap.parse_args(argv)
    print(f"wrote {plot(load_rows(args.results), Path(args.out), args.reference)}")


if __name__ == "__main__":
    main()
