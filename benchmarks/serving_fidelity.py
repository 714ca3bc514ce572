"""How close is the simulated engine to real deployments it was not fitted to? Held-out errors.

    python -m benchmarks.serving_fidelity [--data-dir D] [--deployment aiconfigurator]
        [--client lockstep] [--latency-override FIELD=VALUE] [--jobs 2]
        [--variants roofline,smooth-roofline] [--plot serving_fidelity.png]
        [--plot-kinds docs/fidelity/dense_vs_moe.png] [--rows] [--causes]

Not a speed benchmark: an audit of the serving engine at system level. Every deployment of
``aiconfigurator/silicon_sample_calibration.csv`` (section 1b of the measured-latency folder's
SOURCES.md; real H100/H200 deployments under TensorRT-LLM, vLLM and SGLang, 2-512 concurrent
clients) that the simulator can represent is replayed with
:func:`envs.sim.calibration.benchmark_client.closed_loop` (same GPU, model, TP, precision, engine,
isl, osl, concurrency, 20 requests per client, the clients as
:data:`envs.sim.calibration.benchmark_client.CALIBRATION_CLIENT`, the engine configured as
``--deployment`` says: :data:`envs.sim.calibration.calibrate_serving.DEPLOYMENTS`). Rows it cannot
represent are counted by reason.

The only constant fitted on these rows is each engine's ``frontend_seconds``
(:func:`envs.sim.calibration.serving_fit.fit_frontend`); everything else comes from kernel-level
data. Validation holds out whole groups, never single rows: leave one **model** out, leave one
**engine** out (the held-out engine takes a frontend fitted on the other engines' rows) and
leave one **GPU** out (H100 vs H200); each group is predicted by constants fitted on the others.

Printed per scheme, per engine and overall: median and worst |relative error| of the mean TTFT,
the mean TPOT and the mean request latency (measured latency = TTFT + (osl - 1) x TPOT, both
means from the row), and PASS/FAIL against the targets (on held-out groups mean-TTFT median
<= 20 %, worst <= 100 %; mean-TPOT median <= 10 %), for all rows and then for the dense and the
MoE models' rows separately (each against the same targets). ``--plot`` writes a scatter plot
(simulated vs measured, one row of panels per scheme); ``--plot-kinds`` a bar chart of the
held-out median errors of dense and MoE rows per engine, one colour per per-op calibration
variant. ``--variants`` runs the whole report once per named variant
(:data:`envs.sim.latency.efficiency.CALIBRATION_VARIANTS`; default: the one in force). The rows are
simulated once per variant without the frontend, which is a client-side constant
(:mod:`envs.sim.calibration.benchmark_client`) added per held-out fit.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

TARGETS = {"ttft_median": 0.20, "ttft_worst": 1.00, "tpot_median": 0.10}
SCHEMES = ("model", "engine", "gpu")
METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("latency", "latency"))
#: The two kinds of model whose rows are reported apart.
KINDS = ("dense", "moe")


def kind(row: Any) -> str:
    """``"moe"`` for a row of a mixture-of-experts model (routed experts), else ``"dense"``."""
    from envs.sim.hardware.catalog import get_model

    return "moe" if get_model(row.model).is_moe else "dense"


def measured(row: Any, metric: str) -> float:
    """A row's measured mean TTFT / TPOT, or mean request latency derived from them, seconds."""
    if metric == "latency":
        return row.ttft_s + (row.osl - 1) * row.tpot_s
    return getattr(row, f"{metric}_s")


def abs_errors(pairs: list, metric: str) -> np.ndarray:
    """|predicted / measured - 1| of ``metric`` for (row, prediction) pairs."""
    return np.array([abs(p[f"{metric}_s"] / measured(r, metric) - 1) for r, p in pairs])


def table(pairs: list) -> list[dict[str, Any]]:
    """Median and worst |error| per engine and overall (``all``)."""
    groups: dict[str, list] = {}
    for r, p in pairs:
        groups.setdefault(r.backend, []).append((r, p))
    groups["all"] = list(pairs)
    out = []
    for name in sorted(groups, key=lambda g: (g == "all", g)):
        row: dict[str, Any] = {"engine": name, "rows": len(groups[name])}
        for metric, _ in METRICS:
            e = abs_errors(groups[name], metric)
            row[f"{metric}_median"] = float(np.median(e))
            row[f"{metric}_worst"] = float(e.max())
        out.append(row)
    return out


