"""Runtime workflow state: calls, tool runs and the online reveal of a workflow DAG.

A :class:`traces.schema.Workflow` is static data. The simulator wraps each one in a
:class:`WorkflowRun`, which tracks which nodes are revealed, running and finished. Online reveal
(HexAgent §4.1): at arrival only source nodes are visible; a node becomes visible and runnable
when all its parents have finished. :meth:`WorkflowRun.revealed_nodes` is the only view of the
DAG a scheduler gets; unrevealed nodes are not reachable from it.

A request (:class:`traces.schema.Request`) is a one-call workflow.
"""

from __future__ import annotations

from typing import Any

from traces.schema import LLMNode, Request, ToolNode, Workflow

# Stages a call moves through, in order (HexAgent §4.3 "End-to-end request lifecycle").
WAIT_PREFILL = "wait_prefill"
PREFILL = "prefill"
TRANSFER = "transfer"
WAIT_DECODE = "wait_decode"
DECODE = "decode"
DONE = "done"
# A running monolithic request moving to another instance (GoodServe §3.4); in neither
# instance's lists until it lands in the target's waiting queue.
MIGRATING = "migrating"


class WorkloadError(ValueError):
    """A workflow cannot be simulated (malformed DAG, unknown model on this cluster, ...)."""


class CallNames:
    """What a live :class:`Call` and a finished, packed one
    (:class:`envs.sim.core.records.PackedCall`) derive alike from ``workflow``, ``node`` and their
    token counts."""

    __slots__ = ()
    workflow: Any
    node: Any
    input_tokens: int
    output_tokens: int

    @property
    def id(self) -> str:
        """``<workflow id>/<node id>``."""
        return f"{self.workflow.id}/{self.node.id}"

    @property
    def model(self) -> str:
        return self.node.model

    @property
    def kv_tokens(self) -> int:
        """KV tokens the call holds at the end of decode (reserved at admission)."""
        return self.input_tokens + self.output_tokens


class Call(CallNames):
    """One LLM call of a workflow, as the simulator runs it.

    ``output_tokens`` is the truth the simulator runs on; schedulers must use
    ``predicted_output_tokens`` (the estimate, possibly with injected error).
    Priorities: lower values are served first; ties go to the earlier enqueued call.

    Migration (monolithic clusters): ``migrations`` counts the moves, ``migration_seconds`` is
    the total time in transit, ``resident`` flags a call that waits in a queue with its KV
    already on the instance (KV migration: it needs no prefill at admission). ``enqueued_at`` is
    the time (seconds) the call last entered an instance's queue. ``prefill_left`` and
    ``prefill_began`` are engine bookkeeping: uncached prompt tokens still to compute on the
    current instance, and when that prefill started (seconds).

    KV (batch engines): ``kv_held`` is the KV tokens the call holds on its current instance (the
    whole ``kv_tokens`` under reserve-at-admission; prompt + generated tokens under paging).
    Paging engines may preempt a running call: ``preemptions`` counts it, ``evicted_tokens`` sums
    the KV tokens freed, ``recomputed_tokens`` the tokens prefilled again on re-admission.

    Monolithic engines emit the first output token at the end of the prefill (as vLLM, SGLang
    and TensorRT-LLM do), so ``generated`` is 1 when a call starts decoding there and it runs
    ``output_tokens - 1`` decode iterations; a decode engine of a P-D cluster runs
    ``output_tokens`` iterations after the KV transfer.
    """

    __slots__ = (
        "uid",
        "workflow",
        "node",
        "input_tokens",
        "output_tokens",
        "predicted_output_tokens",
        "time_error",
        "stage",
        "revealed_at",
        "prefill_instance",
        "decode_instance",
        "prefill_priority",
        "decode_priority",
        "enqueue_seq",
        "prefill_start",
        "prefill_end",
        "transfer_end",
        "decode_start",
        "decode_end",
        "generated",
        "cached_tokens",
        "isolated_duration",
        "migrations",
        "migration_seconds",
        "enqueued_at",
        "resident",
        "prefill_left",
        "prefill_began",
        "kv_held",
        "preemptions",
        "evicted_tokens",
        "recomputed_tokens",
    )

    def __init__(self, uid: int, workflow: WorkflowRun, node: LLMNode, revealed_at: float):
        self.uid = uid
        self.workflow = workflow
        self.node = node
        self.input_tokens = node.input_tokens
        self.output_tokens = node.output_tokens
        self.predicted_output_tokens = node.output_tokens
        self.time_error = 1.0
        self.stage = WAIT_PREFILL
        self.revealed_at = revealed_at
        self.prefill_instance: int | None = None
        self.decode_instance: int | None = None
        self.prefill_priority = 0.0
        self.decode_priority = 0.0
        self.enqueue_seq = 0
        self.prefill_start = -1.0
        self.prefill_end = -1.0
        self.transfer_end = -1.0
        self.decode_start = -1.0
        self.decode_end = -1.0
        self.generated = 0
        self.kv_held = 0
        self.preemptions = 0
        self.evicted_tokens = 0
        self.recomputed_tokens = 0
        self.cached_tokens = 0
        self.isolated_duration = 0.0
        self.migrations = 0
        self.migration_seconds = 0.0
        self.enqueued_at = -1.0
        self.resident = False
        self.prefill_left = 0
        self.prefill_began = -1.0

    @property
    def predicted_kv_tokens(self) -> int:
        """Decode memory demand m(c) = L_in + L̂_out (HexAgent §5.4, Eq. 3)."""
        return self.input_tokens + self.predicted_output_tokens

    def __repr__(self) -> str:
        return f"Call({self.id}, stage={self.stage}, in={self.input_tokens})"


