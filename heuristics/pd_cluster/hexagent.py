"""HexAgent's scheduler (HexAgent §5.3–§5.4, Algorithm 1) and its §3 ablation.

Ordering: projected-risk priority. For every waiting call c the env gives the projected ratio
R(c, p, d) = ((t − a_w) + Δ(c, p, d)) / H_w(t) (Eq. 2) for every legal pair, computed on the
simulated state that already includes this invocation's earlier picks (Algorithm 1 lines 10,
13–20). The call's risk is its best-case ratio min_{p,d} R(c, p, d) (line 14: "project best
feasible placement"); the most urgent call is the argmax (line 18).

Δ's decode part follows §5.4: the call starts decoding on d at the earliest capacity-feasible
start at or after its arrival there (``ctx.decode_free_at``, read from d's simulated
KV-occupancy intervals, ``PDClusterEnv.decode_intervals(d)``), so
Δ = max(arrival, decode_free_at) + decode seconds. The wait is the decode-queue wait for KV
room (and, at the decode stage, for the calls picked ahead on d: the engine admits in strict
priority order). Each pick adds its interval to the state (line 20), so later calls see it.
Placement by argmin R is therefore the paper's "instance with the earliest projected finish".
"""

from __future__ import annotations

import numpy as np

from envs.pd_cluster import DecisionContext
from heuristics.base import Policy, register
from heuristics.pd_cluster.base import ComposedPolicy
from heuristics.pd_cluster.placement import heterogeneity_aware, load_balanced

#: Default queue-length threshold between the greedy and the one-pass mode. HexAgent §5.3 says
#: "for small queues ... greedy", "for larger queues ... one-pass ordering" but gives no value.
DEFAULT_THRESHOLD = 32


def best_ratio(ctx: DecisionContext) -> np.ndarray:
    """(K,) min over legal (p, d) of R(c, p, d); −inf for slots with no legal action."""
    best = np.full(ctx.num_slots, -np.inf)
    ks, scores = _open_scores(ctx)
    best[ks] = scores
    return best


def _open_scores(ctx: DecisionContext) -> tuple[np.ndarray, np.ndarray]:
    """The open slots (ascending) and their best-case ratios min_{p,d} R(c, p, d). Only valid,
    not yet picked slots can have a legal action, so only their rows are read."""
    ks = np.flatnonzero(ctx.valid & ~ctx.picked)
    if ks.size:
        ks = ks[ctx.feasible[ks].reshape(ks.size, -1).any(axis=1)]
    if ks.size == 0:
        return ks, np.empty(0)
    # Illegal (p, d) hold +inf, so the plain minimum is the minimum over legal pairs.
    return ks, ctx.projected_ratio[ks].reshape(ks.size, -1).min(axis=1)


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
        self.reset()

    def reset(self) -> None:
        self._ctx: DecisionContext | None = None  # the context object last seen
        self._invocation: tuple | None = None
        self._call_ids: list[str] = []
        self._ranking: list[int] | None = None
        self._skip = 0  # ranking entries before this one are picked (and stay picked)

    def next_slot(self, ctx: DecisionContext) -> int:
        # The env updates one context object in place through an invocation and makes a new
        # one for the next, so the same object with a pick made is the same invocation; any
        # other object (e.g. a copy through a vector env's pipe) is compared by value.
        same = ctx is self._ctx and len(ctx.picks) > 0
        invocation = (ctx.time, ctx.stage, ctx.trigger)
        if not same and (
            len(ctx.picks) == 0 or invocation != self._invocation or ctx.call_ids != self._call_ids
        ):
            self._invocation = invocation
            self._call_ids = list(ctx.call_ids)
            self._ranking = None
            if ctx.num_waiting > self.threshold:
                ks, score = _open_scores(ctx)
                self._ranking = ks[np.argsort(-score, kind="stable")].tolist()
                self._skip = 0
        self._ctx = ctx
        if self._ranking is not None:
            ranking, picked = self._ranking, ctx.picked
            while self._skip < len(ranking) and picked[ranking[self._skip]]:
                self._skip += 1
            for k in ranking[self._skip :]:
                if ctx.feasible[k].any():
                    return k
        ks, score = _open_scores(ctx)
        if ks.size == 0:
            raise ValueError(f"no open slot: picked={ctx.picked.tolist()}")
        return int(ks[np.argmax(score)])


@register("hexagent")
def hexagent(threshold: int = DEFAULT_THRESHOLD) -> Policy:
    """HexAgent (§5.3–§5.4, Algorithm 1): :class:`HexAgentOrdering` (pick the call with the
    largest best-case projected ratio; greedy with recomputation up to ``threshold`` waiting
    calls, one-pass ranking above) + heterogeneity-aware placement (the pair with the earliest
    projected finish, argmin_{p,d} R(c, p, d), whose Δ counts the wait for the earliest
    capacity-feasible decode start, §5.4).

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