def format_table(rows: list[dict[str, Any]], title: str) -> str:
    lines = [
        title,
        f"  {'engine':8} {'rows':>5}  {'TTFT med':>8} {'worst':>8}  {'TPOT med':>8} {'worst':>8}"
        f"  {'latency med':>11} {'worst':>8}",
    ]
    for t in rows:
        lines.append(
            f"  {t['engine']:8} {t['rows']:5d}  {t['ttft_median']:8.1%} {t['ttft_worst']:8.1%}  "
            f"{t['tpot_median']:8.1%} {t['tpot_worst']:8.1%}  {t['latency_median']:11.1%} "
            f"{t['latency_worst']:8.1%}"
        )
    return "\n".join(lines)


def verdict(overall: dict[str, Any]) -> str:
    parts = []
    for key, target in TARGETS.items():
        ok = overall[key] <= target
        parts.append(f"{key} {overall[key]:.1%} <= {target:.0%} {'PASS' if ok else 'FAIL'}")
    return "  targets: " + "; ".join(parts)


def plot(held: dict[str, list], path: str) -> None:
    """Simulated vs measured (log-log), one row of TTFT / TPOT / latency panels per scheme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"trtllm": "tab:green", "vllm": "tab:blue", "sglang": "tab:red"}
    fig, axes = plt.subplots(len(held), 3, figsize=(12, 4 * len(held)), squeeze=False)
    for i, (scheme, pairs) in enumerate(held.items()):
        for j, (metric, label) in enumerate(METRICS):
            ax = axes[i][j]
            for engine, color in colors.items():
                pts = [
                    (measured(r, metric), p[f"{metric}_s"]) for r, p in pairs if r.backend == engine
                ]
                if pts:
                    x, y = np.array(pts).T
                    ax.scatter(x, y, s=6, alpha=0.6, color=color, label=engine)
            lo = min(min(measured(r, metric), p[f"{metric}_s"]) for r, p in pairs)
            hi = max(max(measured(r, metric), p[f"{metric}_s"]) for r, p in pairs)
            line = np.array([lo, hi])
            ax.plot(line, line, "k-", lw=0.8)
            ax.fill_between(line, line / 1.2, line * 1.2, color="0.85", zorder=0)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(f"measured mean {label} (s)")
            ax.set_ylabel(f"simulated mean {label} (s)")
            ax.set_title(f"leave one {scheme} out: {label}")
            if j == 0:
                ax.legend(loc="upper left", fontsize=8)
    fig.suptitle("Serving-engine fidelity on held-out groups (grey band: within 20 %)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def kind_tables(pairs: list) -> dict[str, list[dict[str, Any]]]:
    """:func:`table` of the dense rows and of the MoE rows (a kind without rows is left out)."""
    out = {}
    for k in KINDS:
        sub = [(r, p) for r, p in pairs if kind(r) == k]
        if sub:
            out[k] = table(sub)
    return out


def plot_kinds(summaries: dict[str, dict[str, dict[str, list]]], path: str) -> None:
    """Held-out median |error| of dense (hatched) and MoE (solid) rows per engine, one colour
    per calibration variant; one row of TTFT / TPOT / latency panels per scheme.

    :param summaries: variant -> scheme -> :func:`kind_tables`.
    :param path: PNG to write.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(summaries)
    schemes = list(next(iter(summaries.values())))
    colors = ["tab:gray", "tab:blue", "tab:orange", "tab:green"]
    targets = {"ttft": TARGETS["ttft_median"], "tpot": TARGETS["tpot_median"]}
    fig, axes = plt.subplots(len(schemes), 3, figsize=(15, 3.6 * len(schemes)), squeeze=False)
    bars = len(variants) * len(KINDS)
    width = 0.8 / bars
    for i, scheme in enumerate(schemes):
        for j, (metric, label) in enumerate(METRICS):
            ax = axes[i][j]
            engines = [t["engine"] for t in summaries[variants[0]][scheme][KINDS[0]]]
            for v, variant in enumerate(variants):
                for k, kd in enumerate(KINDS):
                    by_engine = {
                        t["engine"]: t[f"{metric}_median"]
                        for t in summaries[variant][scheme].get(kd, [])
                    }
                    x = [
                        e + (v * len(KINDS) + k - (bars - 1) / 2) * width
                        for e in range(len(engines))
                    ]
                    y = [100 * by_engine.get(name, float("nan")) for name in engines]
                    ax.bar(
                        x,
                        y,
                        width,
                        color=colors[v % len(colors)],
                        hatch="//" if kd == "dense" else None,
                        edgecolor="black",
                        linewidth=0.4,
                        label=f"{variant}: {kd}",
                    )
            if metric in targets:
                ax.axhline(100 * targets[metric], color="red", ls="--", lw=0.8)
            ax.set_xticks(range(len(engines)), engines)
            ax.set_ylabel(f"median |error| of mean {label} (%)")
            ax.set_title(f"leave one {scheme} out: {label}")
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.suptitle(
        "Held-out serving errors, dense (hatched) vs MoE (solid) rows, per engine "
        "(red: the median target)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: Groupings of ``--causes``: what a held-out error is broken down by.
CAUSES = {
    "engine, model, precision": lambda r: f"{r.backend} {r.model} {r.precision}",
    "engine, model, GPU, TP": lambda r: f"{r.backend} {r.model} {r.gpu} tp{r.tp}",
    "engine, prompt tokens": lambda r: f"{r.backend} isl {r.isl}",
    "engine, clients": lambda r: f"{r.backend} {_client_band(r.concurrency)}",
}


def _client_band(concurrency: int) -> str:
    for bound in (8, 32, 128):
        if concurrency <= bound:
            return f"c<={bound}"
    return "c>128"


def signed_errors(pairs: list, metric: str) -> np.ndarray:
    """predicted / measured - 1 of ``metric`` for (row, prediction) pairs."""
    return np.array([p[f"{metric}_s"] / measured(r, metric) - 1 for r, p in pairs])


def causes(pairs: list) -> str:
    """The held-out errors broken down by :data:`CAUSES`: per group its rows, the median
    |error| and median signed error of mean TTFT and mean TPOT, and the number of rows off by
    more than the targets (TTFT > 20 %, TPOT > 10 %)."""
    lines = []
    for title, key in CAUSES.items():
        groups: dict[str, list] = {}
        for r, p in pairs:
            groups.setdefault(key(r), []).append((r, p))
        lines.append(f"  by {title}:")
        lines.append(
            f"    {'group':40} {'rows':>4}  {'TTFT |e|':>8} {'signed':>8} {'>20%':>5}"
            f"  {'TPOT |e|':>8} {'signed':>8} {'>10%':>5}"
        )
        for name in sorted(groups):
            g = groups[name]
            t, d = signed_errors(g, "ttft"), signed_errors(g, "tpot")
            lines.append(
                f"    {name:40} {len(g):4d}  {np.median(np.abs(t)):8.1%} {np.median(t):+8.1%} "
                f"{int((np.abs(t) > TARGETS['ttft_median']).sum()):5d}  "
                f"{np.median(np.abs(d)):8.1%} {np.median(d):+8.1%} "
                f"{int((np.abs(d) > TARGETS['tpot_median']).sum()):5d}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import dataclasses

    from envs.sim.calibration.calibrate_serving import DEPLOYMENTS, load_rows, predict_rows
    from envs.sim.latency.efficiency import (
        CALIBRATION_VARIANT_ENV,
        CALIBRATION_VARIANTS,
        Calibration,
        resolve_calibration_variant,
    )

    CALIBRATION_FIELDS = {f.name for f in dataclasses.fields(Calibration)} - {
        "families",
        "links",
        "moe_kernels",
        "engines",
        "source",
    }
    from envs.sim.calibration.benchmark_client import (
        AIPERF_DATASET_CLIENT,
        CALIBRATION_CLIENT,
        STEADY_CLIENT,
    )

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.serving_fidelity", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data-dir", help="measured-latency folder (default ../shared/...)")
    parser.add_argument("--deployment", default="aiconfigurator", choices=DEPLOYMENTS)
    parser.add_argument(
        "--client",
        default="lockstep",
        choices=("lockstep", "steady", "aiperf-dataset"),
        help="closed-loop clients: CALIBRATION_CLIENT (lockstep), STEADY_CLIENT or "
        "AIPERF_DATASET_CLIENT (100 prompts reused, prefix caches hit)",
    )
    parser.add_argument(
        "--latency-override",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="replace a latency-model constant (envs.sim.latency.efficiency.Calibration field) for "
        "every engine, e.g. iteration_overhead_per_extra_gpu_seconds=0 (repeatable)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--plot", help="write the scatter plot to this PNG")
    parser.add_argument(
        "--plot-kinds", help="write the dense-vs-MoE bar chart of held-out errors to this PNG"
    )
    parser.add_argument(
        "--variants",
        help="comma-separated per-op calibration variants to report one after the other "
        f"(of {sorted(CALIBRATION_VARIANTS)}; default: the one in force)",
    )
    parser.add_argument("--rows", action="store_true", help="print every held-out prediction")
    parser.add_argument(
        "--causes",
        action="store_true",
        help="break the held-out errors down by engine/model/precision, GPU/TP, prompt "
        "length and client count",
    )
    args = parser.parse_args(argv)
    variants: list[str | None] = [None]
    if args.variants:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        unknown = [v for v in variants if v not in CALIBRATION_VARIANTS]
        if unknown or not variants:
            parser.error(
                f"--variants {args.variants!r}: unknown {unknown}; expected names from "
                f"{sorted(CALIBRATION_VARIANTS)}"
            )
    override = {}
    for item in args.latency_override:
        key, sep, value = item.partition("=")
        try:
            override[key] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            parser.error(f"--latency-override {item!r}: expected FIELD=NUMBER")
        if key not in CALIBRATION_FIELDS:
            parser.error(
                f"--latency-override {item!r}: {key!r} is not a latency-model constant; "
                f"expected one of {sorted(CALIBRATION_FIELDS)}"
            )
    try:
        rows, skipped = load_rows(args.data_dir)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} deployments the simulator can represent; left out:")
    for reason, n in skipped.most_common():
        print(f"  {n:4d}  {reason}")
    client = {
        "lockstep": CALIBRATION_CLIENT,
        "steady": STEADY_CLIENT,
        "aiperf-dataset": AIPERF_DATASET_CLIENT,
    }[args.client]
    print(f"engine configuration: --deployment {args.deployment}; clients: {client}")
    if override:
        print(f"latency-model overrides for every engine: {override}")
    engines = {r.backend: dict(override) for r in rows}
    summaries: dict[str, dict[str, dict[str, list]]] = {}
    held: dict[str, list] = {}
    for variant in variants:
        if variant is not None:
            os.environ[CALIBRATION_VARIANT_ENV] = variant  # the workers' latency models follow
        name = resolve_calibration_variant()
        print(f"\n=== per-op calibration variant: {name} ===")
        preds0 = predict_rows(
            rows, engines, jobs=args.jobs, progress=True, deployment=args.deployment, client=client
        )
        held, summaries[name] = _report(rows, preds0, args)

    if args.plot:
        plot(held, args.plot)
        print(f"\nwrote {args.plot}")
    if args.plot_kinds:
        plot_kinds(summaries, args.plot_kinds)
        print(f"wrote {args.plot_kinds}")
    return 0


