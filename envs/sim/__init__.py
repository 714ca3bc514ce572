"""servegym's discrete-event cluster simulator (SimPy). Knows nothing of Gymnasium.

Main entry points: :func:`load_cluster`, :class:`Simulation`, :class:`DefaultScheduler`,
:class:`envs.sim.latency.LatencyModel`, :mod:`envs.sim.metrics`, the engine presets
(:func:`get_engine`, :mod:`envs.sim.engines`) and the closed-loop benchmark
(:func:`envs.sim.serving.closed_loop`).
"""

from envs.sim.cluster import (
    ClusterSpec,
    InstanceSpec,
    cluster_names,
    load_cluster,
    scaled_cluster,
)
from envs.sim.engines import EnginePreset, engine_names, get_engine
from envs.sim.protocol import (
    KV_POLICIES,
    LISTENER_METHODS,
    MIGRATION_MODES,
    PREFILL_MODES,
    SCHEDULING_MODES,
    STAGES,
    Assignment,
    Invocation,
    Scheduler,
    SchedulingError,
)
from envs.sim.records import CallRecord, LatencyCache, SimulationResult
from envs.sim.scheduler import DefaultScheduler, EarliestFinishScheduler
from envs.sim.simulation import Simulation
from envs.sim.workload import Call, WorkflowRun, WorkloadError

__all__ = [
    "KV_POLICIES",
    "LISTENER_METHODS",
    "MIGRATION_MODES",
    "PREFILL_MODES",
    "SCHEDULING_MODES",
    "STAGES",
    "Assignment",
    "Call",
    "CallRecord",
    "ClusterSpec",
    "DefaultScheduler",
    "EarliestFinishScheduler",
    "EnginePreset",
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
    "engine_names",
    "get_engine",
    "load_cluster",
    "scaled_cluster",
]
