"""Scepsy §7.2 / §7.4 summaries from ``evaluate.py --env allocation --sweep workflow_rate=...``
result files: peak sustainable throughput per policy (Fig. 6, Fig. 10) and the APL's prediction
error (rows run with ``--apl-info true``).

    python -m heuristics.allocation.scepsy.report results/alloc-*/results.json [--plot fig6.png]

A policy's **peak sustainable throughput** is the largest swept rate at which every seed's run
was ``sustainable`` (``info["metrics"]["sustainable"]``; ``SUSTAINABLE_COMPLETED`` and
``SUSTAINABLE_THROUGHPUT`` in :mod:`envs.allocation`: ≥ 99 % of the measured workflows
finished by the end of the drain, and the achieved throughput ≥ 90 % of the offered rate).
Its **peak achieved throughput** is the largest achieved throughput (workflows completed per
second inside the measured window, mean over seeds) over all swept rates: where Scepsy
Fig. 6's curves end. Its **peak goodput** is the largest goodput (workflows finished within
their SLO per second, mean over seeds) over all swept rates: the highest throughput served with
bounded latency. "Sustainable" bounds no latency, so a backlog that drains within the run
counts as sustained; goodput does not count it. Ratios name their reference:
``scepsy / k8s-hpa`` etc.
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


def load_rows(paths: Sequence[str | Path], drop: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The Allocation-v0 rows of ``paths``.

    :param drop: ``POLICY@FILE`` (that file's rows of POLICY) or ``POLICY`` (every file's) to
        leave out, e.g. when another file holds longer runs of the policy.
    :raises SystemExit: if a file is missing, nothing is left, or two rows are the same run
        (workload, GPUs, policy, rate, seed), which would otherwise be averaged silently.
    """
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise SystemExit(f"no such results file: {', '.join(missing)} (run evaluate.py first)")
    rows: list[dict[str, Any]] = []
    seen: dict[tuple, str] = {}
    for p in paths:
        left_out = {
            d.split("@", 1)[0] for d in drop if "@" not in d or d.split("@", 1)[1] == str(p)
        }
        for r in json.loads(Path(p).read_text()):
            if r.get("env") != "allocation" or r["policy"] in left_out:
                continue
            key = (r["workload"], r.get("gpus"), r["policy"], rate_of(r), r["seed"])
            if key in seen:
                raise SystemExit(
                    f"{p} and {seen[key]} both hold the run {key}; pass --drop POLICY@FILE"
                )
            seen[key] = str(p)
            rows.append(r)
    if not rows:
        raise SystemExit(f"no Allocation-v0 rows in {list(map(str, paths))}")
    return rows


def _num(x: Any) -> float:
    return math.inf if x is None else float(x)


def rate_of(r: dict[str, Any]) -> float:
    """The scheduled workflow rate of a row: its sweep value, else ``workflow_rate``, else the
    offered rate it measured (the generator's default rate)."""
    if r.get("sweep") and r["sweep"].get("option") == "workflow_rate":
        return float(r["sweep"]["value"])
    if r.get("workflow_rate") is not None:
        return float(r["workflow_rate"])
    return float(r["metrics"]["offered_rate"])


Point = tuple[float, float, float, bool]  # rate, achieved throughput, mean latency, sustainable


