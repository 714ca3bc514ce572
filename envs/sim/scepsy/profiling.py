"""Scepsy §4 step 3: per-LLM throughput–latency profiles by replaying traced requests.

"For each LLM, Scepsy replays all the requests for a given LLM across all execution traces, at
varying arrival rates, and maintaining inter-request dependencies within each trace [...] sweeps
the arrival rate from low load to saturation (i.e., maximum throughput), and for each point
records latency at various percentile points and on average. The replay is repeated at multiple
tensor parallelism degrees" (§4). Here one replica of LLM ``m`` at a (TP, GPU share) runs alone
in the simulator (:func:`profile_llm`); :func:`profile_set` covers every feasible (TP, share).

**Projection** (:func:`project_workflow`). Each traced workflow is projected onto ``m``'s calls:
an ``m``-call's parents become its *nearest* ``m``-ancestors, reached through any chain of
non-``m`` nodes (other LLMs, tools); calls without an ``m``-ancestor are sources. A beam-search
step's 8 generator calls thus still arrive together, and step ``s+1``'s only after *all* of step
``s``'s have finished (through the verifiers and the select tool). Replaying calls one at a time
loses this burstiness and under-predicts latency.

**Gaps.** We keep the traced time the workflow spent outside ``m`` as :class:`ToolNode` delays:
a call with ``m``-parents waits ``gap = start − max(parents' end)`` after its last ``m``-parent
finishes (e.g. the verifier call and the select tool between two generator steps), and a source
waits its traced offset from the workflow's first ``m``-call. Without the gaps a workflow's
``m``-calls would arrive in back-to-back bursts that ``m`` never sees in deployment, where the
other LLMs take real time; the paper replays real traces, whose timing includes those gaps. The
gaps are the reference deployment's (no contention there), so they do not grow with load.
Calls sharing parents and a gap share one delay node. ``keep_gaps=False`` drops them.

**Replay** (:func:`replay_point`). The projected workflows are drawn by cycling through seeded
permutations of all projections (every traced workflow is replayed, equally often) and arrive as
a Poisson process conditioned on its count: sorted uniform arrival times on ``[0, T]``,
``T = calls / rate``, so the offered LLM call rate over ``[0, T]`` is exactly ``rate``
(``= λ_w · n_m``). Enough workflows are drawn that ``T`` spans ``warmup_spans + span_factor``
call-weighted projected-workflow spans (capped by ``max_calls``). The measurement window is
``[t0, T]`` with ``t0`` the warm-up (the system starts empty); a point's latency statistics are
over the calls revealed in the window (reveal to last token, queueing included). The simulation
stops at ``T + max(T/4, 2 · longest span)``; window calls unfinished then count with their
censored latency.

**Knee rule** (:func:`knee_throughput`). A point is *sustained* when the replica is still at the
knee of its throughput–latency curve, where the queue is stable: at least ``1 − tolerance``
(default 99 %) of the calls *offered* in the window — those whose open-loop time falls in it —
have finished by the end of the replay (the window's end plus the drain below; counting only
completions *inside* the window would charge long workflows, whose last calls shift past the
window end under any load, with a deficit of ~1 % that is not backlog), no window call is left
unfinished, and the window calls' median latency is at most ``latency_factor`` (default 2) × the
*unloaded* median: the median call latency when every projected workflow runs alone on this
replica (:func:`isolated_timing`). A call's open-loop time is its workflow's arrival plus the
call's offset when the projected workflow runs alone on this replica (a quarter GPU stretches
every workflow, and only contention should count as falling behind). Completions cannot be
compared with *reveals*: dependent calls are revealed only as fast as their parents complete.
Borderline failures are confirmed with a second seed (``confirm``). The sweep starts at
``start`` (5 %) of a rough capacity (:func:`burst_capacity`: every workflow at once), multiplies
the rate by ``growth`` (1.6) until a point is not sustained (divides while even the first is
not), then bisects (``refine`` geometric midpoints) between the last sustained and the first
unsustained rate. ``T_m`` (``max_throughput``) is the completion rate ``rate · min(1, finished
/ offered)`` at the highest swept rate at and below which every point is sustained. Scepsy §4
sweeps "from low load to saturation (i.e., maximum throughput)" without saying where saturation
is read; reading it at deep backlog (the rule before issue 29: ≥ 90 % completion, no latency
bound) credited a quarter-GPU verifier share with ~1.26× the rate it serves with a stable queue,
because throughput keeps creeping up with the backlog's batch size. The knee is where a
deployment planned on ``T_m`` still has bounded latency. Points above ``T_m`` are kept (for
plots); :meth:`LLMProfile.latency` treats rates ``>= T_m`` as saturated.

**Co-located shares** (``neighbour``). A share below one GPU is an MPS partition: its SMs and
memory are its own, HBM bandwidth is contended with whatever shares the GPU
(:func:`envs.sim.latency.contended_bandwidth_shares`). A share alone would be profiled with the
whole GPU's bandwidth, which the deployed replica has only while its neighbours idle. So by
default (``neighbour="busy"``) a sub-GPU share is profiled as one of a co-located pair: the rest
of each of its GPUs is an MPS partition that is busy throughout (it keeps its demand on HBM);
the profile is what the share sustains when the GPU is fully used, the regime the search plans
for. ``"idle"`` profiles the share alone on its GPU (the optimistic bound) and ``"static"`` with
bandwidth proportional to the share (the model before MPS partitions; its cache keys are the old
ones). Whole-GPU profiles are the same in every mode.

**Cache.** :func:`profile_set` stores each profile as JSON under
``$SERVEGYM_CACHE/scepsy-profiles`` (default ``~/.cache/servegym/scepsy-profiles``), keyed by a
hash of the full configuration (model, GPU, TP, share, engine, the trace's content hash and
provenance, every replay parameter and :data:`PROFILE_VERSION`). A hit skips the simulation.

CLI::

    python -m envs.sim.scepsy.profiling --workload rag_reranker --units-per-gpu 4 --tp 1 2
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import heapq
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.sim.allocation import TP_DEGREES, min_share_units
from envs.sim.catalog import get_gpu, get_model
from envs.sim.cluster import ClusterSpec, InstanceSpec
from envs.sim.engines import get_engine
from envs.sim.scepsy.apl import LLMProfile, ProfilePoint, ProfileSet
from envs.sim.scepsy.tracing import Trace, trace_workflows, trace_workload
from envs.sim.scheduler import DefaultScheduler
from envs.sim.simulation import CallRecord, LatencyCache, Simulation
from traces.generators.beam_search import PREFIX_BLOCK_TOKENS
from traces.schema import LLMNode, Node, ToolNode, Workflow

#: Bump when the profiling method changes: invalidates every cached profile.
#: 2: T_m read at the knee (>= 99 % completion, p50 <= 2x unloaded; issue 29).
#: 3: completion = offered window calls finished by the end of the replay (not in the window).
#: (Sub-GPU shares' keys also carry their ``neighbour`` mode unless ``static``: issue 29's MPS
#: partitions re-profile those shares only; whole-GPU profiles keep their keys.)
PROFILE_VERSION = 3
#: Per-cycle XOR salts of replayed prefix hashes (fixed: replays are reproducible).
_SALTS = tuple(int(x) for x in np.random.default_rng(20261201).integers(1, 2**62, 1024))
#: Gaps at most this long (seconds) are dropped instead of becoming delay nodes.
_GAP_EPS = 1e-9


# -- projection -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Projection:
    """One traced workflow projected onto LLM ``model``'s calls (see the module docstring).

    :param workflow_id: the traced workflow.
    :param model: the LLM.
    :param nodes: ``model``'s :class:`LLMNode` s with parents rewritten, plus gap
        :class:`ToolNode` s (ids ``gap<k>``) when gaps are kept.
    :param span: seconds from the first ``model``-call's start to the last one's end (traced;
        :func:`isolated_timing` re-measures it on the profiled replica).
    :param offsets: per ``model``-call (in ``nodes`` order), its open-loop start in seconds after
        the projection's first call: the traced start with gaps kept, else the earliest start the
        projected DAG allows with the traced call durations; empty without trace records
        (:func:`isolated_timing` re-measures them on the profiled replica).
    """

    workflow_id: str
    model: str
    nodes: tuple[Node, ...]
    span: float
    offsets: tuple[float, ...] = ()

    @property
    def calls(self) -> int:
        return sum(1 for n in self.nodes if isinstance(n, LLMNode))


def _topo_order(workflow: Workflow) -> list[Node]:
    """Nodes in a topological order; ties in the workflow's node order."""
    by_id = {n.id: n for n in workflow.nodes}
    index = {n.id: k for k, n in enumerate(workflow.nodes)}
    children: dict[str, list[str]] = {n.id: [] for n in workflow.nodes}
    indeg = {n.id: len(n.parents) for n in workflow.nodes}
    for n in workflow.nodes:
        for p in n.parents:
            if p not in by_id:
                raise ValueError(
                    f"workflow {workflow.id!r}: node {n.id!r} names unknown parent {p!r}"
                )
            children[p].append(n.id)
    ready = [index[n.id] for n in workflow.nodes if not n.parents]
    heapq.heapify(ready)
    order = []
    while ready:
        node = workflow.nodes[heapq.heappop(ready)]
        order.append(node)
        for c in children[node.id]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, index[c])
    if len(order) != len(workflow.nodes):
        raise ValueError(f"workflow {workflow.id!r} has a dependency cycle")
    return order


