"""servegym's discrete-event cluster simulator (SimPy). Knows nothing of Gymnasium.

Main entry points: :func:`load_cluster`, :class:`Simulation`, :class:`DefaultScheduler`,
:class:`envs.sim.latency.model.LatencyModel`, :mod:`envs.sim.core.metrics` and the engine presets
(:func:`get_engine`, :mod:`envs.sim.engines.presets`). The subpackages, one concern each; the
runtime ones (all but ``calibration``) import one another's modules directly, never this package,
and never ``calibration``, the offline fitting code (``tests/test_layout.py`` checks both):

- ``core/``: the simulation and the parts it holds, the scheduler protocol and default
  schedulers, workflow state, records, metrics (``python -m envs.sim.core.run`` runs it alone);
- ``allocation/``: GPU allocations, their placement on a topology and Scepsy's pipeline model;
- ``engines/``: instances (prefill, decode, monolithic), batching, prefix cache, shared GPUs,
  engine presets;
- ``latency/``: the roofline latency model and its calibrated efficiencies;
- ``hardware/``: the GPU and model catalog, clusters and topologies;
- ``calibration/``: the offline fits of the latency model and the engine presets, and the
  closed-loop benchmark client they replay measured deployments with.
"""

from envs.sim.core.protocol import (
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
from envs.sim.core.records import CallRecord, LatencyCache, SimulationResult
from envs.sim.core.scheduler import DefaultScheduler, EarliestFinishScheduler
from envs.sim.core.simulation import Simulation
from envs.sim.core.workflows import Call, WorkflowRun, WorkloadError
from envs.sim.engines.presets import EnginePreset, engine_names, get_engine
from envs.sim.hardware.cluster import (
    ClusterSpec,
    InstanceSpec,
    cluster_names,
    load_cluster,
    scaled_cluster,
)

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
