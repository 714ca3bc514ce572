"""``servegym/PDCluster-v0``: HexAgent's problem as a Gymnasium MDP.

Online-revealed agentic workflows (DAGs of LLM calls and tools) arrive at a heterogeneous
prefill–decode disaggregated cluster. The policy places each waiting call on a (prefill, decode)
instance pair and orders the calls in the instances' local queues (HexAgent §4–§5).

## Decisions

Scheduler *invocations* are raised when work enters a stage (HexAgent §4.3, §5.2): workflow
arrival and child-call reveal (prefill stage), KV-transfer completion (decode stage). An
invocation re-plans the calls still waiting at that stage, **one call per step**, for at most K of
them (``slots``). The K are the oldest by the canonical order, reveal time (a neutral order: it
favours no policy's priority rule, and a call cannot starve beyond K because it only gets older).
Calls beyond K keep their plan and their relative queue order, behind this invocation's picks;
those without a plan take the fallback's (least-loaded placement,
:class:`envs.sim.scheduler.DefaultScheduler`). The k-th call picked in an
invocation gets queue priority k. A call that started service never moves. The simulator
advances only when the invocation's slots are all picked (Decima's pattern).

## Action space

``Discrete(K · P · D)``: action ``a = k·P·D + p·D + d`` picks slot ``k`` and, at the prefill
stage, prefill instance ``p`` and decode instance ``d`` (pool-local indices, in cluster order).
At the decode stage the call is locked to its planned pair: the only legal action for slot ``k``
is its own ``(p, d)``. ``action_masks()`` (also ``info["action_mask"]``) marks legal actions:
valid, not yet picked slots, and decode KV feasibility m(c) = L_in + L̂_out ≤ Cap(d)
(HexAgent §5.4 Eq. 3–4). It is never all-false while a decision is pending; on the step that
ends the episode it marks action 0 alone.

A masked action is replaced by the fallback's choice (:meth:`PDClusterEnv.fallback_action`: the
oldest unpicked slot on the simulator's least-loaded pair) with a penalty, and flagged in
``info["invalid_action"]``; ``invalid_action="raise"`` raises instead (the shared rule of
:mod:`envs.common.base`).

## Observation (``Dict`` of ``float32`` boxes; all padded entries are 0)

==================  ===============  ===========================================================
key                 shape            meaning
==================  ===============  ===========================================================
``slots``           (K, 12)          per waiting call: valid, picked, log1p(L_in)/10,
                                     log1p(L̂_out)/10, elapsed/H_w(t) (≤10)/10, log1p(H_w(t))/5,
                                     log1p(elapsed)/5, log1p(time since reveal)/5, has plan,
                                     workflow finished/revealed calls, log1p(attained service)/5,
                                     the best projected ratio log1p(min R)/5
``instances``       (P + D, 9)       per instance: is prefill, log1p(prefill ms per 1k tokens)/5,
                                     log1p(decode step ms at batch 1)/5, log1p(ready-in s)/5,
                                     queued calls/16, KV used fraction (incl. this invocation's
                                     picks), batch incl. picks/64, running batch/64, usable
                                     memory (TB)
``ratio``           (K, P, D)        log1p of the projected ratio R(c, p, d), clipped to [0, 5]
``stage``           (3,)             is prefill stage, is decode stage, picks made / K
==================  ===============  ===========================================================

R(c, p, d) = ((t − a_w) + Δ(c, p, d)) / H_w(t) (HexAgent §5.1 Eq. 2), where Δ is the projected
time to finish the stage: at the prefill stage the wait for p, the prefill, the KV transfer,
the decode-queue wait on d and the decode on d; at the decode stage the decode-queue wait and
the decode on d. The decode-queue wait lasts until the earliest capacity-feasible start on d's
KV-occupancy timeline (HexAgent §5.4; ``decode_free_at`` in :class:`DecisionContext`). It is
computed on the simulated state *including the picks already made in this invocation*
(HexAgent Algorithm 1 line 20; a pick adds its KV-occupancy interval on d), from
scheduler-visible estimates only (predicted output lengths, estimate-error-scaled times).

## Rewards (``reward=``)

* ``"slowdown"`` (default): when a workflow finishes, −(C_w/H_w)^p / N (``reward_kwargs`` ``p``,
  default 4). The episode return is exactly −Σ_w (C_w/H_w)^p / N, a smooth surrogate of the tail
  (p → ∞ approaches max C_w/H_w).
* ``"lateness"``: when a workflow finishes, −max(0, C_w/H_w − α)/N (default α = 2).
* ``"req99"``: 0 until the end, then −Req99 (terminal, sparse).
Workflows unfinished at truncation are charged with their elapsed time as C_w.

## Episode

``reset`` draws a workload (generator ``workload`` seeded from the reset seed, or ``trace``) and
runs the simulator to the first decision. The episode terminates when every workflow finishes;
it is truncated after ``max_steps`` steps. At episode end ``info`` carries ``metrics`` (Req95,
Req99, ... from :mod:`envs.sim.metrics`), ``attainment_curve``, ``completion_times``,
``horizons``, ``invocations``, ``utilisation``. Every step's ``info["metrics"]`` holds the metrics
as if the episode ended now (unfinished workflows: C_w = inf), so a ``TimeLimit`` cut reports
them too. With ``decision_context=True`` every step's ``info["decision_context"]`` is the
structured scheduler-visible state (:class:`DecisionContext`) that experts act on
(``env.decision_context()`` returns it either way).

## Arguments

See the options table under "PDCluster-v0" in README.md; each is a keyword of :class:`PDClusterEnv`.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from envs.common.base import DecisionContextBase, ServegymEnv
from envs.common.predictors.feed import PredictorFeed
from envs.common.rewards import make_reward
from envs.common.workloads import TraceSource
from envs.sim import metrics as sim_metrics
from envs.sim.cluster import ClusterSpec, load_cluster
from envs.sim.metrics import slowdown_ratio
from envs.sim.scheduler import DefaultScheduler
from envs.sim.simulation import (
    TOOL_ESTIMATES,
    Assignment,
    Invocation,
    LatencyCache,
    Simulation,
)
from envs.sim.workload import PREFILL, TRANSFER, WAIT_DECODE, Call, WorkflowRun
from traces.schema import ToolNode

SLOT_FEATURES = 12
INSTANCE_FEATURES = 9
RATIO_CLIP = 5.0
#: Slot features that are log1p(x) / scale: L_in, L̂_out, H_w(t), elapsed, time since reveal,
#: attained service (columns of the observation's ``slots``, see the module docstring).
LOGGED_SLOT_FEATURES = [2, 3, 5, 6, 7, 10]
LOGGED_SLOT_SCALES = np.array([10.0, 10.0, 5.0, 5.0, 5.0, 5.0])
#: Invocations with at most this many (slot, p, d) entries are re-projected whole after a pick.
WHOLE_REFRESH_LIMIT = 2048
#: The model when none is given: HexAgent's main model (§7.1).
DEFAULT_MODEL = "llama3.1-70b"


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
    (tests/test_predictor_visibility.py checks that the truth reaches the observation only
    through the predictor). Measured
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

    @property
    def prefix_hit_tokens(self) -> np.ndarray:
        """(K, P) prompt tokens of each slot's call cached on each prefill instance now."""
        hits = self.__dict__.get("_prefix_hit_tokens")
        return np.zeros(self.prefill_time.shape) if hits is None else hits

    @prefix_hit_tokens.setter
    def prefix_hit_tokens(self, hits: np.ndarray) -> None:
        self.__dict__["_prefix_hit_tokens"] = hits

    def action(self, slot: int, p: int, d: int) -> int:
        """The flat action index of (slot, p, d)."""
        num_p, num_d = self.prefill_time.shape[1], self.decode_time.shape[1]
        return (slot * num_p + p) * num_d + d

    def unflatten(self, action: int) -> tuple[int, int, int]:
        """(slot, p, d) of a flat action index."""
        num_p, num_d = self.prefill_time.shape[1], self.decode_time.shape[1]
        slot, rest = divmod(int(action), num_p * num_d)
        p, d = divmod(rest, num_d)
        return slot, p, d