def projected_parents(workflow: Workflow, model: str) -> dict[str, tuple[str, ...]]:
    """``model``-call id -> ids of its nearest ``model``-ancestors (through non-``model``
    nodes), in topological order (ties: node order); sources map to ``()``."""
    frontier: dict[str, frozenset[str]] = {}
    out: dict[str, tuple[str, ...]] = {}
    index = {n.id: k for k, n in enumerate(workflow.nodes)}
    for node in _topo_order(workflow):
        inherited = frozenset().union(*(frontier[p] for p in node.parents))
        if isinstance(node, LLMNode) and node.model == model:
            out[node.id] = tuple(sorted(inherited, key=index.__getitem__))
            frontier[node.id] = frozenset((node.id,))
        else:
            frontier[node.id] = inherited
    return out


def project_workflow(
    workflow: Workflow,
    model: str,
    records: Mapping[str, CallRecord] | None = None,
    *,
    keep_gaps: bool = True,
) -> Projection | None:
    """Project ``workflow`` onto ``model``'s calls (§4 step 3 "maintaining inter-request
    dependencies"); None if it never calls ``model``.

    :param records: node id -> traced record of the workflow's calls; needed for the gaps and
        the span (``keep_gaps=False`` without records gives span 0).
    :param keep_gaps: insert the traced non-``model`` time as tool delays.
    :raises ValueError: if gaps are requested without records, or a record is missing.
    """
    parents = projected_parents(workflow, model)
    if not parents:
        return None
    llm = {n.id: n for n in workflow.nodes if isinstance(n, LLMNode) and n.id in parents}
    if records is None:
        if keep_gaps:
            raise ValueError(
                f"workflow {workflow.id!r}: keeping the traced gaps needs the call records"
            )
        nodes = tuple(_with_parents(llm[i], parents[i]) for i in parents)
        return Projection(workflow.id, model, nodes, 0.0)
    missing = [i for i in parents if i not in records]
    if missing:
        raise ValueError(f"workflow {workflow.id!r}: no trace record for {model} calls {missing}")
    start = {i: records[i].revealed_at for i in parents}
    end = {i: records[i].decode_end for i in parents}
    origin = min(start.values())
    span = max(end.values()) - origin
    if not keep_gaps:
        nodes = tuple(_with_parents(llm[i], parents[i]) for i in parents)
        t: dict[str, float] = {}
        for i, ps in parents.items():  # topological order
            t[i] = max((t[p] + end[p] - start[p] for p in ps), default=0.0)
        return Projection(workflow.id, model, nodes, span, tuple(t[i] for i in parents))
    gap_nodes: dict[tuple[tuple[str, ...], float], str] = {}
    out: list[Node] = []
    for i, ps in parents.items():
        ready = max((end[p] for p in ps), default=origin)
        gap = start[i] - ready
        if gap < -1e-6:
            raise ValueError(
                f"workflow {workflow.id!r}: call {i!r} starts {-gap:.3g} s before its parents "
                "end; the trace contradicts the DAG"
            )
        gap = max(0.0, gap)
        if gap <= _GAP_EPS:
            out.append(_with_parents(llm[i], ps))
            continue
        key = (ps, round(gap, 9))
        gid = gap_nodes.get(key)
        if gid is None:
            gid = f"gap{len(gap_nodes)}"
            gap_nodes[key] = gid
            out.append(ToolNode(gid, key[1], ps, "gap"))
        out.append(_with_parents(llm[i], (gid,)))
    offsets = {i: start[i] - origin for i in parents}
    order = tuple(offsets[n.id] for n in out if isinstance(n, LLMNode))
    return Projection(workflow.id, model, tuple(out), span, order)


