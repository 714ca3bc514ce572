"""Routing-v0's observation: the request's and the instances' feature arrays (columns tabled in
the :class:`envs.routing.env.RoutingEnv` docstring), read from the routing context.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from envs.routing.context import RoutingContext
from envs.routing.state import RoutingState
from envs.routing.workloads import TASKS

REQUEST_FEATURES = 10
INSTANCE_FEATURES = 14


class ObservationMixin(RoutingState):
    """The observation method of :class:`envs.routing.env.RoutingEnv`."""

    # -- observation -------------------------------------------------------------------------
    def _observation(self) -> dict[str, np.ndarray]:
        ctx = self._ctx
        assert ctx is not None
        req = np.zeros(REQUEST_FEATURES, dtype=np.float32)
        # float(n): the float64 an integer is cast to for log1p's float64 loop, without the
        # slower cast inside the ufunc call
        req[0] = np.log1p(float(ctx.input_tokens)) / 12
        req[1] = np.log1p(float(ctx.predicted_output_tokens)) / 10
        req[2] = np.log1p(float(ctx.generated)) / 10
        req[3] = min(max(ctx.slack / ctx.slo, -1.0), 4.0) + 1.0
        req[4] = np.log1p(ctx.slo) / 5
        req[5] = ctx.kind == "migrate"
        req[6 + (TASKS.index(ctx.task) if ctx.task in TASKS else 3)] = 1.0
        # Built feature-major (each feature a contiguous row of M values), then transposed:
        # strided column writes into an (M, F) array cost more than the features themselves.
        # The rows that depend on the instances alone are computed once per monitor snapshot
        # (clipping is elementwise, so clipping them apart gives the same values).
        cols = self._instance_rows(ctx).copy()
        rows = self._obs_rows  # at a risk check, rows 8-11 were computed (and clipped) for all
        if rows is not None and rows[0] is ctx:
            cols[8:12] = rows[1]
            cols[12, ctx.current] = 1.0  # inside [0, 10]: clipping leaves it
        else:
            cols[8] = ctx.prefix_hit_tokens / max(1, ctx.input_tokens)
            cols[9] = np.minimum(ctx.estimate / ctx.slo, 10.0)
            cols[10] = ctx.meets_deadline
            cols[11] = ctx.feasible
            if ctx.current >= 0:
                cols[12, ctx.current] = 1.0
            np.clip(cols[8:13], 0.0, 10.0, out=cols[8:13])
        inst = np.ascontiguousarray(cols.T)
        return {"request": req, "instances": inst}

    def _instance_rows(self, ctx: RoutingContext) -> np.ndarray:
        """(INSTANCE_FEATURES, M) float32: rows 0–7 and 13 of the instance features (clipped to
        [0, 10]), rows 8–12 zero. Reused while ``ctx`` shares the previous context's monitor
        arrays (the env's contexts hand out one read-only snapshot until the monitor changes)."""
        cached = self._obs_base
        if cached is not None and cached[0] is ctx.q and cached[1] is ctx.free_kv_tokens:
            return cached[2]
        cols = np.zeros((INSTANCE_FEATURES, self.M), dtype=np.float32)
        cols[0] = np.log1p(ctx.capability)
        cols[1] = np.log1p(ctx.q)
        cols[2] = np.log1p(ctx.p * 1e3)
        cols[3] = np.log1p(ctx.d * 1e3)
        cols[4] = ctx.running / 64
        cols[5] = ctx.waiting / 16
        cols[6] = ctx.outstanding / 16
        cols[7] = ctx.free_kv_tokens / ctx.kv_capacity
        cols[13] = np.log1p(ctx.tokens_per_minute) / 15
        np.clip(cols, 0.0, 10.0, out=cols)
        if not ctx.q.flags.writeable and not ctx.free_kv_tokens.flags.writeable:
            self._obs_base = (ctx.q, ctx.free_kv_tokens, cols)
        return cols


# -- opt-in: observation="extended" (ours) ------------------------------------------
#: Names of the observation options of Routing-v0 (the env's ``observation=`` keyword).
OBSERVATIONS = ("default", "extended", "queue")
#: Extra columns of ``observation="extended"``, appended after the default ones.
EXTENDED_REQUEST_FEATURES = 3
EXTENDED_INSTANCE_FEATURES = 4
#: Extra columns of ``observation="queue"``, appended after the extended ones.
QUEUE_REQUEST_FEATURES = 1
QUEUE_INSTANCE_FEATURES = 4
#: Per option, the (request, instance) columns it adds to the default observation.
EXTRA_FEATURES = {
    "default": (0, 0),
    "extended": (EXTENDED_REQUEST_FEATURES, EXTENDED_INSTANCE_FEATURES),
    "queue": (
        EXTENDED_REQUEST_FEATURES + QUEUE_REQUEST_FEATURES,
        EXTENDED_INSTANCE_FEATURES + QUEUE_INSTANCE_FEATURES,
    ),
}
#: Cap of ρ, the deadline-implied over the predicted decode time.
RHO_MAX = 20.0


def observation_space(m: int, observation: str = "default") -> spaces.Dict:
    """Routing-v0's observation space over ``m`` instances for the option ``observation``.

    :raises ValueError: for an option not in :data:`OBSERVATIONS`.
    """
    if observation not in OBSERVATIONS:
        raise ValueError(f"observation must be one of {OBSERVATIONS}, got {observation!r}")
    extra_req, extra_inst = EXTRA_FEATURES[observation]
    n_req = REQUEST_FEATURES + extra_req
    n_inst = INSTANCE_FEATURES + extra_inst
    return spaces.Dict(
        {
            "request": spaces.Box(0.0, 10.0, (n_req,), np.float32),
            "instances": spaces.Box(0.0, 10.0, (m, n_inst), np.float32),
        }
    )


def _over_slack(seconds: np.ndarray, slack: float) -> np.ndarray:
    """``seconds / slack`` clipped to [0, 10]; 10 when no slack is left."""
    if slack <= 0:
        return np.full(np.shape(seconds), 10.0)
    return np.clip(np.asarray(seconds, dtype=float) / slack, 0.0, 10.0)


class ExtendedObservationMixin(RoutingState):
    """``observation="extended"``: the default observation plus features no built-in router
    reads (ours, an opt-in variant -- the default observation is unchanged).

    ρ = (SLO / α − A_ref(L_in, 1)) / (A_ref(L_in, L̂_out) − A_ref(L_in, 1)), clipped to [0, 20]:
    the decode time the deadline implies over the decode time the predicted length implies, both
    alone on the SLO's reference GPU (A_ref: :class:`envs.common.run_alone.RunAloneLatency`).
    Under ``slo_basis="request"`` (the default, GoodServe §5) the deadline is α × the request's
    own run-alone latency, so ρ · L̂ is its true length up to rounding: the leak the env docstring
    names, which every policy is free to read and no built-in router does. Under
    ``slo_basis="task"`` ρ compares the task's median with this request's prediction.

    Extra request columns (after the default 10): log1p(ρ) / log(21); the share of feasible
    instances that *can make it* (below); 1 if none can.
    Extra instance columns (after the default 14), with L̃_rem = ρ · L̂_rem:

    * A_g(L_in + generated, L̂_rem) / slack: run-alone on g's GPU with the predicted length;
    * A_g(L_in + generated, L̃_rem) / slack: the same with the deadline-implied length;
    * (Eq. 2 estimate + (L̃_rem − L̂_rem) · d_g) / slack: GoodServe's estimate with the implied
      length;
    * can make it: both of the previous two ≤ 1 (and the instance feasible).

    Ratios over the slack are clipped to [0, 10] (10 when no slack is left).
    """

    # What the env class sets (see ``RoutingEnv.__init__``) and the default observation.
    cluster: Any
    engine: Any
    token_budget: int | None
    prefill_mode: str
    slo_scale: float
    M: int
    observation: str
    _latency_cache: Any
    _ctx: RoutingContext | None
    _run_alone: Callable[[int, int], float]
    _observe: Callable[[], dict[str, np.ndarray]]
    _observation: Callable[[], dict[str, np.ndarray]]
    _alone_models: list[Any]

    def _bind_observation(self, observation: str) -> None:
        """``self._observe``: the observation method of the option ``observation``."""
        self.observation = observation
        methods = {"extended": self._observation_extended, "queue": self._observation_queue}
        self._observe = methods.get(observation, self._observation)

    def _alone_per_instance(self) -> list[Any]:
        """Per instance, its GPU's run-alone model (built once per env)."""
        models = getattr(self, "_alone_models", None)
        if models is None:
            from envs.common.run_alone import RunAloneLatency
            from envs.sim.engines.presets import resolve_token_budget

            models = []
            for spec in self.cluster.instances:
                lat = self._latency_cache.get(spec, self.engine)
                budget = resolve_token_budget(self.engine, lat.gpu, self.token_budget)
                models.append(RunAloneLatency(lat, self.prefill_mode, budget))
            self._alone_models = models
        return models

    def _observation_extended(self) -> dict[str, np.ndarray]:
        base = self._observation()
        ctx = self._ctx
        assert ctx is not None
        ref = self._run_alone
        prompt = int(ctx.input_tokens + ctx.generated)
        predicted = max(1, int(ctx.predicted_output_tokens))
        first = ref(ctx.input_tokens, 1)
        decode_pred = ref(ctx.input_tokens, predicted) - first
        implied = ctx.slo / self.slo_scale - first
        rho = float(np.clip(implied / decode_pred, 0.0, RHO_MAX)) if decode_pred > 0 else 1.0
        rem = max(1, int(ctx.predicted_remaining_tokens))
        rem_implied = max(1, int(round(rho * rem)))
        models = self._alone_per_instance()
        a_pred = np.array([m(prompt, rem) for m in models])
        a_impl = np.array([m(prompt, rem_implied) for m in models])
        est_impl = ctx.estimate + (rem_implied - rem) * ctx.d
        extra = np.zeros((self.M, EXTENDED_INSTANCE_FEATURES), dtype=np.float32)
        extra[:, 0] = _over_slack(a_pred, ctx.slack)
        extra[:, 1] = _over_slack(a_impl, ctx.slack)
        extra[:, 2] = _over_slack(est_impl, ctx.slack)
        can = (extra[:, 1] <= 1.0) & (extra[:, 2] <= 1.0) & np.asarray(ctx.feasible, dtype=bool)
        extra[:, 3] = can
        req = np.zeros(EXTENDED_REQUEST_FEATURES, dtype=np.float32)
        req[0] = np.log1p(rho) / np.log1p(RHO_MAX)
        n_feasible = max(1, int(np.count_nonzero(ctx.feasible)))
        req[1] = np.count_nonzero(can) / n_feasible
        req[2] = not can.any()
        return {
            "request": np.concatenate([base["request"], req]),
            "instances": np.concatenate([base["instances"], extra], axis=1),
        }

    def _observation_queue(self) -> dict[str, np.ndarray]:
        """``observation="queue"`` (ours, opt-in): the extended observation plus the queue
        columns :func:`heuristics.routing.goodserve.queue_aware` reads, which the black-box
        EMAs lag. Functions of prompt lengths and predicted output lengths only (no true
        output length). Extra instance columns, with W_g = queued_prefill_tokens_g · p_g (the
        prompt tokens waiting for prefill on g at g's prefill rate) and
        q'_g = max(q_g, W_g):

        * W_g / slack;
        * (Eq. 2 estimate − q_g + q'_g) / slack: the queue-aware estimate (at a migrate
          decision the current instance keeps its estimate);
        * 1 if t + that estimate ≤ deadline;
        * log1p(outstanding_output_tokens_g) / 15: the predicted output tokens still owed on g.

        Extra request column: the share of feasible instances whose queue-aware estimate meets
        the deadline.
        """
        base = self._observation_extended()
        ctx = self._ctx
        assert ctx is not None
        wait = ctx.queued_prefill_tokens * ctx.p
        estimate = ctx.estimate - ctx.q + np.maximum(ctx.q, wait)
        if ctx.kind == "migrate" and ctx.current >= 0:
            estimate[ctx.current] = ctx.estimate[ctx.current]
        meets = (ctx.time + estimate <= ctx.deadline) & np.asarray(ctx.feasible, dtype=bool)
        extra = np.zeros((self.M, QUEUE_INSTANCE_FEATURES), dtype=np.float32)
        extra[:, 0] = _over_slack(wait, ctx.slack)
        extra[:, 1] = _over_slack(estimate, ctx.slack)
        extra[:, 2] = meets
        extra[:, 3] = np.clip(np.log1p(ctx.outstanding_output_tokens) / 15, 0.0, 10.0)
        n_feasible = max(1, int(np.count_nonzero(ctx.feasible)))
        req = np.array([np.count_nonzero(meets) / n_feasible], dtype=np.float32)
        return {
            "request": np.concatenate([base["request"], req]),
            "instances": np.concatenate([base["instances"], extra], axis=1),
        }