@dataclass
class _OpenNodes:
    """A workflow's revealed, unfinished nodes and their run-alone costs (seconds), as of the
    first ``revealed`` reveals and ``finished`` finishes; ``critical`` is the largest cost."""

    revealed: int = 0
    finished: int = 0
    cost: dict[str, float] = field(default_factory=dict)
    critical: float = 0.0


#: HexAgent §7.1 workloads: (workflows, arrival rate in workflows/s).
PAPER_WORKLOADS: dict[str, tuple[int, float]] = {
    "sharegpt": (100, 10.0),
    "bfcl": (400, 40.0),
    "lats": (100, 40.0),
    "mixed": (100, 10.0),
}


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


class PDClusterEnv(ServegymEnv):
    """HexAgent's P-D cluster scheduling problem (see the module docstring for the full table).

    :param cluster: preset name or YAML path (``hetero-1``, ``hetero-2``, ``homo-h200-4p4d``,
        ``homo-a100-4p4d``) or a :class:`ClusterSpec`.
    :param model: ``llama3.1-70b`` or ``qwen3-235b-a22b`` (HexAgent §7.1); None:
        ``llama3.1-70b``. With a ``trace``, a model given here (not None) also serves every
        call of the trace.
    :param workload: generator name (``sharegpt``, ``bfcl``, ``lats``, ``mixed``; ``agent_chain``
        for prompt-reusing agent chains with ``prefix_hashes``).
    :param trace: a servegym JSONL workflow trace, or a list of records, instead of a generator
        (``workload_count`` keeps its first records, ``load_scale`` divides its arrival times).
    :param workload_count: number of workflows (None: the paper's, HexAgent §7.1).
    :param workload_rate: arrival rate in workflows/s (None: the paper's).
    :param load_scale: multiplies the arrival rate (1.0 = the paper's).
    :param slots: K, waiting calls re-planned per invocation. The default, 256, covers the
        queues of the paper presets, so an invocation re-plans every waiting call as HexAgent's
        does (§5.2); with a small K the calls beyond it keep stale plans and every policy
        degrades toward FCFS (measured: at K=16 HexAgent no longer beats ATLAS on bfcl).
    :param reward: ``slowdown``, ``lateness`` or ``req99``; ``reward_kwargs`` for its options.
    :param estimate_error: multiplicative error e on scheduler-visible estimates (HexAgent §7.6).
    :param output_predictor: ``oracle`` (truth × ``estimate_error``, the default) or any name in
        :data:`envs.common.predictors.PREDICTORS` (``task-mean``, ``history``, ``mlp``, ``moe``,
        ``oracle-error``). The learned ones are trained on the GoodServe request mix's synthetic
        prompts; HexAgent's workloads carry no prompt text, so they predict from length and task.
    :param tool_estimate: what H_w(t) charges a revealed tool that has not returned yet:
        ``history`` (default: the mean measured latency of earlier finished tools of its name,
        see :class:`envs.sim.Simulation`) or ``oracle`` (its true latency, unknowable before it
        returns).
    :param invalid_action: ``penalize`` (default: −``invalid_penalty`` and
        :meth:`fallback_action` instead, ``info["invalid_action"]`` True) or ``raise``.
    :param max_steps: truncate after this many steps (None: run to completion).
    :param workload_seed: fix the workload for every reset (None: derived from the reset seed).
    :param render_mode: ``ansi`` or ``rgb_array``.
    :param decision_context: put the :class:`DecisionContext` in every step's ``info`` (True
        here; the registered id passes False, see :mod:`envs.common.base`).
    :param prefix_cache: an LRU prefix cache on every prefill instance (SGLang's RadixAttention
        at block granularity; :class:`envs.sim.instances.PrefillInstance`): ``False`` (default:
        none, every prompt is computed in full), ``True`` or ``"kv"`` (as many 512-token blocks
        as the instance's KV capacity holds) or a number of blocks. A hit computes only the
        uncached tokens. Needs a workload with ``prefix_hashes`` (e.g. ``agent_chain``).
        Standalone horizons H_w are simulated without it, so ratios with and without the cache
        share their denominators.
    :param prefix_cache_visible: with a ``prefix_cache``, schedulers see it (default):
        ``prefix_hit_tokens`` and ``prefill_time``, hence R and Δ, price each prefill on p's
        uncached tokens. False: the cache still works, but the context prices every prompt in
        full (a cache-blind scheduler, for ablations).
    :param planning_delay: how long a plan takes to land (HexAgent §4.3 "Asynchronous planning
        avoids blocking", §5.2, Algorithm 1 lines 5–7 and 23; see
        :meth:`envs.sim.Simulation.apply`). None or 0 (default): planning is instantaneous, the
        simulator waits for every plan. A number: seconds of simulated time per plan; meanwhile
        serving goes on, new calls follow the fallback plan (least-loaded placement, behind the
        planned calls), at most one plan per stage is in flight, and a plan lands only on calls
        still waiting. ``"measured"``: each plan takes the wall time its invocation took, from
        the env raising it to its last pick (the policy's thinking plus the env's projection
        work, i.e. HexAgent's planner work), times ``planning_delay_scale``. ``"measured"``
        makes runs non-deterministic (it depends on the machine and its load): use it to report
        a policy's cost, not for training or pinned comparisons. The end-of-episode ``info``
        carries ``planning`` statistics either way.
    :param planning_delay_scale: multiplies the measured wall time (``"measured"`` only), > 0.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        cluster: str | ClusterSpec = "hetero-1",
        model: str | None = None,
        workload: str = "mixed",
        trace: str | Sequence[Any] | None = None,
        workload_count: int | None = None,
        workload_rate: float | None = None,
        load_scale: float = 1.0,
        slots: int = 256,
        reward: str = "slowdown",
        reward_kwargs: dict[str, Any] | None = None,
        estimate_error: float = 0.0,
        output_predictor: str = "oracle",
        tool_estimate: str = "history",
        invalid_action: str = "penalize",
        invalid_penalty: float = 1.0,
        max_steps: int | None = None,
        workload_seed: int | None = None,
        render_mode: str | None = None,
        decision_context: bool = True,
        prefix_cache: bool | int | str = False,
        prefix_cache_visible: bool = True,
        planning_delay: float | str | None = None,
        planning_delay_scale: float = 1.0,
    ):
        super().__init__()
        self.cluster = (
            cluster
            if isinstance(cluster, ClusterSpec)
            else load_cluster(cluster, model=model or DEFAULT_MODEL)
        )
        if self.cluster.architecture != "pd":
            raise ValueError(
                f"PDCluster needs a prefill-decode ('pd') cluster; {self.cluster.name!r} is "
                f"{self.cluster.architecture!r}"
            )
        self._check_predictor(output_predictor)
        if tool_estimate not in TOOL_ESTIMATES:
            raise ValueError(
                f"tool_estimate must be one of {TOOL_ESTIMATES}, got {tool_estimate!r}"
            )
        self.tool_estimate = tool_estimate
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.planning_delay, self.planning_delay_scale = _check_planning_delay(
            planning_delay, planning_delay_scale
        )
        self.model = self.cluster.models[0]
        self.workload = workload
        self.trace = trace
        self.workload_count = workload_count
        self.workload_rate = workload_rate
        self.load_scale = load_scale
        self._source = TraceSource(
            workload,
            trace,
            count=workload_count,
            rate=workload_rate,
            load_scale=load_scale,
            model=self.model,
            paper_rates={k: v[1] for k, v in PAPER_WORKLOADS.items()},
            model_override=model if trace is not None else None,
        )
        self.K = slots
        self.estimate_error = estimate_error
        self.output_predictor_name = output_predictor
        self._prefix_cache_blocks = _prefix_cache_blocks(prefix_cache)
        self.prefix_cache = prefix_cache
        self.prefix_cache_visible = bool(prefix_cache_visible)
        # schedulers price prefills with the cache's hits
        self._prefix_visible = bool(self._prefix_cache_blocks) and self.prefix_cache_visible

        self.P = len(self.cluster.by_role("prefill"))
        self.D = len(self.cluster.by_role("decode"))
        self.action_space = spaces.Discrete(self.K * self.P * self.D)
        self.observation_space = spaces.Dict(
            {
                "slots": spaces.Box(0.0, 10.0, (self.K, SLOT_FEATURES), np.float32),
                "instances": spaces.Box(
                    0.0, 10.0, (self.P + self.D, INSTANCE_FEATURES), np.float32
                ),
                "ratio": spaces.Box(0.0, RATIO_CLIP, (self.K, self.P, self.D), np.float32),
                "stage": spaces.Box(0.0, 1.0, (3,), np.float32),
            }
        )
        self._latency_cache = LatencyCache()
        self._horizon_cache: dict[Any, float] = {}
        self.sim: Simulation | None = None
        self._ctx: DecisionContext | None = None
        self._init_common(
            reward,
            reward_kwargs,
            invalid_action,
            invalid_penalty,
            max_steps,
            workload_seed,
            render_mode,
            decision_context,
        )

    # -- gymnasium API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        records = self._begin_episode(seed, self._source)
        wseed = self._workload_seed
        # "oracle" keeps the simulator's own estimate: the truth with HexAgent §7.6's error.
        predictor = None
        if self.output_predictor_name != "oracle":
            from envs.common.predictors import make_predictor

            predictor = make_predictor(self.output_predictor_name, error=self.estimate_error)
            predictor.reset(seed=wseed)
        self._predictor = predictor
        self.sim = Simulation(
            self.cluster,
            records,
            seed=wseed,
            estimate_error=self.estimate_error,
            output_predictor=predictor,
            latency_cache=self._latency_cache,
            horizon_cache=self._horizon_cache,
            prefix_cache_blocks=self._prefix_cache_blocks,
            tool_estimate=self.tool_estimate,
        )
        if predictor is not None:
            self.sim.add_listener(PredictorFeed(predictor))
        self._reward = make_reward(self.reward_name, len(self.sim.runs), **self.reward_kwargs)
        self._arrival_times = np.sort([run.arrival for run in self.sim.runs])
        self._cluster_tables()
        self._completed_seen = 0
        self._remaining_cache: dict[int, _OpenNodes] = {}
        self._planning_wall: list[float] = []  # measured wall seconds per plan ("measured")
        inv = self._advance()
        if inv is None:
            raise ValueError("the workload is empty: no scheduling decision ever arises")
        return self._observation(), self._info()

    def step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.sim is None or self._ctx is None:
            raise RuntimeError("call reset() before step()")
        action, reward = self._legal_action(action)
        slot, p, d = self._ctx.unflatten(action)
        self._pick(slot, p, d)
        self._steps += 1
        if not self._slot_pending():
            self._finish_invocation()
            inv = self._advance()
        else:
            inv = self.sim.pending[0]
            self._refresh((slot, p, d))
        reward += self._collect_rewards()
        terminated = inv is None
        truncated = self._truncated(terminated, self._steps)
        if terminated or truncated:
            reward += self._reward.terminal(self._ratios())
        if truncated and not terminated:
            reward += self._reward.on_truncate(self._unfinished_ratios())
        obs = self._observation() if not terminated else self._terminal_observation()
        info = self._info(final=terminated or truncated)
        return obs, float(reward), terminated, truncated, info

    # -- invocation machinery ----------------------------------------------------------------
    def _advance(self) -> Invocation | None:
        assert self.sim is not None
        inv = self.sim.advance()
        if inv is not None:
            self._raised_at = time.perf_counter()  # planning starts: see ``planning_delay``
            self._begin_invocation(inv)
        else:
            self._ctx = None
            # a new array: the last context's ``feasible`` (the old mask's base) keeps its values
            self._end_mask()
        return inv

    def _begin_invocation(self, inv: Invocation) -> None:
        sim = self.sim
        assert sim is not None
        # Canonical order: reveal order (the simulator lists waiting calls oldest first). The K
        # oldest are re-planned; newer ones wait behind them, so no call starves beyond K.
        order = inv.calls
        self._inv = inv
        self._obs_slots: np.ndarray | None = None
        self._slot_calls: list[Call] = list(order[: self.K])
        self._rest: list[Call] = list(order[self.K :])
        self._build_context(inv)
        self._owned_refs = self._refcounts()  # see _unshare; no local names hold them here

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
                [sim.isolated_call_time(c) for c in calls],
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
            ready_pre = p_ready[:, None, None] + np.ascontiguousarray(pre[:n].T)[:, None, :]
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
            for i, tokens in sim.prefix_hits(c).items():
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
            state = self._remaining_cache[run.index] = _OpenNodes()
        if state.revealed == len(run.revealed) and state.finished == len(run.finished):
            return state.critical
        for node_id in run.revealed[state.revealed :]:
            node = run.nodes[node_id]
            if isinstance(node, ToolNode):
                # What H_w(t) charges it: an estimate until it returns (never its true latency).
                state.cost[node_id] = run.tool_estimates[node_id]
            else:
                state.cost[node_id] = sim.isolated_call_time(run.calls[node_id])
        for node_id in [n for n in state.cost if n in run.finished]:
            del state.cost[node_id]
        # Revealed nodes all have finished parents, so no path holds two unfinished nodes.
        state.critical = max(state.cost.values(), default=0.0)
        state.revealed, state.finished = len(run.revealed), len(run.finished)
        return state.critical

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
        blocks those behind it (:class:`envs.sim.instances.DecodeInstance`, ``reserve``), and
        the k-th pick gets priority k, ahead of every later pick. At the prefill stage the
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
            dec = self._lout_err * (self._it0[j] + self._slope[j] * self._ctx_call)
            self._decode[:n, j] = dec
            self._dec_t[j] = dec
            self._earliest_starts(j)
            self._free_kd[:n, j] = self._free_at[j]

    def _project(self, ps: slice, ds: slice) -> None:
        """Recompute R(c, p, d) of the valid slots on the block of prefill instances ``ps`` ×
        decode instances ``ds`` (HexAgent Eq. 2), its log1p and the observation's clipped log.
        Δ = max(arrival at d, earliest capacity-feasible start on d) + decode seconds, where the
        arrival is ``_base`` (+inf where illegal) — see :meth:`_decode_estimates`."""
        n = self._n
        if any(self._waits[ds]):
            delta = np.maximum(self._base[ps, ds], self._free_at[ds]) + self._dec_t[ds]
        else:  # every start is 0 on these instances, and max(arrival ≥ 0, 0) is the arrival
            delta = self._base[ps, ds] + self._dec_t[ds]
        ratio = (self._elapsed + delta) / self._horizon
        self._ratio[:n, ps, ds] = ratio.transpose(2, 0, 1)
        log = np.log1p(ratio)
        self._ratio_log[ps, ds] = log
        clipped = np.where(self._feasible_t[ps, ds], np.minimum(log, RATIO_CLIP), 0.0)
        self._ratio_obs[:n, ps, ds] = clipped.transpose(2, 0, 1)

    def _refresh(self, pick: tuple[int, int, int] | None = None) -> None:
        """Bring R, the mask and the context arrays up to date (Algorithm 1 lines 13–17): all
        of them at the invocation's start, after a pick (slot, p, d) only what it changed.

        A pick changes prefill p's readiness (the plane R[:, p, :]) and decode d's batch, context
        and KV use (the column R[:, :, d]); the picked slot loses its legal actions. Only the n
        valid slots (the first n) are computed; the padding stays inf / illegal. Small
        invocations are recomputed whole: fewer, larger array operations cost less there."""
        ctx = self._ctx
        assert ctx is not None
        n = self._n
        whole = slice(None)
        if pick is None:
            self._decode_estimates()
            self._project(whole, whole)
        else:
            self._unshare()
            slot, p, d = pick
            self._feasible[slot] = False
            self._feasible_t[:, :, slot] = False
            self._base[:, :, slot] = np.inf
            self._decode_estimates(d)
            prefill = ctx.stage == "prefill"
            if prefill:
                self._trans_blocked[:, :, slot] = np.inf
                self._base[p] = (self._ready[p] + self._pre[:n, p]) + self._trans_blocked[p]
            if self._ratio_log.size <= WHOLE_REFRESH_LIMIT:
                self._project(whole, whole)
            else:
                self._ratio[slot] = np.inf
                self._ratio_log[:, :, slot] = np.inf
                self._ratio_obs[slot] = 0.0
                if prefill:
                    self._project(slice(p, p + 1), whole)
                self._project(whole, slice(d, d + 1))
        ctx.projected_ratio = self._ratio
        ctx.feasible = self._feasible
        ctx.decode_time = self._decode
        ctx.decode_free_at = self._free_kd
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

    def _pick(self, slot: int, p: int, d: int) -> None:
        ctx = self._ctx
        assert ctx is not None
        ctx.picked[slot] = True
        ctx.picks.append((slot, p, d))
        self._open -= 1
        self._open_legal -= 1  # the slot had a legal action: it was just taken
        prefill = ctx.stage == "prefill"
        # The pick's KV-occupancy interval on d (Algorithm 1 line 20): from its projected start,
        # max(arrival, earliest capacity-feasible start) — the start its R used — for its
        # projected decode seconds. ``_base`` still holds the arrival at p's old readiness.
        start = max(float(self._base[p, d, slot]), float(self._free_at[d, slot]))
        end = start + float(self._dec_t[d, slot])
        self._iv_picks[d].append([start, end, float(self._demand[slot])])
        self._iv[d] = self._bp[d] = None
        if prefill:
            self._ready[p] += float(self._pre[slot, p])
        else:
            self._floor[d] = start
        self._kv_used[d] += float(self._lin[slot] + self._lout[slot])
        self._batch[d] += 1
        self._ctx_tokens[d] += float(self._lin[slot])
        self._decode_rate(d)
        if self._obs_slots is not None:
            # What the pick changes in the observation's per-slot and per-instance features.
            self._obs_slots[slot, 1] = 1.0
            inst, P = self._obs_inst, self.P
            if prefill:
                inst[p, 3] = np.log1p(self._ready[p]) / 5
            inst[P + d, 5] = min(self._kv_used[d] / self._cap[d], 10.0)
            inst[P + d, 6] = min(self._batch[d], 640) / 64

    def _slot_pending(self) -> bool:
        return self._open > 0

    def _finish_invocation(self) -> None:
        """Turn the picks into a plan: picks get priority 0..k−1; the rest keep placement and
        relative order behind them, or take the fallback's placement (HexAgent §4.3)."""
        sim = self.sim
        ctx = self._ctx
        assert sim is not None and ctx is not None
        inv = self._inv
        plan: list[Assignment] = []
        decode_stage = inv.stage == "decode"
        for rank, (slot, p, d) in enumerate(ctx.picks):
            c = self._slot_calls[slot]
            if decode_stage:
                plan.append(Assignment(c, float(rank)))
            else:
                plan.append(Assignment(c, float(rank), sim.prefill[p].index, sim.decode[d].index))
        base = float(self.K)
        if decode_stage:
            rest = sorted(self._rest, key=lambda c: (c.decode_priority, c.enqueue_seq))
            plan += [Assignment(c, base + i) for i, c in enumerate(rest)]
        else:
            planned = [c for c in self._rest if c.prefill_instance is not None]
            planned.sort(key=lambda c: (c.prefill_priority, c.enqueue_seq))
            fresh = [c for c in self._rest if c.prefill_instance is None]
            for i, c in enumerate(planned):
                plan.append(Assignment(c, base + i, c.prefill_instance, c.decode_instance))
            if fresh:
                fake = Invocation(inv.stage, inv.time, inv.trigger, fresh, fresh, inv.seq)
                fb = DefaultScheduler().plan(sim, fake)
                off = base + len(planned)
                plan += [
                    Assignment(a.call, off + i, a.prefill_instance, a.decode_instance)
                    for i, a in enumerate(fb)
                ]
        delay = self._planning_delay()
        if delay > 0:
            sim.apply(plan, delay=delay)
        else:
            sim.apply(plan)  # blocking: the plan applies at the invocation's instant

    def _planning_delay(self) -> float:
        """Seconds of simulated time the plan of the invocation being finished takes to land
        (``planning_delay``); records the episode's planning statistics."""
        mode = self.planning_delay
        if mode is None:
            return 0.0
        if mode == "measured":
            wall = time.perf_counter() - self._raised_at
            self._planning_wall.append(wall)
            return wall * self.planning_delay_scale
        return float(mode)

    # -- rewards and results -----------------------------------------------------------------
    def _collect_rewards(self) -> float:
        sim = self.sim
        assert sim is not None
        r = 0.0
        while self._completed_seen < len(sim.completed):
            run = sim.completed[self._completed_seen]
            self._completed_seen += 1
            h = sim.standalone_horizon(run)
            r += self._reward.on_complete(slowdown_ratio(run.finish_time - run.arrival, h))
        return r

    def _unfinished_ratios(self) -> np.ndarray:
        """Elapsed / H_w of the workflows that arrived and have not finished (truncation)."""
        sim = self.sim
        assert sim is not None
        now = sim.now
        return np.array(
            [
                slowdown_ratio(now - run.arrival, sim.standalone_horizon(run))
                for run in sim.runs
                if run.finish_time < 0 and run.arrival <= now
            ]
        )

    def _ratios(self) -> np.ndarray:
        """C_w / H_w of every workflow; an unfinished one is charged its elapsed time (inf if it
        has not arrived or arrived just now)."""
        sim = self.sim
        assert sim is not None
        out = []
        for run in sim.runs:
            if run.finish_time >= 0:
                ct = run.finish_time - run.arrival
            else:
                ct = sim.now - run.arrival if sim.now > run.arrival else math.inf
            out.append(slowdown_ratio(ct, sim.standalone_horizon(run)))
        return np.asarray(out, dtype=float)

    def _metrics_now(self) -> dict[str, float]:
        """Req95, Req99, ... (:func:`envs.sim.metrics.summarize_workflows`) over every workflow,
        an unfinished one with C_w = inf, as the episode-end metrics count them."""
        sim = self.sim
        assert sim is not None
        runs = sim.runs
        ct = [r.finish_time - r.arrival if r.finish_time >= 0 else math.inf for r in runs]
        # An unfinished workflow's ratio is inf whatever its H_w: no standalone run needed.
        h = [sim.standalone_horizon(r) if r.finish_time >= 0 else 1.0 for r in runs]
        return sim_metrics.summarize_workflows(ct, h)

    def fallback_action(self) -> int:
        """The fallback policy's choice (what a masked action becomes): the oldest unpicked slot
        (the canonical order) on the simulator's least-loaded pair
        (:class:`envs.sim.scheduler.DefaultScheduler`): among the slot's legal pairs, the
        prefill instance ready soonest, then the decode instance with the smallest KV load
        fraction, then the lowest indices. At the decode stage, the slot's locked pair."""
        ctx = self._ctx
        assert ctx is not None
        legal = self._mask.reshape(self.K, self.P, self.D)
        slot = int(np.flatnonzero(legal.any(axis=(1, 2)))[0])
        ps, ds = np.nonzero(legal[slot])
        load = ctx.decode_kv_used / ctx.decode_kv_capacity
        best = min(
            zip(ps.tolist(), ds.tolist(), strict=True),
            key=lambda pd: (ctx.prefill_ready[pd[0]], load[pd[1]], pd[0], pd[1]),
        )
        return ctx.action(slot, *best)

    def _info(self, final: bool = False) -> dict[str, Any]:
        info = self._common_info()
        if self.sim is not None:
            info["metrics"] = self._metrics_so_far()
        if final:
            assert self.sim is not None
            res = self.sim.result()
            ratios = [w.completion_time / w.horizon for w in res.workflows]
            alphas, curve = sim_metrics.attainment_curve(ratios)
            info.update(
                metrics={**res.metrics, **info["metrics"]},
                attainment_curve={"alpha": alphas.tolist(), "attainment": curve.tolist()},
                completion_times=[w.completion_time for w in res.workflows],
                horizons=[w.horizon for w in res.workflows],
                arrivals=[w.arrival for w in res.workflows],
                invocations=res.invocations,
                utilisation=res.utilisation,
                simulated_seconds=res.end_time,
                workload_seed=self._workload_seed,
                steps=self._steps,
                planning=self._planning_info(res.extra["planning"]),
            )
        return info

    def _planning_info(self, sim_stats: dict[str, Any]) -> dict[str, Any]:
        """The episode's planning statistics: the option, the simulator's counters
        (:class:`envs.sim.simulation.PlanningStats`: delayed plans, mean/max delay in simulated
        seconds, calls that ran under the fallback plan because a plan was late, ...), and under
        ``"measured"`` the measured wall seconds per plan (mean, max) before scaling."""
        out: dict[str, Any] = {
            "planning_delay": self.planning_delay,
            "planning_delay_scale": self.planning_delay_scale,
            **sim_stats,
        }
        if self.planning_delay == "measured":
            wall = self._planning_wall
            out["measured_wall_mean"] = sum(wall) / len(wall) if wall else 0.0
            out["measured_wall_max"] = max(wall, default=0.0)
        return out

    # -- observation -------------------------------------------------------------------------
    def _observation(self) -> dict[str, np.ndarray]:
        """Per-invocation features are built once (:meth:`_invocation_features`) and the clipped
        log ratios are kept by :meth:`_refresh`; a step only writes what a pick changes: picked
        flags, best ratios, instance readiness, KV and batch."""
        ctx = self._ctx
        assert ctx is not None
        if self._obs_slots is None:
            self._obs_slots, self._obs_inst = self._invocation_features()
        slots, inst = self._obs_slots, self._obs_inst
        n = self._n
        # min over legal pairs of min(log1p R, clip) = min(min of log1p R, clip); +inf: none.
        best = self._ratio_log.reshape(self.P * self.D, n).min(axis=0, initial=np.inf)
        slots[:n, 11] = np.where(np.isfinite(best), np.minimum(best, RATIO_CLIP), 0.0) / 5
        stage = np.array(
            [ctx.stage == "prefill", ctx.stage == "decode", len(ctx.picks) / self.K],
            dtype=np.float32,
        )
        return {
            "slots": slots.copy(),
            "instances": inst.copy(),
            "ratio": self._ratio_obs.copy(),
            "stage": stage,
        }

    def _invocation_features(self) -> tuple[np.ndarray, np.ndarray]:
        sim = self.sim
        ctx = self._ctx
        assert sim is not None and ctx is not None
        K, P, D = self.K, self.P, self.D
        n = self._n
        # Padding slots' features are all 0, so only the n valid rows are computed.
        slots = np.zeros((K, SLOT_FEATURES), dtype=np.float32)
        logged = np.stack(
            [
                ctx.input_tokens[:n],
                ctx.predicted_output_tokens[:n],
                ctx.horizon[:n],
                ctx.elapsed[:n],
                ctx.time - ctx.revealed_at[:n],
                ctx.attained_service[:n],
            ],
            axis=1,
        )
        slots[:n, LOGGED_SLOT_FEATURES] = np.log1p(logged) / LOGGED_SLOT_SCALES
        slots[:n, 0] = 1.0
        slots[:n, 1] = ctx.picked[:n]
        slots[:n, 4] = np.minimum(ctx.elapsed[:n] / ctx.horizon[:n], 10.0) / 10
        slots[:n, 8] = ctx.planned_prefill[:n] >= 0
        slots[:n, 9] = [
            len(c.workflow.finished) / max(1, len(c.workflow.revealed)) for c in self._slot_calls
        ]
        inst = np.zeros((P + D, INSTANCE_FEATURES), dtype=np.float32)
        inst[:, :3] = self._instance_static()
        inst[:P, 4] = np.minimum([len(i.queue) for i in sim.prefill], 160) / 16
        inst[P:, 4] = np.minimum([len(i.waiting) for i in sim.decode], 160) / 16
        inst[P:, 7] = np.minimum([len(i.running) for i in sim.decode], 640) / 64
        inst[:, 8] = self._gpu_memory
        np.clip(slots, 0.0, 10.0, out=slots)
        np.clip(inst, 0.0, 10.0, out=inst)
        # Updated by every pick (:meth:`_pick`); not clipped, as they never leave [0, 10].
        inst[:P, 3] = np.log1p(ctx.prefill_ready) / 5
        inst[P:, 5] = np.minimum(ctx.decode_kv_used / ctx.decode_kv_capacity, 10.0)
        inst[P:, 6] = np.minimum(ctx.decode_batch, 640) / 64
        return slots, inst

    def _instance_static(self) -> np.ndarray:
        if getattr(self, "_inst_static", None) is None:
            sim = self.sim
            assert sim is not None
            rows = []
            mem = []
            for i in sim.prefill + sim.decode:
                is_p = float(i.role == "prefill")
                pre = i.latency.prefill_time(1000)
                dec = i.latency.decode_iteration_time(1, 1000)
                rows.append([is_p, np.log1p(pre * 1e3) / 5, np.log1p(dec * 1e3) / 5])
                mem.append(i.latency.usable_memory_bytes / 1e12)
            self._inst_static = np.asarray(rows, dtype=np.float32)
            self._gpu_memory = np.asarray(mem, dtype=np.float32)
        return self._inst_static

    def _explain_invalid(self, action: int) -> str:
        if not 0 <= action < self.action_space.n:
            return f"action {action} is outside Discrete({self.action_space.n})"
        ctx = self._ctx
        assert ctx is not None
        slot, p, d = ctx.unflatten(action)
        if not ctx.valid[slot]:
            why = f"slot {slot} is empty (only {int(ctx.valid.sum())} calls are waiting)"
        elif ctx.picked[slot]:
            why = f"slot {slot} ({ctx.call_ids[slot]}) was already picked in this invocation"
        elif ctx.stage == "decode":
            why = (
                f"at the decode stage call {ctx.call_ids[slot]} is locked to prefill "
                f"{ctx.planned_prefill[slot]}, decode {ctx.planned_decode[slot]}"
            )
        else:
            why = (
                f"call {ctx.call_ids[slot]} needs {ctx.kv_demand[slot]:.0f} KV tokens but decode "
                f"instance {d} holds {ctx.decode_kv_capacity[d]:.0f}"
            )
        return (
            f"masked action {action} = (slot {slot}, prefill {p}, decode {d}): {why}. Use "
            "env.action_masks() or make the env with invalid_action='penalize'."
        )

    # -- rendering (:mod:`envs.common.render`) ----------------------------------------------------
    def _render_ansi(self) -> str:
        from envs.common.render import render_ansi

        return render_ansi(self)

    def _render_figure(self) -> Any:
        from envs.common.render import render_figure

        return render_figure(self)


