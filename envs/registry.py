"""One entry per env family: how to build it, what it is compared on, how it trains.

An env family (``pd-cluster``, ``routing``, ``allocation``) is one :class:`EnvFamily` in
:data:`FAMILIES`: its Gymnasium id and command-line options (``envs.CLI_ENVS``), its headline
metrics and which direction is better (PDCluster: Req95 / Req99, lower; Routing: goodput,
higher, and SLO-violation ratio, lower; Allocation: goodput, higher, and mean latency, lower),
its reference (expert) policy, its paper's baselines, our own strong references and the
expert's ablations, its default cluster, model and workloads, and its training defaults.
``evaluate.py`` (:mod:`evaluation`), ``train.py`` (:mod:`training`) and :mod:`agents` all read
it; nothing else names an env family.

Policies are named by strings here (the heuristics are registered in :mod:`heuristics`, above
``envs``), so this module imports nothing above ``envs``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from envs import CLI_ENVS, DEFAULT_VERSION
from envs.common.base import did_you_mean

if TYPE_CHECKING:
    from envs.common.options import EnvOptions


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
class EnvFamily:
    """One env family: how to build it, what it is compared on and how it trains.

    :param gym_id: the Gymnasium id.
    :param options: command-line option (``evaluation.EvalConfig`` / ``training.TrainConfig``
        field, or ``workload``) -> env keyword argument (``envs.CLI_ENVS``). Options not listed
        must stay unset, or evaluation stops.
    :param headline: the metrics shown in the table cells, in order.
    :param select: the metric (a ``headline`` key) that picks "best": the best baseline of a
        column, the best checkpoint during training, the y axis of sweep plots.
    :param reference: the expert whose reduction (gain) vs the best baseline is reported.
    :param cluster: default cluster preset.
    :param model: default model.
    :param workloads: default workloads (table columns).
    :param baselines: the paper's baselines.
    :param own_references: our own strong simple references (docs/design.md, "Fair
        comparison"); they compete with the paper's baselines in a second "best of" row.
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
    :param train_defaults: training defaults of options (``workload``, ``count``, ...) that
        differ from the evaluation defaults above: shorter episodes, fewer slots
        (``train.py``; unset options not listed take the evaluation default or the env's own).
    :param train_reward_scale: training envs see the env's reward times this
        (``agents.envs.ScaledReward``), so that returns stay of order one; evaluation reads the
        env's metrics, never the scaled reward.
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
    train_defaults: Mapping[str, Any] = field(default_factory=dict)
    train_reward_scale: float = 1.0

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


def _family(name: str, **description: Any) -> EnvFamily:
    gym_id, options = CLI_ENVS[f"{name}-v0"]
    return EnvFamily(gym_id=gym_id, options=options, **description)


#: The env families by short name (the ``--env`` of ``evaluate.py`` and ``train.py``). The
#: entries written out here describe each family's ``-v0``; :func:`_versions` adds the ``-v0``
#: and ``-v1`` names and points the plain name at ``envs.DEFAULT_VERSION`` (``-v1``).
FAMILIES: dict[str, EnvFamily] = {
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
        # 30 workflows ≈ 2,000 decisions per episode; 16 slots keep the action space small.
        train_defaults={"workload": "mixed", "count": 30, "slots": 16},
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
            # the per-request SLO's leak as a rule (evaluation.policies.ENV_REFERENCES)
            "implied-triage",
        ),
        ablations=("goodserve-no-migration",),
        paper="GoodServe §5 (Fig. 6: goodput vs SLO scale)",
        references_label="all baselines (paper's + deployed routers + ours)",
        references_note=(
            "all baselines = the paper's, plus {refs} (llm-d, sglang-cache-aware, dynamo-kv: "
            "deployed routers, not in the paper; prefix-aware-low, earliest-finish: our own; "
            "implied-triage: the per-request SLO's leak of the true output length as a rule)"
        ),
        attainment_xlabel="SLO scale α  (request meets SLO if latency ≤ α × run-alone latency)",
        takes_traces=True,
        metrics_note=(
            "goodput: requests finished within their E2E SLO (slo_scale × the request's run-alone "
            "latency on an A800) per second of the trace, higher is better; SLO violation "
            "ratio: share of requests that missed it (unfinished ones included)"
        ),
        # One decision per request (+ migration checks): 200 requests ≈ 200–300 decisions.
        train_defaults={"workload": "goodserve", "count": 200},
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
        # The autoscaling variant: RAG + reranker on 8 GPUs, 12 one-minute periods following a
        # training window of RAGPulse's hourly shape (base 3 workflows/s: peaks overload).
        train_defaults={
            "workload": "rag_reranker",
            "gpus": 8,
            "workflow_rate": 3.0,
            "rate_trace": "ragpulse_hourly",
            "periods": 12,
            "period_seconds": 60.0,
        },
        # +1 per workflow within its SLO: ~2,000 per episode of the default; scaled to ~2.
        train_reward_scale=1e-3,
    ),
}