def points(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, list[Point]]]:
    """(workload, gpus) -> policy -> [(rate, throughput, mean latency, sustainable)] over the
    swept rates (means over seeds; sustainable only if every seed's run was)."""
    acc: dict[tuple, dict[tuple[str, float], list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rows:
        acc[(r["workload"], r.get("gpus"))][(r["policy"], rate_of(r))].append(r["metrics"])
    out: dict[tuple, dict[str, list[Point]]] = {}
    for key, by in acc.items():
        pol: dict[str, list[Point]] = defaultdict(list)
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


def peak(series: list[Point]) -> float:
    """Largest achieved throughput over the sweep (0 if none): where Fig. 6's curves end."""
    return max((t for _, t, _, _ in series), default=0.0)


def peak_goodputs(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, float]]:
    """(workload, gpus) -> policy -> the largest goodput (workflows/s within SLO, mean over
    seeds at each swept rate) over the swept rates."""
    acc: dict[tuple, dict[tuple[str, float], list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        acc[(r["workload"], r.get("gpus"))][(r["policy"], rate_of(r))].append(
            float(r["metrics"]["goodput"])
        )
    out: dict[tuple, dict[str, float]] = defaultdict(dict)
    for key, by in acc.items():
        for (policy, _), gs in by.items():
            out[key][policy] = max(out[key].get(policy, 0.0), float(np.mean(gs)))
    return dict(out)


def sustainable_rate(series: list[Point]) -> float:
    """Peak sustainable throughput: the largest swept rate at which every seed's run was
    sustainable (0 if none). Nominal rates are the same grid for every policy, so the ratio of
    two policies' values does not depend on their arrival draws."""
    return max((r for r, _, _, ok in series if ok), default=0.0)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "-"


def peak_table(rows: list[dict[str, Any]], markdown: bool = False) -> str:
    """Per (workload, GPUs): each policy's peak sustainable throughput (:func:`sustainable_rate`),
    peak achieved throughput (:func:`peak`) and peak goodput (:func:`peak_goodputs`), and
    Scepsy's ratios to every other policy."""
    pts = points(rows)
    good = peak_goodputs(rows)
    keys = sorted(pts, key=lambda k: (k[0], k[1] or 0))
    policies = [p for p in ("scepsy", *REFERENCES, *ABLATIONS) if any(p in pts[k] for k in keys)]
    policies += sorted({p for k in keys for p in pts[k]} - set(policies))
    if markdown:
        head = "| workload, GPUs | " + " | ".join(f"`{p}`" for p in policies)
        lines = [head + " |", "|---" * (len(policies) + 1) + "|"]
        for k in keys:
            mine = pts[k].get("scepsy", [])
            cells = []
            for p in policies:
                s = pts[k].get(p)
                if s is None:
                    cells.append("")
                    continue
                g_mine, g_p = good[k].get("scepsy", 0.0), good[k][p]
                cell = f"{sustainable_rate(s):g} / {peak(s):.2f} / {g_p:.2f}"
                if p != "scepsy":
                    cell += (
                        f" ({_ratio(sustainable_rate(mine), sustainable_rate(s))} / "
                        f"{_ratio(peak(mine), peak(s))} / {_ratio(g_mine, g_p)})"
                    )
                cells.append(cell)
            lines.append(f"| {k[0]}, {k[1]} | " + " | ".join(cells) + " |")
        lines.append(
            "\nCells: peak sustainable throughput / peak achieved throughput / peak goodput "
            "(workflows/s); in brackets Scepsy's over the policy's, for each."
        )
        return "\n".join(lines)
    lines = [
        "peak sustainable throughput (largest swept rate sustained on every seed) and peak "
        "achieved throughput (workflows/s); ratios = scepsy / policy"
    ]
    for k in keys:
        pol = pts[k]
        lines.append(f"  {k[0]}, {k[1]} GPUs:")
        for p in sorted(pol, key=lambda q: (-sustainable_rate(pol[q]), -peak(pol[q]))):
            lines.append(
                f"    {p:<26} sustainable {sustainable_rate(pol[p]):7g}  peak {peak(pol[p]):7.3f}"
                f"  goodput {good[k][p]:7.3f}"
            )
        if "scepsy" not in pol:
            continue
        mine = pol["scepsy"]
        for label, fn in (("peak sustainable", sustainable_rate), ("peak achieved", peak)):
            ratios = [
                f"vs {ref} {_ratio(fn(mine), fn(s))}" for ref, s in pol.items() if ref != "scepsy"
            ]
            lines.append(f"    scepsy {label}: " + ", ".join(ratios))
        ratios = [
            f"vs {ref} {_ratio(good[k]['scepsy'], g)}"
            for ref, g in good[k].items()
            if ref != "scepsy"
        ]
        lines.append("    scepsy peak goodput: " + ", ".join(ratios))
        lines.append("    mean-latency ratio policy / scepsy at the rates both sustain:")
        ok = {r: lat for r, _, lat, good in mine if good}
        for ref, s in pol.items():
            both = [lat / ok[r] for r, _, lat, good in s if good and r in ok and ref != "scepsy"]
            if both:
                lines.append(
                    f"      {ref:<26} {min(both):.2f}x - {max(both):.2f}x over {len(both)} rates"
                )
    return "\n".join(lines)


def apl_rates(rows: list[dict[str, Any]], fractions: Sequence[float]) -> dict[tuple, list[float]]:
    """(workload, gpus) -> the rates at ``fractions`` of Scepsy's peak sustainable throughput."""
    pts = points(rows)
    return {
        k: [round(f * sustainable_rate(pol["scepsy"]), 3) for f in fractions]
        for k, pol in sorted(pts.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))
        if "scepsy" in pol and sustainable_rate(pol["scepsy"]) > 0
    }


def apl_table(rows: list[dict[str, Any]], policy: str | None = None) -> str:
    """|APL predicted − simulated| / simulated mean latency of the runs with predictions (of
    ``policy`` only, if given), per run and as medians per (workload, GPUs, policy); and
    |predicted T_w − achieved| / achieved throughput of the runs offered more than the
    predicted T_w (where the achieved throughput measures the allocation's capacity)."""
    out = ["APL predicted vs simulated mean workflow latency"]
    errs: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        m = r["metrics"]
        if policy is not None and r["policy"] != policy:
            continue
        if m.get("apl_latency") is None or not math.isfinite(_num(m["latency_mean"])):
            continue
        pred, sim = _num(m["apl_latency"]), _num(m["latency_mean"])
        err = abs(pred - sim) / sim
        errs[(r["workload"], r.get("gpus"), r["policy"])].append(err)
        out.append(
            f"  {r['workload']:<13} {r.get('gpus')!s:>3} GPUs {r['policy']:<24} rate "
            f"{rate_of(r):>6g} seed {r['seed']}: predicted {pred:8.2f} s, simulated {sim:8.2f} s, "
            f"error {err:6.1%}"
        )
    # throughput: where the offered rate exceeds the predicted T_w, the run measures capacity
    t_errs: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        m = r["metrics"]
        if policy is not None and r["policy"] != policy:
            continue
        pred_t, achieved = _num(m.get("apl_throughput")), _num(m.get("throughput"))
        if not (pred_t > 0 and achieved > 0) or _num(m.get("offered_rate")) <= pred_t:
            continue
        err = abs(pred_t - achieved) / achieved
        t_errs[r["workload"]].append(err)
        out.append(
            f"  {r['workload']:<13} {r.get('gpus')!s:>3} GPUs {r['policy']:<24} rate "
            f"{rate_of(r):>6g} seed {r['seed']}: predicted T_w {pred_t:7.3f}/s, achieved "
            f"{achieved:7.3f}/s (offered above T_w), error {err:6.1%}"
        )
    for w, e in sorted(t_errs.items()):
        out.append(f"  median throughput error {w}: {np.median(e):.1%} over {len(e)} runs")
    for (w, g, p), e in sorted(errs.items(), key=lambda kv: str(kv[0])):
        out.append(f"  median error {w}, {g} GPUs, {p}: {np.median(e):.1%} over {len(e)} runs")
    by_workload: dict[str, list[float]] = defaultdict(list)
    for (w, _, _), e in errs.items():
        by_workload[w] += e
    for w, e in sorted(by_workload.items()):
        out.append(f"  median error {w}, all sizes: {np.median(e):.1%} over {len(e)} runs")
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
    # One colour per policy in every panel (a panel that lacks a policy must not shift the rest).
    names = sorted({p for pol in pts.values() for p in pol})
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    colour = {p: cmap(i % cmap.N) for i, p in enumerate(names)}
    width = {p: 2.4 if p == "scepsy" else 1.2 for p in names}  # the expert drawn bold
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
                c = colour[policy]
                ax.plot(xs, ys, label=policy, color=c, linewidth=width[policy])
                for _, t, lat, ok in series:
                    ax.plot(t, lat, "o", color=c, markerfacecolor=c if ok else "white", ms=4)
            ax.set_title(f"{w}, {g} GPUs", fontsize=10)
            ax.set_xlabel("achieved throughput (workflows/s)")
            ax.set_ylabel("mean latency (s)")
            ax.set_yscale("log")
            ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=colour[p], linewidth=width[p]) for p in names]
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 6), fontsize=8)
    fig.suptitle(
        "Allocation-v0 (scepsy-16, vLLM): mean latency vs achieved throughput over the swept "
        "rates; hollow markers = not sustainable",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="example: python -m heuristics.allocation.scepsy.report "
        "results/alloc-*/results.json "
        "--plot docs/allocation_throughput_latency.png",
    )
    ap.add_argument("results", nargs="+", help="evaluate.py results.json files")
    ap.add_argument("--plot", help="write the Fig. 6-style grid here (PNG)")
    ap.add_argument("--markdown", action="store_true", help="peak table as a Markdown table")
    ap.add_argument(
        "--apl-rates",
        metavar="FRACTIONS",
        help="print the rates at these fractions of Scepsy's peak sustainable throughput (e.g. "
        "0.2,0.5,0.8), for an APL-accuracy run",
    )
    ap.add_argument("--apl-policy", default=None, help="APL errors of this policy only")
    ap.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="POLICY[@FILE]",
        help="leave POLICY's rows (of FILE only, if given) out; repeatable",
    )
    args = ap.parse_args(argv)
    rows = load_rows(args.results, args.drop)
    print(peak_table(rows, markdown=args.markdown))
    print()
    if args.apl_rates:
        fractions = [float(x) for x in args.apl_rates.split(",")]
        for (w, g), rates in apl_rates(rows, fractions).items():
            print(f"{w}, {g} GPUs: --sweep workflow_rate={','.join(f'{x:g}' for x in rates)}")
        print()
    print(apl_table(rows, args.apl_policy))
    if args.plot:
        print(f"wrote {plot(rows, args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
