"""Allocators for ``servegym/Allocation-v0`` (Scepsy's problem). Importing this package registers
them. Every policy acts one LLM at a time through the env's menu, reading only
``info["decision_context"]`` (:class:`envs.allocation.AllocationContext`). A policy that plans a
whole allocation at a period's first step (:class:`~heuristics.allocation.base.PlanPolicy`) emits
its per-LLM options in the env's order; if an option is masked (the env's placement check can be
stricter than the policy's), it takes the nearest legal option (:func:`nearest_legal`) and counts
it in ``fallbacks``.

===========================  ================================================================
name                         rule (source)
===========================  ================================================================
``scepsy``                   APL + GPU scheduler at the period's target rate (Scepsy §4–§5)
``scepsy-parallelism-only``  Scepsy without fractional shares (whole GPUs; Fig. 10 ablation)
``scepsy-fractional-only``   Scepsy without tensor parallelism (TP 1; Fig. 10 ablation)
``scepsy-reactive``          Scepsy re-solved for the last period's *measured* rate, not the
                             upcoming scheduled one (no forecast; our own variant)
``scepsy-sticky``            Scepsy that keeps its allocation while the APL says it sustains
                             the new rate (no reconfiguration churn; our own variant)
``k8s-hpa``                  Kubernetes HPA per LLM, whole-GPU TP-1 replicas (§7.2)
``naive-equal``              equal GPU split, TP 1, fixed
``aegaeon-3p1d`` (``-2p2d``,  Aegaeon's pooled prefill/decode instances at a per-node P/D split,
``-1p3d``)                   non-LLM models on the prefill side, shares by phase work (§7.2;
                             SOSP'25, approximated: :class:`AegaeonPolicy`); ``-units``
                             suffix: packed into the most units rather than the largest shares
``ayo``                      Ayo's engine provisioning: whole-GPU instances, one per non-LLM
                             engine, the rest even over LLM engines (§7.2; ASPLOS'25,
                             :class:`AyoPolicy`)
``demand-proportional``      GPUs in proportion to each LLM's traced GPU-seconds per workflow,
                             TP 1 (our own strong simple reference)
``alloc:PATH``               a user-specified allocation from a YAML file (evaluate.py prefix)
===========================  ================================================================

Modules: :mod:`~heuristics.allocation.base`, :mod:`~heuristics.allocation.baselines`,
:mod:`~heuristics.allocation.scepsy` (the expert), :mod:`~heuristics.allocation.aegaeon`,
:mod:`~heuristics.allocation.ayo`.
"""

# Import order is registration order, the order ``policies_for("allocation")`` lists them.
from heuristics.allocation.base import PlanPolicy, allocation_context, nearest_legal
from heuristics.allocation.baselines import (
    DemandProportional,
    FixedAllocation,
    KubernetesHPA,
    NaiveEqual,
)

# isort: split
from heuristics.allocation.scepsy.policy import ScepsyPolicy

# isort: split
from heuristics.allocation.aegaeon import AegaeonPolicy

# isort: split
from heuristics.allocation.ayo import AyoPolicy

__all__ = [
    "AegaeonPolicy",
    "AyoPolicy",
    "DemandProportional",
    "FixedAllocation",
    "KubernetesHPA",
    "NaiveEqual",
    "PlanPolicy",
    "ScepsyPolicy",
    "allocation_context",
    "nearest_legal",
]
