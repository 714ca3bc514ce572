"""PDCluster-v0's observation: the feature arrays of the waiting-call slots and the instances
(columns and scales are tabled in the :class:`envs.pd_cluster.env.PDClusterEnv` docstring),
built once per invocation and updated per pick."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from gymnasium import spaces

from envs.pd_cluster.state import PDClusterState

if TYPE_CHECKING:
    from gymnasium.spaces import Box

SLOT_FEATURES = 12
INSTANCE_FEATURES = 9
RATIO_CLIP = 5.0
#: Slot features that are log1p(x) / scale: L_in, L̂_out, H_w(t), elapsed, time since reveal,
#: attained service (columns of the observation's ``slots``, see the
#: :class:`envs.pd_cluster.env.PDClusterEnv` docstring).
LOGGED_SLOT_FEATURES = [2, 3, 5, 6, 7, 10]
LOGGED_SLOT_SCALES = np.array([10.0, 10.0, 5.0, 5.0, 5.0, 5.0])
#: The read-only blank observations of ``observations=False`` by space (keys, shapes, dtypes).
_BLANKS: dict[tuple, list[dict[str, np.ndarray]]] = {}


def observation_space(slots: int, prefill: int, decode: int, action_space: str) -> spaces.Dict:
    """The observation space: ``slots``, ``instances``, ``stage`` and, in the flat action
    space, ``ratio`` (K, P, D); in the two-step space ``step`` (slot step, pair step),
    ``selected`` (K,) (one-hot of the slot whose pair step is pending) and ``pair`` (P, D) (its
    clipped log ratios; 0 at a slot step) instead of ``ratio``: the slot step reads each call's
    best ratio from ``slots``, the pair step the selected call's ratios."""
    K, P, D = slots, prefill, decode
    boxes: dict[str, spaces.Space[Any]] = {
        "slots": spaces.Box(0.0, 10.0, (K, SLOT_FEATURES), np.float32),
        "instances": spaces.Box(0.0, 10.0, (P + D, INSTANCE_FEATURES), np.float32),
        "stage": spaces.Box(0.0, 1.0, (3,), np.float32),
    }
    if action_space == "flat":
        boxes["ratio"] = spaces.Box(0.0, RATIO_CLIP, (K, P, D), np.float32)
    else:
        boxes["step"] = spaces.Box(0.0, 1.0, (2,), np.float32)
        boxes["selected"] = spaces.Box(0.0, 1.0, (K,), np.float32)
        boxes["pair"] = spaces.Box(0.0, RATIO_CLIP, (P, D), np.float32)
    return spaces.Dict(boxes)


