"""Routing-v0's rendering: the ``ansi`` text of the current route decision (the request, each
instance's load and estimates) and the ``rgb_array`` picture (:func:`routing_figure`: per
instance the running and waiting requests and KV use, and the pending request's estimated
latency T(r, g) on each instance against its slack).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from envs.common.render import LEGEND_ABOVE, agg_pyplot
from envs.routing.state import RoutingState

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class RenderMixin(RoutingState):
    """The render methods of :class:`envs.routing.env.RoutingEnv`."""

    def _render_figure(self) -> Any:
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


def routing_figure(env: Any) -> Figure:
    """Routing-v0's ``rgb_array`` picture (Agg canvas): per instance (``<g>:<gpu>``) the running
    and waiting requests (bars) and the KV used (dots, right axis); and, while a decision is
    pending, the request's estimated latency T(r, g) on every instance against its slack to the
    deadline (hatched: masked instances; the current instance of a migrate decision is marked).
    The caller closes it."""
    plt = agg_pyplot()
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    sim, ctx = env.sim, env._ctx
    fig, (ax_q, ax_e) = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    if sim is not None:
        insts = sim.monolithic
        labels = [f"{j}:{i.spec.gpu}" for j, i in enumerate(insts)]
        x = np.arange(len(insts))
        running = np.array([len(i.running) for i in insts])
        waiting = np.array([len(i.waiting) for i in insts])
        kv = np.array([i.reserved / i.capacity for i in insts])
        ax_q.bar(x, running, color="tab:blue", label="running (left axis)")
        ax_q.bar(x, waiting, bottom=running, color="tab:cyan", label="waiting (left axis)")
        ax_q.set_ylim(0, max(1.0, 1.15 * float((running + waiting).max())))
        ax_q.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax_q.set_ylabel("requests")
        ax_q.set_xticks(x, labels, rotation=90 if len(x) > 8 else 0, fontsize=7)
        ax_kv = ax_q.twinx()
        ax_kv.plot(x, kv, "o", color="tab:red", label="KV used (right axis)")
        ax_kv.set_ylim(0, 1.05)
        ax_kv.set_ylabel("KV used (fraction of capacity)")
        handles = ax_q.get_legend_handles_labels()[0] + ax_kv.get_legend_handles_labels()[0]
        ax_kv.legend(handles=handles, **LEGEND_ABOVE)
        ax_q.set_title(
            f"instances at t={sim.now:.1f} s ({sim.finished_runs}/{len(sim.runs)} done)",
            fontsize=9,
            loc="left",
        )
        if ctx is not None:
            colors = np.where(ctx.meets_deadline, "tab:green", "tab:orange")
            bars = ax_e.bar(x, ctx.estimate, color=colors)
            for j, bar in enumerate(bars):
                if not ctx.feasible[j]:
                    bar.set_hatch("//")
                    bar.set_alpha(0.4)
            ax_e.axhline(ctx.slack, color="black", ls="--", lw=1)
            top = max(float(np.max(ctx.estimate)), ctx.slack, 1e-3)
            ax_e.set_ylim(min(0.0, 1.1 * ctx.slack), 1.15 * top)
            if ctx.current >= 0:
                ax_e.annotate(
                    "current", (ctx.current, ctx.estimate[ctx.current]), ha="center",
                    va="bottom", fontsize=7,
                )  # fmt: skip
            ax_e.legend(
                handles=[
                    Patch(color="tab:green", label="meets deadline"),
                    Patch(color="tab:orange", label="misses deadline"),
                    Patch(facecolor="white", edgecolor="grey", hatch="//", label="masked"),
                    plt.Line2D([], [], color="black", ls="--", label="slack"),
                ],
                **LEGEND_ABOVE,
            )
            ax_e.set_title(
                f"{ctx.kind} {ctx.call_id} ({ctx.task}, {ctx.input_tokens} in)",
                fontsize=9,
                loc="left",
            )
        else:
            ax_e.set_title("episode over", fontsize=9, loc="left")
        ax_e.set_xticks(x, labels, rotation=90 if len(x) > 8 else 0, fontsize=7)
        ax_e.set_ylabel("estimated latency T(r, g) (s)")
    fig.tight_layout()
    return fig
