"""The router shape for ``servegym/Routing-v0``: read the context, route or migrate, check the pick.

Every router acts only through ``info["decision_context"]``, a
:class:`envs.routing.context.RoutingContext`. A decision is one of two kinds:

* ``route`` — a request arrived; the action is the instance it is sent to
  (:meth:`Router.choose`);
* ``migrate`` — a τ-iteration risk check found the running request likely to miss its deadline
  (GoodServe §3.4); the action is the instance it moves to, ``ctx.current`` meaning stay
  (:meth:`Router.migrate`). The default is to stay: of the baselines only GoodServe and Llumnix
  migrate.

:class:`Router.act` checks the pick against ``ctx.feasible``; an illegal pick is a bug in the
router's rule and raises :class:`RuntimeError`.

Ties, everywhere: the more capable instance first (smaller ``ctx.capability``), then the lower
index (:func:`argmin_lex`) — a router that breaks ties toward the slowest GPU would be a
handicapped baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from envs.routing.context import RoutingContext
from heuristics.context import context_error

#: Decision kinds of ``RoutingContext.kind``.
KINDS = ("route", "migrate")


def routing_context(info: dict[str, Any]) -> RoutingContext:
    """``info["decision_context"]``, with a clear error when it is missing (e.g. the episode
    ended, or the env is not Routing)."""
    ctx = info.get("decision_context") if isinstance(info, dict) else None
    if not isinstance(ctx, RoutingContext):
        raise context_error(info, RoutingContext, "routing")
    return ctx


def feasible_indices(ctx: RoutingContext) -> np.ndarray:
    """Indices of the instances the action mask allows, ascending.

    :raises ValueError: if none is feasible (the env never asks for a decision without one).
    """
    idx = np.flatnonzero(ctx.feasible)
    if idx.size == 0:
        raise ValueError(
            f"no feasible instance for {ctx.kind} decision of {ctx.call_id!r}: feasible="
            f"{np.asarray(ctx.feasible).tolist()}; the env never asks without a legal action"
        )
    return idx


def argmin_lex(ctx: RoutingContext, candidates: np.ndarray, keys: Sequence[np.ndarray]) -> int:
    """The candidate with the lexicographically smallest ``keys`` (primary key first); ties by
    capability (faster first), then index.

    :param candidates: instance indices to choose among (non-empty).
    :param keys: (M,) arrays over all instances; smaller is better.
    :raises ValueError: if ``candidates`` is empty.
    """
    cand = np.asarray(candidates, dtype=np.int64)
    if cand.size == 0:
        raise ValueError(f"no candidate instance for {ctx.kind} decision of {ctx.call_id!r}")
    columns = [np.asarray(k, dtype=float)[cand] for k in keys]
    columns += [np.asarray(ctx.capability, dtype=float)[cand], cand]
    # np.lexsort sorts by its *last* key first, so pass the keys reversed.
    return int(cand[np.lexsort(tuple(reversed(columns)))[0]])


class Router:
    """Base of the routing policies (the :class:`heuristics.base.Policy` protocol).

    A subclass sets ``name`` and implements :meth:`choose`; a router with its own migration rule
    also overrides :meth:`migrate`. Stateful routers override :meth:`reset`.
    """

    name: str = "router"

    def reset(self) -> None:
        """Forget per-episode state (call after ``env.reset``)."""

    def choose(self, ctx: RoutingContext) -> int:
        """The instance a newly arrived request is routed to (``ctx.kind == "route"``)."""
        raise NotImplementedError

    def migrate(self, ctx: RoutingContext) -> int:
        """The instance an at-risk running request moves to (``ctx.kind == "migrate"``);
        ``ctx.current`` means stay. Default: stay."""
        return ctx.current

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """A feasible instance index for the current decision.

        :param obs: the env observation (routers read ``info`` instead).
        :param info: the step's info dict; must hold a ``RoutingContext``.
        :raises ValueError: for an unknown decision kind, or a migrate decision whose mask
            forbids staying.
        :raises RuntimeError: if the router's rule picks an infeasible instance.
        """
        ctx = routing_context(info)
        if ctx.kind == "route":
            choice = self.choose(ctx)
        elif ctx.kind == "migrate":
            choice = self.migrate(ctx)
        else:
            raise ValueError(f"unknown decision kind {ctx.kind!r}; expected one of {KINDS}")
        choice = int(choice)
        if not 0 <= choice < ctx.num_instances or not ctx.feasible[choice]:
            if ctx.kind == "migrate" and choice == ctx.current:
                raise ValueError(
                    f"migrate decision of {ctx.call_id!r}: the mask forbids staying on current "
                    f"instance {ctx.current} (feasible={np.asarray(ctx.feasible).tolist()}); "
                    "staying must always be legal"
                )
            raise RuntimeError(
                f"policy {self.name!r} chose infeasible instance {choice} at the {ctx.kind} "
                f"decision of {ctx.call_id!r} (feasible={np.asarray(ctx.feasible).tolist()}); "
                "this is a bug in its rule"
            )
        return choice

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class KeyRouter(Router):
    """Stateless router: the feasible instance with the lexicographically smallest key tuple
    (ties: capability, then index); stays at migrate decisions.

    :param name: the policy's registry name.
    :param key: ``ctx -> [(M,) array, ...]``, primary key first; smaller is preferred.
    """

    def __init__(self, name: str, key: Callable[[RoutingContext], Sequence[np.ndarray]]):
        self.name = name
        self.key = key

    def choose(self, ctx: RoutingContext) -> int:
        return argmin_lex(ctx, feasible_indices(ctx), self.key(ctx))