class ObservationMixin(PDClusterState):
    """The observation methods of :class:`envs.pd_cluster.env.PDClusterEnv`."""

    # -- observation -------------------------------------------------------------------------
    def _observation(self) -> dict[str, np.ndarray]:
        """Per-invocation features are built once (:meth:`_invocation_features`) and the clipped
        log ratios are kept by :meth:`_refresh`; a step only writes what a pick changes: picked
        flags, best ratios, instance readiness, KV and batch. With ``observations=False`` none
        of it is built: every step returns a read-only all-zero observation."""
        ctx = self._ctx
        assert ctx is not None
        if not self._observe:
            return self._blank_observation()
        if self._obs_slots is None:
            self._obs_slots, self._obs_inst = self._invocation_features()
        slots, inst = self._obs_slots, self._obs_inst
        n = self._n
        # min over legal pairs of min(log1p R, clip) = min(min of log1p R, clip); +inf: none.
        best = self._ratio_log.reshape(self.P * self.D, n).min(axis=0, initial=np.inf)
        slots[:n, 11] = np.where(np.isfinite(best), np.minimum(best, RATIO_CLIP), 0.0) / 5
        stage = np.array(
            [ctx.stage == "prefill", ctx.stage == "decode", len(ctx.picks) / self.K],
            dtype=np.float32,
        )
        if self.action_space_name == "flat":
            return {
                "slots": slots.copy(),
                "instances": inst.copy(),
                "ratio": self._ratio_obs.copy(),
                "stage": stage,
            }
        selected = np.zeros(self.K, dtype=np.float32)
        if self._selected >= 0:
            selected[self._selected] = 1.0
            pair = self._ratio_obs[self._selected].copy()
        else:
            pair = np.zeros((self.P, self.D), dtype=np.float32)
        return {
            "slots": slots.copy(),
            "instances": inst.copy(),
            "stage": stage,
            "step": np.array([self._selected < 0, self._selected >= 0], dtype=np.float32),
            "selected": selected,
            "pair": pair,
        }

    def _blank_observation(self) -> dict[str, np.ndarray]:
        """The all-zero observation of ``observations=False``: read-only arrays of the space's
        shapes over one zero element each (stride 0: no memory of their size). Successive calls
        alternate between two such sets, so no two consecutive steps share memory (Gymnasium's
        passive checker warns when they do; being read-only, the arrays cannot be changed through
        an observation a caller kept), at the cost of a dict copy."""
        shapes = getattr(self, "_blank_shapes", None)
        if shapes is None:
            spaces = self.observation_space.items()
            boxes = [(k, cast("Box", box)) for k, box in spaces]  # observation_space: Box-es
            shapes = self._blank_shapes = tuple((k, box.shape, box.dtype) for k, box in boxes)
        blanks = _BLANKS.get(shapes)
        if blanks is None:  # module-level, so an env's pickle never carries (writable) copies
            blanks = _BLANKS[shapes] = [
                {
                    key: np.ndarray(shape, dtype, bytes(dtype.itemsize), 0, (0,) * len(shape))
                    for key, shape, dtype in shapes
                }
                for _ in range(2)
            ]
        self._blank_turn = getattr(self, "_blank_turn", 0)
        self._blank_turn ^= 1
        return dict(blanks[self._blank_turn])

    def _invocation_features(self) -> tuple[np.ndarray, np.ndarray]:
        sim = self.sim
        ctx = self._ctx
        assert sim is not None and ctx is not None
        K, P, D = self.K, self.P, self.D
        n = self._n
        # Padding slots' features are all 0, so only the n valid rows are computed.
        slots = np.zeros((K, SLOT_FEATURES), dtype=np.float32)
        logged = np.stack(
            [
                ctx.input_tokens[:n],
                ctx.predicted_output_tokens[:n],
                ctx.horizon[:n],
                ctx.elapsed[:n],
                ctx.time - ctx.revealed_at[:n],
                ctx.attained_service[:n],
            ],
            axis=1,
        )
        slots[:n, LOGGED_SLOT_FEATURES] = np.log1p(logged) / LOGGED_SLOT_SCALES
        slots[:n, 0] = 1.0
        slots[:n, 1] = ctx.picked[:n]
        slots[:n, 4] = np.minimum(ctx.elapsed[:n] / ctx.horizon[:n], 10.0) / 10
        slots[:n, 8] = ctx.planned_prefill[:n] >= 0
        slots[:n, 9] = [
            len(c.workflow.finished) / max(1, len(c.workflow.revealed)) for c in self._slot_calls
        ]
        inst = np.zeros((P + D, INSTANCE_FEATURES), dtype=np.float32)
        inst[:, :3] = self._instance_static()
        inst[:P, 4] = np.minimum([len(i.queue) for i in sim.prefill], 160) / 16
        inst[P:, 4] = np.minimum([len(i.waiting) for i in sim.decode], 160) / 16
        inst[P:, 7] = np.minimum([len(i.running) for i in sim.decode], 640) / 64
        inst[:, 8] = self._gpu_memory
        np.clip(slots, 0.0, 10.0, out=slots)
        np.clip(inst, 0.0, 10.0, out=inst)
        # Updated by every pick (:meth:`_pick`); not clipped, as they never leave [0, 10].
        inst[:P, 3] = np.log1p(ctx.prefill_ready) / 5
        inst[P:, 5] = np.minimum(ctx.decode_kv_used / ctx.decode_kv_capacity, 10.0)
        inst[P:, 6] = np.minimum(ctx.decode_batch, 640) / 64
        return slots, inst

    def _instance_static(self) -> np.ndarray:
        if getattr(self, "_inst_static", None) is None:
            sim = self.sim
            assert sim is not None
            rows = []
            mem = []
            for i in sim.prefill + sim.decode:
                is_p = float(i.role == "prefill")
                pre = i.latency.prefill_time(1000)
                dec = i.latency.decode_iteration_time(1, 1000)
                rows.append([is_p, np.log1p(pre * 1e3) / 5, np.log1p(dec * 1e3) / 5])
                mem.append(i.latency.usable_memory_bytes / 1e12)
            self._inst_static = np.asarray(rows, dtype=np.float32)
            self._gpu_memory = np.asarray(mem, dtype=np.float32)
        return self._inst_static

    def flat_observation(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The flat space's (PDCluster-v0's) observation and action mask at the current decision:
        what a policy trained on ``Discrete(K·P·D)`` acts on. In the two-step space it is read
        at a slot step (the pick's decision point; a pair step places the slot chosen there), and
        its flat action ``k·P·D + p·D + d`` is taken as slot step ``k`` then, at the prefill
        stage, pair step ``p·D + d`` (the rule every expert and baseline acts by in both spaces).

        :raises RuntimeError: without observations (``observations=False``) or a pending
            decision.
        """
        if not self._observe or self._ctx is None:
            raise RuntimeError(
                "flat_observation() needs a pending decision of an env built with observations"
            )
        obs = self._observation()
        if self.action_space_name != "flat":
            obs = {
                "slots": obs["slots"],
                "instances": obs["instances"],
                "ratio": self._ratio_obs.copy(),
                "stage": obs["stage"],
            }
        return obs, self._feasible.reshape(-1).copy()
