"""GoodServe's router (GoodServe §3.3–§3.4, Appendix A.2), its no-migration ablation (§4.3)
and two separately named variants that are NOT the paper's (``goodserve+shorten``,
``goodserve+queue-aware``).

All four act on the env's Eq. 2 estimates (``ctx.estimate``, ``ctx.meets_deadline``) and its
static speed ranking (``ctx.capability``: seconds a reference request takes alone, smaller =
stronger).

* **Routing** — the just-enough heuristic (§3.4): "among the set of candidate instances that can
  all meet the E2E-SLO requirement of a request, GoodServe chooses to route that request to the
  instance with the worst computing capability". The paper does not say what happens when no
  instance meets the SLO; we send the request to the instance that finishes it soonest.
* **Migration** — every τ decode iterations the env re-estimates each ongoing request (running
  or still queued, §3.4 "for each ongoing request") and asks about the ones whose finish misses
  the deadline; GoodServe "reroutes that request to another GPU with stronger processing
  capability (still following the just-enough heuristic)" (§3.4). Just-enough means the move
  goes only to a stronger instance whose estimate meets the deadline (the least capable such
  one); when no stronger instance can save the request, it stays (the paper names no other
  target, and moving it cannot make it good).

The other §4.3 ablations are env options, not policies: GoodServe without its MoE predictor is
``output_predictor="history"``, an oracle of output lengths ``output_predictor="oracle"``, and
KV-cache instead of token-ID migration ``migration="kv"``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from envs.routing.context import RoutingContext
from heuristics.base import register
from heuristics.routing.base import Router, argmin_lex, feasible_indices


def just_enough(ctx: RoutingContext, candidates: np.ndarray) -> int | None:
    """GoodServe §3.4 just-enough selection: among ``candidates`` whose estimate meets the
    deadline, the least capable (largest ``capability``); ties by smaller estimate, then index.
    ``None`` if no candidate meets the deadline."""
    ok = candidates[np.asarray(ctx.meets_deadline, dtype=bool)[candidates]]
    if ok.size == 0:
        return None
    return _least_capable(ctx, ok)


def _least_capable(ctx: RoutingContext, ok: np.ndarray) -> int:
    """Of the (non-empty) instances ``ok``, the least capable; ties by estimate, then index."""
    order = np.lexsort((ok, ctx.estimate[ok], -np.asarray(ctx.capability, dtype=float)[ok]))
    return int(ok[order[0]])


def earliest_finish(ctx: RoutingContext, candidates: np.ndarray) -> int:
    """The candidate with the smallest estimate T(r, g); ties by capability, then index."""
    return argmin_lex(ctx, candidates, [ctx.estimate])


def just_enough_route(ctx: RoutingContext) -> int:
    """Route (§3.4): just-enough among feasible instances; if none meets the deadline, the
    feasible instance with the earliest estimated finish."""
    feasible = feasible_indices(ctx)
    choice = just_enough(ctx, feasible)
    return earliest_finish(ctx, feasible) if choice is None else choice


def stronger_rerouting(ctx: RoutingContext, shorten_misses: bool = False) -> int:
    """Migrate (§3.4: "reroutes that request to another GPU with stronger processing capability
    (still following the just-enough heuristic)"):

    1. the candidates are feasible instances other than ``current`` that are strictly stronger
       (``capability[g] < capability[current]``; an equally fast GPU is not "stronger");
    2. just-enough among them: the least capable one that meets the deadline (the estimate for a
       non-current instance includes transfer, queueing and re-prefill of prompt + generated
       tokens);
    3. if none meets it, stay -- unless ``shorten_misses`` (our variant ``goodserve+shorten``,
       not the paper's): then the stronger instance with the smallest estimate, if that beats
       staying (``estimate[current]``), which cannot save the deadline, only shorten the miss;
    4. otherwise stay. Also stay if the current instance already meets the deadline (the env
       should only ask about at-risk requests; the paper reroutes only those).
    """
    cur = ctx.current
    if ctx.meets_deadline[cur]:
        return cur
    cap = np.asarray(ctx.capability, dtype=float)
    feasible = np.asarray(ctx.feasible, dtype=bool)
    if not feasible[cur] and not feasible.any():
        feasible_indices(ctx)  # raises: no feasible instance at all
    # Boolean masks over all instances instead of index arrays (a risk check asks this of
    # nearly every running request in overload; most stay): the same candidates, in index
    # order, so the same choice. A strictly stronger instance is never ``cur`` itself.
    stronger = feasible & (cap < cap[cur])
    saving = stronger & np.asarray(ctx.meets_deadline, dtype=bool)
    if saving.any():
        return _least_capable(ctx, np.flatnonzero(saving))
    if not shorten_misses or not stronger.any():
        return cur
    fastest = earliest_finish(ctx, np.flatnonzero(stronger))
    return fastest if ctx.estimate[fastest] < ctx.estimate[cur] else cur


class GoodServeRouter(Router):
    """GoodServe's router: just-enough routing, optionally with stronger-instance rerouting.

    :param name: the policy's registry name.
    :param migration: whether to migrate at risk checks (False: always stay, the §4.3 ablation).
    :param shorten_misses: also move a request no stronger instance can save, to the stronger
        instance that finishes it soonest (see :func:`stronger_rerouting`, step 3; not the
        paper's rule).
    """

    def __init__(self, name: str, migration: bool = True, shorten_misses: bool = False):
        self.name = name
        self.migration = migration
        self.shorten_misses = shorten_misses

    def choose(self, ctx: RoutingContext) -> int:
        return just_enough_route(ctx)

    def migrate(self, ctx: RoutingContext) -> int:
        if not self.migration:
            return ctx.current
        return stronger_rerouting(ctx, self.shorten_misses)


@register("goodserve", env="routing")
def goodserve() -> Router:
    """GoodServe as written (§3.4): route to the least capable feasible instance whose Eq. 2
    estimate meets the deadline (else the earliest finish; the paper is silent there); at a risk
    check -- running and queued requests -- move to the least capable *stronger* instance that
    meets the deadline, else stay. See :func:`just_enough_route`, :func:`stronger_rerouting`."""
    return GoodServeRouter("goodserve", migration=True, shorten_misses=False)


@register("goodserve+shorten", env="routing")
def goodserve_shorten() -> Router:
    """A separately named variant, **not** the paper's GoodServe (the project's earlier default):
    GoodServe, but a request at risk that no stronger instance can save still moves to the
    stronger instance with the smallest estimate if that beats staying (``shorten_misses``)."""
    return GoodServeRouter("goodserve+shorten", migration=True, shorten_misses=True)


@register("goodserve-no-migration", env="routing")
def goodserve_no_migration() -> Router:
    """Ablation (§4.3 "GoodServe without migration"): GoodServe's just-enough routing; always
    stays at risk checks."""
    return GoodServeRouter("goodserve-no-migration", migration=False)


def queue_aware(ctx: RoutingContext) -> RoutingContext:
    """``ctx`` with a queue-aware Eq. 2 estimate, our own fix (not GoodServe's):
    q'_g = max(q_g, queued_prefill_tokens_g · p_g). The black-box q_g is an EMA of queueing
    delays measured at admission, so it lags a queue that is still building (measured: requests
    on the A40 waited 41 s on average while q_g read 1.3 s); the prompt tokens already waiting
    for prefill on g, at g's measured per-token prefill rate, bound the wait from below now.
    At a migrate decision the current instance's estimate (no queue, no prefill) is kept."""
    q = np.maximum(ctx.q, ctx.queued_prefill_tokens * ctx.p)
    estimate = ctx.estimate - ctx.q + q
    if ctx.kind == "migrate":
        estimate[ctx.current] = ctx.estimate[ctx.current]
    return replace(ctx, q=q, estimate=estimate, meets_deadline=ctx.time + estimate <= ctx.deadline)


class QueueAwareGoodServeRouter(GoodServeRouter):
    """GoodServe's rules on :func:`queue_aware` estimates; migrates only to save a deadline."""

    def choose(self, ctx: RoutingContext) -> int:
        return super().choose(queue_aware(ctx))

    def migrate(self, ctx: RoutingContext) -> int:
        return super().migrate(queue_aware(ctx))


@register("goodserve+queue-aware", env="routing")
def goodserve_queue_aware() -> Router:
    """A separately named variant, **not** the paper's GoodServe: its just-enough routing and
    stronger-instance migration on a queue-aware estimate (:func:`queue_aware`), moving a request
    only when a stronger instance meets its deadline (``shorten_misses=False``)."""
    return QueueAwareGoodServeRouter("goodserve+queue-aware", migration=True, shorten_misses=False)
