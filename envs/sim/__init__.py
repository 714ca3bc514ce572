"""servegym's discrete-event cluster simulator (SimPy). Knows nothing of Gymnasium.

Main entry points: :func:`load_cluster`, :class:`Simulation`, :class:`DefaultScheduler`,
:class:`envs.sim.latency.LatencyModel` and :mod:`envs.sim.metrics`.
"""

from envs.sim.cluster import (
    ClusterSpec,
    InstanceSpec,
    cluster_names,
    load_cluster,
    scaled_cluster,
)
from envs.sim.scheduler import DefaultScheduler, EarliestFinishScheduler, Scheduler
from envs.sim.simulation import (
    LISTENER_METHODS,
    MIGRATION_MODES,
    PREFILL_MODES,
    STAGES,
    Assignment,
    CallRecord,
    Invocation,
    LatencyCache,
    SchedulingError,
    Simulation,
    SimulationResult,
)
from envs.sim.workload import Call, WorkflowRun, WorkloadError

__all__ = [
    "LISTENER_METHODS",
    "MIGRATION_MODES",
    "PREFILL_MODES",
    "STAGES",
    "Assignment",
    "Call",
    "CallRecord",
    "ClusterSpec",
    "DefaultScheduler",
    "EarliestFinishScheduler",
    "InstanceSpec",
    "Invocation",
    "LatencyCache",
    "Scheduler",
    "SchedulingError",
    "Simulation",
    "SimulationResult",
    "WorkflowRun",
    "WorkloadError",
    "cluster_names",
    "load_cluster",
    "scaled_cluster",
]
