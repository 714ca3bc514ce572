"""Every attribute of a :class:`~envs.routing.env.RoutingEnv` that its mixins read, declared and
typed in one place (class-level annotations only: nothing changes at runtime). The mixins
(:mod:`~envs.routing.decisions`, :mod:`~envs.routing.observation`,
:mod:`~envs.routing.results`, :mod:`~envs.routing.render`) derive from :class:`RoutingState`,
so a type checker sees what each reads; ``RoutingEnv.__init__``/``reset`` set them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from envs.common.base import ServegymEnv

if TYPE_CHECKING:
    from envs.common.rewards import Reward
    from envs.routing.context import InstanceMonitor, RoutingContext
    from envs.routing.diagnosis import RoutingDiagnosis
    from envs.sim.core.protocol import Invocation
    from envs.sim.core.simulation import Simulation
    from envs.sim.core.workflows import Call


class RoutingState(ServegymEnv):
    """The state of a routing env: what ``__init__`` derives from the cluster, and what
    ``reset`` and each step change."""

    # -- options and cluster (fixed by __init__) ----------------------------------------------
    M: int
    migration: str
    slo_scale: float
    #: (M,) per-instance capability, max context and KV capacity (tokens); whether the longest
    #: context fits.
    _capability: np.ndarray
    _max_context: np.ndarray
    _kv_capacity: np.ndarray
    _footprint_ok: np.ndarray
    _zeros: np.ndarray
    #: (M,) the model each instance serves; its GPU names.
    _served: np.ndarray
    _gpu_names: list[str]
    #: model -> (M,) instances that serve it and hold its longest context.
    _holds: dict[str, np.ndarray]
    _windows: list[int]
    _feasible: dict[tuple[str, int], tuple[np.ndarray, bool]]
    #: (M,) KV bytes per token; (M, M) inverse KV-link bandwidth; the link latency (s).
    _kvb: np.ndarray
    _inv_bw: np.ndarray
    _link_latency: float

    # -- episode (set by reset) ---------------------------------------------------------------
    sim: Simulation | None
    monitor: InstanceMonitor
    _alone: np.ndarray
    _slo: np.ndarray
    _reward: Reward
    _duration: float
    _latencies: np.ndarray
    _completed_seen: int
    _migration_decisions: int
    _moved: dict[int, Call]
    _migrations: int | None
    _inv: Invocation | None
    _remaining: dict[int, int]
    _stay: dict[int, float]
    _checked: int
    _diag: RoutingDiagnosis

    # -- per decision ---------------------------------------------------------------------------
    _ctx: RoutingContext | None
    _derived: tuple[Any, np.ndarray, np.ndarray] | None
    _obs_base: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    _obs_rows: tuple[RoutingContext, np.ndarray] | None
    _live_base: tuple[tuple[float, int], dict[str, float]] | None
    _prefill_tokens: Any
