"""What an evaluation suite is: :class:`EvalConfig` (every option, declared once), its
parsers, the env family lookups and the env's own keyword defaults.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from envs.registry import FAMILIES, EnvFamily, family_name


class EvaluationError(ValueError):
    """A bad option (unknown env, policy or workload, ...): reported without a traceback."""


def env_entry(name: str) -> EnvFamily:
    """The :data:`FAMILIES` entry for ``name`` (a short name or a Gymnasium id), or a clear error
    with the closest and all known names."""
    return FAMILIES[canonical_env(name)]


def canonical_env(name: str) -> str:
    """The :data:`FAMILIES` name of ``name``: a short name (``routing``) or a Gymnasium id
    (``servegym/Routing-v0``); see :func:`envs.registry.family_name`.

    :raises EvaluationError: for an unknown name, with a did-you-mean.
    """
    try:
        return family_name(name)
    except ValueError as exc:
        raise EvaluationError(str(exc)) from None


def parse_bool(text: str) -> bool:
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``) from the command line."""
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_delay(text: str) -> float | str:
    """A planning delay from the command line: ``measured`` or seconds (a number >= 0)."""
    value = str(text).strip().lower()
    return "measured" if value == "measured" else float(value)


def parse_cache(text: str) -> bool | int | str:
    """A prefill prefix cache from the command line: ``true``/``false``, ``kv`` or blocks."""
    value = str(text).strip().lower()
    if value == "kv":
        return "kv"
    try:
        return parse_bool(value)
    except ValueError:
        return int(value)


def parse_ramp(text: str) -> tuple[float, float]:
    """A rate ramp from the command line: ``LO:HI`` (first and last period's rate as multiples of
    the workflow rate, e.g. ``0.5:4``)."""
    lo, sep, hi = str(text).partition(":")
    if not sep:
        raise ValueError(f"expected LO:HI (e.g. 0.5:4), got {text!r}")
    return float(lo), float(hi)


def env_option(kind: Any, abbrev: str) -> Any:
    """A :class:`EvalConfig` field that configures the env (None: the env family's default);
    its meaning and ``--help`` text are the docstring of the env option it sets
    (:func:`envs.registry.option_help`).

    :param kind: parses the command-line value (and ``--sweep`` values).
    :param abbrev: its tag in the default output directory name when it is not the default.
    """
    return field(default=None, metadata={"env": True, "type": kind, "abbrev": abbrev})


@dataclass(frozen=True)
class Sweep:
    """One env option swept over values: the table gets a column per (workload, value).

    :param option: an :data:`ENV_FIELDS` name the env takes (``slo_scale``, ``load_scale``).
    :param values: its values, in column order.
    """

    option: str
    values: tuple[Any, ...]


@dataclass
class EvalConfig:
    """One evaluation suite. Fields left None take the env family's default (:data:`FAMILIES` for
    cluster, model, workloads, policies and reference; the env's own keyword default for the
    rest); ``python evaluate.py --help`` lists them per env.

    :param env: env family, a key of :data:`FAMILIES`.
    :param workloads: workload generator names (table columns).
    :param policies: policy specs (see ``evaluation.policies.resolve_policy``; one table row
        each).
    :param seeds: reset seeds; the workload is a deterministic function of the seed.
    :param cluster, model, count, ...: the env options (fields made by :func:`env_option`): each
        sets the env keyword ``envs.CLI_ENVS`` maps it to, documented in the env's options
        dataclass (``envs.<family>.options``), which ``--help`` quotes.
    :param sweep: one env option swept over values (columns = workload × value).
    :param reference: the policy whose reduction (gain) vs the best baseline is reported.
    :param out: output directory (None: ``results/<name derived from these options>``).
    :param json_path: JSON path (None: ``<out>/results.json``).
    :param quiet: no progress bar.
    :param timeline: directory for one Perfetto / chrome://tracing timeline per run
        (``<workload>_<policy>_seed<seed>.json``; :mod:`envs.sim.core.timeline`); None: none.
    :param ray: run every (workload, policy, seed) as a Ray task: ``"local"`` (``ray.init()``
        on this machine's cores) or a cluster address (``ray://host:10001``, ``auto``); None:
        serially in this process. Same rows either way.
    :param wandb: ``disabled`` (default), ``offline`` or ``online``: log the table and plots to
        W&B (``agents.wandb_utils``).
    """

    env: str = "pd-cluster"
    cluster: str | None = env_option(str, "c")
    model: str | None = env_option(str, "m")
    workloads: tuple[str, ...] | None = None
    policies: tuple[str, ...] | None = None
    seeds: tuple[int, ...] = (0, 1, 2)
    count: int | None = env_option(int, "n")
    load_scale: float | None = env_option(float, "load")
    estimate_error: float | None = env_option(float, "err")
    slots: int | None = env_option(int, "k")
    tool_estimate: str | None = env_option(str, "tool")
    planning_delay: float | str | None = env_option(parse_delay, "delay")
    prefix_cache: bool | int | str | None = env_option(parse_cache, "pcache")
    prefix_cache_visible: bool | None = env_option(parse_bool, "pvis")
    slo_scale: float | None = env_option(float, "slo")
    slo_basis: str | None = env_option(str, "basis")
    instances: int | None = env_option(int, "inst")
    output_predictor: str | None = env_option(str, "pred")
    predictor_error: float | None = env_option(float, "perr")
    engine: str | None = env_option(str, "eng")
    latency_calibration: str | None = env_option(str, "cal")
    prefill_mode: str | None = env_option(str, "prefill")
    token_budget: int | None = env_option(int, "budget")
    check_interval: int | None = env_option(int, "tau")
    migration: str | None = env_option(str, "mig")
    gpus: int | None = env_option(int, "gpus")
    workflow_rate: float | None = env_option(float, "rate")
    rate_trace: str | None = env_option(str, "trace")
    rate_window: str | None = env_option(str, "win")
    rate_ramp: tuple[float, float] | None = env_option(parse_ramp, "ramp")
    periods: int | None = env_option(int, "per")
    period_seconds: float | None = env_option(float, "ps")
    warmup_seconds: float | None = env_option(float, "warm")
    units_per_gpu: int | None = env_option(int, "F")
    apl_info: bool | None = env_option(parse_bool, "apl")
    sweep: Sweep | None = None
    reference: str | None = None
    out: str | None = None
    json_path: str | None = None
    quiet: bool = False
    timeline: str | None = None
    ray: str | None = None
    wandb: str = "disabled"


