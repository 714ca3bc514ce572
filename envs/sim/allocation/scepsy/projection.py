"""Projection of traced workflows onto one LLM's calls (Scepsy §4 step 3, the **Projection** and
**Gaps** paragraphs of :mod:`envs.sim.allocation.scepsy.profiling`): an ``m``-call's parents become
its nearest ``m``-ancestors, the time spent outside ``m`` becomes delay nodes.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envs.sim.allocation.scepsy.tracing import Trace
from envs.sim.core.simulation import CallRecord
from envs.sim.hardware.catalog import get_model
from traces.schema import LLMNode, Node, ToolNode, Workflow

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
