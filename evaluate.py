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

What an env family is compared on is data, one :class:`EnvEntry` per family in :data:`ENVS`:
its headline metrics and which direction is better (PDCluster: Req95 / Req99, lower; Routing:
goodput, higher, and SLO-violation ratio, lower), its reference (expert) policy, its paper's
baselines and our own strong references, and its default cluster, model and workloads. Nothing
below names an env.

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

Policies are named by :func:`resolve_policy`: a heuristic registered for the env
(``heuristics.policies_for``), or ``<prefix>:<argument>`` for a loader in
:data:`POLICY_LOADERS` (``ckpt:PATH``: a saved SB3 model; ``alloc:PATH``: an Allocation-v0
allocation file).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import json
import math
import re
import sys
import textwrap
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from envs import CLI_ENVS
from envs.base import did_you_mean

# --------------------------------------------------------------------------------------------
# Env families: what each env is compared on, declared once.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """A headline metric: a key of the episode-end ``info["metrics"]``.

    :param key: the metric's key (``req99``, ``goodput``).
    :param label: how tables and plots name it.
    :param better: ``"lower"`` or ``"higher"``: which direction is better.
    :param unit: shown in titles and axis labels (``req/s``), or empty.
    """

    key: str
    label: str
    better: str = "lower"
    unit: str = ""

    def __post_init__(self) -> None:
        if self.better not in ("lower", "higher"):
            raise ValueError(f"metric {self.key!r}: better must be 'lower' or 'higher'")

    def sign(self, value: float) -> float:
        """``value`` oriented so that smaller is better (for sorting)."""
        return value if self.better == "lower" else -value

    def improvement(self, reference: float, baseline: float) -> float:
        """How much better ``reference`` is than ``baseline``, in percent of the baseline:
        a reduction for lower-is-better (HexAgent Table 2), a gain for higher-is-better."""
        if not (math.isfinite(reference) and math.isfinite(baseline)) or baseline <= 0:
            return math.nan
        return 100.0 * self.sign(baseline - reference) / baseline


@dataclass(frozen=True)
class EnvEntry:
    """One env family: how to build it and what it is compared on.

    :param gym_id: the Gymnasium id.
    :param options: :class:`EvalConfig` field (or ``workload``) -> env keyword argument
        (``envs.CLI_ENVS``). Options not listed must stay unset, or evaluation stops.
    :param headline: the metrics shown in the table cells, in order.
    :param select: the metric (a ``headline`` key) that picks "best": the best baseline of a
        column, the best checkpoint during training, the y axis of sweep plots.
    :param reference: the expert whose reduction (gain) vs the best baseline is reported.
    :param cluster: default cluster preset.
    :param model: default model.
    :param workloads: default workloads (table columns).
    :param baselines: the paper's baselines.
    :param own_references: our own strong simple references (DESIGN.md "Fair comparison"); they
        compete with the paper's baselines in a second "best of" row.
    :param ablations: variants of the reference; never a baseline.
    :param paper: where the default table comes from (for titles and ``--help``).
    :param attainment_xlabel: x label of the attainment plot (what α scales).
    :param fixed: keyword arguments always passed to the env.
    :param curve: ``(x metric, y metric)``: with a sweep, also plot y against x, one line per
        policy through the swept values (Scepsy Fig. 6: latency vs achieved throughput);
        points whose ``sustainable`` metric is 0 are drawn hollow.
    :param takes_traces: the env replays a servegym JSONL trace (its ``trace`` argument), so a
        ``--workload`` entry may be a trace file.
    :param baselines_label: what the table calls the ``baselines`` family ("best of ...").
    :param references_label: what it calls ``baselines`` + ``own_references`` together.
    :param references_note: the line below the table saying what that second family holds
        (``{refs}`` = the own references that ran).
    :param metrics_note: the line below the table defining the headline metrics.
    """

    gym_id: str
    options: Mapping[str, str]
    headline: tuple[Metric, ...]
    select: str
    reference: str
    cluster: str
    model: str
    workloads: tuple[str, ...]
    baselines: tuple[str, ...]
    own_references: tuple[str, ...] = ()
    ablations: tuple[str, ...] = ()
    paper: str = ""
    attainment_xlabel: str = "SLO scale α"
    fixed: Mapping[str, Any] = field(default_factory=dict)
    curve: tuple[str, str] | None = None
    takes_traces: bool = False
    baselines_label: str = "paper baselines"
    references_label: str = "all references"
    references_note: str = (
        "all references = the paper's baselines and our own strong reference(s) {refs}"
    )
    metrics_note: str = ""

    def __post_init__(self) -> None:
        if self.select not in {m.key for m in self.headline}:
            raise ValueError(f"select {self.select!r} is not a headline metric")

    @property
    def policies(self) -> tuple[str, ...]:
        """The default table rows: baselines, own references, the reference."""
        return (*self.baselines, *self.own_references, self.reference)

    @property
    def select_metric(self) -> Metric:
        return next(m for m in self.headline if m.key == self.select)


def _family(name: str, **description: Any) -> EnvEntry:
    gym_id, options = CLI_ENVS[name]
    return EnvEntry(gym_id=gym_id, options=options, **description)


ENVS: dict[str, EnvEntry] = {
    "pd-cluster": _family(
        "pd-cluster",
        headline=(Metric("req95", "Req95"), Metric("req99", "Req99")),
        select="req99",
        reference="hexagent",
        cluster="hetero-1",
        model="llama3.1-70b",
        workloads=("sharegpt", "bfcl", "lats", "mixed"),
        baselines=("per-call-fcfs", "workflow-fcfs", "workflow-llf", "atlas"),
        own_references=(
            "per-call-fcfs+earliest-finish",
            "workflow-fcfs+earliest-finish",
            "workflow-llf+earliest-finish",
            "atlas+earliest-finish",
        ),
        paper="HexAgent Tables 1–3",
        attainment_xlabel="SLO scale α  (workflow meets SLO if C_w ≤ α·H_w)",
        takes_traces=True,
        baselines_label="paper's speed-blind baselines",
        references_label="all baselines (speed-blind + speed-aware)",
        references_note=(
            "all baselines = the paper's, with its speed-blind load-balanced dispatch (§7.2), and "
            "their speed-aware variants with earliest-finish placement {refs}"
        ),
        metrics_note=(
            "Req95 / Req99: the smallest α such that 95 % / 99 % of workflows finish within "
            "α × H_w (H_w: the workflow's completion time alone on the empty cluster; 1.0 = as "
            "fast as alone; lower is better; inf: too many unfinished)"
        ),
    ),
    "routing": _family(
        "routing",
        headline=(
            Metric("goodput", "goodput", "higher", "req/s"),
            Metric("slo_violation_ratio", "SLO violation ratio"),
        ),
        select="goodput",
        reference="goodserve",
        cluster="goodserve-4",
        model="llama3.1-8b",
        workloads=("goodserve",),
        baselines=(
            "random-route",
            "power-of-two",
            "round-robin",
            "least-request",
            "lowest-tpm",
            "preble",
            "llumnix",
        ),  # fmt: skip
        # Deployed routers (llm-d, SGLang, Dynamo; not in the paper) and our own references.
        own_references=(
            "llm-d",
            "sglang-cache-aware",
            "dynamo-kv",
            "prefix-aware-low",
            "earliest-finish",
        ),
        ablations=("goodserve-no-migration",),
        paper="GoodServe §5 (Fig. 6: goodput vs SLO scale)",
        references_label="all baselines (paper's + deployed routers + ours)",
        references_note=(
            "all baselines = the paper's, plus {refs} (llm-d, sglang-cache-aware, dynamo-kv: "
            "deployed routers, not in the paper; prefix-aware-low, earliest-finish: our own)"
        ),
        attainment_xlabel="SLO scale α  (request meets SLO if latency ≤ α × run-alone latency)",
        takes_traces=True,
        metrics_note=(
            "goodput: requests finished within their E2E SLO (slo_scale × the request's run-alone "
            "latency on an A800) per second of the trace, higher is better; SLO violation "
            "ratio: share of requests that missed it (unfinished ones included)"
        ),
    ),
    "allocation": _family(
        "allocation",
        headline=(
            Metric("goodput", "goodput", "higher", "wf/s"),
            Metric("latency_mean", "mean latency", "lower", "s"),
        ),
        select="goodput",
        reference="scepsy",
        cluster="scepsy-16",
        model="",  # each workload names its LLMs
        workloads=("rag_reranker", "beam_search"),
        baselines=(
            "k8s-hpa",
            "naive-equal",
            "aegaeon-3p1d",
            "aegaeon-2p2d",
            "aegaeon-1p3d",
            "ayo",
        ),
        own_references=("demand-proportional",),
        ablations=(
            "scepsy-parallelism-only",
            "scepsy-fractional-only",
            "scepsy-reactive",
            "scepsy-sticky",
        ),
        paper="Scepsy §7.2 (Fig. 6: K8s HPA; Fig. 7: Aegaeon; Fig. 8: Ayo), §7.4 (Fig. 10)",
        attainment_xlabel="SLO scale α  (workflow meets SLO if latency ≤ α × run-alone latency)",
        curve=("throughput", "latency_mean"),
        metrics_note=(
            "goodput: workflows finished within their SLO (slo_scale × the workflow's run-alone "
            "latency) per second of the measured window, higher is better; mean latency: of the "
            "finished workflows, seconds"
        ),
    ),
}

PAPER_WORKLOADS = ENVS["pd-cluster"].workloads
PAPER_POLICIES = ENVS["pd-cluster"].policies


class EvaluationError(ValueError):
    """A bad option (unknown env, policy or workload, ...): reported without a traceback."""


def env_entry(name: str) -> EnvEntry:
    """The :data:`ENVS` entry for ``name`` (a short name or a Gymnasium id), or a clear error
    with the closest and all known names."""
    return ENVS[canonical_env(name)]


def canonical_env(name: str) -> str:
    """The :data:`ENVS` name of ``name``: a short name (``routing``) or a Gymnasium id
    (``servegym/Routing-v0``); see :func:`envs.env_short_name`.

    :raises EvaluationError: for an unknown name, with a did-you-mean.
    """
    if name in ENVS:
        return name
    bare = name.removeprefix("envs:")
    for short, entry in ENVS.items():
        if entry.gym_id == bare:
            return short
    known = [*ENVS, *(e.gym_id for e in ENVS.values())]
    raise EvaluationError(
        f"unknown env {name!r}{did_you_mean(name, known)}; known: {', '.join(known)}"
    )


# --------------------------------------------------------------------------------------------
# Options: everything a run depends on, declared once.
# --------------------------------------------------------------------------------------------


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


def env_option(kind: Any, help: str, abbrev: str) -> Any:
    """A :class:`EvalConfig` field that configures the env (None: the env family's default).

    :param kind: parses the command-line value (and ``--sweep`` values).
    :param help: ``--help`` text.
    :param abbrev: its tag in the default output directory name when it is not the default.
    """
    return field(default=None, metadata={"env": True, "type": kind, "help": help, "abbrev": abbrev})


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
    """One evaluation suite. Fields left None take the env family's default (:data:`ENVS` for
    cluster, model, workloads, policies and reference; the env's own keyword default for the
    rest); ``python evaluate.py --help`` lists them per env.

    :param env: env family, a key of :data:`ENVS`.
    :param cluster: cluster preset or YAML path.
    :param model: model name.
    :param workloads: workload generator names (table columns).
    :param policies: policy specs (see :func:`resolve_policy`; one table row each).
    :param seeds: reset seeds; the workload is a deterministic function of the seed.
    :param count: workflows / requests per workload (None: the paper's count).
    :param load_scale: multiplies the arrival rate (1.0 = the paper's).
    :param estimate_error: PDCluster: multiplicative error on scheduler-visible estimates
        (HexAgent §7.6).
    :param slots: PDCluster: K, waiting calls re-planned per scheduler invocation.
    :param tool_estimate: PDCluster: what H_w(t) charges a revealed tool before it returns.
    :param planning_delay: PDCluster: simulated seconds a plan takes to land, or ``measured``
        (HexAgent §4.3 asynchronous planning).
    :param prefix_cache: PDCluster: LRU prefix cache on prefill instances.
    :param prefix_cache_visible: PDCluster: schedulers see the cache's hits.
    :param slo_scale: Routing: SLO = scale × run-alone latency on the reference GPU.
    :param slo_basis: Routing: ``request`` (each request's run-alone latency; the deadline then
        encodes its true length) or ``task`` (the task's median run-alone latency).
    :param instances: Routing: grow the cluster to this many instances (GoodServe §4.3 scale).
    :param output_predictor: output-length predictor name (``envs.predictors``).
    :param predictor_error: Routing: e of the ``oracle-error`` predictor.
    :param engine: Routing: serving-engine preset (``vllm``, ``sglang``, ``trtllm``).
    :param prefill_mode: Routing: override the engine's scheduling (``chunked``,
        ``prefill-first``, ``chunked-prefill-first``, ``mixed-whole``).
    :param token_budget: Routing: override the engine's tokens per iteration.
    :param check_interval: Routing: τ, decode iterations between migration checks (0: none).
    :param migration: Routing: ``token`` or ``kv``.
    :param gpus: Allocation: GPUs of the pool (4, 8, 16 on ``scepsy-16``).
    :param workflow_rate: Allocation: workflows/s (constant, or a rate trace's base rate).
    :param rate_trace: Allocation: a ``traces.rates`` shape for the autoscaling variant.
    :param rate_window: Allocation: ``train``, ``heldout`` or a start bin of the rate trace.
    :param periods: Allocation: allocation periods per episode.
    :param period_seconds: Allocation: simulated seconds per period.
    :param warmup_seconds: Allocation: arrivals before this are left out of the metrics.
    :param units_per_gpu: Allocation: F, GPU-fraction units per GPU.
    :param apl_info: Allocation: add the APL's predictions to the metrics (profiles on first use).
    :param sweep: one env option swept over values (columns = workload × value).
    :param reference: the policy whose reduction (gain) vs the best baseline is reported.
    :param out: output directory (None: ``results/<name derived from these options>``).
    :param json_path: JSON path (None: ``<out>/results.json``).
    :param quiet: no progress bar.
    :param timeline: directory for one Perfetto / chrome://tracing timeline per run
        (``<workload>_<policy>_seed<seed>.json``; :mod:`envs.sim.timeline`); None: none.
    :param ray: run every (workload, policy, seed) as a Ray task: ``"local"`` (``ray.init()``
        on this machine's cores) or a cluster address (``ray://host:10001``, ``auto``); None:
        serially in this process. Same rows either way.
    :param wandb: ``disabled`` (default), ``offline`` or ``online``: log the table and plots to
        W&B (``agents.wandb_utils``).
    """

    env: str = "pd-cluster"
    cluster: str | None = env_option(str, "cluster preset or YAML path", "c")
    model: str | None = env_option(str, "model name", "m")
    workloads: tuple[str, ...] | None = None
    policies: tuple[str, ...] | None = None
    seeds: tuple[int, ...] = (0, 1, 2)
    count: int | None = env_option(int, "workflows/requests per workload (None: paper's)", "n")
    load_scale: float | None = env_option(float, "arrival-rate multiplier", "load")
    estimate_error: float | None = env_option(
        float, "multiplicative error on scheduler-visible estimates", "err"
    )
    slots: int | None = env_option(int, "calls re-planned per invocation", "k")
    tool_estimate: str | None = env_option(
        str, "what H_w(t) charges a running tool: history or oracle", "tool"
    )
    planning_delay: float | str | None = env_option(
        parse_delay, "seconds a plan takes to land (asynchronous planning), or measured", "delay"
    )
    prefix_cache: bool | int | str | None = env_option(
        parse_cache, "LRU prefix cache on prefill instances: true, false, kv or blocks", "pcache"
    )
    prefix_cache_visible: bool | None = env_option(
        parse_bool, "schedulers see the prefix cache's hits (true/false)", "pvis"
    )
    slo_scale: float | None = env_option(float, "SLO = scale × run-alone latency", "slo")
    slo_basis: str | None = env_option(
        str, "request (own run-alone latency) or task (task median)", "basis"
    )
    instances: int | None = env_option(int, "grow the cluster to this many instances", "inst")
    output_predictor: str | None = env_option(str, "output-length predictor", "pred")
    predictor_error: float | None = env_option(float, "error e of oracle-error", "perr")
    engine: str | None = env_option(str, "serving-engine preset: vllm, sglang or trtllm", "eng")
    prefill_mode: str | None = env_option(
        str, "override the engine's scheduling: chunked, prefill-first, ...", "prefill"
    )
    token_budget: int | None = env_option(
        int, "override the engine's tokens per iteration", "budget"
    )
    check_interval: int | None = env_option(
        int, "decode iterations between migration checks (0: none)", "tau"
    )
    migration: str | None = env_option(str, "token (re-prefill) or kv (transfer)", "mig")
    gpus: int | None = env_option(int, "GPUs of the pool to allocate (whole nodes)", "gpus")
    workflow_rate: float | None = env_option(
        float, "workflows/s (base rate of a rate trace)", "rate"
    )
    rate_trace: str | None = env_option(
        str, "varying rate: ragpulse_hourly or azure_code_minutely", "trace"
    )
    rate_window: str | None = env_option(
        str, "rate-trace window: train, heldout or a start bin", "win"
    )
    periods: int | None = env_option(int, "allocation periods per episode", "per")
    period_seconds: float | None = env_option(float, "simulated seconds per period", "ps")
    warmup_seconds: float | None = env_option(
        float, "leave arrivals before this out of the metrics", "warm"
    )
    units_per_gpu: int | None = env_option(int, "GPU-fraction units per GPU", "F")
    apl_info: bool | None = env_option(
        parse_bool, "report the APL's predicted latency/throughput (true/false)", "apl"
    )
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
_ROW_FIELDS = ("cluster", "model", "count")

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

#: The full HexAgent Tables 1–3 run (Llama-3.1-70B on Hetero-1; change --model / --cluster for
#: the other columns of Table 2).
FULL_SUITE_COMMAND = (
    "python evaluate.py --env pd-cluster --cluster hetero-1 --model llama3.1-70b "
    f"--workload {','.join(PAPER_WORKLOADS)} --policies {','.join(PAPER_POLICIES)} --seeds 0,1,2"
)


@functools.cache
def env_defaults(name: str) -> dict[str, Any]:
    """The env's own keyword defaults by :class:`EvalConfig` field (read off the env class's
    signature, so they never drift from the env); ``{}`` if the env cannot be imported."""
    import importlib
    import inspect

    import gymnasium as gym

    import envs  # noqa: F401  (registers the servegym ids)

    entry = env_entry(name)
    try:
        module, _, cls = str(gym.spec(entry.gym_id).entry_point).partition(":")
        params = inspect.signature(getattr(importlib.import_module(module), cls)).parameters
    except Exception:  # an env module being written must not break evaluation of the others
        return {}
    out = {}
    for option, kw in entry.options.items():
        if option in ENV_FIELD_META and kw in params:
            default = params[kw].default
            out[option] = None if default is inspect.Parameter.empty else default
    return out


def resolve_config(config: EvalConfig) -> EvalConfig:
    """``config`` with every per-env default filled in (cluster, model, workloads, policies,
    reference from :data:`ENVS`; env options from :func:`env_defaults`).

    :raises EvaluationError: for an unknown env, an option or sweep the env does not take, or a
        bad sweep.
    """
    entry = env_entry(config.env)
    for name in ENV_FIELDS:
        if name not in entry.options and getattr(config, name) is not None:
            flag = "--" + name.replace("_", "-")
            raise EvaluationError(
                f"env {config.env!r} does not take {flag} (got {getattr(config, name)!r}); "
                f"its options: {', '.join(_flags(config.env))}"
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
    filled = {
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


def checkpoint_settings(config: EvalConfig, policies: Sequence[str]) -> dict[str, Any]:
    """The :data:`SPACE_OPTIONS` values the ``ckpt:`` policies among ``policies`` were trained
    with (``config.json`` beside each model) that ``config`` leaves unset.

    :raises EvaluationError: if ``config`` sets one to another value, or two checkpoints
        disagree; the message names the flag to change.
    """
    entry = env_entry(config.env)
    found: dict[str, tuple[Any, str]] = {}
    for spec in policies:
        if not spec.startswith("ckpt:"):
            continue
        from agents.checkpoint import checkpoint_config

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
        if trained.get("env", config.env) != config.env:
            raise EvaluationError(
                f"{spec} was trained on --env {trained['env']} ({path}), not {config.env}"
            )
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


def _flags(env: str) -> list[str]:
    entry = env_entry(env)
    return ["--" + n.replace("_", "-") for n in ENV_FIELDS if n in entry.options]


def is_trace(workload: str) -> bool:
    """A ``--workload`` entry that names a servegym JSONL trace file rather than a generator
    (generator names have no dot or path separator)."""
    return workload.endswith((".jsonl", ".json")) or "/" in workload or Path(workload).is_file()


def _trace_records(path: str) -> list[Any]:
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
    from envs.workloads import trace_models

    models: set[str] = set()
    for w in workloads:
        if is_trace(w):
            models.update(trace_models(_trace_records(w)))
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
            f"--load-scale {_fmt_value(config.load_scale)}: trace arrival times divided by "
            f"{_fmt_value(config.load_scale)}"
        )
    if len(config.seeds) > 1:
        notes.append(
            f"--seeds {','.join(map(str, config.seeds))}: a trace is the same workload for every "
            "seed; seeds change only seeded estimates (--estimate-error, predictors)"
        )
    if config.model and config.model != trace_model(traces):
        notes.append(f"--model {config.model}: serves every call of the traces")
    return [f"trace {', '.join(traces)}: {n}" for n in notes]


def make_env(config: EvalConfig, workload: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """A fresh env for ``workload`` with ``config``'s options (see :class:`EnvEntry`).

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
        from envs.sim.cluster import cluster_names

        cluster = str(values["cluster"])
        if not cluster.endswith((".yaml", ".yml")) and "/" not in cluster:
            check_name("cluster preset", cluster, cluster_names())
    kwargs = {
        kw: values[name] for name, kw in entry.options.items() if values.get(name) is not None
    }
    if trace:
        _trace_records(workload)  # a clear error for a missing or malformed file
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
    from agents.checkpoint import load_policy

    try:
        return load_policy(path, env)
    except (FileNotFoundError, ValueError) as exc:
        raise EvaluationError(f"policy 'ckpt:{path}': {exc}") from exc


def load_allocation_policy(path: str, env: Any) -> Policy:
    """``alloc:PATH``: a user-specified Allocation-v0 allocation from a YAML file (see
    :meth:`heuristics.allocation.FixedAllocation.from_yaml`), the same every period."""
    from envs.sim.allocation import AllocationError
    from heuristics.allocation import FixedAllocation

    if env_name_of(env) != "allocation":
        raise EvaluationError(f"alloc:{path}: allocation files apply to --env allocation only")
    try:
        return FixedAllocation.from_yaml(path)
    except AllocationError as exc:
        raise EvaluationError(str(exc)) from exc


def load_plugin_policy(argument: str, env: Any) -> Policy:
    """``py:MODULE:FACTORY`` or ``py:FILE.py:FACTORY``: an outside policy built by a factory
    (:mod:`heuristics.plugins`)."""
    from heuristics.plugins import PluginError, make_plugin_policy

    try:
        return make_plugin_policy(argument, env)
    except PluginError as exc:
        raise EvaluationError(str(exc)) from exc


#: Policy-spec prefixes (``<prefix>:<argument>``) -> loader(argument, env).
POLICY_LOADERS: dict[str, Callable[[str, Any], Policy]] = {
    "ckpt": load_checkpoint_policy,
    "alloc": load_allocation_policy,
    "py": load_plugin_policy,
}


def env_name_of(env: Any) -> str | None:
    """The :data:`ENVS` name of a Gymnasium env (from its ``spec.id``), or None."""
    gym_id = getattr(getattr(env, "spec", None), "id", None)
    return next((name for name, e in ENVS.items() if e.gym_id == gym_id), None)


def heuristic_names(spec: str = "", env_name: str | None = None) -> tuple[str, ...]:
    """Names of the heuristics that act in ``env_name`` (all of them if None), imported lazily
    (heuristics build on envs).

    :param spec: the policy being resolved, named in the error if the import fails.
    """
    try:
        from heuristics import POLICIES, policies_for
    except ImportError as exc:
        raise EvaluationError(
            f"policy {spec!r}: cannot import the heuristics package: {exc}"
        ) from exc
    return tuple(POLICIES) if env_name is None else policies_for(env_name)


def resolve_policy(spec: str, env: Any, env_name: str | None = None) -> Policy:
    """Build a fresh policy from its spec.

    :param spec: a heuristic name (``hexagent``, ``goodserve``, ...) or ``<prefix>:<argument>``
        with a prefix in :data:`POLICY_LOADERS` (``ckpt:PATH``).
    :param env: the env the policy will act in (loaders may need its spaces).
    :param env_name: its :data:`ENVS` name (None: read off ``env.spec.id``); only heuristics
        registered for it are accepted.
    :raises EvaluationError: unknown name or prefix, a heuristic of another env, or a loader
        that cannot load ``spec``.
    """
    prefix, sep, argument = spec.partition(":")
    if sep:
        if prefix not in POLICY_LOADERS:
            raise EvaluationError(
                f"unknown policy prefix {prefix!r} in {spec!r}; known: "
                f"{', '.join(p + ':' for p in sorted(POLICY_LOADERS))}"
            )
        return POLICY_LOADERS[prefix](argument, env)
    env_name = env_name or env_name_of(env)
    known = heuristic_names(spec, env_name)
    if spec not in known:
        where = f" for env {env_name!r}" if env_name else ""
        raise EvaluationError(
            f"unknown policy {spec!r}{where}{did_you_mean(spec, known)}; known: {', '.join(known)}"
        )
    from heuristics import make_policy

    return make_policy(spec)


def comparison_sets(entry: EnvEntry, reference: str) -> list[tuple[str, tuple[str, ...]]]:
    """What the reference is compared against, one "best of" set per table row pair: the
    paper's baselines, then (if the env has any) the paper's baselines together with our own
    strong references. Experts, ablations, learned (``ckpt:``) and outside (``py:``) policies
    are never in a set, and neither is ``reference``."""
    sets = [(entry.baselines_label, entry.baselines)]
    if entry.own_references:
        sets.append((entry.references_label, (*entry.baselines, *entry.own_references)))
    return [(label, tuple(p for p in ps if p != reference)) for label, ps in sets]


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


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
        **{k: list(v) for k, v in info.items() if isinstance(v, list)},
        "steps": int(info["steps"]),
        "invocations": int(info.get("invocations", 0)),
        "simulated_seconds": float(info.get("simulated_seconds", math.nan)),
        "wall_seconds": wall,
        "truncated": bool(truncated),
        "episode_return": episode_return,
    }


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
    from envs.sim.progress import progress

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
        return _evaluate_on_ray(config, [(w, o, p, s) for w, o, _, p, s in runs])
    rows = []
    bar = progress(runs, desc="evaluate", unit="run", disable=config.quiet, file=sys.stderr)
    for workload, overrides, env, spec, seed in bar:
        label = " ".join(f"{k}={v}" for k, v in overrides.items())
        bar.set_postfix_str(f"{workload} {label} {spec} seed {seed}".replace("  ", " "))
        rows.append(run_one(config, workload, overrides, spec, seed, env, resolve))
    for _, _, env in envs_by_column:
        env.close()
    return rows


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
        if name in entry.options and name not in _ROW_FIELDS
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
        env.unwrapped.export_timeline(Path(config.timeline) / f"{_safe(name)}.json")
    return {**row, **result}


class PartialEvaluation(EvaluationError):
    """Some runs of a Ray evaluation failed: ``rows`` holds the others', ``failures`` one line
    per failed run naming its (workload, policy, seed) and error."""

    def __init__(self, rows: list[dict[str, Any]], failures: list[str]):
        super().__init__(
            f"{len(failures)} of {len(rows) + len(failures)} runs failed:\n  "
            + "\n  ".join(failures)
        )
        self.rows = rows
        self.failures = failures


def _evaluate_on_ray(
    config: EvalConfig, runs: Sequence[tuple[str, Mapping[str, Any], str, int]]
) -> list[dict[str, Any]]:
    """Every run as a Ray task (``agents.distributed``); rows in the serial order.

    :raises PartialEvaluation: if a task failed (after every other task finished).
    """
    from agents.distributed import evaluate_task, init_ray
    from envs.sim.progress import progress

    ray = init_ray(config.ray)
    task = ray.remote(evaluate_task)
    payload = dataclasses.asdict(config)
    futures = [task.remote(payload, w, dict(o), p, s) for w, o, p, s in runs]
    index = {f: i for i, f in enumerate(futures)}
    results: list[Any] = [None] * len(futures)
    failures: dict[int, str] = {}
    pending = list(futures)
    with progress(
        total=len(futures), desc="evaluate (ray)", unit="run", disable=config.quiet, file=sys.stderr
    ) as bar:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for future in done:
                i = index[future]
                workload, overrides, spec, seed = runs[i]
                try:
                    results[i] = ray.get(future)
                except Exception as exc:  # a task's error: report it, keep the others' rows
                    cause = getattr(exc, "cause", None) or exc
                    where = f" {dict(overrides)}" if overrides else ""
                    failures[i] = (
                        f"policy {spec!r} on {workload}{where} seed {seed}: "
                        f"{type(cause).__name__}: {cause}"
                    )
                bar.update(1)
    rows = [r for i, r in enumerate(results) if i not in failures]
    if failures:
        raise PartialEvaluation(rows, [failures[i] for i in sorted(failures)])
    return rows


def _where(exc: BaseException) -> str:
    """`` at FILE:LINE in FUNCTION`` of the innermost frame of ``exc``'s traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f" at {f.filename}:{f.lineno} in {f.name}"


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def _fmt_value(value: Any) -> str:
    if value is None:
        return "unset"
    return f"{value:g}" if isinstance(value, float) else str(value)


def column_key(row: Mapping[str, Any]) -> tuple[str, Any]:
    """(workload, sweep value or None): the table column a row belongs to."""
    sweep = row.get("sweep") or {}
    return row["workload"], sweep.get("value")


def column_label(row: Mapping[str, Any]) -> str:
    """``mixed``, or ``goodserve slo_scale=1.5`` with a sweep."""
    sweep = row.get("sweep")
    if not sweep:
        return row["workload"]
    return f"{row['workload']} {sweep['option']}={_fmt_value(sweep['value'])}"


def entry_name_of(rows: Sequence[Mapping[str, Any]]) -> str:
    """The :data:`ENVS` name of ``rows`` (see :func:`headline_of`)."""
    return canonical_env(_unique(r["env"] for r in rows)[0])


def headline_of(rows: Sequence[Mapping[str, Any]]) -> EnvEntry:
    """The :data:`ENVS` entry of ``rows`` (all from one env family).

    :raises ValueError: if the rows mix env families.
    """
    names = _unique(r["env"] for r in rows)
    if len(names) != 1:
        raise ValueError(f"rows from several envs {names}; tabulate one env at a time")
    return env_entry(names[0])


def mean_metric(
    rows: Sequence[dict[str, Any]], workload: str, policy: str, key: str, better: str = "lower"
) -> float:
    """Mean of ``metrics[key]`` over the seeds of (workload, policy); nan if there are none.

    A missing value (None, as read back from JSON) counts as the worst value in the ``better``
    direction (inf for lower-is-better): the run did not finish.
    """
    worst = math.inf if better == "lower" else -math.inf
    vals = [
        worst if r["metrics"].get(key) is None else float(r["metrics"][key])
        for r in rows
        if r["workload"] == workload and r["policy"] == policy
    ]
    return float(np.mean(vals)) if vals else math.nan


def best_baseline(
    rows: Sequence[dict[str, Any]],
    workload: str,
    reference: str | None = None,
    candidates: Sequence[str] | None = None,
) -> str | None:
    """The candidate that is best on ``workload`` by the env's ``select`` metric in its
    direction (PDCluster: lowest Req99; Routing: highest goodput); ties by the other headline
    metrics, then name. None if no candidate ran.

    :param rows: rows of one env family and one sweep value.
    :param reference: the reference policy (None: the env's); never its own baseline.
    :param candidates: the policies that may be best (None: the strongest set of
        :func:`comparison_sets`, the paper's baselines and our own references).
    """
    entry = headline_of(rows)
    reference = reference or entry.reference
    if candidates is None:
        candidates = comparison_sets(entry, reference)[-1][1]
    metrics = [entry.select_metric, *(m for m in entry.headline if m.key != entry.select)]
    scored = [
        (*(m.sign(mean_metric(rows, workload, p, m.key, m.better)) for m in metrics), p)
        for p in _unique(r["policy"] for r in rows)
        if p in candidates and p != reference
        and any(r["workload"] == workload and r["policy"] == p for r in rows)
    ]  # fmt: skip
    return min(scored)[-1] if scored else None


def reduction(reference: float, baseline: float) -> float:
    """Relative reduction of ``reference`` vs ``baseline`` in percent (HexAgent Table 2)."""
    return Metric("x", "x", "lower").improvement(reference, baseline)


def gain(reference: float, baseline: float) -> float:
    """Relative gain of ``reference`` over ``baseline`` in percent (higher is better)."""
    return Metric("x", "x", "higher").improvement(reference, baseline)


def _num(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if math.isinf(x) else f"{x:.2f}")


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{round(x, 1) + 0.0:.1f}%"  # + 0.0: no "-0.0%"


def _title(headline: Sequence[Metric]) -> str:
    """``Req95 / Req99 (lower is better)``, or each metric's direction when they differ."""

    def unit(m: Metric) -> str:
        return f"{m.unit}; " if m.unit else ""

    if len({m.better for m in headline}) == 1 and not any(m.unit for m in headline):
        return f"{' / '.join(m.label for m in headline)} ({headline[0].better} is better)"
    return " / ".join(f"{m.label} ({unit(m)}{m.better} is better)" for m in headline)


def format_table(
    rows: Sequence[dict[str, Any]], reference: str | None = None, command: str | None = None
) -> str:
    """A HexAgent Tables 1–3 shaped table of ``rows`` (from :func:`evaluate` or the JSON).

    Rows: every policy, then for each set of :func:`comparison_sets` that ran a "best of ..."
    row (best by the env's ``select`` metric, its name in brackets) and the ``reference``'s
    "reduction" vs it (% per headline metric; "gain" when the select metric is
    higher-is-better; positive = the reference is better); with a ``reference`` other than the
    env's expert, also its reduction vs the expert. Columns: workloads (× sweep values). Cells:
    mean over seeds of the headline metrics. Below: the mean utilisation of all runs per column
    (the env's aggregate keys, not per-instance ``i:gpu`` keys), which policies each comparison
    covers, and ``command``.
    """
    if not rows:
        raise ValueError("format_table needs at least one row")
    entry = headline_of(rows)
    reference = reference or entry.reference
    headline = entry.headline
    keys = _unique(column_key(r) for r in rows)
    by_col = {k: [r for r in rows if column_key(r) == k] for k in keys}
    labels = {k: column_label(by_col[k][0]) for k in keys}
    policies = _unique(r["policy"] for r in rows)
    # A workload named like a policy (Routing's "goodserve" mix) says it is the workload.
    try:
        named_like_a_policy = set(heuristic_names("", entry_name_of(rows))) | set(policies)
    except (EvaluationError, KeyError):  # an env family without registered heuristics
        named_like_a_policy = set(policies)
    labels = {k: f"{v} (workload)" if k[0] in named_like_a_policy else v for k, v in labels.items()}
    seeds = _unique(r["seed"] for r in rows)

    def cell(col: tuple[str, Any], policy: str) -> str:
        rs, workload = by_col[col], col[0]
        if not any(r["policy"] == policy for r in rs):
            return "-"
        return " / ".join(
            _num(mean_metric(rs, workload, policy, m.key, m.better)) for m in headline
        )

    body = [[p, *(cell(k, p) for k in keys)] for p in policies]
    verb = "gain" if entry.select_metric.better == "higher" else "reduction"

    def improvement_row(label: str, against: Callable[[list[dict], str], str | None]) -> list:
        out = [label]
        for k in keys:
            rs, workload = by_col[k], k[0]
            other = against(rs, workload)
            if other is None or not any(r["policy"] == reference for r in rs):
                out.append("-")
                continue
            out.append(
                " / ".join(
                    _pct(
                        m.improvement(
                            mean_metric(rs, workload, reference, m.key, m.better),
                            mean_metric(rs, workload, other, m.key, m.better),
                        )
                    )
                    for m in headline
                )
            )
        return out

    compared: list[list[str]] = []
    ran = reference in policies  # without the reference, no improvement line says anything
    for set_label, candidates in comparison_sets(entry, reference):
        if set_label != entry.baselines_label and not any(
            p in entry.own_references for p in policies
        ):
            continue  # no own reference ran: the row pair would repeat the paper's
        best_row = [f"best of {set_label}"]
        for k in keys:
            best = best_baseline(by_col[k], k[0], reference, candidates)
            best_row.append("-" if best is None else f"{cell(k, best)} ({best})")
        compared.append(best_row)
        if ran:
            compared.append(
                improvement_row(
                    f"{verb} ({reference} vs it)",
                    lambda rs, w, c=candidates: best_baseline(rs, w, reference, c),  # type: ignore[misc]
                )
            )
    if ran and reference != entry.reference and entry.reference in policies:
        compared.append(
            improvement_row(
                f"{verb} ({reference} vs {entry.reference})", lambda rs, w: entry.reference
            )
        )
    util_keys = _unique(k for r in rows for k in r["utilisation"] if ":" not in k)
    util_row = [f"utilisation ({' / '.join(util_keys)})"]
    for k in keys:
        util = [r["utilisation"] for r in by_col[k]]
        means = [np.mean([u[key] for u in util if u.get(key) is not None]) for key in util_keys]
        util_row.append(" / ".join(f"{m:.0%}" for m in means))

    header = ["policy", *(labels[k] for k in keys)]
    table = [header, *body, *compared, util_row]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]

    def fmt(line: list[str]) -> str:
        return "  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip()

    first = rows[0]
    title = (
        f"{_title(headline)}, mean over seeds {','.join(map(str, seeds))}: "
        f"{first['env']} {first['cluster']}"
        + (f" {first['model']}" if first.get("model") else "")
        + (f" {first['gpus']} GPUs" if first.get("gpus") else "")
    )
    rule = "-" * max(len(fmt(line)) for line in table)
    lines = [title, rule, fmt(header), rule, *(fmt(b) for b in body), rule]
    lines += [*(fmt(c) for c in compared), fmt(util_row), rule]
    direction = ", in the metric's own direction" if len({m.better for m in headline}) > 1 else ""
    if entry.metrics_note:
        lines.append(entry.metrics_note)
    if ran:
        lines.append(
            f"{verb}: % by which {reference} beats the policy above it on each metric{direction} "
            f"(positive = better); {entry.baselines_label}: {', '.join(entry.baselines)}"
        )
    else:
        lines.append(
            f"no {verb} lines: the reference {reference} did not run; "
            f"{entry.baselines_label}: {', '.join(entry.baselines)}"
        )
    own = [p for p in entry.own_references if p in policies]
    if own:
        note = entry.references_note.format(refs=", ".join(own))
        lines.append(note.replace("reference(s)", "references" if len(own) > 1 else "reference"))
    candidates_all = {p for _, ps in comparison_sets(entry, reference) for p in ps}
    outside = [p for p in policies if p != reference and p not in candidates_all]
    if outside:
        lines.append(
            f"not compared against (expert, ablation, learned or outside): {', '.join(outside)}"
        )
    lines += [f"note: {n}" for n in diagnose(rows)]
    if command:
        lines.append(f"regenerate: {command}")
    return "\n".join(lines)


#: :func:`diagnose` thresholds: a run whose arrivals span less than this share of its simulated
#: time is a burst; a column whose mean utilisation is below the other is idle.
BURST_SHARE = 0.25
IDLE_UTILISATION = 0.2


def diagnose(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Warnings for columns too small or too idle to separate policies: arrivals that come as
    a burst much shorter than the episode (the run measures draining one backlog), a cluster
    that is mostly idle (policies that differ only under contention look alike), and
    same-direction headline metrics (Req95, Req99) equal for most policies (too few workflows
    for the percentiles to differ), and every run reporting ``sustainable = 0`` (Allocation-v0:
    the policy's deployment is overloaded at this rate, so its goodput and latency measure a
    growing backlog, not its serving)."""
    entry = headline_of(rows)
    notes: list[str] = []
    for key in _unique(column_key(r) for r in rows):
        rs = [r for r in rows if column_key(r) == key]
        label = column_label(rs[0])
        notes += overloaded_notes(rs, label)
        spans = [
            (max(r["arrivals"]) - min(r["arrivals"]), r["simulated_seconds"])
            for r in rs
            if r.get("arrivals") and r.get("simulated_seconds")
        ]
        if spans:
            span, sim = (float(np.mean(x)) for x in zip(*spans, strict=True))
            if span < BURST_SHARE * sim:
                notes.append(
                    f"{label}: arrivals span {span:.0f} s of a {sim:.0f} s episode (a burst): "
                    "the run measures how a backlog drains; more workflows (--count) or a "
                    "lower rate give a steadier load"
                )
        aggregate = [
            v for r in rs for k, v in r["utilisation"].items() if ":" not in k and v is not None
        ]
        if aggregate and float(np.mean(aggregate)) < IDLE_UTILISATION:
            notes.append(
                f"{label}: mean utilisation {float(np.mean(aggregate)):.0%}: the cluster is "
                "mostly idle, so policies that differ only under contention look alike "
                "(raise --load-scale, or --count if arrivals are a burst)"
            )
        for better in ("lower", "higher"):
            same = [m for m in entry.headline if m.better == better and not m.unit]
            if len(same) < 2:
                continue
            policies = _unique(r["policy"] for r in rs)
            ties = [
                p
                for p in policies
                if len({round(mean_metric(rs, key[0], p, m.key, better), 9) for m in same}) == 1
            ]
            if len(ties) * 2 > len(policies):
                sizes = [len(r.get("completion_times") or r.get("latencies") or []) for r in rs]
                n = f" with {int(np.median(sizes))} workflows per run" if any(sizes) else ""
                notes.append(
                    f"{label}: {' = '.join(m.label for m in same)} for {len(ties)} of "
                    f"{len(policies)} policies{n}: the percentiles fall on the same few "
                    "workflows; more workflows per run (--count) separate them"
                )
    return notes


def overloaded_notes(rows: Sequence[dict[str, Any]], label: str) -> list[str]:
    """One note per (policy, seed) run of ``rows`` whose ``sustainable`` metric is 0
    (Allocation-v0: fewer than 99 % of the measured workflows finished, or the completions
    inside the measured window are under 90 % of the offered rate), saying which: a backlog the
    drain did not clear, or workflows that finished only after the window (a window not much
    longer than the latency cannot tell a slow deployment from an overloaded one)."""
    out = []
    for r in rows:
        m = r["metrics"]
        if m.get("sustainable", 1.0):
            continue
        n = int(m.get("num_workflows", 0))
        done = int(m.get("num_completed", 0))
        offered = float(m.get("offered_rate", 0.0))
        achieved = float(m.get("throughput", 0.0))
        head = f"{label}: {r['policy']} (seed {r['seed']}) is NOT SUSTAINABLE"
        if done < n:
            why = f"overloaded, {done} of {n} measured workflows finished by the end of the drain"
        else:
            window = n / offered if offered > 0 else 0.0
            why = (
                f"all {n} finished, but only {achieved:.3g} wf/s of {offered:.3g} offered inside "
                f"the {window:.0f}-s window (mean latency {float(m.get('latency_mean', 0.0)):.0f}"
                " s; a window not much longer than the latency, or without --warmup-seconds, "
                "cannot tell a slow deployment from an overloaded one)"
            )
        out.append(
            f"{head}: {why}; its goodput and latency measure a backlog, not steady serving "
            "(lower --workflow-rate, add --gpus, or lengthen --periods/--warmup-seconds)"
        )
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", name)


def _distinct_colours(ax: Any, n: int) -> None:
    """One colour per line: matplotlib's default cycle repeats after 10."""
    import matplotlib.pyplot as plt

    ax.set_prop_cycle(color=plt.get_cmap("tab10" if n <= 10 else "tab20").colors)


def plot_attainment(
    rows: Sequence[dict[str, Any]], out_dir: str | Path, reference: str | None = None
) -> list[Path]:
    """SLO-attainment curves like HexAgent Fig. 3: one PNG per column (workload, sweep value),
    attainment vs α, one line per policy averaged over seeds, ``reference`` (default: the env's
    expert) bold. Returns the written paths.

    :raises ValueError: if runs of one column have different α grids.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entry = headline_of(rows)
    reference = reference or entry.reference
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for col in _unique(column_key(r) for r in rows):
        col_rows = [r for r in rows if column_key(r) == col]
        label = column_label(col_rows[0])
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        _distinct_colours(ax, len(_unique(r["policy"] for r in rows)))
        alpha_max = 1.5
        for policy in _unique(r["policy"] for r in rows):
            runs = [r for r in col_rows if r["policy"] == policy]
            if not runs:
                continue
            alphas = np.asarray(runs[0]["attainment_curve"]["alpha"], dtype=float)
            curves = []
            for r in runs:
                a = np.asarray(r["attainment_curve"]["alpha"], dtype=float)
                if a.shape != alphas.shape or not np.allclose(a, alphas):
                    raise ValueError(
                        f"attainment curves of {label!r}/{policy!r} use different α grids "
                        f"(seed {r['seed']}: {a.size} points vs {alphas.size})"
                    )
                curves.append(np.asarray(r["attainment_curve"]["attainment"], dtype=float))
            mean = np.mean(curves, axis=0)
            # Zoom to where every policy reaches 99% attainment: long single-workflow tails
            # beyond it would squash the curves (the table reports them).
            done = np.flatnonzero(mean >= 0.99)
            alpha_max = max(alpha_max, alphas[done[0]] if done.size else alphas[-1])
            bold = policy == reference
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
        ax.set_xlabel(entry.attainment_xlabel)
        ax.set_ylabel("SLO attainment (fraction)")
        first = col_rows[0]
        seeds = _unique(r["seed"] for r in col_rows)
        ax.set_title(
            f"{label} — {first['cluster']}, {first['model']} "
            f"(mean over {len(seeds)} seed{'s' if len(seeds) > 1 else ''})"
        )
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        path = out / f"attainment_{_safe(label.replace(' ', '_'))}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_curve(
    rows: Sequence[dict[str, Any]], out_dir: str | Path, reference: str | None = None
) -> list[Path]:
    """With a sweep and an env entry with a ``curve``: y metric vs x metric, one line per policy
    through the swept values (mean over seeds), hollow markers where the run was not
    ``sustainable``; ``curve_<workload>.png``. Returns the written paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swept = [r for r in rows if r.get("sweep")]
    if not swept or headline_of(rows).curve is None:
        return []
    entry = headline_of(rows)
    assert entry.curve is not None
    xkey, ykey = entry.curve
    reference = reference or entry.reference
    values = _unique(r["sweep"]["value"] for r in swept)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for workload in _unique(r["workload"] for r in swept):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        _distinct_colours(ax, len(_unique(r["policy"] for r in swept)))
        for policy in _unique(r["policy"] for r in swept):
            pts = []
            for v in values:
                rs = [
                    r
                    for r in swept
                    if r["sweep"]["value"] == v
                    and r["workload"] == workload
                    and r["policy"] == policy
                ]
                if not rs:
                    continue
                x = float(np.mean([r["metrics"][xkey] for r in rs]))
                y = float(np.mean([r["metrics"][ykey] for r in rs]))
                ok = all(r["metrics"].get("sustainable", 1.0) for r in rs)
                pts.append((x, y, ok))
            if not pts:
                continue
            bold = policy == reference
            (line,) = ax.plot(
                [p[0] for p in pts], [p[1] for p in pts], label=policy,
                linewidth=2.4 if bold else 1.4, zorder=3 if bold else 2,
            )  # fmt: skip
            for x, y, ok in pts:
                ax.plot(
                    x, y, marker="o", color=line.get_color(),
                    markerfacecolor=line.get_color() if ok else "white", zorder=4,
                )  # fmt: skip
        ax.set_xlabel(f"{xkey} (achieved)")
        ax.set_ylabel(ykey)
        first = [r for r in swept if r["workload"] == workload][0]
        ax.set_title(f"{workload} — {first['cluster']} (hollow: not sustainable)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"curve_{_safe(workload)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_sweep(
    rows: Sequence[dict[str, Any]], out_dir: str | Path, reference: str | None = None
) -> list[Path]:
    """With a sweep: the env's ``select`` metric (Routing: goodput; PDCluster: Req99) vs the swept
    value, one PNG per workload, one line per policy (mean over seeds), ``reference`` bold —
    GoodServe Fig. 6 (goodput vs SLO scale). Returns the written paths (none without a sweep)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swept = [r for r in rows if r.get("sweep")]
    if not swept:
        return []
    entry = headline_of(rows)
    reference = reference or entry.reference
    metric = entry.select_metric
    option = swept[0]["sweep"]["option"]
    values = _unique(r["sweep"]["value"] for r in swept)
    numeric = all(isinstance(v, int | float) for v in values)
    xs = [float(v) for v in values] if numeric else list(range(len(values)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for workload in _unique(r["workload"] for r in swept):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        _distinct_colours(ax, len(_unique(r["policy"] for r in swept)))
        for policy in _unique(r["policy"] for r in swept):
            ys = [
                mean_metric(
                    [r for r in swept if r["sweep"]["value"] == v],
                    workload,
                    policy,
                    metric.key,
                    metric.better,
                )
                for v in values
            ]
            bold = policy == reference
            ax.plot(
                xs, ys, marker="o", label=policy, linewidth=2.4 if bold else 1.4,
                zorder=3 if bold else 2,
            )  # fmt: skip
        if not numeric:
            ax.set_xticks(xs, [str(v) for v in values])
        unit = f" ({metric.unit})" if metric.unit else ""
        ax.set_xlabel(option)
        ax.set_ylabel(f"{metric.label}{unit}, {metric.better} is better")
        first = swept[0]
        seeds = _unique(r["seed"] for r in swept if r["workload"] == workload)
        ax.set_title(
            f"{workload} — {first['cluster']}, {first['model']} "
            f"(mean over {len(seeds)} seed{'s' if len(seeds) > 1 else ''})"
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{metric.key}_vs_{option}_{_safe(workload)}.png"
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
    for name, e in ENVS.items():
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
            f"--{n.replace('_', '-')} {_fmt_value(defaults.get(n, 'unset'))}"
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
    p.add_argument("--env", default=d.env, help=f"env family: {', '.join(ENVS)} (default {d.env})")
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
        takers = [e for e, entry in ENVS.items() if name in entry.options]
        where = "" if len(takers) == len(ENVS) else f"; {', '.join(takers)} only"
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=meta["type"],
            help=f"{meta['help']} (default: the env's{where})",
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


def command_for(config: EvalConfig) -> str:
    """The command line that regenerates ``config``'s table (every option explicit)."""
    config = resolve_config(config)
    assert config.workloads is not None and config.policies is not None
    parts = [
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
            parts.append(f"--{name.replace('_', '-')} {_fmt_value(value)}")
    if config.sweep is not None:
        values = ",".join(_fmt_value(v) for v in config.sweep.values)
        parts.append(f"--sweep {config.sweep.option}={values}")
    if config.reference != env_entry(config.env).reference:
        parts.append(f"--reference {config.reference}")
    return " ".join(parts)


def default_out_dir(config: EvalConfig) -> Path:
    """``results/<name>``: a timestamp-free name derived from the options, so a rerun of the
    same suite overwrites its own results and nothing else. Options at the env's default are
    left out of the name."""
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
        parts.append(f"{ENV_FIELD_META[name]['abbrev']}{_fmt_value(value)}")
    if config.sweep is not None:
        parts.append(
            f"sweep-{config.sweep.option}-" + "-".join(map(_fmt_value, config.sweep.values))
        )
    # an option the env does not take (Allocation's model) is None: no part of the name
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", "_".join(str(p) for p in parts if p not in (None, "")))
    if len(name) > 120:
        import hashlib

        name = name[:100] + "_" + hashlib.sha1(name.encode()).hexdigest()[:10]
    return Path("results") / name


# --------------------------------------------------------------------------------------------
# Leaderboard: results/leaderboard.md from results.json files and their run.json provenance
# --------------------------------------------------------------------------------------------


def provenance_path(json_path: Path) -> Path:
    """The provenance sidecar of a results file: ``run.json`` beside ``results.json``, else
    ``<stem>.run.json`` (``--json other.json``)."""
    if json_path.name == "results.json":
        return json_path.with_name("run.json")
    return json_path.with_name(f"{json_path.stem}.run.json")


def git_commit(directory: Path) -> str:
    """``git rev-parse HEAD`` of the checkout holding ``directory``, with ``-dirty`` when tracked
    files have uncommitted changes; ``unknown`` outside a git checkout or without git."""
    import os
    import subprocess

    # GIT_OPTIONAL_LOCKS=0: `git status` must not refresh (write) the index of a tree in use.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args: str) -> str:
        out = subprocess.run(
            ["git", *args], cwd=directory, env=env, capture_output=True, text=True, timeout=30
        )
        if out.returncode != 0:
            raise OSError(out.stderr.strip())
        return out.stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def write_provenance(json_path: Path, command: str, wall_seconds: float) -> Path:
    """Write the run's provenance beside ``json_path`` (:func:`provenance_path`): the exact
    command, the commit of this checkout and the UTC date. Kept out of ``results.json``, whose
    rows are a deterministic function of the command."""
    from datetime import datetime, timezone

    path = provenance_path(json_path)
    record = {
        "command": command,
        "commit": git_commit(Path(__file__).resolve().parent),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_seconds": round(wall_seconds, 1),
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def _sortable(value: Any) -> tuple[int, float, str]:
    """A sort key for option values that may be numbers, strings or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return (1 if value is None else 0, 0.0, str(value))
    return (0, float(value), "")


def load_leaderboard_rows(paths: Sequence[Path]) -> dict[tuple, tuple[list[dict], int]]:
    """The rows of ``paths`` keyed by (env, cluster, model, column, count, options, policy),
    each with the index of the file it came from; a later file replaces every seed of a
    policy's setting that an earlier one had (a rerun supersedes, seeds are not mixed).

    :raises EvaluationError: for a missing or malformed file, naming it.
    """
    merged: dict[tuple, tuple[list[dict], int]] = {}
    for index, path in enumerate(paths):
        try:
            rows = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise EvaluationError(f"--leaderboard: cannot read {path}: {exc}") from None
        needed = ("env", "cluster", "workload", "policy", "seed", "metrics")
        if not isinstance(rows, list) or not all(
            isinstance(r, dict) and all(k in r for k in needed) for r in rows
        ):
            raise EvaluationError(
                f"--leaderboard: {path} is not an evaluate.py results.json (a list of rows "
                f"with {', '.join(needed)})"
            )
        from_file: dict[tuple, list[dict]] = {}
        for row in rows:
            entry = env_entry(row["env"])
            options = tuple(
                (n, row.get(n)) for n in ENV_FIELDS if n in entry.options and n not in _ROW_FIELDS
            )
            sweep = column_key(row)[1]
            key = (
                row["env"], row["cluster"], row.get("model"), row["workload"], sweep,
                row.get("workload_count"), options, row["policy"],
            )  # fmt: skip
            from_file.setdefault(key, []).append(row)
        merged.update({key: (rs, index) for key, rs in from_file.items()})
    return merged


def _policy_kind(entry: EnvEntry, policy: str) -> str:
    if policy == entry.reference:
        return "expert"
    if policy in entry.baselines:
        return "paper baseline"
    if policy in entry.own_references:
        return "own reference"
    if policy in entry.ablations:
        return "ablation"
    return {"ckpt": "learned", "py": "plug-in", "alloc": "fixed allocation"}.get(
        policy.partition(":")[0] if ":" in policy else "", "heuristic"
    )


def _metric_cell(rows: Sequence[Mapping[str, Any]], metric: Metric) -> tuple[float, str]:
    """(mean, ``mean ± sample std``) of ``metric`` over ``rows`` (one per seed); a missing value
    (a run that did not finish) counts as the worst, as in :func:`mean_metric`."""
    worst = math.inf if metric.better == "lower" else -math.inf
    values = [
        worst if r["metrics"].get(metric.key) is None else float(r["metrics"][metric.key])
        for r in rows
    ]
    mean = float(np.mean(values))
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        return mean, _num(mean)
    return mean, f"{_num(mean)} ± {_num(float(np.std(values, ddof=1)))}"


def _setting_label(env: str, workload_count: Any, options: tuple, swept: str | None) -> str:
    """``--count 40`` (or ``default count``) and the options (but the ``swept`` one, which the
    column label names) that differ from the env's defaults."""
    defaults = env_defaults(env)
    parts = []
    if "count" in env_entry(env).options:
        parts.append("default count" if workload_count is None else f"--count {workload_count}")
    parts += [
        f"--{n.replace('_', '-')} {_fmt_value(v)}"
        for n, v in options
        if v is not None and v != defaults.get(n) and n != swept
    ]
    return ", ".join(parts) or "the env's defaults"


def _provenance_line(path: Path, sidecar: Mapping[str, Any] | None, policies: list[str]) -> str:
    which = f" ({', '.join(policies)})" if policies else ""
    if sidecar is None:
        return f"- provenance unknown{which}: {path.as_posix()} has no {provenance_path(path).name}"
    return (
        f"- `{sidecar.get('command', '?')}`{which}  \n"
        f"  commit `{sidecar.get('commit', 'unknown')}`, {sidecar.get('date', 'date unknown')}"
    )


def format_leaderboard(paths: Sequence[Path], out: Path) -> str:
    """The leaderboard markdown of the results files ``paths`` (later files override earlier
    ones, see :func:`load_leaderboard_rows`): a section per env × cluster × model, a table per
    workload setting with one row per policy, best-first by the env's ``select`` metric (ties
    by the other headline metrics, then name), cells mean ± sample standard deviation over the
    seeds listed; below each table the command, commit and date of the runs. Deterministic:
    the same files give the same bytes."""
    merged = load_leaderboard_rows(paths)
    sidecars: dict[int, Mapping[str, Any] | None] = {}
    for index, path in enumerate(paths):
        side = provenance_path(path)
        try:
            sidecars[index] = json.loads(side.read_text()) if side.is_file() else None
        except ValueError as exc:
            raise EvaluationError(f"--leaderboard: {side} is not JSON: {exc}") from None
    used = sorted({index for _, index in merged.values()})
    tables_seen = {key[:7] for key in merged}
    default_seeds = len(EvalConfig().seeds)
    reduced = sum(
        1
        for table in tables_seen
        if table[5] is not None
        or any(len(rows) < default_seeds for k, (rows, _) in merged.items() if k[:7] == table)
    )
    regenerate = f"python evaluate.py --leaderboard {out.as_posix()} " + " ".join(
        p.as_posix() for p in paths
    )
    lines = [
        "# servegym leaderboard",
        "",
        "Generated from `evaluate.py` results files and their `run.json` provenance by one "
        "command; do not edit by hand. Per env × cluster preset × model, one table per "
        "workload setting; rows are best-first by the env's selection metric, cells are the "
        "mean ± sample standard deviation over the seeds listed. A table's heading gives its "
        "`--count` when one was set (workflows or requests per episode instead of the env's "
        "default) and the options that differ from the env's defaults.",
        "",
        *(
            [
                f"**Reduced-size runs.** {reduced} of {len(tables_seen)} tables ran fewer seeds "
                f"than evaluate.py's default ({','.join(map(str, EvalConfig().seeds))}) or an "
                "explicit `--count`: they show how the policies compare on a short run, not the "
                "papers' settings, and their ± spans are wide. The paper-size PDCluster suite "
                f"is `{FULL_SUITE_COMMAND}`.",
                "",
            ]
            if reduced
            else []
        ),
        "Regenerate (each `evaluate.py` run writes `results.json` and `run.json` in its "
        "`--out` folder, by default `results/<name from its options>/`):",
        "",
        "```bash",
        *_unique(
            str(sidecars[i]["command"]) for i in used if sidecars[i] and "command" in sidecars[i]
        ),
        regenerate,
        "```",
    ]
    env_order = {name: i for i, name in enumerate(ENVS)}
    sections = sorted(
        {k[:3] for k in merged},
        key=lambda s: (env_order.get(s[0], len(env_order)), s[1], _sortable(s[2])),
    )
    for env, cluster, model in sections:
        entry = env_entry(env)
        lines += [
            "",
            f"## {env} · {cluster}" + (f" · {model}" if model else ""),
            "",
            f"`{entry.gym_id}`; headline as in {entry.paper}; best first by {entry.select} "
            f"({entry.select_metric.better} is better).",
        ]
        tables = sorted(
            {k[3:7] for k in merged if k[:3] == (env, cluster, model)},
            key=lambda t: (t[0], _sortable(t[1]), _sortable(t[2]), repr(t[3])),
        )
        for workload, sweep, count, options in tables:
            cells = {
                k[7]: v for k, v in merged.items() if k[:7] == (env, cluster, model, workload,
                                                                 sweep, count, options)
            }  # fmt: skip
            first = next(iter(cells.values()))[0][0]
            swept = (first.get("sweep") or {}).get("option")
            metrics = [entry.select_metric, *(m for m in entry.headline if m.key != entry.select)]
            ranked = []
            for policy, (rows, index) in cells.items():
                scored = {m.key: _metric_cell(rows, m) for m in entry.headline}
                order = tuple(m.sign(scored[m.key][0]) for m in metrics)
                ranked.append((order, policy, rows, index, scored))
            ranked.sort(key=lambda t: (t[0], t[1]))
            head = [
                f"{m.label} ({m.unit + ', ' if m.unit else ''}{m.better} is better)"
                for m in entry.headline
            ]
            lines += [
                "",
                f"### {column_label(first)}: {_setting_label(env, count, options, swept)}",
                "",
                "| # | policy | kind | " + " | ".join(head) + " | seeds | wall s / run |",
                "|---|---|---|" + "---|" * len(head) + "---|---|",
            ]
            for rank, (_, policy, rows, _, scored) in enumerate(ranked, 1):
                seeds = ",".join(str(s) for s in sorted(r["seed"] for r in rows))
                wall = [r["wall_seconds"] for r in rows if r.get("wall_seconds") is not None]
                wall_cell = f"{np.mean(wall):.1f}" if wall else "-"
                lines.append(
                    f"| {rank} | `{policy}` | {_policy_kind(entry, policy)} | "
                    + " | ".join(scored[m.key][1] for m in entry.headline)
                    + f" | {seeds} | {wall_cell} |"
                )
            sources = sorted({index for *_, index, _ in ranked})
            lines += ["", "Produced by:"]
            for index in sources:
                policies = (
                    sorted(p for _, p, _, i, _ in ranked if i == index) if len(sources) > 1 else []
                )
                lines.append(_provenance_line(paths[index], sidecars[index], policies))
    lines += ["", f"Regenerate this file: `{regenerate}`"]
    return "\n".join(lines) + "\n"


def leaderboard_main(argv: Sequence[str]) -> int:
    """``python evaluate.py --leaderboard OUT.md RESULTS.json [RESULTS.json ...]``: write the
    leaderboard of the results files to OUT.md (:func:`format_leaderboard`)."""
    p = argparse.ArgumentParser(
        prog="evaluate.py --leaderboard",
        description="Build a markdown leaderboard from evaluate.py results.json files (later "
        "files override earlier ones for the same setting and policy).",
    )
    p.add_argument("--leaderboard", metavar="OUT.md", required=True, help="markdown to write")
    p.add_argument("results", nargs="+", type=Path, metavar="RESULTS.json")
    args = p.parse_args(list(argv))
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
