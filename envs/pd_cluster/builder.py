"""PDCluster-v0's decision context at an invocation (HexAgent §5): the per-episode cluster
tables, the waiting calls' estimates (prefill and KV-transfer times, prefix-cache hits, run-alone
times) and the workflows' online horizons and remaining critical paths, gathered into a
:class:`~envs.pd_cluster.context.DecisionContext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from envs.pd_cluster.context import DecisionContext
from envs.pd_cluster.state import PDClusterState
from envs.sim.core.simulation import (
    Invocation,
)
from envs.sim.core.workflows import Call, WorkflowRun
from traces.schema import ToolNode


@dataclass
class OpenNodes:
    """A workflow's revealed, unfinished nodes and their run-alone costs (seconds), as of the
    first ``revealed`` reveals and ``finished`` finishes; ``critical`` is the largest cost."""

    revealed: int = 0
    finished: int = 0
    cost: dict[str, float] = field(default_factory=dict)
    critical: float = 0.0


class ContextBuilderMixin(PDClusterState):
    """The context-building methods of :class:`envs.pd_cluster.env.PDClusterEnv`."""

    #: Workflow run index -> its open nodes (declared here, not in PDClusterState: its type
    #: lives in this module).
    _remaining_cache: dict[int, OpenNodes]

    def _cluster_tables(self) -> None:
        """Per-episode lookup tables of the cluster (instance positions, KV-transfer inverse
        bandwidths, decode capacities, prefill instance classes) and an empty prefill-time
        cache; the simulator's instances are rebuilt at every reset."""
        sim = self.sim
        assert sim is not None
        self._prefill_pos: dict[int | None, int] = {None: -1}
        self._prefill_pos.update({inst.index: i for i, inst in enumerate(sim.prefill)})
        self._decode_pos: dict[int | None, int] = {None: -1}
        self._decode_pos.update({inst.index: i for i, inst in enumerate(sim.decode)})
        kv = self.cluster.kv_transfer
        self._inv_bw = np.array(
            [[1.0 / kv.bandwidth(p.gpu, d.gpu) for d in sim.decode] for p in sim.prefill]
        )
        # KV bytes per prompt token each prefill instance ships (its KV precision's)
        self._kv_bytes = np.array([float(p.latency.kv_bytes_per_token) for p in sim.prefill])
        self._cap = np.array([float(d.capacity) for d in sim.decode])
        # Prefill time depends only on the instance's latency model (one per distinct spec:
        # GPU, TP, fraction, precision): few distinct ones.
        classes: dict[int, int] = {}
        self._prefill_class = np.array(
            [classes.setdefault(id(i.latency), len(classes)) for i in sim.prefill]
        )
        first = {c: j for j, c in reversed(list(enumerate(self._prefill_class.tolist())))}
        self._prefill_class_latency = [sim.prefill[first[c]].latency for c in range(len(classes))]
        self._prefill_times: list[dict[int, float]] = [{} for _ in classes]

    def _class_prefill_times(self, tokens: list[int]) -> np.ndarray:
        """(len(tokens), classes) unscaled prefill seconds of each input length per class."""
        out = np.empty((len(tokens), len(self._prefill_times)))
        for ci, (cache, lat) in enumerate(
            zip(self._prefill_times, self._prefill_class_latency, strict=True)
        ):
            col = []
            for x in tokens:
                t = cache.get(x)
                if t is None:
                    t = cache[x] = lat.prefill_time(x)
                col.append(t)
            out[:, ci] = col
        return out

    def _build_context(self, inv: Invocation) -> None:
        """Build the :class:`DecisionContext` of invocation ``inv`` over its slotted calls
        (``self._ctx``) and the planning state its picks then update: the per-slot fields, the
        per-call service estimates (prefill, KV transfer, decode, from scheduler-visible
        estimates only), the simulated state Ŝ of HexAgent Algorithm 1 line 10 (prefill
        readiness; decode KV use, batch and context tokens of the work in service and on its
        way), the legal actions (decode KV feasibility, HexAgent §5.4 Eq. 3–4) and the
        projection's working arrays of Δ and R(c, p, d) (§5.1 Eq. 2)."""
        sim = self.sim
        assert sim is not None
        K, P, D = self.K, self.P, self.D
        now = sim.now
        calls = self._slot_calls
        n = self._n = len(calls)
        runs = [c.workflow for c in calls]
        valid = np.zeros(K, dtype=bool)
        valid[:n] = True
        # The per-slot (K,) fields, as the rows of one array (padding 0, estimate error 1).
        tokens_in = [c.input_tokens for c in calls]
        columns = np.zeros((11, K))
        columns[10, n:] = 1.0
        if n:
            columns[:, :n] = [
                [r.arrival for r in runs],
                [now - r.arrival for r in runs],
                [max(r.online_horizon, 1e-6) for r in runs],
                [c.revealed_at for c in calls],
                tokens_in,
                [c.predicted_output_tokens for c in calls],
                [sim.estimates.isolated_call_time(c) for c in calls],
                [r.attained_service for r in runs],
                [r.attained_critical for r in runs],
                [self._remaining_critical(r) for r in runs],
                [c.time_error for c in calls],
            ]
        arrival, elapsed, horizon, revealed, lin, lout, iso, att, attc, rem, time_err = columns
        pp = np.full(K, -1, dtype=np.int64)
        pp[:n] = [self._prefill_pos[c.prefill_instance] for c in calls]
        pd_ = np.full(K, -1, dtype=np.int64)
        pd_[:n] = [self._decode_pos[c.decode_instance] for c in calls]
        # Per-call service estimates: prefill seconds by instance class, scaled by the call's
        # estimate error; KV transfer from the static inverse bandwidths.
        pre = np.zeros((K, P))
        pre[:n] = self._class_prefill_times(tokens_in)[:, self._prefill_class] * time_err[:n, None]
        hits = np.zeros((K, P))
        if self._prefix_visible:
            self._price_prefix_hits(calls, pre, hits, time_err)
        kv = self.cluster.kv_transfer
        trans = np.zeros((K, P, D))
        trans[:n] = np.where(
            lout[:n, None, None] > 0,
            kv.latency_s
            + (lin[:n, None, None] * self._kv_bytes[None, :, None]) * self._inv_bw[None, :, :],
            0.0,
        )
        # Simulated state Ŝ (HexAgent Algorithm 1 line 10): only work in service is ahead of
        # the picks; calls beyond K keep their queue places behind this invocation's picks.
        p_ready = np.array(
            [
                max(0.0, inst.busy_until - now) if inst.current is not None else 0.0
                for inst in sim.prefill
            ]
        )
        rest_work = np.zeros(P)
        if inv.stage == "prefill":
            for c in self._rest:
                if c.prefill_instance is not None:
                    j = self._prefill_pos[c.prefill_instance]
                    cached = None if self._prefix_visible else 0  # None: its hits on j now
                    rest_work[j] += sim.prefill[j].prefill_seconds(c, cached)
        cap = self._cap
        # Decode load from estimates only: running calls' predicted footprint, plus the calls
        # planned to the instance that are on their way (not re-planned in this invocation).
        # Summed as floats in the simulator's order, so the totals are exactly reproducible.
        # The same calls, as KV-occupancy intervals, make the instance's capacity timeline
        # (HexAgent §5.4), built only for an instance where some demand may not fit
        # (:meth:`_earliest_starts`, :meth:`decode_intervals`): the simulator does not move
        # during an invocation, so building it later reads the same state.
        slotted = {c.uid for c in calls}
        kv_used = np.zeros(D)
        batch = np.zeros(D)
        ctx_tokens = np.zeros(D)
        done_tokens = [0] * D
        for j, d in enumerate(sim.decode):
            used = tok = 0.0
            # Tokens emitted in the decode jump in progress (``generated`` counts up to its
            # start): elapsed / its first iteration's time, from observables only (batch,
            # context, clock); iterations only lengthen, so it may run ahead of a token-by-token
            # engine's count by the context growth's share.
            done = 0
            if d.seg_calls and not d.seg_prefill and now > d.seg_start:
                first = d.latency.decode_iteration_time(d.seg_b, d.seg_c)
                done = done_tokens[j] = int((now - d.seg_start) / first)
            for c in d.running:
                used += c.input_tokens + c.predicted_output_tokens
                tok += c.input_tokens + c.generated + done
            b = len(d.running)
            for uid, c in sim.decode_inbound[d.index].items():
                if uid not in slotted:
                    used += c.input_tokens + c.predicted_output_tokens
                    tok += c.input_tokens
                    b += 1
            kv_used[j], ctx_tokens[j], batch[j] = used, tok, b
        # What the intervals are built from (see _base_intervals), and their caches: the
        # running and inbound calls' intervals, this invocation's picks' rows, and all of them.
        self._slotted, self._p_ready0, self._done_tokens = slotted, p_ready, done_tokens
        self._batch0, self._ctx_tokens0 = batch, ctx_tokens
        self._iv_base: list[np.ndarray | None] = [None] * D
        self._iv_picks: list[list[list[float]]] = [[] for _ in range(D)]
        self._iv: list[np.ndarray | None] = [None] * D
        # The planning state that picks change (Algorithm 1's Ŝ), as Python floats (the same
        # doubles the arrays hold): prefill readiness; decode KV use, batch and context tokens.
        self._ready: list[float] = p_ready.tolist()
        self._kv_used: list[float] = kv_used.tolist()
        self._batch: list[float] = batch.tolist()
        self._ctx_tokens: list[float] = ctx_tokens.tolist()
        self._it0 = [0.0] * D
        self._slope = [0.0] * D
        for j in range(D):
            self._decode_rate(j)
        # Per-call constants of the projection, over the n valid slots.
        demand = lin + lout
        self._pre, self._trans, self._lin, self._lout = pre, trans, lin, lout
        self._demand = demand[:n]
        self._demand_max = float(self._demand.max()) if n else 0.0
        self._ctx_call = (lin + 0.5 * lout)[:n]
        self._lout_err = (lout * time_err)[:n]
        self._elapsed, self._horizon = elapsed[:n], horizon[:n]
        # Legal actions: at the prefill stage every valid slot on every decode instance that can
        # hold its KV (any prefill instance); at the decode stage only the slot's planned pair.
        feasible = np.zeros((K, P, D), dtype=bool)
        if inv.stage == "prefill":
            feasible[:n] = (demand[:n, None] <= cap[None, :])[:, None, :]
        else:
            feasible[np.arange(n), pp[:n], pd_[:n]] = True
        self._feasible = feasible
        # The projection's working arrays are slot-last, (P, D, n): the plane and the column a
        # pick changes are then long contiguous runs. ``_base`` is the part of Δ that only p's
        # readiness changes, +inf where illegal (so R is +inf there without a mask; + 0.0 keeps
        # the legal sums exact): at the prefill stage the wait for p, the prefill on p and the
        # KV transfer p→d, summed in Eq. 2's order.
        self._feasible_t = np.ascontiguousarray(feasible[:n].transpose(1, 2, 0))
        blocked = np.where(self._feasible_t, 0.0, np.inf)
        if inv.stage == "prefill":
            self._trans_blocked = np.ascontiguousarray(trans[:n].transpose(1, 2, 0)) + blocked
            self._pre_t = np.ascontiguousarray(pre[:n].T)  # (P, n): a pick's plane reads a row
            ready_pre = p_ready[:, None, None] + self._pre_t[:, None, :]
            self._base = ready_pre + self._trans_blocked
        else:
            self._base = blocked
        self._open = n
        self._open_legal = int(feasible[:n].any(axis=(1, 2)).sum())
        self._ratio = np.full((K, P, D), np.inf)
        self._decode = np.zeros((K, D))
        # The decode part of Δ, slot-last: decode seconds and the earliest capacity-feasible
        # start (seconds from now) per decode instance and slot; ``_free_kd`` is the latter as
        # the context's (K, D) ``decode_free_at``. ``_floor``: at the decode stage, the start of
        # the latest pick on each instance (strict priority admission, see _earliest_starts).
        self._dec_t = np.empty((D, n))
        self._free_at = np.empty((D, n))
        self._free_kd = np.zeros((K, D))
        self._floor = [0.0] * D
        self._waits = [True] * D  # some slot's earliest start on d is > 0 (set in _refresh)
        # Each instance's capacity_timeline, built when first needed (None: not built or stale
        # after a pick): most instances have room for every demand and never need one.
        self._bp: list[np.ndarray | None] = [None] * D
        self._neg_sm: list[np.ndarray] = [np.zeros(1)] * D
        self._ratio_log = np.full((P, D, n), np.inf)  # log1p R (+inf where illegal)
        self._ratio_obs = np.zeros((K, P, D), dtype=np.float32)  # its float32 copy, padded
        self._ctx = DecisionContext(
            time=now,
            stage=inv.stage,
            trigger=inv.trigger,
            num_slots=K,
            num_waiting=len(inv.calls),
            valid=valid,
            picked=np.zeros(K, dtype=bool),
            call_ids=[c.id for c in calls] + [""] * (K - n),
            workflow_ids=[r.id for r in runs] + [""] * (K - n),
            workflow_arrival=arrival,
            elapsed=elapsed,
            horizon=horizon,
            revealed_at=revealed,
            input_tokens=lin,
            predicted_output_tokens=lout,
            kv_demand=demand,
            isolated_time=iso,
            attained_service=att,
            attained_critical=attc,
            remaining_critical=rem,
            planned_prefill=pp,
            planned_decode=pd_,
            prefill_time=pre,
            transfer_time=trans,
            decode_time=self._decode,
            prefill_ready=p_ready.copy(),
            prefill_queued=rest_work,
            decode_kv_used=kv_used.copy(),
            decode_kv_capacity=cap.copy(),
            decode_batch=batch.copy(),
            projected_ratio=self._ratio,
            feasible=feasible,
            prefill_gpus=[i.gpu for i in sim.prefill],
            decode_gpus=[i.gpu for i in sim.decode],
            decode_free_at=self._free_kd,
            action_space=self.action_space_name,
        )
        self._ctx.prefix_hit_tokens = hits
        self._refresh()

    def _price_prefix_hits(
        self, calls: list[Call], pre: np.ndarray, hits: np.ndarray, time_err: np.ndarray
    ) -> None:
        """Fill ``hits`` (K, P) with the slots' prompt tokens cached on each prefill instance now
        and re-price ``pre`` (K, P) where a slot hits: the prefill of its uncached tokens with the
        cached ones as context, times the call's estimate error."""
        sim = self.sim
        assert sim is not None
        for k, c in enumerate(calls):
            for i, tokens in sim.estimates.prefix_hits(c).items():
                if tokens:
                    j = self._prefill_pos[i]
                    hits[k, j] = tokens
                    pre[k, j] = sim.prefill[j].prefill_seconds(c, tokens) * time_err[k]

    def _remaining_critical(self, run: WorkflowRun) -> float:
        """``remaining_critical`` of ``run`` (see :class:`DecisionContext`): the largest run-alone
        cost among its revealed, unfinished nodes. Kept per workflow and brought up to date only
        when a node was revealed or finished since (both sets only grow, so their sizes identify
        the state); an update touches the new nodes and the unfinished ones, not the whole DAG."""
        sim = self.sim
        assert sim is not None
        state = self._remaining_cache.get(run.index)
        if state is None:
            state = self._remaining_cache[run.index] = OpenNodes()
        if state.revealed == len(run.revealed) and state.finished == len(run.finished):
            return state.critical
        for node_id in run.revealed[state.revealed :]:
            node = run.nodes[node_id]
            if isinstance(node, ToolNode):
                # What H_w(t) charges it: an estimate until it returns (never its true latency).
                state.cost[node_id] = run.tool_estimates[node_id]
            else:
                state.cost[node_id] = sim.estimates.isolated_call_time(run.calls[node_id])
        for node_id in [n for n in state.cost if n in run.finished]:
            del state.cost[node_id]
        # Revealed nodes all have finished parents, so no path holds two unfinished nodes.
        state.critical = max(state.cost.values(), default=0.0)
        state.revealed, state.finished = len(run.revealed), len(run.finished)
        return state.critical
