"""What a PDCluster-v0 policy knows at a decision: :class:`DecisionContext`, the documented
decision context (HexAgent §5's estimates and the projected ratio R(c, p, d) per waiting-call
slot and prefill-decode pair) that ``info["decision_context"]`` carries."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from envs.common.base import DecisionContextBase


@dataclass(eq=False)
class DecisionContext(DecisionContextBase):
    """The scheduler-visible state at one decision step (``info["decision_context"]``).

    Array axes: k = slot (K), p = prefill instance (P), d = decode instance (D); seconds unless
    named otherwise. Entries of invalid slots are zero. Nothing here depends on unrevealed nodes.

    **What it reveals about output lengths.** Every field that depends on a call's output length
    (``predicted_output_tokens``, ``kv_demand``, ``isolated_time``, ``horizon``,
    ``remaining_critical``, ``decode_time``, ``decode_kv_used``, ``projected_ratio``,
    ``feasible``) is computed from the configured predictor's estimate L̂_out (the env's
    ``output_predictor``), never from the true length of a call that has not finished; a finished
    call's true length is observed, and ``horizon`` re-costs it. Under the default ``oracle``
    predictor L̂_out *is* the true length (times the ``estimate_error`` draw), so under the oracle
    all of those fields are functions of the truth: that is HexAgent's assumption (§5.4 feeds
    per-call output lengths, §7.6 injects error into them), not what a deployed scheduler knows.
    ``task-mean``, ``history``, ``mlp`` and ``moe`` are realistic
    (tests/envs/pd_cluster/test_predictor_visibility.py checks that the truth reaches the
    observation only through the predictor). Measured
    quantities (``elapsed``, ``attained_service``, ...) reflect what happened, as in any real
    system. A revealed tool that has not returned is charged the env's ``tool_estimate``, by
    default a running mean of finished tools, never its true latency.

    Within an invocation the env updates this object after every pick: ``picked``, ``picks``
    and the arrays the picks change (``projected_ratio``, ``feasible``, ``decode_time``,
    ``decode_free_at``, ``prefill_ready``, ``decode_kv_used``, ``decode_batch``). An array
    taken from it at an earlier step keeps that step's values (the env writes in place only
    into arrays that nothing else references).

    :param time: simulated time t.
    :param stage: ``prefill`` or ``decode``.
    :param trigger: ``arrival``, ``reveal``, ``transfer``, or ``replan`` (asynchronous planning:
        a delayed plan landed on a stage that absorbed new work meanwhile; ``planning_delay``).
    :param num_slots: K.
    :param num_waiting: calls waiting at this stage in all (slotted or not).
    :param valid: (K,) slot holds a waiting call.
    :param picked: (K,) slot already picked in this invocation.
    :param call_ids: (K,) ``workflow/node`` ids ("" when invalid).
    :param workflow_ids: (K,) workflow ids.
    :param workflow_arrival: (K,) a_w, the workflow's arrival time.
    :param elapsed: (K,) t − a_w: measured seconds since the workflow arrived, everything included
        (queueing, service, KV transfer, tool time). Comparable with ``horizon`` (both count from
        a_w): elapsed / horizon is the workflow's slowdown so far.
    :param horizon: (K,) online horizon H_w(t) (HexAgent §5.1): the longest path, counted from
        a_w, through the workflow's *revealed* nodes, finished and unfinished alike, as if it ran
        alone on an empty cluster with each node starting when its last parent ends. A call costs
        its run-alone time on the fastest (prefill, decode) pair at batch 1 — prefill + KV
        transfer + decode: ``isolated_time`` (from L̂_out) while unfinished, re-costed from its
        true output length once it has finished (known by then). A tool node costs the
        simulation's ``tool_estimate`` until it returns (default: the mean measured latency of
        the finished tools of its name), then its measured latency. This longest path is the
        standalone completion of the revealed subgraph (§5.2) when every branch gets a pair as
        fast as the fastest: a lower bound of the simulated standalone run, which may have to put
        parallel branches on slower pairs (measured at the end of 60-workflow runs, when every
        node has finished: 0.97–1.00 of the simulated H_w on ``mixed`` and ``lats``, 1.00 on
        ``bfcl``). Queueing and contention are excluded, so H_w(t) changes only when a node of
        the workflow is revealed or finishes, never with t alone. Floored at 1e-6 s. It is not the
        H_w of the rewards and metrics (``info["horizons"]``: the whole DAG simulated alone on
        true lengths), which only the finished workflow has.
    :param revealed_at: (K,) reveal time of the call.
    :param input_tokens: (K,) L_in.
    :param predicted_output_tokens: (K,) L̂_out.
    :param kv_demand: (K,) m(c) = L_in + L̂_out tokens.
    :param isolated_time: (K,) the call's run-alone seconds on the fastest (prefill, decode) pair
        at batch 1 (prefill + KV transfer + decode of L̂_out tokens, times the estimate error):
        the cost ``horizon`` and ``remaining_critical`` give it.
    :param attained_service: (K,) measured GPU seconds of the workflow's finished calls (Autellix
        PLAS): per call, prefill end − start plus decode end − start under the batching it
        actually got; queueing, KV transfer, tools and calls still in progress count 0.
    :param attained_critical: (K,) the same measured service summed along the dependency path
        that has the most of it (Autellix ATLAS); attained_critical ≤ attained_service and
        ≤ elapsed. Measured and contention-inflated, so not comparable with ``horizon`` or
        ``remaining_critical`` (run-alone estimates); it ranks workflows against each other.
    :param remaining_critical: (K,) run-alone seconds of critical-path work left in the workflow
        from now, over its revealed nodes: the longest path through the revealed nodes not yet
        finished (the slot's own call included), each costed as in ``horizon`` (calls:
        ``isolated_time``, from L̂_out, never the true length; tools: what ``horizon`` charges
        them). A child is
        revealed only when all its parents have finished, so the unfinished revealed nodes are
        mutually independent and the path is a single node: the costliest of them. A node in
        service counts in full (the work left when it started, not a countdown), so this too
        changes only at a reveal or a finish of the workflow's nodes. Relations:
        isolated_time ≤ remaining_critical ≤ horizon; remaining_critical = horizon until a node
        of the workflow finishes (e.g. at its arrival); without parallel branches (a chain) it
        equals isolated_time; elapsed + remaining_critical is the finish time of the revealed
        part, counted from a_w, if its unfinished nodes all started now and ran alone.
    :param planned_prefill: (K,) current prefill plan (pool index) or -1.
    :param planned_decode: (K,) current decode plan (pool index) or -1.
    :param prefill_time: (K, P) estimated prefill seconds (of the uncached tokens, attending to
        the cached ones, when the env has a visible ``prefix_cache``).
    :param prefix_hit_tokens: (K, P) tokens of the slot's prompt cached on p now (its leading
        prefix blocks in p's LRU prefix cache; 0 without a visible ``prefix_cache``). A property
        (not a constructor argument): 0 everywhere in a context built by hand.
    :param transfer_time: (K, P, D) estimated KV transfer seconds.
    :param decode_time: (K, D) estimated decode seconds on d given this invocation's picks.
    :param prefill_ready: (P,) seconds from now until p is free of in-service and picked work.
    :param prefill_queued: (P,) seconds of prefill work queued behind this invocation's picks
        (calls beyond the K slots).
    :param decode_kv_used: (D,) predicted KV tokens of running calls, of calls planned to d and
        still on their way (prefill, transfer, decode queue; outside the slots), and of this
        invocation's picks.
    :param decode_kv_capacity: (D,) KV capacity in tokens.
    :param decode_batch: (D,) running + on-their-way + picked calls.
    :param projected_ratio: (K, P, D) R(c, p, d); +inf where infeasible or invalid.
    :param feasible: (K, P, D) the action mask reshaped.
    :param prefill_gpus: (P,) GPU types. ``decode_gpus``: (D,).
    :param picks: (slot, p, d) picked so far in this invocation.
    :param decode_free_at: (K, D) earliest capacity-feasible start of the slot's demand m(c) on
        d, seconds from now (HexAgent §5.4): the first time from which m(c) fits for good beside
        d's simulated KV-occupancy intervals (running, inbound and picked calls; the env's
        ``decode_intervals(d)``); at the decode stage no earlier than the latest pick's start
        on d (strict priority admission). A call arriving at d at a starts decoding at
        max(a, decode_free_at), so in ``projected_ratio`` Δ = max(arrival, decode_free_at) +
        ``decode_time`` (arrival: p's readiness + prefill + transfer at the prefill stage, now
        at the decode stage).
    :param action_space: the env's ``action_space`` (``flat`` or ``two-step``): how
        :meth:`action` encodes a pick.
    :param selected_slot: in the two-step space, the slot chosen at this pick's slot step while
        its pair step is pending; -1 otherwise (flat space, or a slot step).
    """

    time: float
    stage: str
    trigger: str
    num_slots: int
    num_waiting: int
    valid: np.ndarray
    picked: np.ndarray
    call_ids: list[str]
    workflow_ids: list[str]
    workflow_arrival: np.ndarray
    elapsed: np.ndarray
    horizon: np.ndarray
    revealed_at: np.ndarray
    input_tokens: np.ndarray
    predicted_output_tokens: np.ndarray
    kv_demand: np.ndarray
    isolated_time: np.ndarray
    attained_service: np.ndarray
    attained_critical: np.ndarray
    remaining_critical: np.ndarray
    planned_prefill: np.ndarray
    planned_decode: np.ndarray
    prefill_time: np.ndarray
    transfer_time: np.ndarray
    decode_time: np.ndarray
    prefill_ready: np.ndarray
    prefill_queued: np.ndarray
    decode_kv_used: np.ndarray
    decode_kv_capacity: np.ndarray
    decode_batch: np.ndarray
    projected_ratio: np.ndarray
    feasible: np.ndarray
    prefill_gpus: list[str]
    decode_gpus: list[str]
    picks: list[tuple[int, int, int]] = field(default_factory=list)
    decode_free_at: np.ndarray | None = None
    action_space: str = "flat"
    selected_slot: int = -1

    @property
    def prefix_hit_tokens(self) -> np.ndarray:
        """(K, P) prompt tokens of each slot's call cached on each prefill instance now."""
        hits = self.__dict__.get("_prefix_hit_tokens")
        return np.zeros(self.prefill_time.shape) if hits is None else hits

    @prefix_hit_tokens.setter
    def prefix_hit_tokens(self, hits: np.ndarray) -> None:
        self.__dict__["_prefix_hit_tokens"] = hits

    def action(self, slot: int, p: int, d: int) -> int:
        """The action that picks (slot, p, d) in the env's action space: the flat index, or in
        the two-step space (:mod:`envs.pd_cluster.actions`) ``slot`` at a slot step and
        ``p·D + d`` at the pair step of the selected slot.

        :raises ValueError: at a pair step, for a slot other than the selected one.
        """
        num_p, num_d = self.prefill_time.shape[1], self.decode_time.shape[1]
        if self.action_space == "flat":
            return (slot * num_p + p) * num_d + d
        if self.selected_slot < 0:
            return int(slot)
        if slot != self.selected_slot:
            raise ValueError(
                f"this is the pair step of slot {self.selected_slot}; a pick of slot {slot} "
                "cannot be expressed here"
            )
        return p * num_d + d

    def unflatten(self, action: int) -> tuple[int, int, int]:
        """(slot, p, d) of a flat action index (the ``flat`` space's encoding)."""
        num_p, num_d = self.prefill_time.shape[1], self.decode_time.shape[1]
        slot, rest = divmod(int(action), num_p * num_d)
        p, d = divmod(rest, num_d)
        return slot, p, d