def _prefix_cache_blocks(prefix_cache: Any) -> int | str:
    """The simulation's ``prefix_cache_blocks`` for :class:`PDClusterEnv`'s ``prefix_cache``:
    False -> 0 (off), True or ``"kv"`` -> ``"kv"``, an integer >= 0 -> that many blocks."""
    if prefix_cache is True or prefix_cache == "kv":
        return "kv"
    if prefix_cache is False or prefix_cache is None:
        return 0
    if isinstance(prefix_cache, (int, np.integer)) and prefix_cache >= 0:
        return int(prefix_cache)
    raise ValueError(
        f"prefix_cache must be False, True, 'kv' or a number of blocks >= 0, got {prefix_cache!r}"
    )


def _check_planning_delay(delay: Any, scale: Any) -> tuple[float | str | None, float]:
    """Validated ``(planning_delay, planning_delay_scale)`` of :class:`PDClusterEnv`; a delay
    of 0 is None (the blocking default)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"planning_delay_scale must be a number > 0, got {scale!r}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"planning_delay_scale must be a finite number > 0, got {scale!r}")
    if delay is None or isinstance(delay, str):
        if delay not in (None, "measured"):
            raise ValueError(
                f"planning_delay must be None, a number of seconds >= 0 or 'measured', got "
                f"{delay!r}"
            )
    elif isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise ValueError(
            f"planning_delay must be None, a number of seconds >= 0 or 'measured', got {delay!r}"
        )
    elif not (math.isfinite(delay) and delay >= 0):
        raise ValueError(f"planning_delay must be a finite number of seconds >= 0, got {delay!r}")
    else:
        delay = float(delay) if delay > 0 else None
    if scale != 1.0 and delay != "measured":
        raise ValueError(
            f"planning_delay_scale={scale!r} scales measured planning time; it needs "
            f"planning_delay='measured' (got planning_delay={delay!r})"
        )
    return delay, float(scale)
