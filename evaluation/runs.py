"""One run: a fresh env for a workload (:func:`make_env`), one episode of a policy through
``env.step`` (:func:`run_episode`) and its result row (:func:`run_one`).
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envs.common.base import did_you_mean
from evaluation.config import ENV_FIELDS, ROW_FIELDS, EvalConfig, EvaluationError, env_entry
from evaluation.policies import Policy, resolve_policy
from evaluation.resolve import is_trace, resolve_config, trace_records
from evaluation.results import safe_name


def make_env(config: EvalConfig, workload: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """A fresh env for ``workload`` with ``config``'s options (see :class:`EnvFamily`).

    :param overrides: option values that replace ``config``'s (a sweep value).
    :raises EvaluationError: if an option is not supported by the env, or the env rejects its
        arguments.
    """
    import gymnasium as gym

    import envs  # noqa: F401  (registers the servegym ids)

    config = resolve_config(config)
    entry = env_entry(config.env)
    values = {name: getattr(config, name) for name in ENV_FIELDS}
    values.update(overrides or {})
    trace = is_trace(workload)
    if trace and not entry.takes_traces:
        raise EvaluationError(
            f"env {config.env!r} does not replay trace files (--workload {workload!r}); use one "
            f"of its generators, e.g. {', '.join(entry.workloads)}"
        )
    values["workload"] = None if trace else workload
    if not trace:
        check_name("workload", workload, _generator_names())
    if "cluster" in entry.options and values.get("cluster") is not None:
        from envs.sim.hardware.cluster import cluster_names

        cluster = str(values["cluster"])
        if not cluster.endswith((".yaml", ".yml")) and "/" not in cluster:
            check_name("cluster preset", cluster, cluster_names())
    kwargs = {
        kw: values[name] for name, kw in entry.options.items() if values.get(name) is not None
    }
    if trace:
        trace_records(workload)  # a clear error for a missing or malformed file
        kwargs["trace"] = workload
    try:
        # policies act on info["decision_context"]: the registered ids leave it out by default
        return gym.make(entry.gym_id, **entry.fixed, decision_context=True, **kwargs)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise EvaluationError(
            f"cannot make env {config.env!r} for workload {workload!r}: {exc}"
        ) from exc


def _generator_names() -> list[str]:
    from traces.generators import GENERATORS

    return sorted(GENERATORS)


def check_name(what: str, name: str, known: Sequence[str]) -> None:
    """:raises EvaluationError: if ``name`` is not in ``known``: ``unknown <what> 'x' (did you
    mean 'y'?); known: ...``."""
    if name not in known:
        raise EvaluationError(
            f"unknown {what} {name!r}{did_you_mean(name, known)}; known: {', '.join(known)}"
        )


def run_episode(env: Any, policy: Policy, seed: int) -> dict[str, Any]:
    """Run one episode of ``policy`` on ``env`` reset with ``seed``, acting only via ``step``.

    :return: ``metrics``, ``utilisation``, ``attainment_curve``, every per-workflow or
        per-request list of the episode-end ``info`` (PDCluster: ``completion_times``,
        ``horizons``; Routing: ``latencies``, ``slos``), ``steps``, ``invocations``,
        ``simulated_seconds``, ``wall_seconds``, ``truncated``, ``episode_return`` (the env's
        training reward summed over the episode).
    :raises RuntimeError: if the episode ends without the env's end-of-episode ``info``.
    """
    start = time.perf_counter()
    policy.reset()
    options = episode_options(env, policy)
    obs, info = env.reset(seed=seed, options=options) if options else env.reset(seed=seed)
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
        **{k: list(v) for k, v in info.items() if isinstance(v, list)},
        "steps": int(info["steps"]),
        "invocations": int(info.get("invocations", 0)),
        "simulated_seconds": float(info.get("simulated_seconds", math.nan)),
        "wall_seconds": wall,
        "truncated": bool(truncated),
        "episode_return": episode_return,
    }


def episode_options(env: Any, policy: Policy) -> dict[str, Any]:
    """``reset`` options for an episode of ``policy`` on ``env``: ``{"observations": False}``
    when the policy reads only the decision context (its ``context_only`` attribute, e.g. the
    PDCluster heuristics) and the env can skip building observations (``observations`` among
    its ``RESET_OPTIONS``: PDCluster-v0); the policy's actions, hence the results, are the
    same, and the env does less work. Otherwise none (the env's own setting)."""
    takes = getattr(getattr(env, "unwrapped", env), "RESET_OPTIONS", ())
    if getattr(policy, "context_only", False) and "observations" in takes:
        return {"observations": False}
    return {}


def run_one(
    config: EvalConfig,
    workload: str,
    overrides: Mapping[str, Any],
    spec: str,
    seed: int,
    env: Any = None,
    resolve: Callable[[str, Any], Policy] = resolve_policy,
) -> dict[str, Any]:
    """One run of a resolved ``config``: policy ``spec`` on ``workload`` (with the sweep's
    ``overrides``) reset with ``seed``; its result row. ``env``: a built env to reuse (None:
    build one, as a Ray task does)."""
    entry = env_entry(config.env)
    if env is None:
        env = make_env(config, workload, overrides)
    label = " ".join(f"{k}={v}" for k, v in overrides.items())
    try:
        result = run_episode(env, resolve(spec, env), seed)
    except Exception as exc:
        if not spec.startswith("py:"):
            raise  # a bug in servegym: the full traceback helps
        raise EvaluationError(
            f"policy {spec!r} raised {exc!r} on {workload} {label} seed {seed}"
            f"{_where(exc)}".replace("  ", " ")
        ) from exc
    options = {
        name: getattr(config, name)
        for name in ENV_FIELDS
        if name in entry.options and name not in ROW_FIELDS
    }
    row = {
        "env": config.env,
        "cluster": config.cluster,
        "model": config.model,
        "workload": workload,
        "policy": spec,
        "seed": seed,
        "workload_count": config.count,
        **options,
        **overrides,
    }
    if config.sweep is not None:
        row["sweep"] = {"option": config.sweep.option, "value": overrides[config.sweep.option]}
    if config.timeline is not None:
        name = f"{workload}_{label}_{spec}_seed{seed}" if label else f"{workload}_{spec}_seed{seed}"
        env.unwrapped.export_timeline(Path(config.timeline) / f"{safe_name(name)}.json")
    return {**row, **result}


def _where(exc: BaseException) -> str:
    """`` at FILE:LINE in FUNCTION`` of the innermost frame of ``exc``'s traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f" at {f.filename}:{f.lineno} in {f.name}"
