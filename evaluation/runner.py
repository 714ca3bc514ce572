"""Every (workload, sweep value, policy, seed) of a suite, run through ``env.step`` on the
identical workload: one fresh env per workload and sweep value, ``env.reset(seed=seed)`` makes
the workload a deterministic function of the seed, and every run gets a freshly built policy,
so a policy's numbers do not depend on which other policies ran beside it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from evaluation.config import EvalConfig, EvaluationError
from evaluation.policies import Policy, resolve_policy
from evaluation.ray_grid import evaluate_on_ray
from evaluation.resolve import resolve_config
from evaluation.runs import make_env, run_one


def columns_of(config: EvalConfig) -> list[tuple[str, dict[str, Any]]]:
    """The table columns of a resolved ``config``: (workload, option overrides) per workload ×
    sweep value, workload-major."""
    assert config.workloads is not None
    sweep = config.sweep
    values = sweep.values if sweep is not None else (None,)
    return [
        (w, {sweep.option: v} if sweep is not None else {})
        for w in config.workloads
        for v in values
    ]


def evaluate(
    config: EvalConfig,
    resolve: Callable[[str, Any], Policy] = resolve_policy,
) -> list[dict[str, Any]]:
    """Run every (workload, sweep value, policy, seed) of ``config``; return one row per run.

    All options are checked (one env per column built and reset, every policy resolved)
    before the first episode, so a typo fails in seconds, not after an hour.

    :param config: the suite (None fields take the env family's defaults).
    :param resolve: ``(spec, env) -> policy``, called once per run for a fresh policy.
    :raises EvaluationError: on an unknown env, workload or policy, or an unsupported option.
    """
    from envs.sim.core.progress import progress

    config = resolve_config(config)
    assert config.workloads is not None and config.policies is not None
    if not config.workloads or not config.policies or not config.seeds:
        raise EvaluationError("need at least one workload, one policy and one seed")
    for name, values in (("workload", config.workloads), ("policy", config.policies)):
        dupes = sorted({v for v in values if list(values).count(v) > 1})
        if dupes:
            raise EvaluationError(f"duplicate {name} {', '.join(dupes)}")
    envs_by_column = []
    for workload, overrides in columns_of(config):
        env = make_env(config, workload, overrides)
        try:
            env.reset(seed=config.seeds[0])
        except (ValueError, KeyError, FileNotFoundError) as exc:
            where = f" {overrides}" if overrides else ""
            # str(KeyError) is the repr of its message; show the message itself.
            reason = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            raise EvaluationError(f"workload {workload!r}{where}: {reason}") from exc
        envs_by_column.append((workload, overrides, env))
    first_env = envs_by_column[0][2]
    for spec in config.policies:
        resolve(spec, first_env)

    runs = [
        (workload, overrides, env, spec, seed)
        for workload, overrides, env in envs_by_column
        for spec in config.policies
        for seed in config.seeds
    ]
    if config.ray is not None:
        for _, _, env in envs_by_column:
            env.close()
        return evaluate_on_ray(config, [(w, o, p, s) for w, o, _, p, s in runs])
    rows = []
    bar = progress(runs, desc="evaluate", unit="run", disable=config.quiet, file=sys.stderr)
    for workload, overrides, env, spec, seed in bar:
        label = " ".join(f"{k}={v}" for k, v in overrides.items())
        bar.set_postfix_str(f"{workload} {label} {spec} seed {seed}".replace("  ", " "))
        rows.append(run_one(config, workload, overrides, spec, seed, env, resolve))
    for _, _, env in envs_by_column:
        env.close()
    return rows
