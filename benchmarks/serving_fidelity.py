"""How close is the simulated engine to real deployments it was not fitted to? Held-out errors.

    python -m benchmarks.serving_fidelity [--data-dir D] [--deployment aiconfigurator]
        [--client lockstep] [--latency-override FIELD=VALUE] [--jobs 2]
        [--plot serving_fidelity.png] [--rows] [--causes]

Not a speed benchmark: an audit of the serving engine at system level. Every deployment of
``aiconfigurator/silicon_sample_calibration.csv`` (section 1b of the measured-latency folder's
SOURCES.md; real H100/H200 deployments under TensorRT-LLM, vLLM and SGLang, 2-512 concurrent
clients) that the simulator can represent is replayed with :func:`envs.sim.serving.closed_loop`
(same GPU, model, TP, precision, engine, isl, osl, concurrency, 20 requests per client, the
clients as :data:`envs.sim.serving.CALIBRATION_CLIENT`, the engine configured as
``--deployment`` says: :data:`envs.sim.calibrate_serving.DEPLOYMENTS`). Rows it cannot represent
are counted by reason.

The only constant fitted on these rows is each engine's ``frontend_seconds``
(:func:`envs.sim.serving_fit.fit_frontend`); everything else comes from kernel-level
data. Validation holds out whole groups, never single rows: leave one **model** out, leave one
**engine** out (the held-out engine takes a frontend fitted on the other engines' rows) and
leave one **GPU** out (H100 vs H200); each group is predicted by constants fitted on the others.

Printed per scheme, per engine and overall: median and worst |relative error| of the mean TTFT,
the mean TPOT and the mean request latency (measured latency = TTFT + (osl - 1) x TPOT, both
means from the row), and PASS/FAIL against the targets (on held-out groups mean-TTFT
median <= 20 %, worst <= 100 %; mean-TPOT median <= 10 %). ``--plot`` writes a scatter plot
(simulated vs measured, one row of panels per scheme). The rows are simulated once without the
frontend, which is a client-side constant (:mod:`envs.sim.serving`) added per held-out fit.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

TARGETS = {"ttft_median": 0.20, "ttft_worst": 1.00, "tpot_median": 0.10}
SCHEMES = ("model", "engine", "gpu")
METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("latency", "latency"))


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

    from envs.sim.calibrate_serving import DEPLOYMENTS, load_rows, predict_rows
    from envs.sim.efficiency import Calibration

    CALIBRATION_FIELDS = {f.name for f in dataclasses.fields(Calibration)} - {
        "families",
        "links",
        "source",
    }
    from envs.sim.serving import AIPERF_DATASET_CLIENT, CALIBRATION_CLIENT, STEADY_CLIENT
    from envs.sim.serving_fit import fit_frontends, leave_one_group_out, with_frontend

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
        help="replace a latency-model constant (envs.sim.efficiency.Calibration field) for "
        "every engine, e.g. iteration_overhead_per_extra_gpu_seconds=0 (repeatable)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--plot", help="write the scatter plot to this PNG")
    parser.add_argument("--rows", action="store_true", help="print every held-out prediction")
    parser.add_argument(
        "--causes",
        action="store_true",
        help="break the held-out errors down by engine/model/precision, GPU/TP, prompt "
        "length and client count",
    )
    args = parser.parse_args(argv)
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
    preds0 = predict_rows(
        rows, engines, jobs=args.jobs, progress=True, deployment=args.deployment, client=client
    )

    fitted_all = fit_frontends(rows, preds0)
    fit_pairs = [
        (r, with_frontend(p, fitted_all[r.backend])) for r, p in zip(rows, preds0, strict=True)
    ]
    consts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in fitted_all.items() if k != "*")
    print(format_table(table(fit_pairs), f"\nfitted on every row (frontend: {consts}):"))

    held: dict[str, list] = {}
    for scheme in SCHEMES:
        pairs, fitted = leave_one_group_out(rows, preds0, scheme)
        held[scheme] = pairs
        t = table(pairs)
        print(format_table(t, f"\nleave one {scheme} out:"))
        print(verdict(t[-1]))
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

    if args.plot:
        plot(held, args.plot)
        print(f"\nwrote {args.plot}")
    return 0


def _group(row: Any, scheme: str) -> str:
    return {"model": row.model, "engine": row.backend, "gpu": row.gpu}[scheme]


if __name__ == "__main__":
    raise SystemExit(main())
