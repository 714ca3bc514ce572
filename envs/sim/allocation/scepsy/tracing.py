"""Scepsy §4 steps 1–2: workflow tracing and statistical workflow aggregation.

**Step 1 — workflow tracing.** Scepsy runs representative workflow-level requests on a
deployment and records, through an HTTP proxy in front of every LLM endpoint, each LLM-level
request with its start and end timestamps and a workflow id. "Tracing is not used to capture the
actual performance of this deployment, and can be parallelized by executing each workflow-level
request in an independent deployment" (§4). :func:`trace_workflows` does exactly that in the
simulator: every workflow runs **alone** (arrival 0) on its own reference deployment — one
whole-GPU replica per LLM at the smallest TP degree at which the model fits one GPU share
(:func:`~envs.sim.allocation.allocations.min_share_units`), with vLLM's automatic prefix caching as
``servegym/Allocation-v0`` serves (beam search's calls share prompt prefixes). The timestamps
therefore reflect the workflow's structure (fan-out, loops, tool time), not contention between
workflows. Each workflow's call times are relative to its own start.

**Step 2 — statistical workflow aggregation.** For every LLM ``m`` (:func:`workflow_stats`):

* ``n_m`` — mean calls of ``m`` per workflow over *all* traced workflows (a workflow that never
  calls ``m`` counts as 0).
* ``p_m`` — request-level parallelism from overlapping call intervals
  ``[revealed_at, decode_end]`` (the call's life at the LLM endpoint as the proxy sees it).
  Per workflow, ``Σ call durations / |∪ intervals|`` is the time-weighted mean number of ``m``'s
  calls in flight while at least one is. We aggregate **duration-weighted**:
  ``p_m = Σ_w Σ durations / Σ_w |∪ intervals|``. This is the choice that makes Eq. 1 exact on the
  trace: with ``L_m`` the mean call latency, ``n_m · L_m / p_m`` equals the mean time per
  workflow during which ``m`` is busy (``E[|∪|]``), i.e. ``m``'s latency contribution. (A plain
  mean of per-workflow ratios would over-weight short workflows.)

Combined workloads (``rag_beam_combined``) are several workflows to Scepsy (§5 "Scheduling
multiple workflows"): :func:`split_trace` separates a trace by family.

Example::

    trace = trace_workload("beam_search", count=50, seed=0)
    stats = workflow_stats(trace)          # WorkflowStats(name="beam_search", ...)
    stats_for("rag_reranker", count=100)   # generate + trace + aggregate
    stats_by_family("rag_beam_combined")   # {"rag_reranker": ..., "beam_search": ...}
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from envs.sim.allocation.allocations import TP_DEGREES, min_share_units
from envs.sim.allocation.scepsy.apl import WorkflowStats
from envs.sim.core.scheduler import DefaultScheduler
from envs.sim.core.simulation import CallRecord, LatencyCache, Simulation
from envs.sim.hardware.catalog import get_gpu, get_model
from envs.sim.hardware.cluster import ClusterSpec, InstanceSpec
from envs.sim.latency.efficiency import resolve_calibration_variant
from traces.generators.beam_search import PREFIX_BLOCK_TOKENS
from traces.schema import LLMNode, Workflow

#: Workload-family suffixes of combined-workload workflow ids (``combined-3-rag``).
FAMILY_SUFFIXES = {"rag": "rag_reranker", "beam": "beam_search"}


@dataclass(frozen=True)
class Trace:
    """LLM-level records of traced workflows (§4 step 1).

    :param name: workload name (what :class:`WorkflowStats` is called).
    :param workflows: the traced workflows (static DAGs, original arrivals and meta).
    :param records: one record per LLM call; times are seconds since the call's workflow started
        (each workflow ran alone).
    :param gpu: GPU type of the reference deployment.
    :param engine: serving engine of the reference deployment.
    :param source: provenance, e.g. ``{"generator": "beam_search", "seed": 0, "count": 50}``.
    :param prefix_cache_blocks: the reference deployment's prefix cache (see
        :func:`trace_workflows`).
    :param prefix_block_tokens: tokens per prefix-hash block it read.
    """

    name: str
    workflows: tuple[Workflow, ...]
    records: tuple[CallRecord, ...]
    gpu: str = "rtx-a6000"
    engine: str = "vllm"
    source: Mapping[str, object] = field(default_factory=dict)
    prefix_cache_blocks: int | str = "kv"
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS

    @property
    def models(self) -> tuple[str, ...]:
        """LLMs the traced workflows call, sorted."""
        return tuple(sorted({r.model for r in self.records}))

    def records_by_workflow(self) -> dict[str, dict[str, CallRecord]]:
        """workflow id -> node id -> record."""
        out: dict[str, dict[str, CallRecord]] = {w.id: {} for w in self.workflows}
        for r in self.records:
            out.setdefault(r.workflow_id, {})[r.node_id] = r
        return out

    @functools.cached_property
    def fingerprint(self) -> str:
        """Content hash of the workflows, the recorded call times and the reference deployment
        (keys on-disk profile caches; equal traces hash equally however they were made)."""
        h = hashlib.sha256()
        head = [
            self.name,
            self.gpu,
            self.engine,
            self.prefix_cache_blocks,
            self.prefix_block_tokens,
        ]
        h.update(json.dumps(head).encode())
        for w in self.workflows:
            h.update(repr((w.id, w.nodes)).encode())
        for r in self.records:
            h.update(
                repr(
                    (r.workflow_id, r.node_id, round(r.revealed_at, 9), round(r.decode_end, 9))
                ).encode()
            )
        return h.hexdigest()


def reference_cluster(
    models: Iterable[str], gpu: str = "rtx-a6000", name: str = "scepsy-trace"
) -> ClusterSpec:
    """One whole-GPU replica per model at the smallest TP of ``TP_DEGREES`` whose share of a GPU
    holds the weights and a long request's KV (the tracing deployment of §4 step 1).

    :raises ValueError: naming a model that fits no TP degree on ``gpu``.
    """
    get_gpu(gpu)  # UnknownNameError names the catalog's GPUs
    instances = []
    for i, m in enumerate(sorted(set(models))):
        get_model(m)
        tp = next((t for t in TP_DEGREES if min_share_units(m, gpu, t, 1) is not None), None)
        if tp is None:
            raise ValueError(
                f"model {m!r} fits no TP degree of {TP_DEGREES} on whole {gpu} GPUs; cannot "
                "build the tracing deployment"
            )
        instances.append(InstanceSpec(i, f"{m}-trace", "monolithic", gpu, m, tp, 1.0))
    return ClusterSpec(name, "monolithic", tuple(instances))


def _llm_models(workflows: Iterable[Workflow]) -> set[str]:
    return {n.model for w in workflows for n in w.nodes if isinstance(n, LLMNode)}


def trace_workflows(
    workflows: Sequence[Workflow],
    gpu: str = "rtx-a6000",
    engine: str = "vllm",
    seed: int = 0,
    *,
    name: str | None = None,
    source: Mapping[str, object] | None = None,
    prefix_cache_blocks: int | str = "kv",
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS,
    calibration_variant: str | None = None,
) -> Trace:
    """Trace ``workflows`` (§4 step 1): run each one alone, from time 0, on a reference
    deployment (:func:`reference_cluster`) in the simulator and record its LLM calls.

    :param workflows: the workflows to trace (their arrival times are ignored).
    :param gpu: GPU type of the reference deployment.
    :param engine: serving-engine preset.
    :param seed: simulation seed.
    :param prefix_cache_blocks: the instances' prefix cache (``"kv"``: vLLM's automatic prefix
        caching in free KV blocks, as ``servegym/Allocation-v0`` runs it; 0 = off).
    :param prefix_block_tokens: tokens per block of the workflows' ``prefix_hashes``.
    :param name: trace name (default: the workflows' common ``meta["workload"]``, else
        ``"workload"``).
    :param source: provenance stored on the trace.
    :param calibration_variant: per-op calibration of the reference deployment (``None``: the
        one in force, :func:`envs.sim.latency.efficiency.resolve_calibration_variant`).
    :raises ValueError: on an empty workload or duplicate workflow ids.
    """
    if not workflows:
        raise ValueError("cannot trace an empty workload: no workflows given")
    counts = Counter(w.id for w in workflows)
    if len(counts) != len(workflows):
        dup = sorted(i for i, k in counts.items() if k > 1)
        raise ValueError(f"workflow ids must be unique to trace them; duplicated: {dup[:5]}")
    models = _llm_models(workflows)
    if not models:
        raise ValueError("the workflows call no LLM; nothing to trace")
    cluster = reference_cluster(models, gpu)
    cache = LatencyCache(calibration_variant=calibration_variant)
    scheduler = DefaultScheduler()
    records: list[CallRecord] = []
    for w in workflows:
        alone = Workflow(w.id, 0.0, w.nodes, meta=w.meta)
        sim = Simulation(
            cluster,
            [alone],
            seed=seed,
            engine=engine,
            compute_horizons=False,
            online_horizons=False,
            latency_cache=cache,
            prefix_cache_blocks=prefix_cache_blocks,
            prefix_block_tokens=prefix_block_tokens,
        )
        res = sim.run(scheduler)
        unfinished = [c.node_id for c in res.calls if c.decode_end < 0]
        if unfinished:
            raise RuntimeError(
                f"tracing workflow {w.id!r}: calls {unfinished[:5]} did not finish on the "
                "reference deployment"
            )
        records.extend(res.calls)
    if name is None:
        fams = {str(w.meta.get("workload", "")) for w in workflows}
        name = fams.pop() if len(fams) == 1 and "" not in fams else "workload"
    return Trace(
        name,
        tuple(workflows),
        tuple(records),
        gpu,
        engine,
        dict(source or {}),
        prefix_cache_blocks,
        prefix_block_tokens,
    )


#: Workflows traced when no count is given (the APL's statistics and the replayed requests).
#: Beam search's invocation count is heavy-tailed (lognormal, mean ~172 generator calls): 100
#: traced workflows (seed 0) gave n_m = 146, 400 give 164, a sampling error of ~5 %.
TRACE_COUNT = 400


def trace_workload(
    workload: str,
    count: int | None = None,
    seed: int = 0,
    *,
    gpu: str = "rtx-a6000",
    engine: str = "vllm",
    prefix_cache_blocks: int | str = "kv",
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS,
    calibration_variant: str | None = None,
) -> Trace:
    """Generate ``count`` workflows (default :data:`TRACE_COUNT`) of the registered generator
    ``workload`` (seed ``seed``) and trace them (:func:`trace_workflows`, which documents the
    other parameters). Memoised per process: tracing 400 beam searches takes over a minute, and
    the APL's statistics and the profiler's replayed requests come from the same trace. The
    returned :class:`Trace` is shared, so treat it (and its records) as read-only."""
    count = TRACE_COUNT if count is None else count
    variant = resolve_calibration_variant(calibration_variant)
    return _trace_workload(
        workload, count, seed, gpu, engine, prefix_cache_blocks, prefix_block_tokens, variant
    )


@functools.lru_cache(maxsize=16)
def _trace_workload(
    workload: str,
    count: int,
    seed: int,
    gpu: str,
    engine: str,
    prefix_cache_blocks: int | str,
    prefix_block_tokens: int,
    calibration_variant: str,
) -> Trace:
    from traces.generators import generate

    wfs = [w for w in generate(workload, seed=seed, count=count) if isinstance(w, Workflow)]
    if not wfs:
        raise ValueError(f"generator {workload!r} produced no workflows (count={count})")
    src = {"generator": workload, "seed": seed, "count": len(wfs)}
    return trace_workflows(
        wfs,
        gpu,
        engine,
        seed,
        name=workload,
        source=src,
        prefix_cache_blocks=prefix_cache_blocks,
        prefix_block_tokens=prefix_block_tokens,
        calibration_variant=calibration_variant,
    )


def workflow_family(workflow: Workflow) -> str:
    """The workload family of a workflow: ``meta["workload"]``, else the id's suffix
    (``combined-3-rag`` -> ``rag_reranker``, see :data:`FAMILY_SUFFIXES`).

    :raises ValueError: if neither names a family.
    """
    fam = workflow.meta.get("workload")
    if fam:
        return str(fam)
    return family_of_id(workflow.id)


def family_of_id(workflow_id: str) -> str:
    """Family from a combined-workload workflow id's suffix (``combined-3-beam``)."""
    suffix = workflow_id.rsplit("-", 1)[-1]
    if suffix not in FAMILY_SUFFIXES:
        raise ValueError(
            f"workflow {workflow_id!r} has no workload family: no meta['workload'] and its id "
            f"suffix {suffix!r} is none of {sorted(FAMILY_SUFFIXES)}"
        )
    return FAMILY_SUFFIXES[suffix]


