"""Ayo (ASPLOS 2025) as Scepsy §7.2 runs it on Allocation-v0: whole-GPU instances, one per
non-LLM engine, the rest spread evenly over the LLM engines (registry ``ayo``).
"""

from __future__ import annotations

from envs.allocation import AllocationContext
from envs.sim.allocation.allocations import Allocation, AllocationError, LLMAllocation
from heuristics.allocation.base import PlanPolicy
from heuristics.allocation.baselines import KubernetesHPA
from heuristics.base import register


@register("ayo", env="allocation")
class AyoPolicy(PlanPolicy):
    """Ayo (Tan et al., ASPLOS 2025, Scepsy ref. [46]; artifact github.com/NetX-lab/Ayo,
    ref. [32]) as an allocation: the engines an Ayo deployment provisions for the workflow.

    **What Ayo does**: it rewrites an application into a graph of *task primitives* (embedding,
    vector search, reranking, LLM prefilling, LLM decoding, ...) and optimises the graph —
    dependency pruning, stage-decomposition parallelism, splitting an LLM's prefill over partial
    prompts, pipelining decoding into downstream primitives (Scepsy §2: "iteratively transforms
    the workflow graph") — then runs it with two-level scheduling: a graph scheduler per query
    and one engine scheduler per engine type (artifact README, "Distributed Two-level
    Scheduling"). It does **not** decide how many GPUs each engine gets: each engine is declared
    by the user with an ``EngineConfig`` of ``instances`` Ray actors of ``num_gpus`` whole GPUs
    each (the artifact's RAG examples, e.g.
    ``examples/optimized_embedding_ingestion_searching_reranking_llm.py``: embedder, reranker
    and LLM engines each ``num_gpus=1, instances=1``, the LLM at ``tensor_parallel_size=1``).
    Scepsy's Table 1 / §2 make the same point (these systems "leave the resource allocation
    decisions for each LLM agent to the user").

    **The allocation** (what maps onto Allocation-v0): one engine per model; every instance on
    whole GPUs (no sharing: Ray places each ``num_gpus=1`` actor on its own GPU); each LLM engine
    at the smallest TP whose GPUs hold the model (TP 1 for all of Scepsy's models). The
    artifact's examples give every non-LLM engine (encoder-only models: embedder, reranker) one
    instance; the GPUs left are split evenly among the LLM engines, the remainder going to the
    LLMs in the env's order (largest first). Scepsy §7.2 does not say how it sized Ayo's
    engines; the even split over LLM engines is our choice, the deployment a user would write
    without a profiler. The same allocation every period (Ayo has no autoscaler).

    **What the simulator cannot express**: Ayo's gains are request-level — primitive graph
    rewriting (partial-prompt prefill splitting, decode pipelining, parallel stages), graph-aware
    priorities in the engine schedulers and cross-query primitive batching. The env serves
    workflows as their traced DAGs on vLLM-style engines with the env's router, so this policy
    reproduces Ayo's *provisioning*, not its scheduling; Scepsy §7.2 finds the latter helps only
    at low load ("Ayo has comparable latencies to Scepsy in the low-throughput region", its
    throughput limit comes from the provisioning).

    :param non_llm_instances: whole-GPU instances per non-LLM engine (1, as in the artifact).
    :raises AllocationError: at planning, naming the engines left without GPUs when the pool
        has fewer GPUs than engines need.
    """

    name = "ayo"

    def __init__(self, non_llm_instances: int = 1):
        super().__init__()
        v = non_llm_instances
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"ayo: non_llm_instances must be an integer >= 1, got {v!r}")
        self.non_llm_instances = v

    def plan(self, ctx: AllocationContext) -> Allocation:
        from envs.sim.hardware.catalog import get_model

        F, G = ctx.units_per_gpu, ctx.topology.num_gpus
        tp = {m: KubernetesHPA.pod_tp(ctx, m) for m in ctx.models}
        non_llm = [m for m in ctx.models if get_model(m).encoder_only]
        llms = [m for m in ctx.models if m not in non_llm]
        inst = {m: self.non_llm_instances for m in non_llm}
        free = G - sum(inst[m] * tp[m] for m in non_llm)
        need = sum(tp[m] for m in llms)
        if free < need:
            raise AllocationError(
                f"ayo: {G} GPUs cannot give every engine a whole-GPU instance: the non-LLM "
                f"engines {non_llm} take {G - free} "
                f"({self.non_llm_instances} x TP-{'/'.join(str(tp[m]) for m in non_llm)}), "
                f"leaving {free} for the LLM engines {llms} which need {need} "
                f"({', '.join(f'{m}: TP {tp[m]}' for m in llms)})"
            )
        for m in llms:
            inst[m] = 1
        free -= need
        # even split of the rest: one more instance to each LLM in turn while it fits
        grew = True
        while grew:
            grew = False
            for m in llms:
                if free >= tp[m] and inst[m] < ctx.max_replicas:
                    inst[m] += 1
                    free -= tp[m]
                    grew = True
        return Allocation(
            tuple(
                LLMAllocation(m, units=F * tp[m] * inst[m], tp=tp[m], replicas=inst[m])
                for m in ctx.models
            ),
            units_per_gpu=F,
        )
