"""From the options given to the suite that runs: every per-env default filled in
(:func:`resolve_config`), settings a ``ckpt:`` policy was trained with, trace workloads, and the
command and output directory that name a suite.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evaluation.config import (
    ENV_FIELD_META,
    ENV_FIELDS,
    EvalConfig,
    EvaluationError,
    env_defaults,
    env_entry,
    env_flags,
    fmt_value,
)


def resolve_config(config: EvalConfig) -> EvalConfig:
    """``config`` with every per-env default filled in (cluster, model, workloads, policies,
    reference from :data:`FAMILIES`; env options from :func:`env_defaults`).

    :raises EvaluationError: for an unknown env, an option or sweep the env does not take, or a
        bad sweep.
    """
    entry = env_entry(config.env)
    for name in ENV_FIELDS:
        if name not in entry.options and getattr(config, name) is not None:
            flag = "--" + name.replace("_", "-")
            raise EvaluationError(
                f"env {config.env!r} does not take {flag} (got {getattr(config, name)!r}); "
                f"its options: {', '.join(env_flags(config.env))}"
            )
    if config.sweep is not None:
        option, values = config.sweep.option, config.sweep.values
        if option not in ENV_FIELDS or option not in entry.options:
            raise EvaluationError(
                f"--sweep {option}: env {config.env!r} has no such option; sweepable: "
                f"{', '.join(n for n in ENV_FIELDS if n in entry.options)}"
            )
        if getattr(config, option) is not None:
            raise EvaluationError(f"--sweep {option} and --{option.replace('_', '-')} both given")
        if not values or len(set(values)) != len(values):
            raise EvaluationError(f"--sweep {option}: need distinct values, got {list(values)}")
    policies = config.policies or entry.policies
    if config.reference not in (None, entry.reference) and config.reference not in policies:
        raise EvaluationError(
            f"--reference {config.reference!r} is not among the policies run "
            f"({', '.join(policies)}); add it to --policies"
        )
    adopted = checkpoint_settings(config, policies)
    if adopted:
        config = dataclasses.replace(config, **adopted)
    defaults = env_defaults(config.env)
    filled: dict[str, Any] = {
        name: defaults.get(name)
        for name in ENV_FIELDS
        if name in entry.options and getattr(config, name) is None and name != "count"
    }
    if config.sweep is not None:
        filled.pop(config.sweep.option, None)
    workloads = config.workloads or entry.workloads
    model = config.model
    if model is None and "model" in entry.options:
        model = trace_model(workloads) or entry.model
    return dataclasses.replace(
        config,
        cluster=config.cluster or entry.cluster,
        model=model,
        workloads=workloads,
        policies=policies,
        reference=config.reference or entry.reference,
        **{k: v for k, v in filled.items() if k not in ("cluster", "model")},
    )


#: Env options that shape a trained model's observation and action spaces. A ``ckpt:PATH``
#: policy's values for them come from the ``config.json`` train.py wrote beside the model, when
#: the command leaves them unset (:func:`checkpoint_settings`).
SPACE_OPTIONS = ("cluster", "slots", "instances", "gpus", "units_per_gpu")


def trained_env(trained: dict[str, Any]) -> str:
    """The explicit ``-vN`` name of the env a run config (``config.json``) trained on; a plain
    family name (configs written before train.py recorded the version) is ``-v0``."""
    from envs import env_short_name

    name = str(trained.get("env", ""))
    try:
        short = env_short_name(name)
    except ValueError:
        return name
    return short if re.search(r"-v\d+$", short) else f"{short}-v0"


def checkpoint_configs(
    config: EvalConfig, policies: Sequence[str]
) -> list[tuple[str, Path, dict[str, Any]]]:
    """``(spec, config.json path, run config)`` of each ``ckpt:`` policy among ``policies``
    that has a ``config.json``.

    :raises EvaluationError: for an unreadable config, or a checkpoint trained on another env
        family (a checkpoint runs on any version of its own family, see
        :func:`checkpoint_warnings`).
    """
    from agents.checkpoint import checkpoint_config
    from envs import versioned_name
    from envs.registry import policy_family

    out = []
    for spec in policies:
        if not spec.startswith("ckpt:"):
            continue
        path = checkpoint_config(spec.removeprefix("ckpt:"))
        if not path.is_file():
            continue
        try:
            trained = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise EvaluationError(f"{spec}: cannot read {path}: {exc}") from exc
        if not isinstance(trained, dict):
            raise EvaluationError(
                f"{spec}: {path} is not a train.py run config (expected a JSON object of "
                f"options, got {type(trained).__name__})"
            )
        env = trained_env({"env": config.env, **trained})
        if policy_family(env) != policy_family(versioned_name(config.env)):
            raise EvaluationError(
                f"{spec} was trained on --env {trained['env']} ({path}), not {config.env}"
            )
        out.append((spec, path, trained))
    return out


def checkpoint_settings(config: EvalConfig, policies: Sequence[str]) -> dict[str, Any]:
    """The :data:`SPACE_OPTIONS` values the ``ckpt:`` policies among ``policies`` were trained
    with (``config.json`` beside each model) that ``config`` leaves unset.

    :raises EvaluationError: if ``config`` sets one to another value, two checkpoints
        disagree (the message names the flag to change), or a checkpoint was trained on another
        env family.
    """
    entry = env_entry(config.env)
    found: dict[str, tuple[Any, str]] = {}
    for spec, path, trained in checkpoint_configs(config, policies):
        for name in SPACE_OPTIONS:
            value = trained.get(name)
            if name not in entry.options or value is None:
                continue
            flag = f"--{name.replace('_', '-')}"
            given = getattr(config, name)
            if given is not None and given != value:
                raise EvaluationError(
                    f"{spec} was trained with {flag} {value} ({path}), the command sets "
                    f"{flag} {given}: pass {flag} {value} (or evaluate another checkpoint)"
                )
            if name in found and found[name][0] != value:
                raise EvaluationError(
                    f"{found[name][1]} and {spec} were trained with different {flag} "
                    f"({found[name][0]} and {value}): evaluate them in separate runs"
                )
            found[name] = (value, spec)
    return {n: v for n, (v, _) in found.items() if getattr(config, n) is None}


#: Recorded env options whose difference from a checkpoint's training setting
#: :func:`checkpoint_warnings` names (besides the env version and the workloads).
WARNED_OPTIONS = (
    "count", "load_scale", "slo_basis", "slo_scale", "latency_calibration", "rate_ramp",
    "workflow_rate", "rate_trace", "periods", "period_seconds",
)  # fmt: skip


def checkpoint_warnings(config: EvalConfig) -> list[str]:
    """One warning per ``ckpt:`` policy of the resolved ``config`` whose training setting
    (``config.json``) differs from the evaluated one, naming each difference: the env version
    (``routing-v0`` -> ``routing-v1``), workloads it never trained on, and the
    :data:`WARNED_OPTIONS` (an option the run config leaves unset, or predates, is the trained
    version's default). The checkpoint still runs: on any version of its family whose spaces it
    can act in (``agents.checkpoint.load_policy``)."""
    from envs import versioned_name

    evaluated = versioned_name(config.env)
    entry = env_entry(evaluated)
    now = env_defaults(evaluated)
    out = []
    for spec, path, trained in checkpoint_configs(config, config.policies or ()):
        version = trained_env(trained) if trained.get("env") else evaluated
        then = env_defaults(version)
        diffs = [] if version == evaluated else [f"env {version} -> {evaluated}"]
        choice = (trained.get("randomize") or {}).get("workload", {})
        seen = set(choice.get("choice", ())) if isinstance(choice, dict) else set()
        seen |= {trained["workload"]} if trained.get("workload") else set()
        unseen = [w for w in config.workloads or () if seen and w not in seen]
        if unseen:
            diffs.append(f"workload {','.join(unseen)} (trained on {','.join(sorted(seen))})")
        for name in WARNED_OPTIONS:
            if name not in entry.options:
                continue
            before = trained.get(name)
            before = then.get(name) if before is None else before
            after = getattr(config, name)
            after = now.get(name) if after is None else after
            if isinstance(before, list):
                before = tuple(before)
            if before != after:
                flag = name.replace("_", "-")
                shown = [("the default" if v is None else fmt_value(v)) for v in (before, after)]
                diffs.append(f"{flag} {shown[0]} -> {shown[1]}")
        if diffs:
            out.append(
                f"warning: {spec} was trained in another setting ({path}); it runs with: "
                + "; ".join(diffs)
            )
    return out


def is_trace(workload: str) -> bool:
    """A ``--workload`` entry that names a servegym JSONL trace file rather than a generator
    (generator names have no dot or path separator)."""
    return workload.endswith((".jsonl", ".json")) or "/" in workload or Path(workload).is_file()


def trace_records(path: str) -> list[Any]:
    """The records of the trace file ``path``, validated (model names: the simulator catalog's).

    :raises EvaluationError: for a missing or invalid file, naming file, line and field.
    """
    from traces.io import read_trace

    if not Path(path).is_file():
        raise EvaluationError(f"--workload {path!r}: no such trace file")
    try:
        return read_trace(path)
    except ValueError as exc:  # traces.io's validation errors name file, line and field
        raise EvaluationError(f"--workload {path!r}: {exc}") from exc


def trace_model(workloads: Sequence[str]) -> str | None:
    """The one model the trace workloads among ``workloads`` name (None without traces).

    :raises EvaluationError: if they name several: ``--model`` must pick the one that serves
        them all.
    """
    from envs.common.workloads import trace_models

    models: set[str] = set()
    for w in workloads:
        if is_trace(w):
            models.update(trace_models(trace_records(w)))
    if len(models) > 1:
        raise EvaluationError(
            f"the traces name models {sorted(models)}; give --model to serve all of their calls "
            "with one model"
        )
    return next(iter(models), None)


def trace_notes(config: EvalConfig) -> list[str]:
    """What the options mean for the trace workloads of a resolved ``config`` (printed before
    the run, so that nothing is dropped silently)."""
    assert config.workloads is not None
    traces = [w for w in config.workloads if is_trace(w)]
    if not traces:
        return []
    notes = []
    if config.count is not None:
        notes.append(f"--count {config.count}: the first {config.count} records of each trace")
    if config.load_scale is not None and config.load_scale != 1.0:
        notes.append(
            f"--load-scale {fmt_value(config.load_scale)}: trace arrival times divided by "
            f"{fmt_value(config.load_scale)}"
        )
    if len(config.seeds) > 1:
        notes.append(
            f"--seeds {','.join(map(str, config.seeds))}: a trace is the same workload for every "
            "seed; seeds change only seeded estimates (--estimate-error, predictors)"
        )
    if config.model and config.model != trace_model(traces):
        notes.append(f"--model {config.model}: serves every call of the traces")
    return [f"trace {', '.join(traces)}: {n}" for n in notes]


def calibration_variant_part() -> str | None:
    """The per-op calibration variant in force (``$SERVEGYM_LATENCY_CALIBRATION``,
    :mod:`envs.sim.latency.efficiency`) if it is not the default, else None: a table made under
    another variant names it in its command and its results folder. (Every ``-v0`` env pins
    ``roofline`` through its ``latency_calibration`` argument, so the variable does not move
    their numbers; it moves whatever follows the variant in force.)"""
    from envs.sim.latency.efficiency import DEFAULT_CALIBRATION_VARIANT, resolve_calibration_variant

    variant = resolve_calibration_variant()
    return None if variant == DEFAULT_CALIBRATION_VARIANT else variant


def command_for(config: EvalConfig) -> str:
    """The command line that regenerates ``config``'s table (every option explicit; prefixed with
    ``SERVEGYM_LATENCY_CALIBRATION=...`` under a non-default per-op calibration)."""
    config = resolve_config(config)
    assert config.workloads is not None and config.policies is not None
    variant = calibration_variant_part()
    parts = [
        *([f"SERVEGYM_LATENCY_CALIBRATION={variant}"] if variant else []),
        "python evaluate.py",
        f"--env {config.env}",
        f"--cluster {config.cluster}",
        *([f"--model {config.model}"] if config.model else []),
        f"--workload {','.join(config.workloads)}",
        f"--policies {','.join(config.policies)}",
        f"--seeds {','.join(map(str, config.seeds))}",
    ]
    if config.count is not None:
        parts.append(f"--count {config.count}")
    for name in ENV_FIELDS:
        value = getattr(config, name)
        if name not in ("cluster", "model", "count") and value is not None:
            parts.append(f"--{name.replace('_', '-')} {fmt_value(value)}")
    if config.sweep is not None:
        values = ",".join(fmt_value(v) for v in config.sweep.values)
        parts.append(f"--sweep {config.sweep.option}={values}")
    if config.reference != env_entry(config.env).reference:
        parts.append(f"--reference {config.reference}")
    return " ".join(parts)


def default_out_dir(config: EvalConfig) -> Path:
    """``results/<name>``: a timestamp-free name derived from the options, so a rerun of the
    same suite overwrites its own results and nothing else. Options at the env's default are
    left out of the name; a non-default per-op calibration variant is in it."""
    config = resolve_config(config)
    assert config.workloads is not None and config.policies is not None
    parts = [
        config.env,
        config.cluster,
        config.model,
        "-".join(Path(w).stem if is_trace(w) else w for w in config.workloads),
        "-".join(config.policies),
        "s" + "-".join(map(str, config.seeds)),
        f"n{config.count if config.count is not None else 'paper'}",
    ]
    defaults = env_defaults(config.env)
    for name in ENV_FIELDS:
        value = getattr(config, name)
        if name in ("cluster", "model", "count") or value is None or value == defaults.get(name):
            continue
        parts.append(f"{ENV_FIELD_META[name]['abbrev']}{fmt_value(value)}")
    if config.sweep is not None:
        parts.append(
            f"sweep-{config.sweep.option}-" + "-".join(map(fmt_value, config.sweep.values))
        )
    variant = calibration_variant_part()
    if variant:
        parts.append(f"cal-{variant}")
    # an option the env does not take (Allocation's model) is None: no part of the name
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", "_".join(str(p) for p in parts if p not in (None, "")))
    if len(name) > 120:
        import hashlib

        name = name[:100] + "_" + hashlib.sha1(name.encode()).hexdigest()[:10]
    return Path("results") / name
