"""The ``evaluate.py`` / ``servegym-evaluate`` command: parse the options (:mod:`evaluation.cli`),
run the grid (:func:`evaluation.runner.evaluate`), write the results, plots and provenance, and
print the table. ``evaluate.py`` in a clone and the installed ``servegym-evaluate`` both call
:func:`main`; the options are described in ``evaluate.py``'s docstring and ``--help``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from evaluation.cli import parse_args, parse_leaderboard_args
from evaluation.config import FULL_SUITE_COMMAND, QUICK_SUITE_ARGS, EvaluationError, env_entry
from evaluation.leaderboard import format_leaderboard
from evaluation.plots import plot_attainment, plot_curve, plot_sweep
from evaluation.ray_grid import PartialEvaluation
from evaluation.resolve import (
    checkpoint_settings,
    checkpoint_warnings,
    command_for,
    default_out_dir,
    resolve_config,
    trace_notes,
)
from evaluation.results import write_provenance, write_results
from evaluation.runner import evaluate
from evaluation.tables import format_table


def leaderboard_main(argv: Sequence[str]) -> int:
    """``python evaluate.py --leaderboard OUT.md RESULTS.json [RESULTS.json ...]``: write the
    leaderboard of the results files to OUT.md (:func:`format_leaderboard`)."""
    args = parse_leaderboard_args(argv)
    out = Path(args.leaderboard)
    try:
        text = format_leaderboard(args.results, out)
    except EvaluationError as exc:
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out} from {len(args.results)} results file(s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--leaderboard" in argv:
        return leaderboard_main(argv)
    quick = not argv
    if quick:
        argv = list(QUICK_SUITE_ARGS)
    start = time.perf_counter()
    try:
        parsed = parse_args(argv)
        config = resolve_config(parsed)
        plain = resolve_config(
            dataclasses.replace(
                parsed,
                policies=tuple(p for p in config.policies or () if not p.startswith("ckpt:"))
                or None,
                reference=None,
            )
        )
        for name, value in checkpoint_settings(parsed, config.policies or ()).items():
            if getattr(plain, name) != value:
                print(
                    f"--{name.replace('_', '-')} {value}: from the checkpoint's config.json (the "
                    f"setting it was trained with; the default is {getattr(plain, name)})"
                )
        for warning in checkpoint_warnings(config):
            print(warning, file=sys.stderr)
        if quick:
            print(f"no arguments: running the quick suite ({command_for(config)})")
        for note in trace_notes(config):
            print(note)
        rows = evaluate(config)
    except PartialEvaluation as exc:
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        if not exc.rows:
            return 1
        rows, status = exc.rows, 1  # write what finished, as for a complete run
    except EvaluationError as exc:
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        return 2
    else:
        status = 0

    entry = env_entry(config.env)
    out = Path(config.out) if config.out else default_out_dir(config)
    json_path = Path(config.json_path) if config.json_path else out / "results.json"
    write_results(rows, json_path, out / "results.csv")
    provenance = command_for(config) + "".join(
        f" --{flag} {value}" for flag, value in (("out", config.out), ("json", config.json_path))
        if value
    )  # fmt: skip
    write_provenance(json_path, provenance, time.perf_counter() - start)
    pngs = (
        plot_attainment(rows, out, config.reference)
        + plot_sweep(rows, out, config.reference)
        + plot_curve(rows, out, config.reference)
    )
    command = command_for(config)
    table = format_table(rows, reference=config.reference, command=command)
    (out / "table.txt").write_text(table + "\n")

    if config.wandb != "disabled":  # W&B logging lives in agents/wandb_utils.py
        from agents.wandb_utils import init_run, log_comparison

        run = init_run(
            config.wandb, out, dataclasses.asdict(config), name=out.name, job_type="evaluate"
        )
        log_comparison(
            run,
            rows,
            table,
            pngs,
            metrics=[m.key for m in entry.headline],
            prefix="evaluate",
            extra_columns=[config.sweep.option] if config.sweep else (),
        )
        run.finish()

    print(table)
    print(f"wrote {json_path}, {out / 'results.csv'}, {len(pngs)} plot(s) in {out}")
    print(f"{len(rows)} runs in {time.perf_counter() - start:.0f} s wall")
    if quick:
        print(f"full suite (HexAgent Tables 1–3, Llama-3.1-70B / Hetero-1): {FULL_SUITE_COMMAND}")
    return status
