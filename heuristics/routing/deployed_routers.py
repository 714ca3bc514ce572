"""Routers people deploy today, and our own prefix-aware least-outstanding-work reference, for
``servegym/Routing-v0``.

None of these is in the GoodServe paper. The deployed ones are re-implemented from their
published rule and default parameters (source files named below; read, not copied) on the
information a Routing-v0 proxy has (:class:`envs.routing.context.RoutingContext`); where a
router's input does not exist here the factory's docstring says what stands in for it. All stay
at migrate decisions (none of them migrates running requests). Ties: capability (faster first),
then index (:func:`heuristics.routing.base.argmin_lex`).
"""

from __future__ import annotations

import numpy as np

from envs.routing.context import RoutingContext
from heuristics.base import register
from heuristics.routing.base import KeyRouter, Router, argmin_lex, feasible_indices


# -- prefix-aware least outstanding work (ours) -----------------------------------------------
def outstanding_work(ctx: RoutingContext) -> np.ndarray:
    """(M,) tokens of work already sent to each instance plus this request's prefill there:
    prompt tokens awaiting prefill + predicted output tokens of the unfinished requests
    (``queued_prefill_tokens + outstanding_output_tokens``) + (L_in − H_rg)."""
    missed = np.maximum(0.0, ctx.input_tokens - ctx.prefix_hit_tokens)
    return ctx.queued_prefill_tokens + ctx.outstanding_output_tokens + missed


@register("prefix-aware-low", env="routing")
def prefix_aware_low() -> Router:
    """Prefix-aware least outstanding work -- OUR OWN reference, not a published router: route
    to the feasible instance with the least :func:`outstanding_work` in tokens (queued + running
    work, discounting the prompt tokens it already caches). Speed-blind on purpose: it is the
    obvious load balancer a research router must beat."""
    return KeyRouter("prefix-aware-low", lambda ctx: [outstanding_work(ctx)])


# -- llm-d endpoint picker --------------------------------------------------------------------
#: Weights of llm-d's default scheduling profile (queue-scorer 2, kv-cache-utilization-scorer 2,
#: prefix-cache-scorer 3; the ``default-plugins.yaml`` EndpointPickerConfig of llm-d's
#: inference-scheduler deployment, also documented as the default profile of Red Hat OpenShift
#: AI's llm-d scheduler).
LLMD_WEIGHTS = {"queue": 2.0, "kv_cache": 2.0, "prefix": 3.0}


def llmd_scores(ctx: RoutingContext, candidates: np.ndarray) -> np.ndarray:
    """(len(candidates),) llm-d's weighted score sum (higher is better):

    * queue-scorer (gateway-api-inference-extension ``pkg/epp/scheduling/framework/plugins/
      scorer/queue.go``): min-max normalised waiting-queue length, (max − q) / (max − min) over
      the candidates, 1 when all are equal; q = ``waiting`` (requests sent, not admitted);
    * kv-cache-utilization-scorer (``scorer/kvcache_utilization.go``): 1 − KV utilisation =
      ``free_kv_tokens / kv_capacity`` (clipped to [0, 1]);
    * prefix-cache-scorer (``multi/prefix/plugin.go``): the fraction of the request's prompt
      blocks found cached on the endpoint, ``H_rg / L_in`` (llm-d estimates it from its own
      index of routed prompts; here the instance's true prefix hits stand in).
    """
    q = np.asarray(ctx.waiting, dtype=float)[candidates]
    span = q.max() - q.min()
    queue = np.ones_like(q) if span == 0 else (q.max() - q) / span
    kv = np.clip(ctx.free_kv_tokens / ctx.kv_capacity, 0.0, 1.0)[candidates]
    prefix = (np.asarray(ctx.prefix_hit_tokens, dtype=float) / max(1, ctx.input_tokens))[candidates]
    w = LLMD_WEIGHTS
    return w["queue"] * queue + w["kv_cache"] * kv + w["prefix"] * prefix


class LlmdRouter(Router):
    """llm-d's endpoint picker with the default profile; see :func:`llm_d`."""

    name = "llm-d"

    def choose(self, ctx: RoutingContext) -> int:
        feasible = feasible_indices(ctx)
        score = np.zeros(ctx.num_instances)
        score[feasible] = llmd_scores(ctx, feasible)
        return argmin_lex(ctx, feasible, [-score])


@register("llm-d", env="routing")
def llm_d() -> Router:
    """llm-d inference scheduler (endpoint picker, default profile): filter, score each endpoint
    with 2 × queue + 2 × KV-cache utilisation + 3 × prefix-cache scorers (:func:`llmd_scores`),
    pick the highest score (``max-score-picker``; ties here by capability, then index)."""
    return LlmdRouter()


