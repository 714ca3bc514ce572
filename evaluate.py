"""Evaluate scheduling policies on servegym environments and print HexAgent-style tables.

Every (workload, policy, seed) runs through ``env.step`` on the identical workload: one fresh env
per workload, ``env.reset(seed=seed)`` makes the workload a deterministic function of the seed,
and every run gets a freshly built policy, so a policy's numbers do not depend on which other
policies ran beside it.

    python evaluate.py                      # quick suite (about 1.5 min on 2 cores)
    python evaluate.py --env pd-cluster --cluster hetero-1 --model llama3.1-70b \\
        --workload sharegpt,bfcl,lats,mixed \\
        --policies per-call-fcfs,workflow-fcfs,workflow-llf,atlas,hexagent --seeds 0,1,2

Prints a table shaped like HexAgent Tables 1–3 (rows = policies, columns = workloads, cells
"Req95 / Req99" averaged over seeds, then a "best baseline" row and the reference policy's
"reduction" vs that baseline), the mean prefill/decode utilisation per workload and the command
that regenerates the table. Writes to ``--out`` (default ``results/<name from the options>``):

* ``results.json``  one row per env/cluster/model/workload/policy/seed (``--json`` moves it);
  inf/nan are written as ``null``, so the file is strict JSON;
* ``results.csv``   the same rows with nested dicts flattened (``metrics.req95``, ...);
* ``attainment_<workload>.png``  SLO-attainment vs α, one line per policy (HexAgent Fig. 3);
* ``table.txt``     the printed table and its command.

Policies are named by :func:`resolve_policy`: a heuristic name from ``heuristics.POLICIES``, or
``<prefix>:<argument>`` for a loader in :data:`POLICY_LOADERS` (``ckpt:PATH`` is reserved for
saved SB3 models). Envs are named by :data:`ENVS`; a new env family is one entry there.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from envs import CLI_ENVS

# --------------------------------------------------------------------------------------------
# Options: everything a run depends on, declared once.
# --------------------------------------------------------------------------------------------

PAPER_WORKLOADS = ("sharegpt", "bfcl", "lats", "mixed")
PAPER_POLICIES = ("per-call-fcfs", "workflow-fcfs", "workflow-llf", "atlas", "hexagent")


@dataclass
class EvalConfig:
    """One evaluation suite. Defaults are HexAgent Tables 1–3 on Llama-3.1-70B / Hetero-1.

    :param env: env family, a key of :data:`ENVS`.
    :param cluster: cluster preset or YAML path.
    :param model: model name.
    :param workloads: workload generator names (one table column each).
    :param policies: policy specs (see :func:`resolve_policy`; one table row each).
    :param seeds: reset seeds; the workload is a deterministic function of the seed.
    :param count: workflows per workload (None: the paper's count, HexAgent §7.1).
    :param load_scale: multiplies the arrival rate (1.0 = the paper's).
    :param estimate_error: multiplicative error on scheduler-visible estimates (HexAgent §7.6).
    :param slots: K, waiting calls re-planned per scheduler invocation.
    :param reference: the policy whose reduction vs the best baseline is reported.
    :param out: output directory (None: ``results/<name derived from these options>``).
    :param json_path: JSON path (None: ``<out>/results.json``).
    :param quiet: no progress bar.
    :param wandb: ``disabled`` (default), ``offline`` or ``online``: log the table and plots to
        W&B (``agents.wandb_utils``).
    """

    env: str = "pd-cluster"
    cluster: str = "hetero-1"
    model: str = "llama3.1-70b"
    workloads: tuple[str, ...] = PAPER_WORKLOADS
    policies: tuple[str, ...] = PAPER_POLICIES
    seeds: tuple[int, ...] = (0, 1, 2)
    count: int | None = None
    load_scale: float = 1.0
    estimate_error: float = 0.0
    slots: int = 256
    reference: str = "hexagent"
    out: str | None = None
    json_path: str | None = None
    quiet: bool = False
    wandb: str = "disabled"


#: What ``python evaluate.py`` with no arguments runs: two workloads at the paper's counts (a
#: reduced count would leave the cluster nearly idle), the strongest baselines and HexAgent, one
#: seed. About 1.5 minutes on 2 cores (bfcl, the slowest workload, is left to the full suite).
QUICK_SUITE_ARGS: tuple[str, ...] = (
    "--workload", "mixed,sharegpt",
    "--policies", "per-call-fcfs,workflow-llf,atlas,hexagent",
    "--seeds", "0",
)  # fmt: skip

#: The full HexAgent Tables 1–3 run (Llama-3.1-70B on Hetero-1; change --model / --cluster for
#: the other columns of Table 2).
FULL_SUITE_COMMAND = (
    "python evaluate.py --env pd-cluster --cluster hetero-1 --model llama3.1-70b "
    f"--workload {','.join(PAPER_WORKLOADS)} --policies {','.join(PAPER_POLICIES)} --seeds 0,1,2"
)


class EvaluationError(ValueError):
    """A bad option (unknown env, policy or workload, ...): reported without a traceback."""


# --------------------------------------------------------------------------------------------
# Env registry: env name -> gym id and which options it takes.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvEntry:
    """How to build one env family from an :class:`EvalConfig`.

    :param gym_id: the Gymnasium id.
    :param options: :class:`EvalConfig` field (or ``workload``) -> env keyword argument. Fields
        not listed here must stay at their default, or evaluation stops with an error.
    :param fixed: keyword arguments always passed.
    :param headline: the two metrics (lower is better) shown in the table cells.
    """

    gym_id: str
    options: Mapping[str, str]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    headline: tuple[str, str] = ("req95", "req99")


ENVS: dict[str, EnvEntry] = {
    name: EnvEntry(gym_id=gym_id, options=options) for name, (gym_id, options) in CLI_ENVS.items()
}

#: EvalConfig fields that configure the env (the rest configure the evaluation itself).
ENV_FIELDS = ("cluster", "model", "count", "load_scale", "estimate_error", "slots")


def env_entry(name: str) -> EnvEntry:
    """The :data:`ENVS` entry for ``name``, or a clear error listing the known ones."""
    if name not in ENVS:
        raise EvaluationError(f"unknown env {name!r}; known: {', '.join(sorted(ENVS))}")
    return ENVS[name]


def make_env(config: EvalConfig, workload: str) -> Any:
    """A fresh env for ``workload`` with ``config``'s options (see :class:`EnvEntry`).

    :raises EvaluationError: if a non-default option is not supported by the env, or the env
        rejects its arguments.
    """
    import gymnasium as gym

    import envs  # noqa: F401  (registers the servegym ids)

    entry = env_entry(config.env)
    defaults = EvalConfig()
    values = {name: getattr(config, name) for name in ENV_FIELDS}
    values["workload"] = workload
    for name in ENV_FIELDS:
        if name not in entry.options and values[name] != getattr(defaults, name):
            flag = "--" + name.replace("_", "-")
            raise EvaluationError(f"env {config.env!r} does not take {flag} (got {values[name]!r})")
    kwargs = {kw: values[name] for name, kw in entry.options.items() if name in values}
    try:
        return gym.make(entry.gym_id, **entry.fixed, **kwargs)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise EvaluationError(
            f"cannot make env {config.env!r} for workload {workload!r}: {exc}"
        ) from exc


# --------------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------------


class Policy(Protocol):
    """The protocol every policy follows (DESIGN.md "Policies")."""

    name: str

    def reset(self) -> None: ...

    def act(self, obs: Any, info: dict[str, Any]) -> int: ...


def load_checkpoint_policy(path: str, env: Any) -> Policy:
    """``ckpt:PATH``: a saved SB3 model, acting by argmax over legal actions
    (:func:`agents.checkpoint.load_policy`)."""
    # -- hook (issue 5, agents/): learned policies are implemented in agents/ --
    from agents.checkpoint import load_policy

    try:
        return load_policy(path, env)
    except (FileNotFoundError, ValueError) as exc:
        raise EvaluationError(f"policy 'ckpt:{path}': {exc}") from exc


#: Policy-spec prefixes (``<prefix>:<argument>``) -> loader(argument, env). Extension point for
#: learned policies.
POLICY_LOADERS: dict[str, Callable[[str, Any], Policy]] = {"ckpt": load_checkpoint_policy}


def heuristic_names(spec: str = "") -> tuple[str, ...]:
    """Names in ``heuristics.POLICIES`` (imported lazily: heuristics build on envs).

    :param spec: the policy being resolved, named in the error if the import fails.
    """
    try:
        from heuristics import POLICIES
    except ImportError as exc:
        raise EvaluationError(
            f"policy {spec!r}: cannot import the heuristics package: {exc}"
        ) from exc
    return tuple(POLICIES)


def resolve_policy(spec: str, env: Any) -> Policy:
    """Build a fresh policy from its spec.

    :param spec: a heuristic name (``hexagent``, ``workflow-llf``, ...) or
        ``<prefix>:<argument>`` with a prefix in :data:`POLICY_LOADERS` (``ckpt:PATH``).
    :param env: the env the policy will act in (loaders may need its spaces).
    :raises EvaluationError: unknown name or prefix, or a loader that cannot load ``spec``.
    """
    prefix, sep, argument = spec.partition(":")
    if sep:
        if prefix not in POLICY_LOADERS:
            raise EvaluationError(
                f"unknown policy prefix {prefix!r} in {spec!r}; known: "
                f"{', '.join(p + ':' for p in sorted(POLICY_LOADERS))}"
            )
        return POLICY_LOADERS[prefix](argument, env)
    known = heuristic_names(spec)
    if spec not in known:
        raise EvaluationError(f"unknown policy {spec!r}; known: {', '.join(known)}")
    from heuristics import make_policy

    return make_policy(spec)


def is_baseline(policy: str, reference: str) -> bool:
    """Whether ``policy`` competes for "best baseline": not the reference (HexAgent), not an
    ablation (a name with ``+``), not a learned policy (``<prefix>:...``)."""
    return policy != reference and policy != "hexagent" and "+" not in policy and ":" not in policy


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def run_episode(env: Any, policy: Policy, seed: int) -> dict[str, Any]:
    """Run one episode of ``policy`` on ``env`` reset with ``seed``, acting only via ``step``.

    :return: ``metrics``, ``utilisation``, ``attainment_curve``, ``completion_times``,
        ``horizons``, ``steps``, ``invocations``, ``simulated_seconds``, ``wall_seconds``,
        ``truncated``, ``episode_return`` (the env's training reward summed over the episode).
    :raises RuntimeError: if the episode ends without the env's end-of-episode ``info``.
    """
    start = time.perf_counter()
    policy.reset()
    obs, info = env.reset(seed=seed)
    terminated = truncated = False
    episode_return = 0.0
    while not (terminated or truncated):
        action = policy.act(obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        episode_return += float(reward)
    wall = time.perf_counter() - start
    if "metrics" not in info:
        raise RuntimeError(f"episode of {policy.name!r} ended without 'metrics' in info")
    return {
        "metrics": dict(info["metrics"]),
        "utilisation": dict(info["utilisation"]),
        "attainment_curve": info["attainment_curve"],
        "completion_times": list(info.get("completion_times", [])),
        "horizons": list(info.get("horizons", [])),
        "steps": int(info["steps"]),
        "invocations": int(info.get("invocations", 0)),
        "simulated_seconds": float(info.get("simulated_seconds", math.nan)),
        "wall_seconds": wall,
        "truncated": bool(truncated),
        "episode_return": episode_return,
    }


def evaluate(
    config: EvalConfig,
    resolve: Callable[[str, Any], Policy] = resolve_policy,
) -> list[dict[str, Any]]:
    """Run every (workload, policy, seed) of ``config``; return one row per run.

    All options are checked (one env per workload built and reset, every policy resolved)
    before the first episode, so a typo fails in seconds, not after an hour.

    :param config: the suite.
    :param resolve: ``(spec, env) -> policy``, called once per run for a fresh policy.
    :raises EvaluationError: on an unknown env, workload or policy, or an unsupported option.
    """
    from tqdm import tqdm

    if not config.workloads or not config.policies or not config.seeds:
        raise EvaluationError("need at least one workload, one policy and one seed")
    for name, values in (("workload", config.workloads), ("policy", config.policies)):
        dupes = sorted({v for v in values if list(values).count(v) > 1})
        if dupes:
            raise EvaluationError(f"duplicate {name} {', '.join(dupes)}")
    envs_by_workload = {}
    for workload in config.workloads:
        env = make_env(config, workload)
        try:
            env.reset(seed=config.seeds[0])
        except (ValueError, KeyError, FileNotFoundError) as exc:
            raise EvaluationError(f"workload {workload!r}: {exc}") from exc
        envs_by_workload[workload] = env
    first_env = envs_by_workload[config.workloads[0]]
    for spec in config.policies:
        resolve(spec, first_env)

    rows = []
    runs = [(w, p, s) for w in config.workloads for p in config.policies for s in config.seeds]
    bar = tqdm(runs, desc="evaluate", unit="run", disable=config.quiet, file=sys.stderr)
    for workload, spec, seed in bar:
        bar.set_postfix_str(f"{workload} {spec} seed {seed}")
        env = envs_by_workload[workload]
        result = run_episode(env, resolve(spec, env), seed)
        rows.append(
            {
                "env": config.env,
                "cluster": config.cluster,
                "model": config.model,
                "workload": workload,
                "policy": spec,
                "seed": seed,
                "workload_count": config.count,
                "load_scale": config.load_scale,
                "estimate_error": config.estimate_error,
                **result,
            }
        )
    for env in envs_by_workload.values():
        env.close()
    return rows


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def mean_metric(rows: Sequence[dict[str, Any]], workload: str, policy: str, key: str) -> float:
    """Mean of ``metrics[key]`` over the seeds of (workload, policy); nan if there are none.

    A missing value (None, as read back from JSON) counts as inf: the run did not finish.
    """
    vals = [
        math.inf if r["metrics"].get(key) is None else float(r["metrics"][key])
        for r in rows
        if r["workload"] == workload and r["policy"] == policy
    ]
    return float(np.mean(vals)) if vals else math.nan


def best_baseline(
    rows: Sequence[dict[str, Any]], workload: str, reference: str = "hexagent"
) -> str | None:
    """The baseline (see :func:`is_baseline`) with the lowest mean Req99 on ``workload``
    (ties: lower Req95, then name); None if no baseline ran."""
    candidates = [p for p in _unique(r["policy"] for r in rows) if is_baseline(p, reference)]
    scored = [
        (mean_metric(rows, workload, p, "req99"), mean_metric(rows, workload, p, "req95"), p)
        for p in candidates
        if any(r["workload"] == workload and r["policy"] == p for r in rows)
    ]
    return min(scored)[2] if scored else None


def reduction(reference: float, baseline: float) -> float:
    """Relative reduction of ``reference`` vs ``baseline`` in percent (HexAgent Table 2)."""
    if not (math.isfinite(reference) and math.isfinite(baseline)) or baseline <= 0:
        return math.nan
    return 100.0 * (baseline - reference) / baseline


def _num(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if math.isinf(x) else f"{x:.2f}")


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1f}%"


def format_table(
    rows: Sequence[dict[str, Any]], reference: str = "hexagent", command: str | None = None
) -> str:
    """A HexAgent Tables 1–3 shaped table of ``rows`` (from :func:`evaluate` or the JSON).

    Rows: policies, then "best baseline" (lowest Req99 among :func:`is_baseline` policies, its
    name in brackets) and "reduction" (``reference`` vs best baseline, %, Req95 / Req99).
    Columns: workloads. Cells: mean over seeds of "Req95 / Req99". Below: the mean prefill /
    decode utilisation of all runs per workload, and ``command`` if given.
    """
    if not rows:
        raise ValueError("format_table needs at least one row")
    workloads = _unique(r["workload"] for r in rows)
    policies = _unique(r["policy"] for r in rows)
    seeds = _unique(r["seed"] for r in rows)

    def cell(workload: str, policy: str) -> str:
        if not any(r["workload"] == workload and r["policy"] == policy for r in rows):
            return "-"
        r95 = mean_metric(rows, workload, policy, "req95")
        r99 = mean_metric(rows, workload, policy, "req99")
        return f"{_num(r95)} / {_num(r99)}"

    body = [[p, *(cell(w, p) for w in workloads)] for p in policies]
    best_row, reduction_row = ["best baseline"], [f"reduction ({reference})"]
    for w in workloads:
        best = best_baseline(rows, w, reference)
        if best is None:
            best_row.append("-")
            reduction_row.append("- (no baseline ran)")
            continue
        best_row.append(f"{cell(w, best)} ({best})")
        if not any(r["workload"] == w and r["policy"] == reference for r in rows):
            reduction_row.append(f"- ({reference} not run)")
            continue
        red = [
            reduction(mean_metric(rows, w, reference, k), mean_metric(rows, w, best, k))
            for k in ("req95", "req99")
        ]
        reduction_row.append(f"{_pct(red[0])} / {_pct(red[1])}")
    util_keys = _unique(k for r in rows for k in r["utilisation"])
    util_row = [f"utilisation ({' / '.join(util_keys)})"]
    for w in workloads:
        util = [r["utilisation"] for r in rows if r["workload"] == w]
        means = [np.mean([u[k] for u in util if u.get(k) is not None]) for k in util_keys]
        util_row.append(" / ".join(f"{m:.0%}" for m in means))

    header = ["policy", *workloads]
    table = [header, *body, best_row, reduction_row, util_row]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]

    def fmt(line: list[str]) -> str:
        return "  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip()

    first = rows[0]
    title = (
        f"Req95 / Req99 (lower is better), mean over seeds {','.join(map(str, seeds))}: "
        f"{first['env']} {first['cluster']} {first['model']}"
    )
    rule = "-" * max(len(fmt(line)) for line in table)
    lines = [title, rule, fmt(header), rule, *(fmt(b) for b in body), rule]
    lines += [fmt(best_row), fmt(reduction_row), fmt(util_row), rule]
    if command:
        lines.append(f"regenerate: {command}")
    return "\n".join(lines)


def plot_attainment(rows: Sequence[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """SLO-attainment curves like HexAgent Fig. 3: one PNG per workload, attainment vs α, one
    line per policy averaged over seeds. Returns the written paths.

    :raises ValueError: if runs of one workload have different α grids.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for workload in _unique(r["workload"] for r in rows):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        alpha_max = 1.5
        for policy in _unique(r["policy"] for r in rows):
            runs = [r for r in rows if r["workload"] == workload and r["policy"] == policy]
            if not runs:
                continue
            alphas = np.asarray(runs[0]["attainment_curve"]["alpha"], dtype=float)
            curves = []
            for r in runs:
                a = np.asarray(r["attainment_curve"]["alpha"], dtype=float)
                if a.shape != alphas.shape or not np.allclose(a, alphas):
                    raise ValueError(
                        f"attainment curves of {workload!r}/{policy!r} use different α grids "
                        f"(seed {r['seed']}: {a.size} points vs {alphas.size})"
                    )
                curves.append(np.asarray(r["attainment_curve"]["attainment"], dtype=float))
            mean = np.mean(curves, axis=0)
            # Zoom to where every policy reaches 99% attainment: long single-workflow tails
            # beyond it would squash the curves (the table reports them).
            done = np.flatnonzero(mean >= 0.99)
            alpha_max = max(alpha_max, alphas[done[0]] if done.size else alphas[-1])
            bold = policy == "hexagent"
            ax.plot(
                alphas, mean, label=policy, linewidth=2.4 if bold else 1.4, zorder=3 if bold else 2
            )
        for level in (0.95, 0.99):
            ax.axhline(level, color="grey", linestyle=":", linewidth=0.8)
            ax.annotate(
                f"{level:.0%}", (1.0, level), xycoords=("axes fraction", "data"),
                xytext=(2, 0), textcoords="offset points", va="center", fontsize=7, color="grey",
            )  # fmt: skip
        ax.set_xlim(1.0, min(alpha_max * 1.1, 20.0))
        ax.set_ylim(0.0, 1.02)
        ax.set_xlabel("SLO scale α  (workflow meets SLO if C_w ≤ α·H_w)")
        ax.set_ylabel("SLO attainment (fraction of workflows)")
        first = rows[0]
        seeds = _unique(r["seed"] for r in rows if r["workload"] == workload)
        ax.set_title(
            f"{workload} — {first['cluster']}, {first['model']} "
            f"(mean over {len(seeds)} seed{'s' if len(seeds) > 1 else ''})"
        )
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        path = out / f"attainment_{re.sub(r'[^A-Za-z0-9._-]+', '_', workload)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def json_safe(value: Any) -> Any:
    """``value`` with every inf/nan float replaced by None (JSON has no inf/nan)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys (``metrics.req95``); lists (curves, per-workflow times) are
    left out: they live in the JSON."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        elif not isinstance(value, list | tuple):
            flat[f"{prefix}{key}"] = value
    return flat


def write_results(rows: Sequence[dict[str, Any]], json_path: Path, csv_path: Path) -> None:
    """Write ``rows`` as strict JSON (a list of rows) and as a flat CSV."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(json_safe(list(rows)), f, indent=1, allow_nan=False)
    flat = [flatten(r) for r in rows]
    columns = _unique(k for r in flat for k in r)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _csv_list(text: str) -> tuple[str, ...]:
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return items


def _seed_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in _csv_list(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"seeds must be integers like 0,1,2, got {text!r}"
        ) from None


def parse_args(argv: Sequence[str]) -> EvalConfig:
    """Parse the command line into an :class:`EvalConfig` (defaults are the dataclass's)."""
    d = EvalConfig()
    p = argparse.ArgumentParser(
        description="Evaluate policies on servegym envs; print HexAgent-style Req95/Req99 tables. "
        f"With no arguments, runs the quick suite: python evaluate.py {' '.join(QUICK_SUITE_ARGS)}",
    )
    p.add_argument("--env", default=d.env, help=f"env family: {', '.join(ENVS)}")
    p.add_argument("--cluster", default=d.cluster, help="cluster preset or YAML path")
    p.add_argument("--model", default=d.model, help="model name")
    p.add_argument(
        "--workload",
        dest="workloads",
        type=_csv_list,
        default=d.workloads,
        help=f"comma-separated workloads, the table columns (default: {','.join(d.workloads)})",
    )
    p.add_argument(
        "--policies",
        type=_csv_list,
        default=d.policies,
        help="comma-separated policies, the table rows: heuristic names or ckpt:PATH "
        f"(default: {','.join(d.policies)})",
    )
    p.add_argument(
        "--seeds", type=_seed_list, default=d.seeds, help="comma-separated seeds (default: 0,1,2)"
    )
    p.add_argument(
        "--count", type=int, default=d.count, help="workflows per workload (default: the paper's)"
    )
    p.add_argument("--load-scale", type=float, default=d.load_scale, help="arrival-rate multiplier")
    p.add_argument(
        "--estimate-error",
        type=float,
        default=d.estimate_error,
        help="multiplicative error on scheduler-visible estimates",
    )
    p.add_argument("--slots", type=int, default=d.slots, help="calls re-planned per invocation")
    p.add_argument(
        "--reference", default=d.reference, help="policy compared against the best baseline"
    )
    p.add_argument("--out", default=d.out, help="output directory (default: results/<name>)")
    p.add_argument("--json", dest="json_path", default=d.json_path, help="JSON path override")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--wandb",
        default=d.wandb,
        choices=("disabled", "offline", "online"),
        help="log the table and plots to W&B (offline: a local run directory under --out)",
    )
    args = p.parse_args(list(argv))
    if args.count is not None and args.count < 1:
        p.error(f"--count must be >= 1, got {args.count}")
    return EvalConfig(**{f.name: getattr(args, f.name) for f in fields(EvalConfig)})


def command_for(config: EvalConfig) -> str:
    """The command line that regenerates ``config``'s table (every option explicit)."""
    parts = [
        "python evaluate.py",
        f"--env {config.env}",
        f"--cluster {config.cluster}",
        f"--model {config.model}",
        f"--workload {','.join(config.workloads)}",
        f"--policies {','.join(config.policies)}",
        f"--seeds {','.join(map(str, config.seeds))}",
    ]
    if config.count is not None:
        parts.append(f"--count {config.count}")
    parts += [
        f"--load-scale {config.load_scale:g}",
        f"--estimate-error {config.estimate_error:g}",
        f"--slots {config.slots}",
    ]
    if config.reference != EvalConfig.reference:
        parts.append(f"--reference {config.reference}")
    return " ".join(parts)


def default_out_dir(config: EvalConfig) -> Path:
    """``results/<name>``: a timestamp-free name derived from the options, so a rerun of the
    same suite overwrites its own results and nothing else."""
    parts = [
        config.env,
        config.cluster,
        config.model,
        "-".join(config.workloads),
        "-".join(config.policies),
        "s" + "-".join(map(str, config.seeds)),
        f"n{config.count if config.count is not None else 'paper'}",
    ]
    if config.load_scale != 1.0:
        parts.append(f"load{config.load_scale:g}")
    if config.estimate_error != 0.0:
        parts.append(f"err{config.estimate_error:g}")
    if config.slots != EvalConfig.slots:
        parts.append(f"k{config.slots}")
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", "_".join(parts))
    if len(name) > 120:
        import hashlib

        name = name[:100] + "_" + hashlib.sha1(name.encode()).hexdigest()[:10]
    return Path("results") / name


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    quick = not argv
    if quick:
        argv = list(QUICK_SUITE_ARGS)
    config = parse_args(argv)
    if quick:
        print(f"no arguments: running the quick suite ({command_for(config)})")
    start = time.perf_counter()
    try:
        rows = evaluate(config)
    except EvaluationError as exc:
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        return 2

    out = Path(config.out) if config.out else default_out_dir(config)
    json_path = Path(config.json_path) if config.json_path else out / "results.json"
    write_results(rows, json_path, out / "results.csv")
    pngs = plot_attainment(rows, out)
    command = command_for(config)
    table = format_table(rows, reference=config.reference, command=command)
    (out / "table.txt").write_text(table + "\n")

    if config.wandb != "disabled":  # hook (issue 5): W&B logging lives in agents/
        from agents.wandb_utils import init_run, log_comparison

        run = init_run(config.wandb, out, vars(config), name=out.name, job_type="evaluate")
        log_comparison(run, rows, table, pngs, prefix="evaluate")
        run.finish()

    print(table)
    print(f"wrote {json_path}, {out / 'results.csv'}, {len(pngs)} attainment plot(s) in {out}")
    print(f"{len(rows)} runs in {time.perf_counter() - start:.0f} s wall")
    if quick:
        print(f"full suite (HexAgent Tables 1–3, Llama-3.1-70B / Hetero-1): {FULL_SUITE_COMMAND}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
