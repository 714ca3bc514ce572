"""Hyperparameter sweeps over ``train.py`` from a W&B sweep file, offline or on Ray.

W&B's own sweeps need its server: ``wandb sweep`` / ``wandb agent`` cannot run in offline mode
(a sweep's next configuration comes from the server; wandb/wandb#6234). The same sweep file
works both ways:

* online, with a W&B account: ``wandb sweep examples/sweep.yaml`` then ``wandb agent <id>`` on
  each machine (the file's ``program`` / ``command`` run ``train.py`` with the sampled flags);
* offline, here: ``python -m agents.sweeps examples/sweep.yaml --runs 4`` samples the same
  parameters (``grid`` or ``random``), runs ``train.py`` once per configuration, each in its
  own process and output directory with an offline W&B run (``wandb sync`` uploads them
  later), and prints the configurations ranked by the sweep's metric; ``--ray [ADDRESS]`` runs
  the configurations as Ray tasks, on this machine or a cluster (``auto``,
  ``ray://HOST:10001``; see :mod:`agents.distributed` for what the nodes need).

The metric is read from each run's ``eval_history.json`` (validation evaluations during
training, the ``eval/<metric>`` W&B logs): ``eval/req99`` ranks runs by their best validation
Req99. Supported parameter specs: ``values: [...]``, ``value: x``, and ``distribution`` one of
``uniform`` / ``log_uniform_values`` / ``int_uniform`` with ``min`` and ``max``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

METHODS = ("grid", "random")
DISTRIBUTIONS = ("uniform", "log_uniform_values", "int_uniform")
TRAIN = Path(__file__).resolve().parents[1] / "train.py"


class SweepError(ValueError):
    """A malformed sweep file: reported without a traceback."""


def load_sweep(path: str | Path) -> dict[str, Any]:
    """The sweep file at ``path``, checked.

    :raises SweepError: naming the file and the offending key.
    """
    where = f"sweep file {str(path)!r}"
    try:
        spec = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SweepError(f"{where}: cannot read it: {exc}") from exc
    if not isinstance(spec, dict):
        raise SweepError(f"{where}: expected a mapping, got {type(spec).__name__}")
    if spec.get("method") not in METHODS:
        raise SweepError(f"{where}: method must be one of {METHODS}, got {spec.get('method')!r}")
    metric = spec.get("metric")
    if not (
        isinstance(metric, dict)
        and isinstance(metric.get("name"), str)
        and metric.get("goal") in ("minimize", "maximize")
    ):
        raise SweepError(f"{where}: metric must be {{name: eval/<key>, goal: minimize|maximize}}")
    params = spec.get("parameters")
    if not isinstance(params, dict) or not params:
        raise SweepError(f"{where}: parameters must be a non-empty mapping")
    for name, p in params.items():
        if not isinstance(p, dict):
            raise SweepError(f"{where}: parameter {name!r} must be a mapping")
        if "values" in p:
            if not isinstance(p["values"], list) or not p["values"]:
                raise SweepError(f"{where}: parameter {name!r}: values must be a non-empty list")
        elif "value" not in p:
            if p.get("distribution") not in DISTRIBUTIONS or not {"min", "max"} <= set(p):
                raise SweepError(
                    f"{where}: parameter {name!r} needs values, value, or a distribution in "
                    f"{DISTRIBUTIONS} with min and max"
                )
            if spec["method"] == "grid":
                raise SweepError(f"{where}: parameter {name!r}: grid sweeps need values")
            if not p["min"] < p["max"] or (
                p["distribution"] == "log_uniform_values" and not p["min"] > 0
            ):
                raise SweepError(
                    f"{where}: parameter {name!r}: need 0 < min < max (log) or min < max"
                )
    return spec


def configurations(spec: Mapping[str, Any], runs: int | None, seed: int = 0) -> list[dict]:
    """The parameter sets to run: the whole grid (or its first ``runs``), or ``runs`` random
    draws (seeded)."""
    params = spec["parameters"]
    if spec["method"] == "grid":
        names = list(params)
        choices = [p["values"] if "values" in p else [p["value"]] for p in params.values()]
        grid = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*choices)]
        return grid[:runs] if runs else grid
    if not runs:
        raise SweepError("a random sweep needs --runs")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(runs):
        config = {}
        for name, p in params.items():
            if "values" in p:
                config[name] = p["values"][int(rng.integers(len(p["values"])))]
            elif "value" in p:
                config[name] = p["value"]
            elif p["distribution"] == "uniform":
                config[name] = float(rng.uniform(p["min"], p["max"]))
            elif p["distribution"] == "log_uniform_values":
                config[name] = float(math.exp(rng.uniform(math.log(p["min"]), math.log(p["max"]))))
            else:
                config[name] = int(rng.integers(p["min"], p["max"] + 1))
        out.append(config)
    return out


def fixed_flags(spec: Mapping[str, Any]) -> list[str]:
    """The ``train.py`` flags the sweep's ``command`` fixes for every run (not ``--wandb``: runs
    here are offline), so the file has one source of truth for both W&B and this runner."""
    command = spec.get("command") or []
    return [
        str(a)
        for a in command
        if isinstance(a, str) and a.startswith("--") and not a.startswith("--wandb")
    ]


def train_argv(params: Mapping[str, Any], out: Path, extra: Sequence[str]) -> list[str]:
    """``train.py`` arguments for one configuration (W&B's ``${args}`` form: ``--name=value``)."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in params.items()]
    return [*extra, *flags, f"--out={out}", "--wandb=offline"]


def run_configuration(
    argv: Sequence[str], metric: str, goal: str, program: str | Path = TRAIN
) -> dict[str, Any]:
    """Run ``program argv`` (``train.py``) in a fresh process; its best validation ``metric``
    (or the error)."""
    proc = subprocess.run([sys.executable, str(program), *argv], capture_output=True, text=True)
    out = Path(next(a.split("=", 1)[1] for a in argv if a.startswith("--out=")))
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return {"out": str(out), "error": f"exit {proc.returncode}: {tail[0]}"}
    key = metric.removeprefix("eval/")
    history_path = out / "eval_history.json"
    history = json.loads(history_path.read_text()) if history_path.exists() else []
    values = [h[key] for h in history if isinstance(h.get(key), (int, float))]
    if not values:
        return {"out": str(out), "error": f"no {metric} in {history_path}"}
    best = min(values) if goal == "minimize" else max(values)
    return {"out": str(out), "value": best}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m agents.sweeps",
        description="Run a W&B-format sweep over train.py offline (or on Ray); arguments after "
        "-- go to every train.py run",
    )
    ap.add_argument("sweep", help="sweep YAML (W&B format), e.g. examples/sweep.yaml")
    ap.add_argument("--runs", type=int, default=None, help="configurations (default: the grid)")
    ap.add_argument("--seed", type=int, default=0, help="seed of a random sweep's draws")
    ap.add_argument("--out", default="runs/sweep", help="parent directory of the runs")
    ap.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS", help="run on Ray")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]
    try:
        spec = load_sweep(args.sweep)
        if args.runs is not None and args.runs < 1:
            raise SweepError(f"--runs must be >= 1, got {args.runs}")
        configs = configurations(spec, args.runs, args.seed)
    except SweepError as exc:
        print(f"agents.sweeps: error: {exc}", file=sys.stderr)
        return 2
    extra = [*fixed_flags(spec), *args.extra]
    metric, goal = spec["metric"]["name"], spec["metric"]["goal"]
    jobs = [train_argv(c, Path(args.out) / f"run-{i:03d}", extra) for i, c in enumerate(configs)]
    print(f"{len(jobs)} configurations of {args.sweep} ({spec['method']}), ranked by {metric}")
    if args.ray is not None:
        from agents.distributed import init_ray

        ray = init_ray(args.ray)
        task = ray.remote(run_configuration)
        results = ray.get([task.remote(j, metric, goal) for j in jobs])
    else:
        results = [run_configuration(j, metric, goal) for j in jobs]
    sign = 1.0 if goal == "minimize" else -1.0
    order = sorted(range(len(jobs)), key=lambda i: sign * results[i].get("value", sign * math.inf))
    for rank, i in enumerate(order, 1):
        r = results[i]
        shown = f"{r['value']:.4g}" if "value" in r else r["error"]
        params = " ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in configs[i].items()
        )
        print(f"{rank:>3}. {metric} {shown:<10} {params}  ({r['out']})")
    return 0 if all("value" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
