"""Allocators for ``servegym/Allocation-v0`` (Scepsy's problem). Importing this package registers
them; the table of names and rules is in :mod:`heuristics.allocation.aegaeon`.
"""

from heuristics.allocation.aegaeon import (
    AegaeonPolicy,
    AyoPolicy,
    DemandProportional,
    FixedAllocation,
    KubernetesHPA,
    NaiveEqual,
    PlanPolicy,
    ScepsyPolicy,
    allocation_context,
    nearest_legal,
)

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