# -- SGLang cache-aware -----------------------------------------------------------------------
#: SGLang router ``CacheAwareConfig`` defaults (sgl-project/sglang
#: ``sgl-router/src/policies/mod.rs``; rule in ``sgl-router/src/policies/cache_aware.rs``).
SGLANG_CACHE_THRESHOLD = 0.5
SGLANG_BALANCE_ABS_THRESHOLD = 32  # requests
SGLANG_BALANCE_REL_THRESHOLD = 1.1


class SglangCacheAwareRouter(Router):
    """SGLang's cache-aware policy; see :func:`sglang_cache_aware`.

    Keeps, per instance, the prompt tokens this router has sent there (its approximate radix
    tree's size; SGLang's periodic LRU eviction of the tree is not modelled); ``reset`` clears it.
    """

    name = "sglang-cache-aware"

    def __init__(self) -> None:
        self._tree_tokens: np.ndarray | None = None

    def reset(self) -> None:
        self._tree_tokens = None

    def choose(self, ctx: RoutingContext) -> int:
        if self._tree_tokens is None or len(self._tree_tokens) != ctx.num_instances:
            self._tree_tokens = np.zeros(ctx.num_instances)
        feasible = feasible_indices(ctx)
        load = np.asarray(ctx.outstanding, dtype=float)
        hi, lo = load[feasible].max(), load[feasible].min()
        if hi - lo > SGLANG_BALANCE_ABS_THRESHOLD and hi > lo * SGLANG_BALANCE_REL_THRESHOLD:
            choice = argmin_lex(ctx, feasible, [load])
        else:
            hit = np.asarray(ctx.prefix_hit_tokens, dtype=float)
            best = argmin_lex(ctx, feasible, [-hit])
            if hit[best] / max(1, ctx.input_tokens) > SGLANG_CACHE_THRESHOLD:
                choice = best
            else:
                choice = argmin_lex(ctx, feasible, [self._tree_tokens])
        self._tree_tokens[choice] += ctx.input_tokens
        return choice


@register("sglang-cache-aware", env="routing")
def sglang_cache_aware() -> Router:
    """SGLang router's ``cache_aware`` policy with its defaults (cache_threshold 0.5,
    balance_abs_threshold 32, balance_rel_threshold 1.1):

    * if the load is imbalanced -- max − min load > 32 and max > 1.1 × min, load = requests in
      flight (``outstanding``) -- route to the least-loaded worker;
    * else, if the longest prefix match covers more than 50 % of the prompt, to that worker
      (SGLang matches request text against its approximate tree; here the true prefix hits H_rg);
    * else to the worker with the smallest tree (the fewest prompt tokens this router has sent
      it).
    """
    return SglangCacheAwareRouter()


# -- Dynamo KV router -------------------------------------------------------------------------
#: Dynamo KV router defaults (ai-dynamo/dynamo ``docs/router/kv_cache_routing.md`` and the
#: router's ``lib/llm/src/kv_router/scheduler.rs``): ``--kv-overlap-score-weight`` 1.0,
#: ``--router-temperature`` 0 (deterministic: the lowest cost).
DYNAMO_OVERLAP_WEIGHT = 1.0
#: KV block size, tokens (vLLM's default ``--block-size``); the cost is in blocks.
DYNAMO_BLOCK_TOKENS = 16


def dynamo_cost(ctx: RoutingContext) -> np.ndarray:
    """(M,) Dynamo's worker cost, in KV blocks (lower is better):
    ``overlap_weight × potential prefill blocks + potential decode blocks``, with prefill blocks
    = (L_in − H_rg) / block and decode blocks = the worker's active blocks + the request's own
    (L_in / block). Active blocks, which Dynamo's router tracks per request it sent, are read as
    the KV in use at admission plus the prompt tokens still awaiting prefill
    (``kv_capacity − free_kv_tokens + queued_prefill_tokens``)."""
    b = float(DYNAMO_BLOCK_TOKENS)
    prefill = np.maximum(0.0, ctx.input_tokens - ctx.prefix_hit_tokens) / b
    active = (ctx.kv_capacity - ctx.free_kv_tokens + ctx.queued_prefill_tokens) / b
    return DYNAMO_OVERLAP_WEIGHT * prefill + active + ctx.input_tokens / b


@register("dynamo-kv", env="routing")
def dynamo_kv() -> Router:
    """NVIDIA Dynamo's KV router (temperature 0): the worker with the lowest
    :func:`dynamo_cost`, overlap score weight 1."""
    return KeyRouter("dynamo-kv", lambda ctx: [dynamo_cost(ctx)])
