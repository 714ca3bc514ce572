"""PDCluster-v0's decode projection (HexAgent §5.3–§5.4): each decode instance's KV-capacity
timeline, the earliest capacity-feasible start of a waiting call on it, the decode estimates and
the projected ratio R(c, p, d) of every (slot, prefill, decode) triple, kept current pick by pick.
"""

from __future__ import annotations

import sys

import numpy as np

from envs.pd_cluster.observation import RATIO_CLIP
from envs.pd_cluster.state import PDClusterState
from envs.sim.core.workflows import PREFILL, TRANSFER, WAIT_DECODE, Call

#: Invocations with at most this many (slot, p, d) entries are re-projected whole after a pick.
WHOLE_REFRESH_LIMIT = 2048


def capacity_timeline(intervals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A decode instance's KV-capacity timeline (HexAgent §5.4, "updates the simulated decode
    intervals"; §6 "decode token-capacity intervals") in the form earliest-start queries need.

    :param intervals: (m, 3) KV-occupancy intervals ``[start, end, tokens]``, seconds from now
        (start ≥ 0) and KV tokens held during [start, end).
    :returns: ``(breakpoints, neg_suffix_max)``: the usage step function's breakpoints
        (ascending, the first is 0) and, for each, −(the largest usage from that breakpoint on),
        a non-decreasing array (:func:`earliest_feasible_start` searches it). Token counts are
        integers, so the running sums are exact and usage returns to exactly 0.
    """
    m = len(intervals)
    if m == 0:
        return np.zeros(1), np.zeros(1)
    times = np.empty(2 * m + 1)
    times[0] = 0.0
    times[1 : m + 1] = intervals[:, 0]
    times[m + 1 :] = intervals[:, 1]
    steps = np.empty(2 * m + 1)
    steps[0] = 0.0
    steps[1 : m + 1] = intervals[:, 2]
    steps[m + 1 :] = -intervals[:, 2]
    order = np.argsort(times, kind="stable")
    times = times[order]
    usage = np.cumsum(steps[order])
    # At a breakpoint shared by several events the usage after all of them holds.
    last = np.empty(len(times), dtype=bool)
    np.not_equal(times[1:], times[:-1], out=last[:-1])
    last[-1] = True
    neg = -usage[last]
    return times[last], np.minimum.accumulate(neg[::-1])[::-1]


def earliest_feasible_start(
    breakpoints: np.ndarray, neg_suffix_max: np.ndarray, demand: np.ndarray, capacity: float
) -> np.ndarray:
    """Earliest time T(m) from which a call holding ``demand`` m KV tokens fits on the instance
    for good: the smallest breakpoint s with (largest usage from s on) + m ≤ capacity (HexAgent
    §5.4, "finds the earliest capacity-feasible start time"). A call arriving at a starts at
    max(a, T(m)): at a inside the step at breakpoint b_i the largest usage from a on is that
    from b_i on, and it only decreases with time.

    Conservative by choice: it asks for room from the start on for good, not only during the
    call's own decode interval, so a call never uses a gap before a later reservation even if
    it would finish inside it. That is exact whenever no interval starts after the call would
    (then usage only falls), and it reads as a single ``np.searchsorted`` for all calls at
    once. Measured with HexAgent on
    Hetero-1 under KV pressure (70 workflows with 100k-token prompts arriving together): 11.7 %
    of the sampled (call, decode instance) projections waited for KV, and for none of them did
    the exact rule (room only during the call's own decode interval) start earlier. A demand
    above ``capacity`` (possible only for a call locked to the instance at the decode stage)
    gets the time the instance empties.

    :param breakpoints: from :func:`capacity_timeline`.
    :param neg_suffix_max: from :func:`capacity_timeline`.
    :param demand: (n,) KV tokens m(c) = L_in + L̂_out.
    :param capacity: Cap(d), KV tokens.
    :returns: (n,) seconds from now.
    """
    idx = np.searchsorted(neg_suffix_max, demand - capacity, side="left")
    return breakpoints[np.minimum(idx, len(breakpoints) - 1)]


class DecodeProjectionMixin(PDClusterState):
    """The projection methods of :class:`envs.pd_cluster.env.PDClusterEnv` (its decision-context
    arrays ``decode_free_at``, ``decode_time``, ``projected_ratio`` and the action mask)."""

    def _decode_rate(self, j: int) -> None:
        """Iteration time of decode instance j at its batch (incl. picks) plus one call, as an
        affine function of the call's context: it0 + slope · tokens (two latency-model calls)."""
        sim = self.sim
        assert sim is not None
        d = sim.decode[j]
        b = int(self._batch[j]) + 1
        c0 = int(self._ctx_tokens[j])
        a = d.latency.decode_iteration_time(b, c0)
        self._it0[j] = a
        self._slope[j] = (d.latency.decode_iteration_time(b, c0 + 8192) - a) / 8192.0

    def _inbound_arrival(self, call: Call, j: int, p_ready: np.ndarray) -> float:
        """Predicted seconds from now until ``call``, planned to decode instance ``j`` and not
        re-planned in this invocation, reaches j's decode queue: 0 if it waits there; the rest
        of its KV transfer; the rest of its prefill plus the transfer; if still queued for
        prefill, its prefill right after the one in service plus the transfer (a lower bound:
        the queue ahead of it is not counted). Estimates only (the env's transfer formula, the
        call's estimate error)."""
        stage = call.stage
        if stage == WAIT_DECODE:
            return 0.0
        pos = self._prefill_pos[call.prefill_instance]
        trans = (
            self.cluster.kv_transfer.latency_s
            + (call.input_tokens * self._kv_bytes[pos]) * self._inv_bw[pos, j]
        )
        if stage == TRANSFER:
            assert self.sim is not None
            return max(0.0, call.prefill_end + trans - self.sim.now)
        if stage == PREFILL:
            return float(p_ready[pos] + trans)
        lat = self._prefill_class_latency[self._prefill_class[pos]]
        return float(p_ready[pos] + lat.prefill_time(call.input_tokens) * call.time_error + trans)

    def _base_intervals(self, j: int) -> np.ndarray:
        """The KV-occupancy intervals of decode instance ``j``'s running and inbound calls at the
        invocation's start (HexAgent §5.4, Algorithm 1 line 10): (m, 3) ``[start, end, tokens]``,
        seconds from now and KV tokens.

        A call holds its predicted footprint L_in + L̂_out (never the true length) from its
        start — now if running, its predicted arrival (:meth:`_inbound_arrival`) if inbound —
        for its predicted remaining output tokens (L̂_out − generated, at least 1; all of L̂_out
        if inbound) times its estimate error times one decode iteration of the instance at its
        batch and context (running + inbound calls). An inbound call is placed at its arrival
        whether or not it would fit then; the intervals are not stretched when later picks grow
        the batch."""
        sim = self.sim
        assert sim is not None
        d = sim.decode[j]
        done = self._done_tokens[j]
        arrive: list[float] = []
        work: list[float] = []
        hold: list[float] = []
        for c in d.running:
            arrive.append(0.0)
            work.append(max(c.predicted_output_tokens - c.generated - done, 1) * c.time_error)
            hold.append(c.input_tokens + c.predicted_output_tokens)
        for uid, c in sim.decode_inbound[d.index].items():
            if uid not in self._slotted:
                arrive.append(self._inbound_arrival(c, j, self._p_ready0))
                work.append(c.predicted_output_tokens * c.time_error)
                hold.append(c.input_tokens + c.predicted_output_tokens)
        iv = np.empty((len(hold), 3))
        if hold:
            batch, tokens = int(self._batch0[j]), int(self._ctx_tokens0[j])
            step = d.latency.decode_iteration_time(batch, tokens)
            iv[:, 0] = arrive
            iv[:, 1] = iv[:, 0] + np.multiply(work, step)
            iv[:, 2] = hold
        return iv

    def decode_intervals(self, d: int) -> np.ndarray:
        """Decode instance ``d``'s simulated KV occupancy at this decision step (HexAgent §5.4,
        "updates the simulated decode intervals"): an (m, 3) array of ``[start, end, tokens]``
        (seconds from now, predicted KV tokens) — running calls until their predicted finish,
        calls planned to d and on their way from their predicted arrival (both
        :meth:`_base_intervals`), then this invocation's picks on d from their projected start
        to their projected end, in pick order. ``decode_free_at`` in the decision context is
        read from it. Predicted lengths only. Do not modify the array.

        :param d: decode instance, pool index.
        """
        if self._ctx is None:
            raise RuntimeError("no decision is pending: call reset() or step() first")
        if not 0 <= d < self.D:
            raise ValueError(f"decode instance {d} is outside the pool's 0..{self.D - 1}")
        iv = self._iv[d]
        if iv is None:
            base = self._iv_base[d]
            if base is None:
                base = self._iv_base[d] = self._base_intervals(d)
            picks = self._iv_picks[d]
            iv = self._iv[d] = np.concatenate((base, picks)) if picks else base
        return iv

    def _earliest_starts(self, j: int) -> None:
        """``_free_at[j]``: for every valid slot, the earliest capacity-feasible start of its
        demand m(c) on decode instance j (HexAgent §5.4), seconds from now, before its arrival
        is taken into account (Δ uses max(arrival, this)).

        At the decode stage it is also no earlier than the latest pick's start on j: the decode
        engine admits in strict priority order and the first waiting call that does not fit
        blocks those behind it (:class:`envs.sim.engines.instances.DecodeInstance`, ``reserve``),
        and the k-th pick gets priority k, ahead of every later pick. At the prefill stage the
        picks' decode order is set later, by the decode invocations at their transfer ends, so
        no such floor is applied."""
        floor = self._floor[j]
        cap = float(self._cap[j])
        # ``_kv_used`` is the intervals' token total, so at least their peak usage: if even the
        # largest demand fits beside all of them, no call waits for KV (the common case).
        self._waits[j] = True
        if self._kv_used[j] + self._demand_max <= cap:
            self._free_at[j] = floor
            self._waits[j] = floor > 0.0
            return
        bp = self._bp[j]
        if bp is None:
            bp, self._neg_sm[j] = capacity_timeline(self.decode_intervals(j))
            self._bp[j] = bp
        neg = self._neg_sm[j]
        if self._demand_max - neg[0] <= cap:
            self._free_at[j] = floor  # the largest demand fits beside the peak from now on
            self._waits[j] = floor > 0.0
            return
        t = earliest_feasible_start(bp, neg, self._demand, cap)
        self._free_at[j] = np.maximum(t, floor) if floor > 0.0 else t

    def _decode_estimates(self, j: int | None = None) -> None:
        """The decode part of Δ on decode instance ``j`` (None: on every one) for each valid
        slot (HexAgent §5.4): its decode seconds at the batch size and context the instance
        will have with this invocation's picks (``decode_time``), and its earliest
        capacity-feasible start on the instance's KV-capacity timeline (``decode_free_at``).

        Δ's decode part for a call arriving at d at a (prefill stage: p's readiness + prefill +
        transfer; decode stage: now) is max(a, T_d(m)) − a + decode seconds: the decode-queue
        wait is the wait for KV room, and, at the decode stage, for the calls picked ahead of it
        (:meth:`_earliest_starts`)."""
        n = self._n
        if j is None:
            it0, slope = np.array(self._it0), np.array(self._slope)
            dec = self._lout_err[:, None] * (it0 + slope * self._ctx_call[:, None])
            self._decode[:n] = dec
            self._dec_t[:] = dec.T
            for jj in range(self.D):
                self._earliest_starts(jj)
            self._free_kd[:n] = self._free_at.T
        else:
            # L̂_out·err · (it0 + slope · ctx) as above, in one buffer (the same products and
            # sums: IEEE addition and multiplication are commutative)
            dec = np.multiply(self._ctx_call, self._slope[j])
            np.add(dec, self._it0[j], out=dec)
            np.multiply(dec, self._lout_err, out=dec)
            self._decode[:n, j] = dec
            self._dec_t[j] = dec
            self._earliest_starts(j)
            self._free_kd[:n, j] = self._free_at[j]

    def _project(self, ps: slice, ds: slice) -> None:
        """Recompute R(c, p, d) of the valid slots on the block of prefill instances ``ps`` ×
        decode instances ``ds`` (HexAgent Eq. 2), its log1p and the observation's clipped log
        (the last two only when the env builds observations).
        Δ = max(arrival at d, earliest capacity-feasible start on d) + decode seconds, where the
        arrival is ``_base`` (+inf where illegal) — see :meth:`_decode_estimates`."""
        n = self._n
        if any(self._waits[ds]):
            delta = np.maximum(self._base[ps, ds], self._free_at[ds]) + self._dec_t[ds]
        else:  # every start is 0 on these instances, and max(arrival ≥ 0, 0) is the arrival
            delta = self._base[ps, ds] + self._dec_t[ds]
        ratio = (self._elapsed + delta) / self._horizon
        self._ratio[:n, ps, ds] = ratio.transpose(2, 0, 1)
        if not self._observe:
            return  # the rest is the observation's (``observations=False``: not built)
        log = np.log1p(ratio)
        self._ratio_log[ps, ds] = log
        clipped = np.where(self._feasible_t[ps, ds], np.minimum(log, RATIO_CLIP), 0.0)
        self._ratio_obs[:n, ps, ds] = clipped.transpose(2, 0, 1)

    def _project_cross(self, p: int, d: int) -> None:
        """:meth:`_project` of the prefill plane ``p`` and the decode column ``d`` together (what
        a prefill-stage pick on (p, d) changes), as one gather of their P + D − 1 (p, d) rows,
        the same element-wise arithmetic, and one scatter: half the numpy calls of projecting
        the plane and the column one after the other, with the same values."""
        n, P, D = self._n, self.P, self.D
        rows, cols = self._cross_rows(p, d)
        # The same operations as _project's, in place on the gathered buffer (the sums are
        # commutative in IEEE arithmetic, so elapsed + Δ and Δ + elapsed are the same doubles).
        ratio = self._base.reshape(P * D, n).take(rows, axis=0)
        if any(self._waits):
            np.maximum(ratio, self._free_at.take(cols, axis=0), out=ratio)
        # else every start is 0, and max(arrival ≥ 0, 0) is the arrival (see _project)
        np.add(ratio, self._dec_t.take(cols, axis=0), out=ratio)
        np.add(ratio, self._elapsed, out=ratio)
        np.divide(ratio, self._horizon, out=ratio)
        self._ratio.reshape(self.K, P * D)[:n, rows] = ratio.T
        if not self._observe:
            return
        log = np.log1p(ratio)
        self._ratio_log.reshape(P * D, n)[rows] = log
        feasible = self._feasible_t.reshape(P * D, n).take(rows, axis=0)
        clipped = np.where(feasible, np.minimum(log, RATIO_CLIP), 0.0)
        self._ratio_obs.reshape(self.K, P * D)[:n, rows] = clipped.T

    def _cross_rows(self, p: int, d: int) -> tuple[np.ndarray, np.ndarray]:
        """The flat pair indices p·D + d' of plane ``p`` (every d') and of column ``d`` (every
        other p'), and the decode instance of each; cached per (p, d)."""
        key = p * self.D + d
        cached = self._cross.get(key)
        if cached is None:
            P, D = self.P, self.D
            others = [q for q in range(P) if q != p]
            rows = np.array([p * D + j for j in range(D)] + [q * D + d for q in others])
            cols = np.array(list(range(D)) + [d] * len(others))
            cached = self._cross[key] = (rows, cols)
        return cached

    def _refresh(self, pick: tuple[int, int, int] | None = None) -> None:
        """Bring R, the mask and the context arrays up to date (Algorithm 1 lines 13–17): all
        of them at the invocation's start, after a pick (slot, p, d) only what it changed.

        A pick changes prefill p's readiness (the plane R[:, p, :]) and decode d's batch, context
        and KV use (the column R[:, :, d]); the picked slot loses its legal actions. Only the n
        valid slots (the first n) are computed; the padding stays inf / illegal. Small
        invocations are recomputed whole: fewer, larger array operations cost less there."""
        ctx = self._ctx
        assert ctx is not None
        whole = slice(None)
        if pick is None:
            self._decode_estimates()
            self._project(whole, whole)
        else:
            self._unshare()
            slot, p, d = pick
            self._feasible[slot] = False
            observe = self._observe
            if observe:  # the slot-last mask is read only by the observation's clipping
                self._feasible_t[:, :, slot] = False
            self._base[:, :, slot] = np.inf
            self._decode_estimates(d)
            prefill = ctx.stage == "prefill"
            if prefill:
                self._trans_blocked[:, :, slot] = np.inf
                np.add(self._ready[p] + self._pre_t[p], self._trans_blocked[p], out=self._base[p])
            if self._ratio_log.size <= WHOLE_REFRESH_LIMIT:
                self._project(whole, whole)
            else:
                self._ratio[slot] = np.inf
                if observe:
                    self._ratio_log[:, :, slot] = np.inf
                    self._ratio_obs[slot] = 0.0
                if prefill:
                    self._project_cross(p, d)
                else:
                    self._project(whole, slice(d, d + 1))
        ctx.projected_ratio = self._ratio
        ctx.feasible = self._feasible
        ctx.decode_time = self._decode
        ctx.decode_free_at = self._free_kd
        if pick is None or ctx.stage == "prefill":  # a decode-stage pick leaves it as it is
            ctx.prefill_ready = np.array(self._ready)
        ctx.decode_kv_used = np.array(self._kv_used)
        ctx.decode_batch = np.array(self._batch)
        self._mask = self._feasible.reshape(-1)
        if self._open_legal == 0 and self._open > 0:
            op = ctx.valid & ~ctx.picked
            raise RuntimeError(
                "no legal action although calls are waiting: some call's KV demand exceeds every "
                f"decode instance's capacity (demands {ctx.kv_demand[op]}, capacities "
                f"{self._cap})"
            )

    def _refcounts(self) -> tuple[int, int, int, int]:
        return (
            sys.getrefcount(self._ratio),
            sys.getrefcount(self._feasible),
            sys.getrefcount(self._decode),
            sys.getrefcount(self._free_kd),
        )

    def _unshare(self) -> None:
        """Copy-on-write for the context's R, mask, decode-time and decode-free-at arrays, which
        a refresh updates in place: if anything besides the env and the context references one
        of them (a policy kept it, or a view of it, from an earlier step), the env continues on a
        copy, so what was kept still holds that step's values, as if every step had fresh arrays.
        ``_owned_refs`` are the reference counts with only the env's and the context's
        references, measured when the invocation's arrays were made."""
        refs = self._refcounts()
        if refs == self._owned_refs:
            return
        if refs[0] > self._owned_refs[0]:
            self._ratio = self._ratio.copy()
        if refs[1] > self._owned_refs[1]:
            self._feasible = self._feasible.copy()
            self._mask = self._feasible.reshape(-1)
        if refs[2] > self._owned_refs[2]:
            self._decode = self._decode.copy()
        if refs[3] > self._owned_refs[3]:
            self._free_kd = self._free_kd.copy()
