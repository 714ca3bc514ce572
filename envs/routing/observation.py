"""Routing-v0's observation: the request's and the instances' feature arrays (columns tabled in
:mod:`envs.routing.env`'s docstring), read from the routing context.
"""

from __future__ import annotations

import numpy as np

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
        req[0] = np.log1p(ctx.input_tokens) / 12
        req[1] = np.log1p(ctx.predicted_output_tokens) / 10
        req[2] = np.log1p(ctx.generated) / 10
        req[3] = min(max(ctx.slack / ctx.slo, -1.0), 4.0) + 1.0
        req[4] = np.log1p(ctx.slo) / 5
        req[5] = ctx.kind == "migrate"
        req[6 + (TASKS.index(ctx.task) if ctx.task in TASKS else 3)] = 1.0
        inst = np.zeros((self.M, INSTANCE_FEATURES), dtype=np.float32)
        inst[:, 0] = np.log1p(ctx.capability)
        inst[:, 1] = np.log1p(ctx.q)
        inst[:, 2] = np.log1p(ctx.p * 1e3)
        inst[:, 3] = np.log1p(ctx.d * 1e3)
        inst[:, 4] = ctx.running / 64
        inst[:, 5] = ctx.waiting / 16
        inst[:, 6] = ctx.outstanding / 16
        inst[:, 7] = ctx.free_kv_tokens / ctx.kv_capacity
        inst[:, 8] = ctx.prefix_hit_tokens / max(1, ctx.input_tokens)
        inst[:, 9] = np.minimum(ctx.estimate / ctx.slo, 10.0)
        inst[:, 10] = ctx.meets_deadline
        inst[:, 11] = ctx.feasible
        if ctx.current >= 0:
            inst[ctx.current, 12] = 1.0
        inst[:, 13] = np.log1p(ctx.tokens_per_minute) / 15
        np.clip(inst, 0.0, 10.0, out=inst)
        return {"request": req, "instances": inst}
