"""Routing-v0's observation: the request's and the instances' feature arrays (columns tabled in
:mod:`envs.routing.env`'s docstring), read from the routing context.
"""

from __future__ import annotations

import numpy as np

from envs.routing.context import RoutingContext
from envs.routing.workloads import TASKS

REQUEST_FEATURES = 10
INSTANCE_FEATURES = 14


class ObservationMixin:
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