def _with_parents(node: LLMNode, parents: tuple[str, ...]) -> LLMNode:
    return LLMNode(
        node.id,
        node.model,
        node.input_tokens,
        node.output_tokens,
        parents,
        node.task,
        node.prompt,
        node.prefix_hashes,
    )


def project_trace(trace: Trace, model: str, *, keep_gaps: bool = True) -> list[Projection]:
    """Projections of every traced workflow that calls ``model``.

    :raises ValueError: if no traced workflow calls ``model``.
    """
    get_model(model)
    recs = trace.records_by_workflow()
    out = []
    for w in trace.workflows:
        p = project_workflow(w, model, recs.get(w.id, {}), keep_gaps=keep_gaps)
        if p is not None:
            out.append(p)
    if not out:
        raise ValueError(
            f"model {model!r} is absent from workload {trace.name!r}; it calls {list(trace.models)}"
        )
    return out


def independent_calls(projections: Sequence[Projection]) -> list[Projection]:
    """Every call of ``projections`` as its own one-call projection (no dependencies, no fan-out):
    the one-at-a-time replay that Scepsy's "maintaining inter-request dependencies" rules out;
    kept as the ablation baseline."""
    out = []
    for p in projections:
        calls = [n for n in p.nodes if isinstance(n, LLMNode)]
        for n in calls:
            node = _with_parents(n, ())
            out.append(Projection(f"{p.workflow_id}/{n.id}", p.model, (node,), 0.0, (0.0,)))
    return out


# -- replay ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplayResult:
    """One replay at one offered call rate.

    :param point: the profile point (window latency statistics, achieved throughput).
    :param workflows: projected workflows replayed.
    :param offered: calls whose open-loop time (workflow arrival + the call's offset) falls in
        the window.
    :param completed: calls completed inside the window (the point's throughput).
    :param sustained: ``finished >= (1 − tolerance) · offered``, no window call unfinished and
        the window's median latency within the bound (the knee rule, module docstring).
    :param window: the measurement window ``(start, end)`` in seconds.
    :param censored: window calls unfinished at the time limit (latency censored).
    :param wall: wall seconds of the simulation.
    :param latencies: the window calls' latencies, seconds.
    :param finished: offered calls that completed by the end of the replay (whenever).
    """

    point: ProfilePoint
    workflows: int
    offered: int
    completed: int
    sustained: bool
    window: tuple[float, float]
    censored: int
    wall: float
    latencies: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    finished: int = 0


#: How a sub-GPU share is profiled (see the module docstring): next to a busy partition, alone
#: on its GPU, or with bandwidth proportional to the share.
NEIGHBOURS = ("busy", "idle", "static")
#: ``ClusterSpec.description`` of a profile cluster whose GPUs' free shares are busy neighbours.
_BUSY_NEIGHBOUR = "profile: the rest of each GPU is a busy co-located partition"


def replica_cluster(
    model: str, tp: int, fraction: float, gpu: str, neighbour: str = "busy"
) -> ClusterSpec:
    """A one-instance monolithic cluster: ``model`` at ``tp`` on ``fraction`` of each GPU, with
    ``neighbour`` on the rest of each GPU (one of :data:`NEIGHBOURS`; ignored for whole GPUs).

    :raises ValueError: on an unknown ``neighbour``.
    """
    if neighbour not in NEIGHBOURS:
        raise ValueError(f"neighbour must be one of {NEIGHBOURS}, got {neighbour!r}")
    shared = fraction < 1 and neighbour != "static"
    spec = InstanceSpec(
        0,
        f"{model}-tp{tp}-{fraction:g}",
        "monolithic",
        gpu,
        model,
        tp,
        fraction,
        gpu_ids=tuple((0, g) for g in range(tp)) if shared else (),
    )
    busy = shared and neighbour == "busy"
    return ClusterSpec(
        f"profile-{model}", "monolithic", (spec,), description=_BUSY_NEIGHBOUR if busy else ""
    )


def _draw(projections: Sequence[Projection], workflows: int, rng: np.random.Generator) -> list[int]:
    order: list[int] = []
    while len(order) < workflows:
        order.extend(rng.permutation(len(projections)).tolist())
    return order[:workflows]


def _salted(nodes: tuple[Node, ...], salt: int) -> tuple[Node, ...]:
    """A replayed copy of a projection whose prefix hashes are XORed with ``salt`` (0: kept):
    two copies of one traced workflow then share no cached prefix (distinct requests in
    deployment), while the calls of one copy share exactly what they shared in the trace."""
    if not salt:
        return nodes
    out: list[Node] = []
    for n in nodes:
        if isinstance(n, LLMNode) and n.prefix_hashes:
            n = LLMNode(
                n.id,
                n.model,
                n.input_tokens,
                n.output_tokens,
                n.parents,
                n.task,
                n.prompt,
                tuple(h ^ salt for h in n.prefix_hashes),
            )
        out.append(n)
    return tuple(out)


