"""Scepsy §7.2 / §7.4 summaries from ``evaluate.py --env allocation --sweep workflow_rate=...``
result files: peak sustainable throughput per policy (Fig. 6, Fig. 10) and the APL's prediction
error (rows run with ``--apl-info true``).

    python -m heuristics.scepsy.report results/alloc-*/results.json [--plot fig6.png]

Peak throughput of a policy = the largest achieved throughput (workflows completed per second
inside the measured window, mean over seeds) over the swept rates: where Scepsy Fig. 6's curves
end. Its highest *sustainable* rate is the largest swept rate at which every seed's run was
``sustainable`` (:data:`envs.allocation.SUSTAINABLE_THROUGHPUT`: ≥ 99 % of the measured
workflows finished and the achieved throughput ≥ 90 % of the offered rate). Ratios name their
reference: ``scepsy / k8s-hpa`` etc.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REFERENCES = ("k8s-hpa", "naive-equal", "demand-proportional")
ABLATIONS = ("scepsy-parallelism-only", "scepsy-fractional-only")


def load_rows(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in paths:
        data = json.loads(Path(p).read_text())
        rows += [r for r in data if r.get("env") == "allocation"]
    if not rows:
        raise SystemExit(f"no Allocation-v0 rows in {list(map(str, paths))}")
    return rows


def _num(x: Any) -> float:
    return math.inf if x is None else float(x)


def points(
    rows: list[dict[str, Any]],
) -> dict[tuple, dict[str, list[tuple[float, float, float, bool]]]]:
    """(workload, gpus) -> policy -> [(rate, throughput, mean latency, sustainable)] over the
    swept rates (means over seeds; sustainable only if every seed's run was)."""
    acc: dict[tuple, dict[tuple[str, float], list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rows:
        rate = r.get("sweep", {}).get("value") if r.get("sweep") else r.get("workflow_rate")
        if rate is None:
            continue
        acc[(r["workload"], r.get("gpus"))][(r["policy"], float(rate))].append(r["metrics"])
    out: dict[tuple, dict[str, list[tuple[float, float, float, bool]]]] = {}
    for key, by in acc.items():
        pol: dict[str, list[tuple[float, float, float, bool]]] = defaultdict(list)
        for (policy, rate), ms in sorted(by.items(), key=lambda kv: kv[0][1]):
            pol[policy].append(
                (
                    rate,
                    float(np.mean([_num(m["throughput"]) for m in ms])),
                    float(np.mean([_num(m["latency_mean"]) for m in ms])),
                    all(m.get("sustainable", 0.0) for m in ms),
                )
            )
        out[key] = dict(pol)
    return out


def peak(series: list[tuple[float, float, float, bool]]) -> float:
    """Largest achieved throughput over the sweep (0 if none)."""
    return max((t for _, t, _, _ in series), default=0.0)


def sustainable_rate(series: list[tuple[float, float, float, bool]]) -> float:
    """Largest swept rate whose runs were all sustainable (0 if none)."""
    return max((r for r, _, _, ok in series if ok), default=0.0)


def peak_table(rows: list[dict[str, Any]]) -> str:
    pts = points(rows)
    lines = [
        "peak achieved throughput (workflows/s) and highest sustainable rate; "
        "ratio = scepsy / reference (peak throughput)"
    ]
    for (workload, gpus), pol in sorted(pts.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        peaks = {p: peak(s) for p, s in pol.items()}
        lines.append(f"  {workload}, {gpus} GPUs:")
        for p, v in sorted(peaks.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {p:<26} {v:7.3f}   sustainable up to {sustainable_rate(pol[p]):g}")
        if "scepsy" in peaks:
            ratios = [
                f"vs {ref} {peaks['scepsy'] / peaks[ref]:.2f}x" if peaks.get(ref) else f"vs {ref} -"
                for ref in (*REFERENCES, *ABLATIONS)
                if ref in peaks
            ]
            lines.append("    scepsy " + ", ".join(ratios))
            lines.append("    mean-latency ratio reference / scepsy at the rates both sustain:")
            for ref in (*REFERENCES, *ABLATIONS):
                if ref not in pol:
                    continue
                mine = {r: lat for r, _, lat, ok in pol["scepsy"] if ok}
                both = [lat / mine[r] for r, _, lat, ok in pol[ref] if ok and r in mine]
                if both:
                    lines.append(
                        f"      {ref:<26} {min(both):.2f}x - {max(both):.2f}x "
                        f"over {len(both)} rates"
                    )
    return "\n".join(lines)


def apl_table(rows: list[dict[str, Any]]) -> str:
    """|APL predicted − simulated| / simulated mean latency of the runs with predictions."""
    out = ["APL predicted vs simulated mean workflow latency"]
    errs: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        m = r["metrics"]
        if m.get("apl_latency") is None or not math.isfinite(_num(m["latency_mean"])):
            continue
        rate = r.get("sweep", {}).get("value") if r.get("sweep") else r.get("workflow_rate")
        pred, sim = _num(m["apl_latency"]), _num(m["latency_mean"])
        err = abs(pred - sim) / sim
        errs[(r["workload"], r.get("gpus"), r["policy"])].append(err)
        out.append(
            f"  {r['workload']:<13} {r.get('gpus')!s:>3} GPUs {r['policy']:<24} rate {rate:>6} "
            f"seed {r['seed']}: predicted {pred:8.2f} s, simulated {sim:8.2f} s, error "
            f"{err:6.1%}"
        )
    for (w, g, p), e in sorted(errs.items(), key=lambda kv: str(kv[0])):
        out.append(f"  median error {w}, {g} GPUs, {p}: {np.median(e):.1%} over {len(e)} runs")
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Fig. 6 grid: one panel per (workload, GPUs), mean latency vs achieved throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = points(rows)
    keys = sorted(pts, key=lambda k: (k[0], k[1] or 0))
    workloads = sorted({k[0] for k in keys})
    sizes = sorted({k[1] for k in keys}, key=lambda g: g or 0)
    fig, axes = plt.subplots(
        len(workloads), len(sizes), figsize=(4.2 * len(sizes), 3.4 * len(workloads)),
        squeeze=False,
    )  # fmt: skip
    for i, w in enumerate(workloads):
        for j, g in enumerate(sizes):
            ax = axes[i][j]
            for policy, series in sorted(pts.get((w, g), {}).items()):
                xs = [t for _, t, _, _ in series]
                ys = [lat for _, _, lat, _ in series]
                bold = policy == "scepsy"
                (line,) = ax.plot(xs, ys, label=policy, linewidth=2.4 if bold else 1.2)
                for _, t, lat, ok in series:
                    c = line.get_color()
                    ax.plot(t, lat, "o", color=c, markerfacecolor=c if ok else "white", ms=4)
            ax.set_title(f"{w}, {g} GPUs", fontsize=10)
            ax.set_xlabel("achieved throughput (workflows/s)")
            ax.set_ylabel("mean latency (s)")
            ax.grid(alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.suptitle("Allocation-v0 (scepsy-16, vLLM): hollow markers = not sustainable", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="evaluate.py results.json files")
    ap.add_argument("--plot", help="write the Fig. 6-style grid here (PNG)")
    args = ap.parse_args(argv)
    rows = load_rows(args.results)
    print(peak_table(rows))
    print()
    print(apl_table(rows))
    if args.plot:
        print(f"wrote {plot(rows, args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
