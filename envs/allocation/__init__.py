"""``servegym/Allocation-v0``: Scepsy's problem, allocating GPU fractions, tensor
parallelism and replicas to the LLMs of agentic workflows each period. The Gym class and its
docstring table are in :mod:`envs.allocation.env`; it delegates to :mod:`~envs.allocation.episode`
(rate schedule, workflows, SLOs), :mod:`~envs.allocation.masking` (the menu's mask and the
decision context), :mod:`~envs.allocation.serving` (a period on the simulator) and
:mod:`~envs.allocation.observation` (observation, metrics, ``info``).
"""

from envs.allocation.context import AllocationContext, LLMPeriodMetrics
from envs.allocation.env import AllocationEnv
from envs.allocation.workloads import DEFAULT_WORKFLOW_RATE, WORKLOADS

__all__ = [
    "DEFAULT_WORKFLOW_RATE",
    "WORKLOADS",
    "AllocationContext",
    "AllocationEnv",
    "LLMPeriodMetrics",
]