def _simulate(
    projections: Sequence[Projection],
    picks: Sequence[int],
    times: np.ndarray,
    cluster: ClusterSpec,
    seed: int,
    engine: str,
    latency_cache: LatencyCache | None,
    time_limit: float | None = None,
    prefix_cache_blocks: int | str = "kv",
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS,
) -> Any:
    # picks cycle through permutations of the projections: copy j is in cycle j // len
    cycle = len(projections)
    wfs = [
        Workflow(
            f"{projections[k].workflow_id}#{j}",
            float(times[j]),
            _salted(projections[k].nodes, _SALTS[j // cycle % len(_SALTS)] if j >= cycle else 0),
        )
        for j, k in enumerate(picks)
    ]
    sim = Simulation(
        cluster,
        wfs,
        seed=seed,
        engine=engine,
        compute_horizons=False,
        online_horizons=False,
        latency_cache=latency_cache,
        time_limit=time_limit,
        prefix_cache_blocks=prefix_cache_blocks,
        prefix_block_tokens=prefix_block_tokens,
    )
    if cluster.description == _BUSY_NEIGHBOUR:
        sim.shared_gpus.fill_with_busy_neighbours()
    return sim.run(DefaultScheduler())


def replay_point(
    projections: Sequence[Projection],
    cluster: ClusterSpec,
    rate: float,
    *,
    workflows: int,
    seed: int = 0,
    engine: str = "vllm",
    warmup: float | Callable[[float], float] = 0.25,
    tolerance: float = 0.01,
    latency_bound: float = math.inf,
    latency_cache: LatencyCache | None = None,
    prefix_cache_blocks: int | str = "kv",
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS,
) -> ReplayResult:
    """Replay ``workflows`` projected workflows on ``cluster`` at LLM call rate ``rate``
    (calls/s; the module docstring gives the arrival process, the window and the rule).

    :param warmup: window start as a share of the arrival span ``T``, or a function of ``T``
        giving it in seconds.
    :param tolerance: sustained if at least ``1 − tolerance`` of the offered window calls
        complete in the window.
    :param latency_bound: sustained only if the window calls' median latency is at most this,
        seconds (the knee rule's ``latency_factor`` × unloaded median; ``inf``: no bound).
    :param prefix_cache_blocks: the replica's prefix cache (see :class:`ReplayConfig`).
    :param prefix_block_tokens: tokens per block of the calls' ``prefix_hashes``.
    :raises ValueError: on an empty projection list, a non-positive rate or an empty window.
    """
    if not projections:
        raise ValueError("nothing to replay: no projected workflows")
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a positive number of calls/s, got {rate}")
    if workflows < 1:
        raise ValueError(f"workflows must be >= 1, got {workflows}")
    rng = np.random.default_rng(seed)
    picks = _draw(projections, workflows, rng)
    horizon = sum(projections[k].calls for k in picks) / rate
    times = np.sort(rng.uniform(0.0, horizon, workflows))
    t0 = warmup(horizon) if callable(warmup) else warmup * horizon
    t1 = horizon
    if not 0 <= t0 < t1:
        raise ValueError(f"measurement window [{t0}, {t1}] s is empty; check `warmup`")
    longest = max(projections[k].span for k in picks)
    limit = horizon + max(0.25 * horizon, 2.0 * longest)
    res = _simulate(
        projections,
        picks,
        times,
        cluster,
        seed,
        engine,
        latency_cache,
        limit,
        prefix_cache_blocks,
        prefix_block_tokens,
    )
    offered_ids: set[tuple[str, str]] = set()
    for j, k in enumerate(picks):
        p = projections[k]
        wid = f"{p.workflow_id}#{j}"
        ids = [n.id for n in p.nodes if isinstance(n, LLMNode)]
        if p.offsets:
            offered_ids.update(
                (wid, i) for i, o in zip(ids, p.offsets, strict=True) if t0 <= times[j] + o <= t1
            )
        elif t0 <= times[j] <= t1:  # untimed projection: its calls count at its arrival
            offered_ids.update((wid, i) for i in ids)
    offered = len(offered_ids)
    if offered == 0:
        raise RuntimeError(
            f"replay at {rate:.4g} calls/s offered no call in its window [{t0:.3g}, {t1:.3g}] s;"
            " raise `workflows`"
        )
    completed = sum(1 for c in res.calls if c.decode_end >= 0 and t0 <= c.decode_end <= t1)
    finished = sum(
        1 for c in res.calls if c.decode_end >= 0 and (c.workflow_id, c.node_id) in offered_ids
    )
    lat = []
    censored = 0
    for c in res.calls:
        if t0 <= c.revealed_at <= t1:
            if c.decode_end >= 0:
                lat.append(c.decode_end - c.revealed_at)
            else:
                lat.append(res.end_time - c.revealed_at)
                censored += 1
    if not lat:
        raise RuntimeError(
            f"replay at {rate:.4g} calls/s revealed no call in its window [{t0:.3g}, {t1:.3g}] s;"
            " raise `workflows`"
        )
    arr = np.asarray(lat)
    point = _point(rate, completed / (t1 - t0), arr, finished / offered, censored)
    sustained = _sustained(point, finished, offered, censored, tolerance, latency_bound)
    return ReplayResult(
        point,
        workflows,
        offered,
        completed,
        sustained,
        (t0, t1),
        censored,
        res.wall_seconds,
        arr,
        finished,
    )


def _sustained(
    point: ProfilePoint,
    completed: int,
    offered: int,
    censored: int,
    tolerance: float,
    latency_bound: float,
) -> bool:
    return censored == 0 and completed >= (1.0 - tolerance) * offered and point.p50 <= latency_bound


def _point(
    rate: float,
    throughput: float,
    latencies: np.ndarray,
    completion: float = 1.0,
    censored: int = 0,
) -> ProfilePoint:
    return ProfilePoint(
        rate=float(rate),
        throughput=float(throughput),
        mean=float(latencies.mean()),
        p50=float(np.percentile(latencies, 50)),
        p90=float(np.percentile(latencies, 90)),
        p95=float(np.percentile(latencies, 95)),
        p99=float(np.percentile(latencies, 99)),
        calls=len(latencies),
        completion=float(completion),
        censored=int(censored),
    )


def knee_throughput(
    points: Sequence[ProfilePoint],
    unloaded_p50: float,
    *,
    min_completion: float = 0.99,
    latency_factor: float = 2.0,
) -> float:
    """``T_m`` read at the knee of a throughput–latency sweep (module docstring): the completion
    rate ``rate · min(1, completion)`` at the highest swept rate at and below which every point
    completes at least ``min_completion`` of its offered calls, leaves none unfinished, and has a
    median latency at most ``latency_factor × unloaded_p50`` (a queue that is still stable).

    :param points: the sweep (any order).
    :param unloaded_p50: median call latency with nothing queued, seconds (> 0).
    :raises ValueError: for no points, a non-positive ``unloaded_p50`` or factor, a completion
        outside (0, 1], or when even the lowest swept rate is past the knee.
    """
    if not points:
        raise ValueError("knee_throughput needs at least one profile point")
    if not (unloaded_p50 > 0 and math.isfinite(unloaded_p50)):
        raise ValueError(f"unloaded_p50 must be a positive number of seconds, got {unloaded_p50}")
    if not latency_factor >= 1.0:
        raise ValueError(f"latency_factor must be >= 1, got {latency_factor}")
    if not 0.0 < min_completion <= 1.0:
        raise ValueError(f"min_completion must be in (0, 1], got {min_completion}")
    best: ProfilePoint | None = None
    for p in sorted(points, key=lambda q: q.rate):
        if p.completion < min_completion or p.censored or p.p50 > latency_factor * unloaded_p50:
            break
        best = p
    if best is None:
        low = min(points, key=lambda q: q.rate)
        raise ValueError(
            f"the lowest swept rate {low.rate:.4g} calls/s is already past the knee (completion "
            f"{low.completion:.3f} < {min_completion} or p50 {low.p50:.4g} s > {latency_factor} x "
            f"unloaded {unloaded_p50:.4g} s); start the sweep lower"
        )
    return best.rate * min(1.0, best.completion)


def merge_replays(
    results: Sequence[ReplayResult], tolerance: float, latency_bound: float = math.inf
) -> ReplayResult:
    """Pool replays of one rate (different seeds): latencies pooled, counts and window
    lengths summed, sustained judged on the pooled counts and latencies (knee rule)."""
    if len({r.point.rate for r in results}) != 1:
        raise ValueError("can only merge replays of one rate")
    lat = np.concatenate([r.latencies for r in results])
    span = sum(r.window[1] - r.window[0] for r in results)
    offered = sum(r.offered for r in results)
    completed = sum(r.completed for r in results)
    finished = sum(r.finished for r in results)
    censored = sum(r.censored for r in results)
    point = _point(results[0].point.rate, completed / span, lat, finished / offered, censored)
    return ReplayResult(
        point,
        sum(r.workflows for r in results),
        offered,
        completed,
        _sustained(point, finished, offered, censored, tolerance, latency_bound),
        results[0].window,
        censored,
        sum(r.wall for r in results),
        lat,
        finished,
    )


def isolated_timing(
    projections: Sequence[Projection],
    cluster: ClusterSpec,
    *,
    seed: int = 0,
    engine: str = "vllm",
    latency_cache: LatencyCache | None = None,
    prefix_cache_blocks: int | str = "kv",
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS,
    unloaded: list[float] | None = None,
) -> list[Projection]:
    """``projections`` with ``offsets`` and ``span`` re-measured by running each one alone on
    ``cluster``'s replica: the open-loop timing *on this replica* (a slower share stretches every
    workflow), so that only contention, not the share's speed, counts as falling behind.

    :param unloaded: if given, every call's latency in these alone runs (seconds) is appended to
        it: the unloaded latencies the knee rule compares against.
    """
    out = []
    for p in projections:
        res = _simulate(
            [p],
            [0],
            np.zeros(1),
            cluster,
            seed,
            engine,
            latency_cache,
            None,
            prefix_cache_blocks,
            prefix_block_tokens,
        )
        start = {c.node_id: c.revealed_at for c in res.calls}
        end = max(c.decode_end for c in res.calls)
        if unloaded is not None:
            unloaded.extend(c.decode_end - c.revealed_at for c in res.calls)
        ids = [n.id for n in p.nodes if isinstance(n, LLMNode)]
        origin = min(start.values())
        offsets = tuple(start[i] - origin for i in ids)
        out.append(dataclasses.replace(p, offsets=offsets, span=end - origin))
    return out


def burst_capacity(
    projections: Sequence[Projection],
    cluster: ClusterSpec,
    *,
    workflows: int,
    seed: int = 0,
    engine: str = "vllm",
    latency_cache: LatencyCache | None = None,
    prefix_cache_blocks: int | str = "kv",
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS,
) -> float:
    """Rough capacity (calls/s) that scales the sweep: all ``workflows`` arrive at once and the
    replica's completion rate until half of the calls are done is measured."""
    picks = _draw(projections, workflows, np.random.default_rng(seed))
    res = _simulate(
        projections,
        picks,
        np.zeros(len(picks)),
        cluster,
        seed,
        engine,
        latency_cache,
        None,
        prefix_cache_blocks,
        prefix_block_tokens,
    )
    ends = np.sort([c.decode_end for c in res.calls])
    half = max(len(ends) // 2, 1)
    t = float(ends[half - 1])
    if not t > 0:
        raise RuntimeError(f"capacity probe of {cluster.name}: calls finished in zero time")
    return half / t


# -- the sweep ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplayConfig:
    """Replay and sweep parameters (all part of the cache key).

    Workflows per point: enough that the arrival span ``T`` covers ``warmup_spans +
    span_factor`` traced spans of a projected workflow (:func:`call_weighted_span`), within
    ``[min_calls, max_calls]`` simulated calls and at least ``min_workflows`` workflows.

    :param min_calls: fewest LLM calls simulated per rate point.
    :param max_calls: most LLM calls simulated per rate point (bounds a point's cost).
    :param min_workflows: fewest projected workflows per point.
    :param span_factor: measurement window in call-weighted projected-workflow spans.
    :param keep_gaps: keep the traced non-LLM gaps as tool delays (module docstring).
    :param start: first swept rate as a share of the burst-probe capacity.
    :param growth: rate multiplier of the geometric sweep.
    :param refine: bisection steps between the last sustained and first unsustained rate.
    :param max_points: cap on geometric points.
    :param warmup: share of the arrival span excluded from the measurement window (at least
        ``warmup_spans`` call-weighted spans, at most half of it).
    :param warmup_spans: see ``warmup``.
    :param tolerance: a point is sustained if it completes at least ``1 − tolerance`` of the
        calls offered in its window (default 0.01: the knee's ≥ 99 %).
    :param latency_factor: ... and its median call latency is at most this × the unloaded
        median (default 2; module docstring, "Knee rule").
    :param prefix_cache_blocks: the replica's prefix cache: ``"kv"`` (default: vLLM's automatic
        prefix caching in free KV blocks, as ``servegym/Allocation-v0`` serves), a block count,
        or 0 (off). Each replayed copy of a workflow gets its own prefix hashes.
    :param prefix_block_tokens: tokens per block of the workload's ``prefix_hashes``.
    :param confirm: replays (extra seeds) pooled with a borderline point of the geometric phase
        (completing between ``1 − 2·tolerance`` and ``1 − tolerance`` of its offered calls)
        before it counts as unsustained (guards against one unlucky draw of heavy workflows
        stopping the sweep a growth factor early).
    :param seed: replay seed (workflow order and arrival times).
    """

    min_calls: int = 3000
    max_calls: int = 24000
    min_workflows: int = 20
    span_factor: float = 6.0
    keep_gaps: bool = True
    start: float = 0.05
    growth: float = 1.6
    refine: int = 3
    max_points: int = 16
    warmup: float = 0.2
    warmup_spans: float = 2.0
    tolerance: float = 0.01
    latency_factor: float = 2.0
    confirm: int = 1
    prefix_cache_blocks: int | str = "kv"
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.min_calls <= self.max_calls or self.min_workflows < 1:
            raise ValueError(
                f"need 1 <= min_calls <= max_calls and min_workflows >= 1, got {self.min_calls}, "
                f"{self.max_calls}, {self.min_workflows}"
            )
        if not self.growth > 1.0:
            raise ValueError(f"growth must be > 1, got {self.growth}")
        if not 0.0 < self.start < 1.0:
            raise ValueError(f"start must be in (0, 1), got {self.start}")
        if not 0.0 <= self.warmup < 1.0 or not 0.0 <= self.tolerance < 1.0:
            raise ValueError("warmup and tolerance must be in [0, 1)")
        if not self.latency_factor >= 1.0:
            raise ValueError(f"latency_factor must be >= 1, got {self.latency_factor}")
        if self.max_points < 2 or self.refine < 0 or self.confirm < 0:
            raise ValueError("need max_points >= 2, refine >= 0 and confirm >= 0")

    def workflows(self, projections: Sequence[Projection], rate: float) -> int:
        """Projected workflows to replay at ``rate`` calls/s."""
        mean_calls = _mean(p.calls for p in projections)
        spans = self.span_factor + self.warmup_spans
        want = spans * call_weighted_span(projections) * rate / mean_calls
        lo, hi = self.min_calls / mean_calls, self.max_calls / mean_calls
        return max(self.min_workflows, math.ceil(min(max(want, lo), hi)))

    def warmup_seconds(self, projections: Sequence[Projection], horizon: float) -> float:
        """Start of the measurement window for an arrival span of ``horizon`` seconds."""
        spans = self.warmup_spans * call_weighted_span(projections)
        return min(0.5 * horizon, max(self.warmup * horizon, spans))


def call_weighted_span(projections: Sequence[Projection]) -> float:
    """Traced span of the projected workflow a random call belongs to, on average (long
    workflows hold most calls, so the replay's ramp-up lasts about this long)."""
    calls = sum(p.calls for p in projections)
    return sum(p.calls * p.span for p in projections) / calls


def _mean(xs: Iterable[float]) -> float:
    v = list(xs)
    return sum(v) / len(v)


def profile_llm(
    model: str,
    tp: int,
    fraction: float,
    workload: Trace | Sequence[Workflow] | Sequence[Projection],
    gpu: str = "rtx-a6000",
    engine: str = "vllm",
    *,
    config: ReplayConfig | None = None,
    latency_cache: LatencyCache | None = None,
    log: Callable[[ReplayResult], None] | None = None,
    neighbour: str = "busy",
) -> LLMProfile:
    """Throughput–latency profile of one replica of ``model`` at ``tp`` on ``fraction`` of each
    GPU (§4 step 3; the replay, the sweep and the saturation rule are in the module docstring).

    :param workload: a :class:`Trace`, workflows (traced first on ``gpu``/``engine``) or
        projections of ``model`` (:func:`project_trace`).
    :param log: called with every replay result (diagnostics).
    :param neighbour: what shares the rest of a sub-GPU share's GPUs (:data:`NEIGHBOURS`; see
        the module docstring).
    :raises ValueError: for an unknown model/GPU, a TP or share the model does not fit, an empty
        workload, a model the workload never calls or an unknown ``neighbour``.
    """
    cfg = config or ReplayConfig()
    get_model(model)
    get_gpu(gpu)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    projections = _projections(workload, model, gpu, engine, cfg)
    cluster = replica_cluster(model, tp, fraction, gpu, neighbour)
    cache = latency_cache or LatencyCache()
    cache.get(cluster.instances[0], get_engine(engine))  # ValueError: does not fit / bad TP
    unloaded: list[float] = []
    projections = isolated_timing(
        projections,
        cluster,
        seed=cfg.seed,
        engine=engine,
        latency_cache=cache,
        prefix_cache_blocks=cfg.prefix_cache_blocks,
        prefix_block_tokens=cfg.prefix_block_tokens,
        unloaded=unloaded,
    )
    unloaded_p50 = float(np.percentile(unloaded, 50))
    bound = cfg.latency_factor * unloaded_p50

    def run(rate: float, confirm: int) -> ReplayResult:
        results = []
        for k in range(1 + confirm):
            results.append(
                replay_point(
                    projections,
                    cluster,
                    rate,
                    workflows=cfg.workflows(projections, rate),
                    seed=cfg.seed + k,
                    engine=engine,
                    warmup=lambda horizon: cfg.warmup_seconds(projections, horizon),
                    tolerance=cfg.tolerance,
                    latency_bound=bound,
                    latency_cache=cache,
                    prefix_cache_blocks=cfg.prefix_cache_blocks,
                    prefix_block_tokens=cfg.prefix_block_tokens,
                )
            )
            last = results[-1]
            if (
                last.sustained
                or last.censored
                or last.finished < (1 - 2 * cfg.tolerance) * last.offered
                or last.point.p50 > 1.5 * bound
            ):
                break  # sustained, or clearly not: only borderline points get confirmed
        r = results[0] if len(results) == 1 else merge_replays(results, cfg.tolerance, bound)
        if log is not None:
            log(r)
        return r

    n_probe = max(cfg.min_workflows, math.ceil(cfg.min_calls / _mean(p.calls for p in projections)))
    capacity = burst_capacity(
        projections,
        cluster,
        workflows=n_probe,
        seed=cfg.seed,
        engine=engine,
        latency_cache=cache,
        prefix_cache_blocks=cfg.prefix_cache_blocks,
        prefix_block_tokens=cfg.prefix_block_tokens,
    )
    results: list[ReplayResult] = []
    rate = cfg.start * capacity
    lo: ReplayResult | None = None
    hi: ReplayResult | None = None
    for _ in range(cfg.max_points):
        r = run(rate, cfg.confirm)
        results.append(r)
        if r.sustained:
            lo = r
            if hi is not None:
                break
            rate *= cfg.growth
        else:
            hi = r
            if lo is not None:
                break
            rate /= cfg.growth  # even the start rate saturates: step down
    if lo is None or hi is None:
        what = "sustained no rate" if lo is None else "never saturated"
        raise RuntimeError(
            f"profiling {model} TP{tp} @ {fraction:g} on {gpu}: the sweep {what} within "
            f"{cfg.max_points} points (rates {[round(x.point.rate, 4) for x in results]} calls/s)"
        )
    for _ in range(cfg.refine):  # a misjudged point here moves T_m within the bracket only
        r = run(math.sqrt(lo.point.rate * hi.point.rate), 0)
        results.append(r)
        if r.sustained:
            lo = r
        else:
            hi = r
    points = tuple(r.point for r in results)
    t_max = knee_throughput(
        points,
        unloaded_p50,
        min_completion=1.0 - cfg.tolerance,
        latency_factor=cfg.latency_factor,
    )
    return LLMProfile(model, gpu, tp, float(fraction), points, t_max, unloaded_p50)


def _projections(
    workload: Trace | Sequence[Workflow] | Sequence[Projection],
    model: str,
    gpu: str,
    engine: str,
    cfg: ReplayConfig,
) -> list[Projection]:
    if isinstance(workload, Trace):
        return project_trace(workload, model, keep_gaps=cfg.keep_gaps)
    items = list(workload)
    if not items:
        raise ValueError(f"cannot profile {model}: empty workload")
    if all(isinstance(p, Projection) for p in items):
        wrong = sorted({p.model for p in items if p.model != model})  # type: ignore[union-attr]
        if wrong:
            raise ValueError(f"projections of {wrong} given to profile {model!r}")
        return items  # type: ignore[return-value]
    if all(isinstance(w, Workflow) for w in items):
        trace = trace_workflows(
            items,  # type: ignore[arg-type]
            gpu,
            engine,
            prefix_cache_blocks=cfg.prefix_cache_blocks,
            prefix_block_tokens=cfg.prefix_block_tokens,
        )
        return project_trace(trace, model, keep_gaps=cfg.keep_gaps)
    raise TypeError("workload must be a Trace, a list of Workflows or a list of Projections")


# -- profile sets and the cache -------------------------------------------------------------
def default_cache_dir() -> Path:
    """``$SERVEGYM_CACHE/scepsy-profiles``, else ``~/.cache/servegym/scepsy-profiles``."""
    root = os.environ.get("SERVEGYM_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "servegym"
    return base / "scepsy-profiles"


def profile_key(
    model: str,
    tp: int,
    fraction: float,
    gpu: str,
    engine: str,
    traces: Sequence[Trace],
    config: ReplayConfig,
    neighbour: str = "busy",
) -> str:
    """Hash of everything a profile depends on (see the module docstring). A sub-GPU share's
    ``neighbour`` is part of it unless ``static`` (whose keys are those before MPS partitions)."""
    desc: dict[str, Any] = {
        "version": PROFILE_VERSION,
        "model": model,
        "tp": tp,
        "fraction": round(float(fraction), 6),
        "gpu": gpu,
        "engine": engine,
        "workloads": [
            {"name": t.name, "source": dict(t.source), "content": t.fingerprint} for t in traces
        ],
        "replay": asdict(config),
    }
    if fraction < 1 and neighbour != "static":
        desc["neighbour"] = neighbour
    blob = json.dumps(desc, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _profile_from_json(d: Mapping[str, Any]) -> LLMProfile:
    return ProfileSet.from_json([dict(d)]).profiles.popitem()[1]


def _configs(
    models: Sequence[str], tps: Sequence[int], gpu: str, units_per_gpu: int
) -> list[tuple[str, int, float]]:
    out = []
    for m in models:
        for tp in tps:
            need = min_share_units(m, gpu, tp, units_per_gpu)
            if need is None:
                continue
            out.extend((m, tp, k / units_per_gpu) for k in range(need, units_per_gpu + 1))
    return out


@dataclass
class _Traces:
    traces: list[Trace] = field(default_factory=list)

    def models(self) -> list[str]:
        return sorted({m for t in self.traces for m in t.models})

    def calling(self, model: str) -> list[Trace]:
        return [t for t in self.traces if model in t.models]


def _as_traces(
    workloads: str | Trace | Iterable[str | Trace],
    gpu: str,
    engine: str,
    count: int | None,
    seed: int,
    cfg: ReplayConfig,
) -> list[Trace]:
    items = [workloads] if isinstance(workloads, (str, Trace)) else list(workloads)
    if not items:
        raise ValueError("no workload given to profile")
    out = []
    for w in items:
        if isinstance(w, Trace):
            took = (w.gpu, w.engine, w.prefix_cache_blocks, w.prefix_block_tokens)
            want = (gpu, engine, cfg.prefix_cache_blocks, cfg.prefix_block_tokens)
            if took != want:
                raise ValueError(
                    f"trace {w.name!r} was taken with (gpu, engine, prefix cache, block tokens) "
                    f"= {took}, but the profiles are for {want}"
                )
            out.append(w)
        else:
            out.append(
                trace_workload(
                    w,
                    count,
                    seed,
                    gpu=gpu,
                    engine=engine,
                    prefix_cache_blocks=cfg.prefix_cache_blocks,
                    prefix_block_tokens=cfg.prefix_block_tokens,
                )
            )
    return out


def profile_set(
    workloads: str | Trace | Iterable[str | Trace],
    models: Sequence[str] | None = None,
    tps: Sequence[int] = TP_DEGREES,
    fractions: Sequence[float] | None = None,
    gpu: str = "rtx-a6000",
    units_per_gpu: int = 4,
    *,
    engine: str = "vllm",
    count: int | None = None,
    seed: int = 0,
    config: ReplayConfig | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    progress: bool = True,
    jobs: int = 1,
    neighbour: str = "busy",
) -> ProfileSet:
    """Profiles of every feasible (model, TP, GPU share) of the workloads' LLMs.

    Feasible: ``tp`` in ``tps`` splits the model's heads and a share of ``k / units_per_gpu``
    holds the weights + KV (:func:`~envs.sim.allocation.min_share_units`); shares run from that
    minimum to a whole GPU (or only those in ``fractions``). Each LLM replays the projections of
    every given workload that calls it.

    :param workloads: workload name(s) (generated with ``count``/``seed`` and traced) or traces.
    :param models: LLMs to profile (default: all the workloads call).
    :param cache_dir: profile cache (default :func:`default_cache_dir`).
    :param use_cache: read and write the cache.
    :param progress: show a tqdm progress bar.
    :param jobs: worker processes (configs are independent; 1 = in-process).
    :param neighbour: what shares the rest of a sub-GPU share's GPUs (:data:`NEIGHBOURS`).
    :raises ValueError: for an empty workload, a requested model no workload calls or an
        unknown ``neighbour``.
    """
    if neighbour not in NEIGHBOURS:
        raise ValueError(f"neighbour must be one of {NEIGHBOURS}, got {neighbour!r}")
    if isinstance(units_per_gpu, bool) or not isinstance(units_per_gpu, int) or units_per_gpu < 1:
        raise ValueError(f"units_per_gpu must be an integer >= 1, got {units_per_gpu!r}")
    cfg = config or ReplayConfig()
    tr = _Traces(_as_traces(workloads, gpu, engine, count, seed, cfg))
    have = tr.models()
    models = list(dict.fromkeys(have if models is None else models))
    for m in models:
        get_model(m)
        if m not in have:
            raise ValueError(
                f"model {m!r} is absent from workloads {[t.name for t in tr.traces]}; they call "
                f"{have}"
            )
    for tp in tps:
        if tp not in TP_DEGREES:
            raise ValueError(f"tp {tp} is not one of the profiled degrees {TP_DEGREES}")
    todo = _configs(models, tps, gpu, units_per_gpu)
    if fractions is not None:
        want = {round(float(f), 6) for f in fractions}
        todo = [c for c in todo if round(c[2], 6) in want]
    if not todo:
        raise ValueError(f"no feasible (model, tp, share) for {models} at tps {list(tps)} on {gpu}")
    cdir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    out = ProfileSet()
    missing: list[tuple[str, int, float, str]] = []
    for m, tp, f in todo:
        key = profile_key(m, tp, f, gpu, engine, tr.calling(m), cfg, neighbour)
        path = cdir / f"{key}.json"
        if use_cache and path.exists():
            out.add(_profile_from_json(json.loads(path.read_text())))
        else:
            missing.append((m, tp, f, key))
    # All cached: nothing to wait for, so no bar (it would print on every env reset).
    bar = _progress(len(todo), len(todo) - len(missing), progress and bool(missing))
    projections = {
        m: [p for t in tr.calling(m) for p in project_trace(t, m, keep_gaps=cfg.keep_gaps)]
        for m in {c[0] for c in missing}
    }
    args = [(m, tp, f, projections[m], gpu, engine, cfg, neighbour) for m, tp, f, _ in missing]
    results: Iterable[LLMProfile]
    if jobs > 1 and len(args) > 1:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=jobs)
        results = pool.map(_profile_job, args)
    else:
        pool = None
        cache = LatencyCache()
        results = (_profile_job(a, cache) for a in args)
    try:
        for (m, tp, f, key), prof in zip(missing, results, strict=True):
            out.add(prof)
            if use_cache:
                cdir.mkdir(parents=True, exist_ok=True)
                tmp = cdir / f"{key}.json.tmp"
                tmp.write_text(json.dumps(asdict(prof)))
                tmp.replace(cdir / f"{key}.json")
            bar.set_postfix_str(f"{m} TP{tp} @ {f:g}", refresh=False)
            bar.update(1)
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown()
    return out


def _profile_job(
    args: tuple[str, int, float, list[Projection], str, str, ReplayConfig, str],
    cache: LatencyCache | None = None,
) -> LLMProfile:
    m, tp, f, projections, gpu, engine, cfg, neighbour = args
    return profile_llm(
        m, tp, f, projections, gpu, engine, config=cfg, latency_cache=cache, neighbour=neighbour
    )


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, done: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    from envs.sim.progress import progress

    return progress(total=total, initial=done, desc="scepsy profiles", unit="profile")


# -- CLI ------------------------------------------------------------------------------------
def format_table(profiles: ProfileSet) -> str:
    """``model  tp  share  T_m  L(low)  L_p99(low)`` rows, sorted."""
    rows = [f"{'model':<20} {'tp':>2} {'share':>5} {'T_m/s':>9} {'L_low_s':>9} {'p99_low_s':>9}"]
    for (m, tp, f), p in sorted(profiles.profiles.items()):
        low = p.points[0]
        rows.append(
            f"{m:<20} {tp:>2} {f:>5.2f} {p.max_throughput:>9.3f} {low.mean:>9.4f} {low.p99:>9.4f}"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m envs.sim.scepsy.profiling",
        description="Scepsy §4 step 3: per-LLM throughput-latency profiles by trace replay.",
    )
    ap.add_argument("--workload", nargs="+", required=True, help="registered workload name(s)")
    ap.add_argument("--units-per-gpu", type=int, default=4)
    ap.add_argument("--tp", type=int, nargs="+", default=list(TP_DEGREES))
    ap.add_argument("--models", nargs="+", default=None)
    ap.add_argument("--gpu", default="rtx-a6000")
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--count", type=int, default=None, help="workflows to trace per workload")
    ap.add_argument("--seed", type=int, default=0, help="workload generator seed")
    ap.add_argument("--max-calls", type=int, default=ReplayConfig.max_calls)
    ap.add_argument("--no-gaps", action="store_true", help="replay without the traced gaps")
    ap.add_argument(
        "--neighbour",
        choices=NEIGHBOURS,
        default="busy",
        help="what shares the rest of a sub-GPU share's GPUs (default: a busy partition)",
    )
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="worker processes (default: up to 2; results do not depend on it)",
    )
    ap.add_argument("--out", default=None, help="write the ProfileSet as JSON here")
    a = ap.parse_args(argv)
    cfg = ReplayConfig(
        min_calls=min(ReplayConfig.min_calls, a.max_calls),
        max_calls=a.max_calls,
        keep_gaps=not a.no_gaps,
    )
    t = time.perf_counter()
    ps = profile_set(
        a.workload,
        a.models,
        a.tp,
        gpu=a.gpu,
        units_per_gpu=a.units_per_gpu,
        engine=a.engine,
        count=a.count,
        seed=a.seed,
        config=cfg,
        cache_dir=a.cache_dir,
        use_cache=not a.no_cache,
        jobs=a.jobs,
        neighbour=a.neighbour,
    )
    print(format_table(ps))
    print(f"{len(ps)} profiles in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    if a.out:
        ps.save(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