#: EvalConfig fields that configure the env (the rest configure the evaluation itself).
ENV_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(EvalConfig) if f.metadata.get("env"))
ENV_FIELD_META: dict[str, Mapping[str, Any]] = {
    f.name: f.metadata for f in fields(EvalConfig) if f.metadata.get("env")
}
#: Fields every table row names explicitly (the others are stored under their own names).
ROW_FIELDS = ("cluster", "model", "count")


#: What ``python evaluate.py`` with no arguments runs: two workloads at the paper's counts (a
#: reduced count would leave the cluster nearly idle), the paper's strongest speed-blind
#: baselines, two of their speed-aware (earliest-finish) variants, so that the table reports
#: HexAgent's gain against both families, and HexAgent; one seed. About 1.5 minutes on 2 cores
#: (bfcl, the slowest workload, is left to the full suite).
QUICK_SUITE_ARGS: tuple[str, ...] = (
    "--workload", "mixed,sharegpt",
    "--policies",
    "per-call-fcfs,workflow-llf,atlas,per-call-fcfs+earliest-finish,atlas+earliest-finish,hexagent",
    "--seeds", "0",
)  # fmt: skip


#: HexAgent Tables 1–3: the paper's workloads and policies (PDCluster's family defaults).
PAPER_WORKLOADS = FAMILIES["pd-cluster"].workloads
PAPER_POLICIES = FAMILIES["pd-cluster"].policies

#: The full HexAgent Tables 1–3 run (Llama-3.1-70B on Hetero-1; change --model / --cluster for
#: the other columns of Table 2).
FULL_SUITE_COMMAND = (
    "python evaluate.py --env pd-cluster --cluster hetero-1 --model llama3.1-70b "
    f"--workload {','.join(PAPER_WORKLOADS)} --policies {','.join(PAPER_POLICIES)} --seeds 0,1,2"
)


@functools.cache
def env_defaults(name: str) -> dict[str, Any]:
    """The env's own keyword defaults by :class:`EvalConfig` field (read off the env class's
    signature and the registered id's keyword arguments, e.g. Routing-v1's ``slo_basis``, so
    they never drift from the env); ``{}`` if the env cannot be imported."""
    import importlib
    import inspect

    import gymnasium as gym

    import envs  # noqa: F401  (registers the servegym ids)

    entry = env_entry(name)
    try:
        spec = gym.spec(entry.gym_id)
        module, _, cls = str(spec.entry_point).partition(":")
        params = inspect.signature(getattr(importlib.import_module(module), cls)).parameters
    except Exception:  # an env module being written must not break evaluation of the others
        return {}
    registered = spec.kwargs or {}
    out = {}
    for option, kw in entry.options.items():
        if option in ENV_FIELD_META and kw in params:
            default = registered.get(kw, params[kw].default)
            out[option] = None if default is inspect.Parameter.empty else default
    return out


def unique(values: Iterable[Any]) -> list[Any]:
    """``values`` without repeats, in first-seen order."""
    return list(dict.fromkeys(values))


def fmt_value(value: Any) -> str:
    """An option value as tables, names and commands show it (``1.5``, ``unset``)."""
    if value is None:
        return "unset"
    if isinstance(value, (tuple, list)):
        return ":".join(fmt_value(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def env_flags(env: str) -> list[str]:
    """The ``--flags`` of the env options ``env`` takes."""
    entry = env_entry(env)
    return ["--" + n.replace("_", "-") for n in ENV_FIELDS if n in entry.options]
