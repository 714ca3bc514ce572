"""A simulation's outcome: each workflow's standalone horizon H_w (HexAgent §7.3: its completion
time alone on the same cluster, cached by workflow content) and the :class:`SimulationResult`
with its metrics.
"""

from __future__ import annotations

import math
from typing import Any

import envs.sim.core.metrics as _metrics
from envs.sim.core.records import (
    CallRecord,
    CallTable,
    SimulationResult,
    WorkflowRecord,
)
from envs.sim.core.state import SimulationState
from envs.sim.core.workflows import (
    Call,
    WorkflowRun,
)
from traces.schema import LLMNode, Workflow


def _workflow_key(wf: Workflow) -> tuple:
    return tuple(
        (n.id, n.parents, n.model, n.input_tokens, n.output_tokens)
        if isinstance(n, LLMNode)
        else (n.id, n.parents, n.latency)
        for n in wf.nodes
    )


def _call_record(c: Call) -> CallRecord:
    """``c``'s :class:`CallRecord` (fields in declaration order)."""
    return CallRecord(
        c.workflow.id,
        c.node.id,
        c.model,
        c.node.task,
        c.input_tokens,
        c.output_tokens,
        c.predicted_output_tokens,
        c.revealed_at,
        -1 if c.prefill_instance is None else c.prefill_instance,
        -1 if c.decode_instance is None else c.decode_instance,
        c.prefill_start,
        c.prefill_end,
        c.transfer_end,
        c.decode_start,
        c.decode_end,
        c.cached_tokens,
        c.migrations,
        c.migration_seconds,
        c.preemptions,
        c.recomputed_tokens,
    )


class OutcomeMixin(SimulationState):
    """The result methods of :class:`envs.sim.core.simulation.Simulation`."""

    # -- results -----------------------------------------------------------------------------
    def standalone_horizon(self, run: WorkflowRun) -> float:
        """H_w: the completion time of ``run``'s workflow alone on this cluster (HexAgent §7.3),
        simulated with the horizon scheduler on true lengths."""
        wf = run.workflow
        key = (
            self.cluster,
            self.prefill_mode,
            self.token_budget,
            self.kv_policy,
            None if self.engine is None else self.engine.name,
            _workflow_key(wf),
        )
        h = self.horizon_cache.get(key)
        if h is None:
            from envs.sim.core.scheduler import EarliestFinishScheduler

            alone = Workflow(id=wf.id, arrival=0.0, nodes=wf.nodes)
            simulation: Any = type(self)  # Simulation: this mixin's host class
            sim = simulation(
                self.cluster,
                [alone],
                compute_horizons=False,
                # the default horizon scheduler never reads H_w(t); a custom one may
                online_horizons=self.horizon_scheduler is not None,
                latency_cache=self.latency_cache,
                prefill_mode=self.prefill_mode,
                token_budget=self.token_budget,
                engine=self.engine,
                kv_policy=self.kv_policy,
            )
            res = sim.run(self.horizon_scheduler or EarliestFinishScheduler())
            h = res.workflows[0].completion_time
            self.horizon_cache[key] = h
        return h

    def result(self) -> SimulationResult:
        """Per-call and per-workflow records, metrics and utilisation at the current time."""
        if self._store is None:
            calls = [_call_record(c) for c in self.calls]
        else:
            packed = self._store.records()
            assert isinstance(self.calls, CallTable)  # record_store compact/disk
            live = self.calls.live
            calls = [
                packed[uid] if uid in packed else _call_record(live[uid])
                for uid in range(len(self.calls))
            ]
        workflows = []
        for run in self.runs:
            finished = run.finish_time >= 0
            ct = run.finish_time - run.arrival if finished else math.inf
            h = self.standalone_horizon(run) if self.compute_horizons else math.nan
            workflows.append(
                WorkflowRecord(
                    id=run.id,
                    arrival=run.arrival,
                    finish=run.finish_time if finished else math.inf,
                    completion_time=ct,
                    horizon=h,
                    num_llm_calls=run.num_llm_calls,
                    num_tools=len(run.nodes) - run.num_llm_calls,
                )
            )
        metrics: dict[str, float] = {}
        if workflows and self.compute_horizons:
            metrics = _metrics.summarize_workflows(
                [w.completion_time for w in workflows], [w.horizon for w in workflows]
            )
        end = self.env.now
        util: dict[str, float] = {}
        for role, group in (
            ("prefill", self.prefill),
            ("decode", self.decode),
            ("monolithic", self.monolithic),
        ):
            if group and end > 0:
                util[role] = sum(i.busy_time for i in group) / (len(group) * end)
        return SimulationResult(
            calls=calls,
            workflows=workflows,
            metrics=metrics,
            utilisation=util,
            end_time=end,
            events=self.events,
            invocations=self.invocation_count,
            extra={"planning": self.planning.as_dict()},
        )