def _report(rows: list, preds0: list, args: argparse.Namespace) -> tuple[dict, dict]:
    """Print the fitted-on-all and held-out tables of one variant's predictions; return the
    held-out pairs and the per-kind tables of each scheme."""
    from envs.sim.calibration.serving_fit import fit_frontends, leave_one_group_out, with_frontend

    fitted_all = fit_frontends(rows, preds0)
    fit_pairs = [
        (r, with_frontend(p, fitted_all[r.backend])) for r, p in zip(rows, preds0, strict=True)
    ]
    consts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in fitted_all.items() if k != "*")
    print(format_table(table(fit_pairs), f"\nfitted on every row (frontend: {consts}):"))

    held: dict[str, list] = {}
    kinds: dict[str, dict[str, list]] = {}
    for scheme in SCHEMES:
        pairs, fitted = leave_one_group_out(rows, preds0, scheme)
        held[scheme] = pairs
        t = table(pairs)
        print(format_table(t, f"\nleave one {scheme} out:"))
        print(verdict(t[-1]))
        kinds[scheme] = kind_tables(pairs)
        for k, kt in kinds[scheme].items():
            print(format_table(kt, f"  leave one {scheme} out, {k} rows:"))
            print(verdict(kt[-1]))
        for group, f in fitted.items():
            e_t, e_p = (
                abs_errors([(r, p) for r, p in pairs if _group(r, scheme) == group], m)
                for m in ("ttft", "tpot")
            )
            consts = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in f.items())
            print(
                f"    held out {group:16} {len(e_t):4d} rows  TTFT median {np.median(e_t):6.1%} "
                f"worst {e_t.max():7.1%}  TPOT median {np.median(e_p):6.1%}  "
                f"(frontend ms: {consts})"
            )
        if args.causes:
            print(causes(pairs))
        if args.rows:
            for r, p in pairs:
                print(
                    f"    {r.model} {r.backend} {r.precision} {r.gpu} tp{r.tp} {r.isl}/{r.osl} "
                    f"c{r.concurrency}: TTFT {r.ttft_s * 1e3:.1f} -> {p['ttft_s'] * 1e3:.1f} ms, "
                    f"TPOT {r.tpot_s * 1e3:.2f} -> {p['tpot_s'] * 1e3:.2f} ms"
                )
    return held, kinds


def _group(row: Any, scheme: str) -> str:
    return {"model": row.model, "engine": row.backend, "gpu": row.gpu}[scheme]


if __name__ == "__main__":
    raise SystemExit(main())
