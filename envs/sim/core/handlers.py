"""The simulation's event handlers: workflow arrivals and node reveals (raising invocations), the
estimates drawn for a revealed call, prefill / transfer / decode completions, tool completions
and the bookkeeping of finished nodes (online horizons, service paths).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from envs.sim.core.protocol import (
    ASYNC_STAGES,
    Invocation,
)
from envs.sim.core.records import CallTable
from envs.sim.core.state import SimulationState
from envs.sim.core.workflows import (
    DONE,
    TRANSFER,
    WAIT_DECODE,
    Call,
    WorkflowRun,
)
from envs.sim.engines.prefill import PrefillInstance
from traces.schema import LLMNode, ToolNode


def _latest(ends: dict[str, float], parents: Sequence[str]) -> float:
    """``max(ends[p] for p in parents)``, 0.0 without parents (a node's earliest start)."""
    if not parents:
        return 0.0
    if len(parents) == 1:
        return ends[parents[0]]
    return max(map(ends.__getitem__, parents))


#: What a :class:`_WaitingInvocation` is given for ``calls``: None, so its list is built when
#: first read.
_BUILT_LAZILY = cast("list[Call]", None)


class _WaitingInvocation(Invocation):
    """A ``prefill``/``route`` invocation whose ``calls`` list is built when first read, from
    the calls waiting then: those revealed before it was raised (uid below ``_bound``; the
    waiting dict is in reveal order). Nothing is processed while an invocation is pending and a
    started call never waits again, so this is the list the invocation had when raised without
    the calls an engine started since: what ``Simulation._drop_started_calls`` leaves of an
    eagerly copied list. A scheduler that reads only ``new_calls`` (the default one) never pays
    for a copy of the waiting calls (~1,100 under the benchmark's load)."""

    _sim: Any
    _bound: int

    @property  # type: ignore[override]
    def calls(self) -> list[Call]:
        calls = self.__dict__.get("_calls")
        if calls is None:
            calls = list(self._sim.waiting_prefill.values())
            bound = self._bound
            while calls and calls[-1].uid >= bound:  # revealed after the raise
                calls.pop()
            self.__dict__["_calls"] = calls
        return calls

    @calls.setter
    def calls(self, value: list[Call] | None) -> None:
        self.__dict__["_calls"] = value


class EventHandlersMixin(SimulationState):
    """The event handlers of :class:`envs.sim.core.simulation.Simulation`."""

    # -- event handlers ----------------------------------------------------------------------
    def raise_invocation(self, stage: str, trigger: str, new_calls: list[Call]) -> None:
        """Raise an invocation at ``stage`` for ``new_calls`` (and the calls still waiting
        there), or, while the stage's plan is in flight, let the planner absorb them."""
        if stage in ASYNC_STAGES and self.planner.in_flight[stage] is not None:
            self.planner.absorb(stage, new_calls)
            return
        seq = self.invocation_count
        if stage == "decode":
            waiting = self.waiting_decode
            calls = [waiting[uid] for uid in sorted(waiting)]  # by uid: reveal order
            inv = Invocation(stage, self.env._now, trigger, calls, new_calls, seq)
        else:
            bound = self.uid_bounds[seq] = len(self.calls)
            inv = _WaitingInvocation(stage, self.env._now, trigger, _BUILT_LAZILY, new_calls, seq)
            inv._sim = self
            inv._bound = bound
        self.pending.append(inv)
        self.invocation_count += 1

    def _drop_started_calls(self) -> None:
        """Take calls out of the pending invocations that started service after the invocation
        was raised but within the same event (an engine that finished a call starts its next
        queued one in the callback that revealed the finished call's children): a scheduler is
        shown only calls it can still plan."""
        started, self._started_while_pending = self._started_while_pending, []
        # Only a call that left a waiting dict can have left an invocation's list (a call is
        # listed only while it waits, and re-enters no waiting dict once started), so the lists
        # are rebuilt only when one of them names such a call: the same lists as filtering every
        # call by ``uid in waiting``, without a pass over every waiting call per event.
        gone = {id(c) for c in started}
        for inv in self.pending:
            if inv.stage == "migrate":
                continue
            if inv.__dict__.get("_calls", ()) is None:  # built lazily from the waiting calls
                if any(id(c) in gone for c in inv.new_calls):
                    waiting = self.waiting_prefill
                    inv.new_calls = [c for c in inv.new_calls if c.uid in waiting]
                continue
            if any(id(c) in gone for c in inv.new_calls) or any(c in inv.calls for c in started):
                waiting = self.waiting_decode if inv.stage == "decode" else self.waiting_prefill
                inv.calls = [c for c in inv.calls if c.uid in waiting]
                inv.new_calls = [c for c in inv.new_calls if c.uid in waiting]

    def _on_arrival(self, _event: Any) -> None:
        run = self.runs[self._next_arrival]
        self._next_arrival += 1
        if self._next_arrival < len(self.runs):
            nxt = self.runs[self._next_arrival]
            self.schedule(nxt.arrival - self.env._now, self._on_arrival)
        self._reveal(run, run.sources(), "arrival")

    def _reveal(self, run: WorkflowRun, nodes: list[LLMNode | ToolNode], trigger: str) -> None:
        now = self.env._now
        new_calls: list[Call] = []
        online = self.online_horizons
        ends = run.path_end
        calls = self.calls
        waiting, unplanned = self.waiting_prefill, self.unplanned
        draw = self.estimate_error > 0 or self.output_predictor is not None
        for node in nodes:
            run.revealed.append(node.id)
            if online:
                parents = node.parents  # _latest(ends, parents), inline
                if not parents:
                    parent_end = 0.0
                elif len(parents) == 1:
                    parent_end = ends[parents[0]]
                else:
                    parent_end = max(map(ends.__getitem__, parents))
            else:
                parent_end = 0.0
            if isinstance(node, ToolNode):
                estimate = run.tool_estimates[node.id] = self.tool_history.estimate(node)
                run.set_path_end(node.id, parent_end + estimate)
                self.call_later(node.latency, self._tool_done, run, node)
                continue
            call = Call(len(calls), run, node, now)
            calls.append(call)
            run.calls[node.id] = call
            if draw:
                self._draw_estimates(call)
            if online:
                run.set_path_end(node.id, parent_end + self.estimates.isolated_call_time(call))
            uid = call.uid
            waiting[uid] = call
            unplanned[uid] = call
            new_calls.append(call)
        if run.path_end:
            run.online_horizon = run.max_path_end()
        if new_calls:
            self.raise_invocation("prefill" if self.pd else "route", trigger, new_calls)

    def _draw_estimates(self, call: Call) -> None:
        e = self.estimate_error
        if e > 0:
            f_out, f_time = self.rng.uniform(1.0 - e, 1.0 + e, size=2)
            call.predicted_output_tokens = max(0, int(round(call.output_tokens * f_out)))
            call.time_error = float(f_time)
        if self.output_predictor is not None:
            call.predicted_output_tokens = int(self.output_predictor(call))

    def on_prefill_done(self, call: Call, inst: PrefillInstance) -> None:
        if call.output_tokens == 0:
            assert call.decode_instance is not None  # planned at prefill (P-D clusters)
            del self.decode_inbound[call.decode_instance][call.uid]
            call.transfer_end = call.decode_start = call.decode_end = self.env._now
            call.stage = DONE
            for f in self.listeners["on_call_done"]:
                f(call, inst, self.env._now)
            self._call_done(call)
            return
        call.stage = TRANSFER
        assert call.decode_instance is not None
        dt = self.estimates.transfer_time(call, inst.index, call.decode_instance)
        self.call_later(dt, self._on_transfer_done, call)

    def _on_transfer_done(self, call: Call) -> None:
        call.transfer_end = self.env._now
        call.stage = WAIT_DECODE
        self.waiting_decode[call.uid] = call
        assert call.decode_instance is not None  # planned at prefill (P-D clusters)
        self.instances[call.decode_instance].enqueue(call)
        self.raise_invocation("decode", "transfer", [call])

    def on_decode_done(self, call: Call, inst: Any) -> None:
        for f in self.listeners["on_call_done"]:
            f(call, inst, self.env._now)
        self._call_done(call)

    def on_started(self, call: Call) -> None:
        """An engine started serving ``call`` at this stage: it can no longer be re-planned.
        (A migrated call is in neither waiting dict: it was never re-plannable.)"""
        if call.stage == WAIT_DECODE:
            left = self.waiting_decode.pop(call.uid, None)
            if left is not None:
                assert call.decode_instance is not None  # it waited for its decode instance
                del self.decode_inbound[call.decode_instance][call.uid]
        else:
            left = self.waiting_prefill.pop(call.uid, None)
        if left is not None and self.pending:
            # It may be listed by a pending invocation (see Simulation._drop_started_calls).
            self._started_while_pending.append(call)
        self.planner.started(call, "decode" if call.stage == WAIT_DECODE else "prefill")

    def _tool_done(self, run: WorkflowRun, node: ToolNode) -> None:
        """Tool ``node`` returned: its latency is now measured, so the history learns it and
        H_w(t) charges it exactly (as a finished call is re-costed from its true length)."""
        self.tool_history.record(node)
        if self.online_horizons:
            run.set_path_end(node.id, _latest(run.path_end, node.parents) + node.latency)
            run.online_horizon = run.max_path_end()
        self._node_done(run, node.id)

    def _call_done(self, call: Call) -> None:
        run = call.workflow
        node = call.node
        if self.online_horizons:
            # Refine H_w(t) with the true isolated duration now that the output length is known.
            parent_end = _latest(run.path_end, node.parents)
            run.set_path_end(
                node.id, parent_end + self.estimates.isolated_call_time(call, use_truth=True)
            )
            run.online_horizon = run._top_end  # run.max_path_end(), inline
        service = (call.prefill_end - call.prefill_start) + (call.decode_end - call.decode_start)
        self._node_done(run, node.id, service, node)

    def _pack_run(self, run: WorkflowRun) -> None:
        """``record_store`` ``compact``/``disk``: pack finished ``run``'s calls into the store and
        drop the per-node state nothing reads once the workflow is done."""
        table, store = self.calls, self._store
        assert isinstance(table, CallTable) and store is not None  # record_store compact/disk
        for call in run.calls.values():
            table.pack(call)
        store.forget_run(run.index)
        run.calls = {}
        run.clear_path_ends()
        run.service_path = {}
        run.tool_estimates = {}
        run.children = {}
        run.waiting_parents = {}
        run.finished = set()
        run.revealed = []

    def _node_done(
        self, run: WorkflowRun, node_id: str, service: float = 0.0, node: Any = None
    ) -> None:
        if node is None:
            node = run.nodes[node_id]
        path = _latest(run.service_path, node.parents) + service
        run.service_path[node_id] = path
        run.attained_service += service
        if path > run.attained_critical:  # max(attained_critical, path), NaN included
            run.attained_critical = path
        children = run.finish_node(node_id)
        if run.done:
            run.finish_time = self.env._now
            self.finished_runs += 1
            self.completed.append(run)
            if self._store is not None:
                self._pack_run(run)
            return
        if children:
            self._reveal(run, children, "reveal")
