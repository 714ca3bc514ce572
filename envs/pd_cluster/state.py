"""Every attribute of a :class:`~envs.pd_cluster.env.PDClusterEnv` that its mixins read,
declared and typed in one place (class-level annotations only: nothing changes at runtime). The
mixins (:mod:`~envs.pd_cluster.builder`, :mod:`~envs.pd_cluster.projection`,
:mod:`~envs.pd_cluster.observation`, :mod:`~envs.pd_cluster.results`) derive from
:class:`PDClusterState`, so a type checker sees what each reads; ``PDClusterEnv.__init__`` and
``reset`` set the options and the episode, the context builder the per-invocation arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from envs.common.base import ServegymEnv

if TYPE_CHECKING:
    from envs.common.rewards import Reward
    from envs.pd_cluster.context import DecisionContext
    from envs.sim.core.protocol import Invocation
    from envs.sim.core.simulation import Simulation
    from envs.sim.core.workflows import Call
    from envs.sim.hardware.cluster import ClusterSpec


class PDClusterState(ServegymEnv):
    """The state of a PD-cluster env: its options, the episode, and the open invocation's
    projection arrays (HexAgent §5.1 Eq. 2: Δ and R(c, p, d))."""

    # -- options (fixed by __init__) -------------------------------------------------------------
    cluster: ClusterSpec
    planning_delay: float | str | None
    planning_delay_scale: float
    #: Slots; prefill and decode instances.
    K: int
    P: int
    D: int
    action_space_name: str
    _prefix_visible: bool
    #: Whether this episode computes observations.
    _observe: bool

    # -- episode (set by reset) -------------------------------------------------------------------
    sim: Simulation | None
    _reward: Reward
    _completed_seen: int
    _planning_wall: list[float]
    _step_metrics: tuple[Any, dict[str, float]] | None
    _selected: int
    _ctx: DecisionContext | None

    # -- the open invocation ------------------------------------------------------------------
    _inv: Invocation | None
    _slot_calls: list[Call]
    _rest: list[Call]
    _obs_slots: np.ndarray | None
    _obs_inst: np.ndarray
    _owned_refs: tuple[int, int, int, int]
    _cross: dict[int, tuple[np.ndarray, np.ndarray]]
    observation_space: spaces.Dict

    # -- cluster tables (ContextBuilderMixin._cluster_tables) --------------------------------------
    _prefill_pos: dict[int | None, int]
    _decode_pos: dict[int | None, int]
    _inv_bw: np.ndarray
    _kv_bytes: np.ndarray
    _cap: np.ndarray
    _prefill_class: np.ndarray
    _prefill_class_latency: list[Any]
    _prefill_times: list[dict[int, float]]

    # -- projection arrays (ContextBuilderMixin builds them, DecodeProjectionMixin updates) -----
    _n: int
    _slotted: set[int]
    _p_ready0: np.ndarray
    _done_tokens: list[int]
    _batch0: np.ndarray
    _ctx_tokens0: np.ndarray
    _iv_base: list[np.ndarray | None]
    _iv_picks: list[list[list[float]]]
    _iv: list[np.ndarray | None]
    _ready: list[float]
    _kv_used: list[float]
    _batch: list[float]
    _ctx_tokens: list[float]
    _it0: list[float]
    _slope: list[float]
    _pre: np.ndarray
    _trans: np.ndarray
    _lin: np.ndarray
    _lout: np.ndarray
    _demand: np.ndarray
    _demand_max: float
    _ctx_call: np.ndarray
    _lout_err: np.ndarray
    _elapsed: np.ndarray
    _horizon: np.ndarray
    _feasible: np.ndarray
    _feasible_t: np.ndarray
    _trans_blocked: np.ndarray
    _pre_t: np.ndarray
    _base: np.ndarray
    _open: int
    _open_legal: int
    _ratio: np.ndarray
    _decode: np.ndarray
    _dec_t: np.ndarray
    _free_at: np.ndarray
    _free_kd: np.ndarray
    _floor: list[float]
    _waits: list[bool]
    _bp: list[np.ndarray | None]
    _neg_sm: list[np.ndarray]
    _ratio_log: np.ndarray
    _ratio_obs: np.ndarray

    if TYPE_CHECKING:
        # Methods one mixin defines and another calls.
        def _refresh(self, pick: tuple[int, int, int] | None = None) -> None: ...
        def _decode_rate(self, j: int) -> None: ...
