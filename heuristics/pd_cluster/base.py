"""The ordering × placement composition of ``servegym/PDCluster-v0`` policies.

Every expert and baseline for PDCluster-v0 acts through the env's action space using only
``info["decision_context"]`` (:class:`envs.pd_cluster.DecisionContext`). A scheduling policy
there is two small pieces (HexAgent §3, Insights 1–2 separate them the same way):

* an **ordering rule** — which waiting call (slot) to pick next; the k-th pick of an invocation
  gets queue priority k, so the pick order *is* the queue order;
* a **placement rule** — which (prefill, decode) pair the picked call gets at the prefill stage.
  At the decode stage placement is fixed: the call is locked to its planned pair.

:class:`ComposedPolicy` glues one of each, so an ablation is one line
(``ComposedPolicy("x", WorkflowFCFSOrdering(), heterogeneity_aware)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from envs.pd_cluster import DecisionContext
from heuristics.context import context_error


class OrderingRule(Protocol):
    """Chooses the next slot to pick. ``reset`` clears any per-episode state."""

    def reset(self) -> None: ...

    def next_slot(self, ctx: DecisionContext) -> int: ...


#: ``(ctx, slot) -> (p, d)``: pool-local prefill and decode indices for a prefill-stage pick.
PlacementRule = Callable[[DecisionContext, int], tuple[int, int]]


def decision_context(info: dict[str, Any]) -> DecisionContext:
    """``info["decision_context"]``, with a clear error when it is missing (e.g. the episode
    ended, or the env is not PDCluster)."""
    ctx = info.get("decision_context") if isinstance(info, dict) else None
    if not isinstance(ctx, DecisionContext):
        raise context_error(info, DecisionContext, "pd-cluster")
    return ctx


def open_slots(ctx: DecisionContext) -> np.ndarray:
    """(K,) bool: slots that still have at least one legal action (valid, not yet picked, and
    KV-feasible on some decode instance)."""
    return np.asarray(ctx.feasible.any(axis=(1, 2)))


def lexicographic_first(ctx: DecisionContext, keys: Sequence[np.ndarray]) -> int:
    """The open slot with the smallest ``keys`` (primary key first), ties by slot index.

    :param keys: (K,) arrays, compared lexicographically in the given order.
    :raises ValueError: if no slot is open.
    """
    ks = np.flatnonzero(open_slots(ctx))
    if ks.size == 0:
        raise ValueError(
            f"no open slot: valid={ctx.valid.tolist()}, picked={ctx.picked.tolist()}; the env "
            "never asks for a decision without a legal action"
        )
    # np.lexsort sorts by its *last* key first and is stable, so equal keys keep slot order.
    order = np.lexsort(tuple(np.asarray(k)[ks] for k in reversed(keys)))
    return int(ks[order[0]])


class KeyOrdering:
    """Stateless ordering: the open slot with the lexicographically smallest key tuple.

    :param key: ``ctx -> [(K,) array, ...]``, primary key first; smaller is served first.
    """

    def __init__(self, key: Callable[[DecisionContext], Sequence[np.ndarray]]):
        self.key = key

    def reset(self) -> None:
        pass

    def next_slot(self, ctx: DecisionContext) -> int:
        return lexicographic_first(ctx, self.key(ctx))


def locked_pair(ctx: DecisionContext, slot: int) -> tuple[int, int]:
    """The only legal (p, d) of ``slot`` at the decode stage (its plan from the prefill stage).

    :raises ValueError: if the slot has no legal action.
    """
    legal = np.argwhere(ctx.feasible[slot])
    if legal.size == 0:
        raise ValueError(f"slot {slot} ({ctx.call_ids[slot]!r}) has no legal (p, d)")
    return int(legal[0, 0]), int(legal[0, 1])


class ComposedPolicy:
    """An ordering rule plus a placement rule (see the module docstring).

    At the prefill stage the picked slot is placed by ``placement``; at the decode stage it takes
    its locked pair. It acts in either action space (``ctx.action`` encodes the pick); in the
    two-step space it never takes the keep action, so its picks are those of the flat space. It
    reads only ``info["decision_context"]`` (``context_only``: evaluation runs it on an env that
    skips building observations).

    :param name: the policy's registry name.
    :param ordering: which slot next.
    :param placement: which (p, d) at the prefill stage.
    """

    #: Acts on the decision context alone, never on the observation.
    context_only = True

    def __init__(self, name: str, ordering: OrderingRule, placement: PlacementRule):
        self.name = name
        self.ordering = ordering
        self.placement = placement

    def reset(self) -> None:
        self.ordering.reset()

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        ctx = decision_context(info)
        # A pair step (two-step action space) places the slot this policy chose at the slot
        # step just before; the ordering rule runs once per pick in either space.
        slot = ctx.selected_slot if ctx.selected_slot >= 0 else self.ordering.next_slot(ctx)
        if ctx.stage == "decode":
            p, d = locked_pair(ctx, slot)
        else:
            p, d = self.placement(ctx, slot)
        if not ctx.feasible[slot, p, d]:
            raise RuntimeError(
                f"policy {self.name!r} chose an illegal action (slot {slot}, prefill {p}, "
                f"decode {d}) at the {ctx.stage} stage; this is a bug in its rules"
            )
        return ctx.action(slot, p, d)

    def __repr__(self) -> str:
        return f"ComposedPolicy({self.name!r})"
