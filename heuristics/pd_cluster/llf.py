"""Workflow-level least-laxity-first, HexAgent's "SGLang-LLF" baseline (HexAgent §7.2, after
Stankovic et al. [40])."""

from __future__ import annotations

import numpy as np

from envs.pd_cluster import DecisionContext
from heuristics.base import Policy, register
from heuristics.pd_cluster.base import ComposedPolicy, KeyOrdering
from heuristics.pd_cluster.placement import earliest_finish, load_balanced


class LaxityOrdering(KeyOrdering):
    """Smallest laxity first: laxity(c) = (a_w + α·H_w(t)) − t − remaining(c) seconds.

    The deadline is the workflow's scaled-SLO target a_w + α·H_w(t) with α = 1 by default (the
    §7.2 text names no α; α = 1 is the horizon itself, the tightest SLO of §5.1 Eq. 1).
    remaining(c) is the call's ``isolated_time`` — its standalone time on the fastest pair —
    which is the remaining critical path of the revealed DAG from c, since c's children are not
    revealed yet. Ties: workflow arrival, then reveal time, then slot index.

    :param alpha: SLO scale α of the deadline (dimensionless, > 0).
    """

    def __init__(self, alpha: float = 1.0):
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0 (SLO scale), got {alpha!r}")
        self.alpha = float(alpha)
        super().__init__(self._key)

    def _key(self, ctx: DecisionContext) -> list[np.ndarray]:
        laxity = ctx.workflow_arrival + self.alpha * ctx.horizon - ctx.time - ctx.isolated_time
        return [laxity, ctx.workflow_arrival, ctx.revealed_at]


@register("workflow-llf")
def workflow_llf(alpha: float = 1.0) -> Policy:
    """Workflow-level least laxity first (HexAgent §7.2 SGLang-LLF): order by laxity
    (a_w + α·H_w(t)) − t − isolated_time ascending (see :class:`LaxityOrdering`);
    load-balanced placement.

    :param alpha: deadline scale α (default 1: deadline a_w + H_w(t)).
    """
    return ComposedPolicy("workflow-llf", LaxityOrdering(alpha), load_balanced)


@register("workflow-llf+earliest-finish")
def workflow_llf_earliest_finish(alpha: float = 1.0) -> Policy:
    """Workflow-LLF order with earliest-finish placement: the speed-aware variant of
    ``workflow-llf`` (:func:`heuristics.pd_cluster.placement.earliest_finish`).

    :param alpha: deadline scale α (default 1: deadline a_w + H_w(t)).
    """
    return ComposedPolicy("workflow-llf+earliest-finish", LaxityOrdering(alpha), earliest_finish)
