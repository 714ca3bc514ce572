"""Routing-v0's rendering: the ``ansi`` text of the current route decision (the request, each
instance's load and estimates) and the ``rgb_array`` figure
(:func:`envs.common.render.routing_figure`).
"""

from __future__ import annotations

from typing import Any


class RenderMixin:
    """The render methods of :class:`envs.routing.env.RoutingEnv`."""

    def _render_figure(self) -> Any:
        from envs.common.render import routing_figure

        return routing_figure(self)

    def _render_ansi(self) -> str:
        ctx = self._ctx
        if ctx is None:
            return "episode over"
        lines = [
            f"t={ctx.time:.3f}s {ctx.kind} {ctx.call_id} task={ctx.task} in={ctx.input_tokens} "
            f"out^={ctx.predicted_output_tokens} slack={ctx.slack:.2f}s slo={ctx.slo:.2f}s",
            "  g  gpu        q(s)    p(ms/tok) d(ms)  run wait  freeKV  hit    T(s)   ok mask",
        ]
        for j in range(self.M):
            lines.append(
                f"  {j:<2} {ctx.gpus[j]:<10} {ctx.q[j]:7.3f} {ctx.p[j] * 1e3:9.4f} "
                f"{ctx.d[j] * 1e3:6.2f} {ctx.running[j]:4.0f} {ctx.waiting[j]:4.0f} "
                f"{ctx.free_kv_tokens[j]:7.0f} {ctx.prefix_hit_tokens[j]:6.0f} "
                f"{ctx.estimate[j]:7.2f} {int(ctx.meets_deadline[j]):3d} {int(ctx.feasible[j]):4d}"
                + ("  <- current" if j == ctx.current else "")
            )
        return "\n".join(lines)
