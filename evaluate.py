"""Evaluate scheduling policies on servegym environments and print paper-style tables.

Every (workload, sweep value, policy, seed) runs through ``env.step`` on the identical workload:
one fresh env per workload and sweep value, ``env.reset(seed=seed)`` makes the workload a
deterministic function of the seed, and every run gets a freshly built policy, so a policy's
numbers do not depend on which other policies ran beside it.

    python evaluate.py                      # quick suite (about 1.5 min on 2 cores)
    python evaluate.py --env pd-cluster --cluster hetero-1 --model llama3.1-70b \\
        --workload sharegpt,bfcl,lats,mixed \\
        --policies per-call-fcfs,workflow-fcfs,workflow-llf,atlas,hexagent --seeds 0,1,2
    python evaluate.py --env routing --sweep slo_scale=1,1.5,2,2.5,3   # GoodServe Fig. 6

What an env family is compared on is data, one ``EnvFamily`` per family in
``envs.registry.FAMILIES``: its headline metrics and which direction is better (PDCluster:
Req95 / Req99, lower; Routing: goodput, higher, and SLO-violation ratio, lower), its reference
(expert) policy, its paper's baselines and our own strong references, and its default cluster,
model and workloads. This file parses the options and prints; the machinery is the
:mod:`evaluation` package (``runner``: every run through ``env.step``; ``policies``: policy
resolution; ``tables``, ``plots``, ``results`` + provenance, ``leaderboard``, ``ray_grid``,
``diagnosis``; ``cli``: the parser).

Prints a table shaped like HexAgent Tables 1–3 (rows = policies, columns = workloads × sweep
values, cells = the headline metrics averaged over seeds, then the best of the paper's baselines
and the reference policy's reduction — or gain, for a higher-is-better metric — vs it, and the
same against the best of the paper's baselines and our own strong references), the
mean utilisation per column and the command that regenerates the table. Writes to ``--out``
(default ``results/<name from the options>``):

* ``results.json``  one row per env/cluster/model/workload/sweep value/policy/seed (``--json``
  moves it); inf/nan are written as ``null``, so the file is strict JSON;
* ``results.csv``   the same rows with nested dicts flattened (``metrics.req95``, ...);
* ``attainment_<workload>.png``  SLO-attainment vs α, one line per policy (HexAgent Fig. 3);
* ``<metric>_vs_<option>_<workload>.png``  with ``--sweep``: the selection metric vs the swept
  value, one line per policy (GoodServe Fig. 6: goodput vs SLO scale);
* ``table.txt``     the printed table and its command.

Policies are named by ``evaluation.policies.resolve_policy``: a heuristic registered for the
env (``heuristics.policies_for``), or ``<prefix>:<argument>`` for a loader in
``evaluation.policies.POLICY_LOADERS`` (``ckpt:PATH``: a saved SB3 model; ``alloc:PATH``: an
Allocation-v0 allocation file; ``py:MODULE:FACTORY``: your own).
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
                policies=tuple(p for p in config.policies if not p.startswith("ckpt:")) or None,
                reference=None,
            )
        )
        for name, value in checkpoint_settings(parsed, config.policies).items():
            if getattr(plain, name) != value:
                print(
                    f"--{name.replace('_', '-')} {value}: from the checkpoint's config.json (the "
                    f"setting it was trained with; the default is {getattr(plain, name)})"
                )
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


if __name__ == "__main__":
    sys.exit(main())
