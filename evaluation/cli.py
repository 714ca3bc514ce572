"""The ``evaluate.py`` command line: the argparse parser built from :class:`EvalConfig` and
:data:`envs.registry.FAMILIES`, and ``--help``'s per-env description.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from envs.registry import FAMILIES, option_help
from evaluation.config import (
    ENV_FIELD_META,
    ENV_FIELDS,
    QUICK_SUITE_ARGS,
    EvalConfig,
    EvaluationError,
    Sweep,
    canonical_env,
    env_defaults,
    fmt_value,
)
from evaluation.policies import heuristic_names


def _csv_list(text: str) -> tuple[str, ...]:
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return items


def _seed_list(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in _csv_list(text))
    except ValueError:
        seeds = ()
    if not seeds or min(seeds) < 0:  # Gymnasium's reset takes seeds >= 0
        raise argparse.ArgumentTypeError(f"seeds must be integers >= 0 like 0,1,2, got {text!r}")
    return seeds


def parse_sweep(text: str) -> Sweep:
    """``OPTION=V1,V2,...`` (``slo_scale=1,1.5,2`` or ``slo-scale=...``) -> :class:`Sweep`, each
    value parsed with the option's type."""
    option, sep, values = text.partition("=")
    option = option.strip().replace("-", "_")
    if not sep or option not in ENV_FIELD_META:
        raise argparse.ArgumentTypeError(
            f"--sweep expects OPTION=V1,V2,... with OPTION one of {', '.join(ENV_FIELDS)}; "
            f"got {text!r}"
        )
    kind = ENV_FIELD_META[option]["type"]
    try:
        return Sweep(option, tuple(kind(v) for v in _csv_list(values)))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sweep {option}: values must be {kind.__name__}s, got {values!r}"
        ) from None