class WorkflowRun:
    """Runtime state of one workflow: reveal bookkeeping, progress and the online horizon.

    :param workflow: the static workflow.
    :param index: position in the workload (stable id).
    """

    def __init__(self, workflow: Workflow, index: int):
        self.workflow = workflow
        self.index = index
        self.id = workflow.id
        self.arrival = workflow.arrival
        self.nodes: dict[str, LLMNode | ToolNode] = {}
        self.children: dict[str, list[str]] = {}
        self.waiting_parents: dict[str, int] = {}
        for node in workflow.nodes:
            if node.id in self.nodes:
                raise WorkloadError(f"workflow {self.id!r}: duplicate node id {node.id!r}")
            self.nodes[node.id] = node
            self.children[node.id] = []
        for node in workflow.nodes:
            for p in node.parents:
                if p not in self.nodes:
                    raise WorkloadError(
                        f"workflow {self.id!r}: node {node.id!r} names unknown parent {p!r}"
                    )
                self.children[p].append(node.id)
            self.waiting_parents[node.id] = len(node.parents)
        _check_acyclic(self)
        for node in workflow.nodes:
            if isinstance(node, LLMNode) and node.input_tokens < 1:
                raise WorkloadError(
                    f"workflow {self.id!r}: node {node.id!r} has input_tokens="
                    f"{node.input_tokens}; expected >= 1"
                )
            if isinstance(node, LLMNode) and node.output_tokens < 0:
                raise WorkloadError(
                    f"workflow {self.id!r}: node {node.id!r} has output_tokens="
                    f"{node.output_tokens}; expected >= 0"
                )
            if isinstance(node, ToolNode) and not node.latency >= 0:
                raise WorkloadError(
                    f"workflow {self.id!r}: tool node {node.id!r} has latency="
                    f"{node.latency}; expected >= 0 seconds"
                )
        self.revealed: list[str] = []
        self.finished: set[str] = set()
        self.calls: dict[str, Call] = {}
        self.finish_time = -1.0
        self.horizon = -1.0
        # Online horizon H_w(t): longest isolated path through the revealed subgraph (seconds).
        # ``path_end`` is written through :meth:`set_path_end`, which keeps its largest value
        # and a node holding it (``_top_end``, ``_top_node``) for :meth:`max_path_end`.
        self.path_end: dict[str, float] = {}
        self._top_node: str | None = None
        self._top_end = 0.0
        # What H_w(t) charged each revealed tool while it ran (Simulation.tool_history).
        self.tool_estimates: dict[str, float] = {}
        self.online_horizon = 0.0
        # Attained GPU service (prefill + decode seconds) of finished calls: the total (Autellix
        # PLAS) and the largest along any dependency path (Autellix ATLAS).
        self.attained_service = 0.0
        self.attained_critical = 0.0
        self.service_path: dict[str, float] = {}

    def set_path_end(self, node_id: str, end: float) -> None:
        """Set ``path_end[node_id]`` (seconds; a revealed node's isolated path end), keeping
        the maximum: O(1) unless the node holding it moves down (a finished call re-costed
        with a shorter true length), which rescans."""
        ends = self.path_end
        ends[node_id] = end
        if node_id == self._top_node:
            if end >= self._top_end:
                self._top_end = end
            else:
                self._top_node = max(ends, key=ends.__getitem__)
                self._top_end = ends[self._top_node]
        elif self._top_node is None or end > self._top_end:
            self._top_node, self._top_end = node_id, end

    def max_path_end(self) -> float:
        """``max(path_end.values())``, the online horizon H_w(t) (``path_end`` not empty)."""
        return self._top_end

    def clear_path_ends(self) -> None:
        self.path_end = {}
        self._top_node, self._top_end = None, 0.0

    @property
    def num_llm_calls(self) -> int:
        return sum(1 for n in self.workflow.nodes if isinstance(n, LLMNode))

    @property
    def done(self) -> bool:
        """Every node finished (``finish_time`` is set then; a run packed by a compact record
        store keeps no ``finished`` set)."""
        return self.finish_time >= 0 or len(self.finished) == len(self.nodes)

    def sources(self) -> list[LLMNode | ToolNode]:
        """Nodes with no parents: the ones revealed at arrival."""
        return [n for n in self.workflow.nodes if not n.parents]

    def revealed_nodes(self) -> list[LLMNode | ToolNode]:
        """Nodes revealed so far, in reveal order. The only DAG view a scheduler may use."""
        return [self.nodes[i] for i in self.revealed]

    def finish_node(self, node_id: str) -> list[LLMNode | ToolNode]:
        """Mark ``node_id`` finished; return the children this reveals (all parents done)."""
        if node_id in self.finished:
            raise RuntimeError(f"workflow {self.id!r}: node {node_id!r} finished twice")
        self.finished.add(node_id)
        out = []
        for c in self.children[node_id]:
            self.waiting_parents[c] -= 1
            if self.waiting_parents[c] == 0:
                out.append(self.nodes[c])
        return out


def _check_acyclic(run: WorkflowRun) -> None:
    indeg = {n: len(run.nodes[n].parents) for n in run.nodes}
    ready = [n for n, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for c in run.children[n]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    if seen != len(run.nodes):
        on_cycle = sorted(n for n, d in indeg.items() if d > 0)
        raise WorkloadError(
            f"workflow {run.id!r}: dependency cycle through node(s) {on_cycle[:5]}"
            + (" ..." if len(on_cycle) > 5 else "")
        )
    if not run.nodes:
        raise WorkloadError(f"workflow {run.id!r} has no nodes")


def as_workflow(record: Workflow | Request) -> Workflow:
    """A request becomes a one-call workflow (node id ``"0"``); a workflow is returned as is."""
    if isinstance(record, Workflow):
        return record
    if isinstance(record, Request):
        node = LLMNode(
            id="0",
            model=record.model,
            input_tokens=record.input_tokens,
            output_tokens=record.output_tokens,
            task=record.task,
            prompt=record.prompt,
            prefix_hashes=record.prefix_hashes,
        )
        return Workflow(id=record.id, arrival=record.arrival, nodes=(node,), meta=record.meta)
    raise WorkloadError(f"expected a traces.schema Workflow or Request, got {type(record)!r}")
