"""FCFS baselines of HexAgent: per-call FCFS (§3 Approach 0, Table 1) and
workflow-level FCFS (§3 Approach 1, §7.2 "SGLang-FCFS") with the paper's speed-blind
load-balanced dispatch, their speed-aware ``+earliest-finish`` variants (our references), plus the
§3 Insight-2 ablation."""

from __future__ import annotations

import numpy as np

from envs.pd_cluster import DecisionContext
from heuristics.base import Policy, register
from heuristics.pd_cluster.base import ComposedPolicy, KeyOrdering
from heuristics.pd_cluster.placement import earliest_finish, heterogeneity_aware, load_balanced


def per_call_fcfs_key(ctx: DecisionContext) -> list[np.ndarray]:
    """Earliest revealed call first (seconds); each call is an independent request."""
    return [ctx.revealed_at]


def workflow_fcfs_key(ctx: DecisionContext) -> list[np.ndarray]:
    """Earliest-arrived workflow first, then earliest revealed call (seconds)."""
    return [ctx.workflow_arrival, ctx.revealed_at]


@register("per-call-fcfs")
def per_call_fcfs() -> Policy:
    """Per-call FCFS, the SGLang default of HexAgent §3 ("treats each revealed LLM call as an
    independent request", Table 1 row "Per-call FCFS"): order by ``revealed_at`` ascending
    (ties: slot index); load-balanced placement."""
    return ComposedPolicy("per-call-fcfs", KeyOrdering(per_call_fcfs_key), load_balanced)


@register("workflow-fcfs")
def workflow_fcfs() -> Policy:
    """Workflow-level FCFS with load-balanced dispatching (HexAgent §3 Approach 1, §7.2
    SGLang-FCFS): order by workflow arrival a_w ascending, then ``revealed_at`` (ties: slot
    index); load-balanced placement."""
    return ComposedPolicy("workflow-fcfs", KeyOrdering(workflow_fcfs_key), load_balanced)


@register("per-call-fcfs+earliest-finish")
def per_call_fcfs_earliest_finish() -> Policy:
    """Per-call FCFS order with earliest-finish placement: the speed-aware variant of
    ``per-call-fcfs`` (:func:`heuristics.pd_cluster.placement.earliest_finish`)."""
    return ComposedPolicy(
        "per-call-fcfs+earliest-finish", KeyOrdering(per_call_fcfs_key), earliest_finish
    )


@register("workflow-fcfs+earliest-finish")
def workflow_fcfs_earliest_finish() -> Policy:
    """Workflow-FCFS order with earliest-finish placement: the speed-aware variant of
    ``workflow-fcfs`` (:func:`heuristics.pd_cluster.placement.earliest_finish`)."""
    return ComposedPolicy(
        "workflow-fcfs+earliest-finish", KeyOrdering(workflow_fcfs_key), earliest_finish
    )


@register("workflow-fcfs+hetero-placement")
def workflow_fcfs_hetero_placement() -> Policy:
    """Ablation (§3 Insights 1–2): workflow-FCFS order with HexAgent's heterogeneity-aware
    placement (argmin_{p,d} R(c, p, d)) — isolates what HexAgent's ordering contributes."""
    return ComposedPolicy(
        "workflow-fcfs+hetero-placement", KeyOrdering(workflow_fcfs_key), heterogeneity_aware
    )
