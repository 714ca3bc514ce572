"""``servegym/Allocation-v0``: Scepsy's problem (papers/004), allocating GPU fractions, tensor
parallelism and replicas to the LLMs of agentic workflows each period. The Gym class and its
docstring table are in :mod:`envs.allocation.env`.
"""

from envs.allocation.env import (
    DEFAULT_WORKFLOW_RATE,
    WORKLOADS,
    AllocationContext,
    AllocationEnv,
    LLMPeriodMetrics,
)

__all__ = [
    "DEFAULT_WORKFLOW_RATE",
    "WORKLOADS",
    "AllocationContext",
    "AllocationEnv",
    "LLMPeriodMetrics",
]
