"""How close is the simulated engine to real deployments? Predicted vs measured TTFT and TPOT.

    python -m benchmarks.serving_fidelity [--data-dir D] [--rows] [--heldout] [--jobs 2]

Not a speed benchmark: an audit of the serving engine at system level. Every deployment of
``aiconfigurator/silicon_sample_calibration.csv`` (section 1b of the measured-latency folder's
SOURCES.md; real H100/H200 deployments under TensorRT-LLM, vLLM and SGLang, 2–512 concurrent
clients) that the simulator can represent is replayed with :func:`envs.sim.serving.closed_loop`
(same GPU, model, TP, precision, engine preset, isl, osl, concurrency, 20 requests per client),
and its mean TTFT and TPOT are compared with the measured ones. Rows it cannot represent are
counted by reason.

Printed: with ``--rows`` one line per deployment (predicted vs measured); always the median,
p90 and max |relative error| per backend and precision with the committed constants (these rows
are also the ones the constants were fitted on); with ``--heldout`` the same figures when each
model is predicted by constants fitted on the *other* models only (leave one model out, about
15 minutes on 2 cores): the honest estimate of the error on a model that is not in the file.
Targets (the engine-fidelity goals): median |error| <= 25 % on TTFT and <= 10 % on TPOT on held-out
models, no row worse than 3x on TTFT.
"""

from __future__ import annotations

import argparse
import sys


def _per_model(pairs: list, summarize, prefix: str) -> None:
    by_model: dict[str, list] = {}
    for r, p in pairs:
        by_model.setdefault(r.model, []).append((r, p))
    for model, items in sorted(by_model.items()):
        t = summarize(items)[-1]
        print(
            f"  {prefix}{model:18} {t['rows']:4d} rows  TTFT median {t['ttft_median']:6.1%}  "
            f"TPOT median {t['tpot_median']:6.1%}  TTFT within 3x {t['ttft_within_3x']:6.1%}"
        )


def main(argv: list[str] | None = None) -> int:
    from envs.sim.calibrate_serving import (
        format_summary,
        leave_one_model_out,
        load_rows,
        predict_rows,
        summarize,
    )

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.serving_fidelity", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data-dir", help="measured-latency folder (default ../shared/...)")
    parser.add_argument("--rows", action="store_true", help="print every deployment")
    parser.add_argument("--heldout", action="store_true", help="leave-one-model-out check")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = parser.parse_args(argv)
    try:
        rows, skipped = load_rows(args.data_dir)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} deployments the simulator can represent; left out:")
    for reason, n in skipped.most_common():
        print(f"  {n:4d}  {reason}")
    preds = predict_rows(rows, jobs=args.jobs, progress=True)
    if args.rows:
        print(
            f"\n{'deployment':58} {'TTFT ms meas':>12} {'sim':>8} {'err':>6}   "
            f"{'TPOT ms meas':>12} {'sim':>7} {'err':>6}"
        )
        for r, p in zip(rows, preds, strict=True):
            label = (
                f"{r.model} {r.backend} {r.precision} {r.gpu} tp{r.tp} {r.isl}/{r.osl} "
                f"c{r.concurrency}"
            )
            print(
                f"{label[:58]:58} {r.ttft_s * 1e3:12.1f} {p['ttft_s'] * 1e3:8.1f} "
                f"{p['ttft_s'] / r.ttft_s - 1:+6.0%}   {r.tpot_s * 1e3:12.2f} "
                f"{p['tpot_s'] * 1e3:7.2f} {p['tpot_s'] / r.tpot_s - 1:+6.0%}"
            )
    pairs = list(zip(rows, preds, strict=True))
    print(format_summary(summarize(pairs), "\ncalibration rows (the committed constants):"))
    print("\nper model:")
    _per_model(pairs, summarize, "")
    if args.heldout:
        held = leave_one_model_out(rows, jobs=args.jobs)
        title = "\nheld out (each model predicted by a fit on the others):"
        print(format_summary(summarize(held), title))
        _per_model(held, summarize, "held-out ")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