def policy_family(name: str) -> str:
    """The family whose registered heuristics act in env ``name``: every version of an env
    (``routing-v1``) takes its family's (``routing``) policies."""
    return re.sub(r"-v\d+$", "", name)


def _versions() -> None:
    """``<family>-v0`` (the entry written out in :data:`FAMILIES`) and ``<family>-v1`` for
    every family; the plain ``<family>`` becomes the ``envs.DEFAULT_VERSION`` entry.
    Allocation-v1 trains on its default episode (v0's autoscaling training variant sets a rate
    trace, which a ramp excludes). Routing-v1's SLO is the task median, which carries no request's
    length, so the metrics note says so and ``implied-triage`` (the per-request basis's leak as a
    rule) is not among its references."""
    for short in ("pd-cluster", "routing", "allocation"):
        FAMILIES[f"{short}-v0"] = FAMILIES[short]
    FAMILIES["allocation-v1"] = replace(
        FAMILIES["allocation"],
        gym_id=CLI_ENVS["allocation-v1"][0],
        paper="Scepsy §7.2 (Fig. 6's throughput sweep as one episode: the rate ramps through the "
        "knee)",
        train_defaults={"workload": "rag_reranker"},
    )
    routing = FAMILIES["routing"]
    FAMILIES["pd-cluster-v1"] = replace(
        FAMILIES["pd-cluster"],
        gym_id=CLI_ENVS["pd-cluster-v1"][0],
    )
    FAMILIES["routing-v1"] = replace(
        routing,
        gym_id=CLI_ENVS["routing-v1"][0],
        own_references=tuple(r for r in routing.own_references if r != "implied-triage"),
        references_note=routing.references_note.replace(
            "; implied-triage: the per-request SLO's leak of the true output length as a rule", ""
        ),
        attainment_xlabel="SLO scale α  (request meets SLO if latency ≤ α × its task's median "
        "run-alone latency)",
        metrics_note=(
            "goodput: requests finished within their E2E SLO (slo_scale × the median run-alone "
            "latency on an A800 of the request's task) per second of the trace, higher is "
            "better; SLO violation ratio: share of requests that missed it (unfinished ones "
            "included)"
        ),
    )
    for short in ("pd-cluster", "routing", "allocation"):
        FAMILIES[short] = FAMILIES[f"{short}-{DEFAULT_VERSION}"]


_versions()


def family(name: str) -> EnvFamily:
    """The :data:`FAMILIES` entry of ``name``: a short name (``routing``) or a Gymnasium id
    (``servegym/Routing-v0``, also ``envs:servegym/Routing-v0``).

    :raises ValueError: for an unknown name, with the closest and all known names.
    """
    return FAMILIES[family_name(name)]


def family_name(name: str) -> str:
    """The :data:`FAMILIES` key of ``name`` (a short name or a Gymnasium id).

    :raises ValueError: for an unknown name, with the closest and all known names.
    """
    if name in FAMILIES:
        return name
    bare = name.removeprefix("envs:")
    for short, entry in FAMILIES.items():
        if entry.gym_id == bare:
            return short
    known = list(dict.fromkeys([*FAMILIES, *(e.gym_id for e in FAMILIES.values())]))
    # suggest a family's plain name before its versioned aliases
    plain = [k for k in known if not k.endswith(("-v0", "-v1"))]
    hint = did_you_mean(name, plain) or did_you_mean(name, known)
    raise ValueError(f"unknown env {name!r}{hint}; known: {', '.join(known)}")


@functools.cache
def family_options(name: str) -> type[EnvOptions]:
    """The options dataclass of env family ``name`` (``envs.common.options``; imports the env
    class)."""
    import importlib

    import gymnasium as gym

    module, _, cls = str(gym.spec(family(name).gym_id).entry_point).partition(":")
    options: type[EnvOptions] = getattr(importlib.import_module(module), cls).OPTIONS
    return options


def _first_sentence(text: str) -> str:
    flat = " ".join(text.replace("``", "").split())
    head, sep, _ = flat.partition(". ")
    return head + "." if sep else flat


def option_help(option: str, kwargs: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The ``--help`` text of command-line option ``option``: the first sentence of the
    docstring of the env option it sets, in each env family that takes it (``family: text``
    where the families' texts differ).

    :param kwargs: per family, command-line option -> env keyword (default: each family's
        ``options``).
    """
    from envs.common.options import option_docs

    texts: dict[str, str] = {}
    for name, entry in FAMILIES.items():
        mapping = entry.options if kwargs is None else kwargs.get(name, entry.options)
        if option in mapping:
            texts[name] = _first_sentence(option_docs(family_options(name))[mapping[option]])
    if len(set(texts.values())) == 1:
        return next(iter(texts.values()))
    return " | ".join(f"{name}: {text}" for name, text in texts.items())