def describe_envs() -> str:
    """Each env family's defaults and options with the env's own defaults (for ``--help``)."""
    lines = ["env families (options left unset take these defaults):"]
    for name, e in FAMILIES.items():
        defaults = env_defaults(name)
        lines.append(f"  {name} ({e.gym_id}; {e.paper})")
        model = f" --model {e.model}" if e.model else ""
        lines.append(f"    --cluster {e.cluster}{model} --workload {','.join(e.workloads)}")
        lines.append(f"    --policies {','.join(e.policies)} --reference {e.reference}")
        lines.append(
            textwrap.fill(
                f"every policy: {', '.join(heuristic_names('', name))}",
                width=100,
                initial_indent="    ",
                subsequent_indent="      ",
                break_on_hyphens=False,
            )
        )
        head = ", ".join(f"{m.key} ({m.better} is better)" for m in e.headline)
        lines.append(f"    headline: {head}; best = by {e.select}")
        opts = [
            f"--{n.replace('_', '-')} {fmt_value(defaults.get(n, 'unset'))}"
            for n in ENV_FIELDS
            if n in e.options and n not in ("cluster", "model")
        ]
        if not defaults:
            opts = [o.split()[0] for o in opts]
        lines.append(f"    options (unset: the env's default): {'  '.join(opts)}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> EvalConfig:
    """Parse the command line into an :class:`EvalConfig` (unset options stay None: the env
    family's defaults, see :func:`resolve_config`)."""
    d = EvalConfig()
    p = argparse.ArgumentParser(
        description="Evaluate policies on servegym envs; print paper-style tables (HexAgent "
        "Req95/Req99, GoodServe goodput). With no arguments, runs the quick suite: python "
        f"evaluate.py {' '.join(QUICK_SUITE_ARGS)}",
        epilog=describe_envs(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--env", default=d.env, help=f"env family: {', '.join(FAMILIES)} (default {d.env})"
    )
    p.add_argument(
        "--workload",
        dest="workloads",
        type=_csv_list,
        help="comma-separated workloads, the table columns (default: the env's): generator "
        "names, or servegym JSONL trace files (FILE.jsonl; pd-cluster and routing), replayed as "
        "recorded: --count keeps their first records, --load-scale divides their arrival times, "
        "--model serves all their calls",
    )
    p.add_argument(
        "--policies",
        type=_csv_list,
        help="comma-separated policies, the table rows: heuristic names (listed per env "
        "below), ckpt:PATH (a train.py checkpoint), py:MODULE:FACTORY or py:FILE.py:FACTORY "
        "(your own policy: FACTORY() returns an object with reset() and act(obs, info)), "
        "alloc:FILE.yaml (allocation only) (default: the env's baselines, own references and "
        "reference)",
    )
    p.add_argument(
        "--seeds", type=_seed_list, default=d.seeds, help="comma-separated seeds (default: 0,1,2)"
    )
    for name in ENV_FIELDS:
        meta = ENV_FIELD_META[name]
        takers = [e for e, entry in FAMILIES.items() if name in entry.options]
        where = "" if len(takers) == len(FAMILIES) else f"; {', '.join(takers)} only"
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=meta["type"],
            help=f"{option_help(name)} (default: the env's{where})",
        )
    p.add_argument(
        "--sweep",
        type=parse_sweep,
        help="sweep one env option: OPTION=V1,V2,... (e.g. slo_scale=1,1.5,2,2.5,3); columns = "
        "workload × value, plus a <metric>_vs_<option> plot",
    )
    p.add_argument(
        "--reference",
        help="policy compared against the best baseline and, if it is not the expert, "
        "against the expert (default: the env's expert)",
    )
    p.add_argument("--out", default=d.out, help="output directory (default: results/<name>)")
    p.add_argument("--json", dest="json_path", default=d.json_path, help="JSON path override")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=d.ray,
        metavar="ADDRESS",
        help="run the grid as Ray tasks: on this machine (no ADDRESS: ray.init() on its cores) "
        "or on a running cluster (ADDRESS: auto, ray://HOST:10001); needs pip install "
        "'servegym[ray]'. Same results as the serial run",
    )
    p.add_argument(
        "--timeline",
        metavar="DIR",
        default=d.timeline,
        help="write each run's timeline to DIR/<workload>_<policy>_seed<seed>.json (Chrome trace "
        "events: open at ui.perfetto.dev or chrome://tracing)",
    )
    p.add_argument(
        "--wandb",
        default=d.wandb,
        choices=("disabled", "offline", "online"),
        help="log the table and plots to W&B (offline: a local run directory under --out)",
    )
    p.add_argument(
        "--leaderboard",
        metavar="OUT.md",
        help="instead of evaluating: write the markdown leaderboard of the RESULTS.json files "
        "that follow (python evaluate.py --leaderboard results/leaderboard.md "
        "results/*/results.json; later files override earlier ones)",
    )
    args = p.parse_args(list(argv))
    if args.count is not None and args.count < 1:
        p.error(f"--count must be >= 1, got {args.count}")
    try:
        args.env = canonical_env(args.env)
    except EvaluationError as exc:
        p.error(str(exc))
    return EvalConfig(**{f.name: getattr(args, f.name) for f in fields(EvalConfig)})


def parse_leaderboard_args(argv: Sequence[str]) -> argparse.Namespace:
    """``evaluate.py --leaderboard OUT.md RESULTS.json [RESULTS.json ...]``: ``leaderboard``
    (the markdown to write) and ``results`` (the results files, later ones override earlier)."""
    p = argparse.ArgumentParser(
        prog="evaluate.py --leaderboard",
        description="Build a markdown leaderboard from evaluate.py results.json files (later "
        "files override earlier ones for the same setting and policy).",
    )
    p.add_argument("--leaderboard", metavar="OUT.md", required=True, help="markdown to write")
    p.add_argument("results", nargs="+", type=Path, metavar="RESULTS.json")
    return p.parse_args(list(argv))
