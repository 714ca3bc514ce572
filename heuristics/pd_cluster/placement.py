"""Placement rules: which (prefill, decode) pair a picked call gets at the prefill stage.

Each rule is ``(ctx, slot) -> (p, d)`` with pool-local indices and only ever returns a legal pair
(``ctx.feasible[slot, p, d]``). The decode stage needs no rule: the call is locked to its plan
(:func:`heuristics.pd_cluster.base.locked_pair`).
"""

from __future__ import annotations

import math

import numpy as np

from envs.pd_cluster import DecisionContext


def _no_legal_pair(ctx: DecisionContext, slot: int) -> ValueError:
    return ValueError(
        f"slot {slot} ({ctx.call_ids[slot]!r}) has no legal (prefill, decode) pair: valid="
        f"{bool(ctx.valid[slot])}, picked={bool(ctx.picked[slot])}, KV demand "
        f"{ctx.kv_demand[slot]:.0f} tokens vs decode capacities {ctx.decode_kv_capacity.tolist()}"
    )


def heterogeneity_aware(ctx: DecisionContext, slot: int) -> tuple[int, int]:
    """HexAgent §5.3 "assigns it to the prefill–decode pair with the earliest projected decode
    finish": argmin over legal (p, d) of ``projected_ratio[slot, p, d]``.

    R(c, p, d) = ((t − a_w) + Δ(c, p, d)) / H_w(t) with t − a_w and H_w(t) fixed for the call, so
    the argmin of R is the argmin of Δ = wait for p + prefill on p + KV transfer p→d + decode on d
    (the env's estimate, including this invocation's earlier picks). Ties: lowest p, then lowest d.
    """
    ratio = ctx.projected_ratio[slot]
    flat = int(ratio.argmin())  # first minimum in (p, d) row-major order
    if not math.isfinite(ratio.item(flat)):
        raise _no_legal_pair(ctx, slot)
    p, d = divmod(flat, ratio.shape[1])
    return p, d


def load_balanced(ctx: DecisionContext, slot: int) -> tuple[int, int]:
    """Least-loaded dispatch, the placement of HexAgent's SGLang-based baselines (§7.2
    "workflow-level FCFS scheduler with load-balanced dispatching"); blind to GPU speed.

    * prefill: the instance with the least ``prefill_ready`` (seconds until it is free of the
      call in service and of this invocation's earlier picks, i.e. the queued work ahead of this
      pick), among instances with a legal pair for the call;
    * decode: among decode instances legal for the call with that prefill instance, the one with
      the smallest KV load fraction ``decode_kv_used / decode_kv_capacity`` (predicted tokens of
      running, on-their-way and picked calls over capacity).

    Ties (e.g. an idle cluster): the instance that serves this call fastest (``prefill_time``,
    ``decode_time``), then the lowest index — a load balancer that breaks ties toward the slowest
    GPUs would be a handicapped baseline.
    """
    legal = ctx.feasible[slot]
    ps = np.flatnonzero(legal.any(axis=1))
    if ps.size == 0:
        raise _no_legal_pair(ctx, slot)
    # np.lexsort sorts by the last key first: load, then speed, then index (stable).
    p = int(ps[np.lexsort((ctx.prefill_time[slot, ps], ctx.prefill_ready[ps]))[0]])
    ds = np.flatnonzero(legal[p])
    load = ctx.decode_kv_used[ds] / ctx.decode_kv_capacity[ds]
    d = int(ds[np.lexsort((ctx.decode_time[slot, ds], load))[0]])
    return p, d


def earliest_finish(ctx: DecisionContext, slot: int) -> tuple[int, int]:
    """Earliest estimated finish, our speed-aware placement for the paper's orderings (not a
    HexAgent rule; docs/design.md, "Fair comparison"): argmin over legal (p, d) of

        prefill_ready[p] + prefill_time[slot, p] + transfer_time[slot, p, d] + decode_time[slot, d]

    — when the call would finish if prefilled after the work ahead of it on p, shipped to d and
    decoded at d's batch with this invocation's earlier picks (all the env's estimates). It is
    :func:`heterogeneity_aware` without HexAgent's ratio and KV-wait hint: what any scheduler
    that knows GPU speeds would do. Ties: lowest p, then lowest d.
    """
    finish = (
        ctx.prefill_ready[:, None]
        + ctx.prefill_time[slot][:, None]
        + ctx.transfer_time[slot]
        + ctx.decode_time[slot][None, :]
    )
    finish = np.where(ctx.feasible[slot], finish, np.inf)
    flat = int(np.argmin(finish))  # first minimum in (p, d) row-major order
    if not np.isfinite(finish.flat[flat]):
        raise _no_legal_pair(ctx, slot)
    p, d = divmod(flat, finish.shape[1])
    return p, d


#: Placement rules by name (for ablation scripts and configs).
PLACEMENTS = {
    "heterogeneity-aware": heterogeneity_aware,
    "load-balanced": load_balanced,
    "earliest-finish": earliest_finish,
}
