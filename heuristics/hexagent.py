"""HexAgent's scheduler (papers/000, §5.3–§5.4, Algorithm 1) and its §3 ablation.

Ordering: projected-risk priority. For every waiting call c the env gives the projected ratio
R(c, p, d) = ((t − a_w) + Δ(c, p, d)) / H_w(t) (Eq. 2) for every legal pair, computed on the
simulated state that already includes this invocation's earlier picks (Algorithm 1 lines 10,
13–20). The call's risk is its best-case ratio min_{p,d} R(c, p, d) (line 14: "project best
feasible placement"); the most urgent call is the argmax (line 18).
"""

from __future__ import annotations

import numpy as np

from envs.pd_cluster import DecisionContext
from heuristics.base import ComposedPolicy, Policy, open_slots, register
from heuristics.placement import heterogeneity_aware, load_balanced

#: Default queue-length threshold between the greedy and the one-pass mode. HexAgent §5.3 says
#: "for small queues ... greedy", "for larger queues ... one-pass ordering" but gives no value.
DEFAULT_THRESHOLD = 32


def best_ratio(ctx: DecisionContext) -> np.ndarray:
    """(K,) min over legal (p, d) of R(c, p, d); −inf for slots with no legal action."""
    best = ctx.projected_ratio.min(axis=(1, 2))
    return np.where(open_slots(ctx), best, -np.inf)


class HexAgentOrdering:
    """HexAgent's adaptive greedy ordering (§5.3 "Adaptive greedy prefill assignment", §5.4
    "Adaptive greedy decode assignment", Algorithm 1 lines 12–22).

    * ``num_waiting ≤ threshold`` (greedy): every step pick the open slot with the largest
      best-case ratio max_k min_{p,d} R(c_k, p, d). The env recomputes R after each pick, so this
      is the paper's "recomputes priorities for the remaining calls".
    * ``num_waiting > threshold`` (one-pass): at the invocation's first step rank the open slots
      once by the same score, descending, and follow that ranking for the rest of the invocation.

    Ties: lowest slot index. A new invocation is detected when no pick has been made in it yet
    (``len(ctx.picks) == 0``) or its identity (time, stage, trigger, slotted call ids) differs from
    the one ranked — compared by value, so contexts copied through a vector env's pipes work.

    :param threshold: number of waiting calls (all of the stage's, ``ctx.num_waiting``) up to
        which the greedy mode is used; the paper does not give its value (default 32).
    """

    def __init__(self, threshold: int = DEFAULT_THRESHOLD):
        if not isinstance(threshold, (int, np.integer)) or threshold < 0:
            raise ValueError(f"threshold must be an integer >= 0 (calls), got {threshold!r}")
        self.threshold = int(threshold)
        self._invocation: tuple | None = None
        self._ranking: list[int] | None = None

    def reset(self) -> None:
        self._invocation = None
        self._ranking = None

    def next_slot(self, ctx: DecisionContext) -> int:
        invocation = (ctx.time, ctx.stage, ctx.trigger, tuple(ctx.call_ids))
        if len(ctx.picks) == 0 or invocation != self._invocation:
            self._invocation = invocation
            self._ranking = None
            if ctx.num_waiting > self.threshold:
                score = best_ratio(ctx)
                ks = np.flatnonzero(open_slots(ctx))
                self._ranking = ks[np.argsort(-score[ks], kind="stable")].tolist()
        if self._ranking is not None:
            still_open = open_slots(ctx)
            for k in self._ranking:
                if still_open[k]:
                    return int(k)
        score = best_ratio(ctx)
        k = int(np.argmax(score))
        if not np.isfinite(score[k]):
            raise ValueError(f"no open slot: picked={ctx.picked.tolist()}")
        return k


@register("hexagent")
def hexagent(threshold: int = DEFAULT_THRESHOLD) -> Policy:
    """HexAgent (§5.3–§5.4, Algorithm 1): :class:`HexAgentOrdering` (pick the call with the
    largest best-case projected ratio; greedy with recomputation up to ``threshold`` waiting
    calls, one-pass ranking above) + heterogeneity-aware placement (the pair with the earliest
    projected finish, argmin_{p,d} R(c, p, d)).

    :param threshold: greedy/one-pass switch in waiting calls (not given by the paper).
    """
    return ComposedPolicy("hexagent", HexAgentOrdering(threshold), heterogeneity_aware)


@register("hexagent-order+load-balanced")
def hexagent_order_load_balanced(threshold: int = DEFAULT_THRESHOLD) -> Policy:
    """Ablation (§3 Insight 2): HexAgent's ordering with the baselines' least-loaded placement
    instead of heterogeneity-aware placement — isolates what placement contributes.

    :param threshold: greedy/one-pass switch in waiting calls (as for ``hexagent``).
    """
    return ComposedPolicy(
        "hexagent-order+load-balanced", HexAgentOrdering(threshold), load_balanced
    )