def split_trace(trace: Trace) -> dict[str, Trace]:
    """Split a trace of a combined workload into one trace per workflow family
    (:func:`workflow_family`); Scepsy schedules each family as its own workflow (§5)."""
    groups: dict[str, list[Workflow]] = defaultdict(list)
    for w in trace.workflows:
        groups[workflow_family(w)].append(w)
    out = {}
    for fam, wfs in groups.items():
        ids = {w.id for w in wfs}
        recs = tuple(r for r in trace.records if r.workflow_id in ids)
        src = {**trace.source, "family": fam}
        out[fam] = dataclasses.replace(
            trace, name=fam, workflows=tuple(wfs), records=recs, source=src
        )
    return out


def split_records(records: Iterable[CallRecord]) -> dict[str, list[CallRecord]]:
    """Split bare call records of a combined workload by workflow-id suffix
    (:func:`family_of_id`); prefer :func:`split_trace`, which also uses ``meta``."""
    out: dict[str, list[CallRecord]] = defaultdict(list)
    for r in records:
        out[family_of_id(r.workflow_id)].append(r)
    return dict(out)


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Measure of the union of closed intervals ``[a, b]``."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def workflow_stats(
    trace: Trace | Sequence[CallRecord],
    name: str | None = None,
    *,
    models: Sequence[str] | None = None,
    workflows: int | None = None,
) -> WorkflowStats:
    """``n_m`` and ``p_m`` of every LLM (§4 step 2; the aggregation rules are in the module
    docstring).

    :param trace: a :class:`Trace`, or bare call records (then the workflows are the distinct
        ``workflow_id`` values unless ``workflows`` says how many were traced — workflows that
        made no LLM call at all are invisible in records).
    :param name: stats name (default: the trace's name).
    :param models: LLMs to report (default: every LLM in the trace).
    :param workflows: number of traced workflows (bare records only).
    :raises ValueError: on an empty trace, an unfinished call, or a requested model the trace
        never calls.
    """
    if isinstance(trace, Trace):
        records: Sequence[CallRecord] = trace.records
        n_wf = len(trace.workflows)
        name = trace.name if name is None else name
        if workflows is not None and workflows != n_wf:
            raise ValueError(f"workflows={workflows} contradicts the trace's {n_wf} workflows")
    else:
        records = list(trace)
        n_wf = workflows if workflows is not None else len({r.workflow_id for r in records})
        name = "workload" if name is None else name
    if not records or n_wf <= 0:
        raise ValueError(f"{name}: empty trace (no LLM calls / no workflows)")
    bad = [f"{r.workflow_id}/{r.node_id}" for r in records if r.decode_end < 0]
    if bad:
        raise ValueError(f"{name}: unfinished calls in the trace, e.g. {bad[:3]}")
    by_model: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in records:
        by_model[r.model][r.workflow_id].append((r.revealed_at, r.decode_end))
    seen = sorted(by_model)
    if models is None:
        models = seen
    for m in models:
        get_model(m)  # UnknownNameError for names outside the catalog
        if m not in by_model:
            raise ValueError(f"{name}: model {m!r} is absent from the trace; it calls {seen}")
    n: dict[str, float] = {}
    p: dict[str, float] = {}
    for m in models:
        calls = busy = union = 0.0
        for intervals in by_model[m].values():
            calls += len(intervals)
            busy += sum(b - a for a, b in intervals)
            union += union_length(intervals)
        if not union > 0:
            raise ValueError(f"{name}: every call of {m!r} has zero duration; p_m is undefined")
        n[m] = calls / n_wf
        p[m] = max(1.0, busy / union)  # >= 1 exactly; max() only absorbs float rounding
    return WorkflowStats(name, n, p, workflows=n_wf)


def stats_for(
    workload: str,
    count: int | None = None,
    seed: int = 0,
    *,
    gpu: str = "rtx-a6000",
    engine: str = "vllm",
) -> WorkflowStats:
    """Generate, trace and aggregate a registered single-family workload.

    :raises ValueError: for a workload of several families (use :func:`stats_by_family`).
    """
    trace = trace_workload(workload, count, seed, gpu=gpu, engine=engine)
    families = sorted({workflow_family(w) for w in trace.workflows})
    if len(families) > 1:
        raise ValueError(
            f"workload {workload!r} mixes workflow families {families}; Scepsy treats each as "
            "its own workflow: use stats_by_family()"
        )
    return workflow_stats(trace)


def stats_by_family(
    workload: str,
    count: int | None = None,
    seed: int = 0,
    *,
    gpu: str = "rtx-a6000",
    engine: str = "vllm",
) -> dict[str, WorkflowStats]:
    """Generate and trace a registered workload, then aggregate each workflow family
    separately (:func:`split_trace`); a single-family workload gives one entry."""
    trace = trace_workload(workload, count, seed, gpu=gpu, engine=engine)
    return {fam: workflow_stats(t) for fam, t in split_trace(trace).items()}
