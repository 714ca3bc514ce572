"""PDCluster-v0's renderings: the ``ansi`` text of the current invocation and the ``rgb_array``
picture (per-instance queues and decode KV use, and a timeline of the most recent calls' prefill
and decode per instance). Instances are named as everywhere else in the env: ``P<j>`` /
``D<j>`` for the j-th prefill / decode instance in cluster order (the pool-local indices of the
action space).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.common.render import LEGEND_ABOVE

if TYPE_CHECKING:
    from matplotlib.figure import Figure


#: Most recent calls drawn in the timeline panel.
TIMELINE_CALLS = 60


def instance_labels(prefill: Sequence[int], decode: Sequence[int]) -> dict[int, str]:
    """Names of instances by global index (``Call.prefill_instance``, ``decode_instance``).

    :param prefill: global indices of the prefill instances, in cluster order.
    :param decode: global indices of the decode instances, in cluster order.
    :return: global index → ``P<j>`` or ``D<j>`` (j: position in its pool), prefill first.
    """
    labels = {g: f"P{j}" for j, g in enumerate(prefill)}
    labels.update({g: f"D{j}" for j, g in enumerate(decode)})
    return labels


def render_ansi(env: Any) -> str:
    """A text table of the instances and the waiting calls of the current decision. A picked
    slot shows the pair it was given; an open one its best projected ratio R."""
    sim, ctx = env.sim, env._ctx
    if sim is None:
        return "(not reset)"
    lines = [
        f"t={sim.now:9.3f} s  workflows done {sim.finished_runs}/{len(sim.runs)}  "
        f"invocations {sim.invocation_count}"
    ]
    lines.append("prefill  gpu        queue  ready-in(s)")
    for j, p in enumerate(sim.prefill):
        ready = ctx.prefill_ready[j] if ctx is not None else 0.0
        lines.append(f"  P{j:<5} {p.gpu:<10} {len(p.queue):>5}  {ready:>10.3f}")
    lines.append("decode   gpu        batch  waiting  KV used")
    for j, d in enumerate(sim.decode):
        lines.append(
            f"  D{j:<5} {d.gpu:<10} {len(d.running):>5}  {len(d.waiting):>7}  "
            f"{d.reserved / d.capacity:>6.1%}"
        )
    if ctx is not None:
        lines.append(f"{ctx.stage} invocation ({ctx.trigger}), picks {len(ctx.picks)}")
        pairs = {slot: (p, d) for slot, p, d in ctx.picks}
        for k in np.flatnonzero(ctx.valid):
            if k in pairs:
                p, d = pairs[k]
                choice = f"picked P{p}->D{d}"
            else:
                r = ctx.projected_ratio[k]
                finite = r[np.isfinite(r)]
                choice = f"best R {finite.min():6.2f}" if finite.size else "no legal pair"
            mark = "x" if ctx.picked[k] else " "
            lines.append(
                f"  [{mark}] slot {k:<3} {ctx.call_ids[k]:<20} in {int(ctx.input_tokens[k]):>6} "
                f"out^ {int(ctx.predicted_output_tokens[k]):>5}  elapsed/H "
                f"{ctx.elapsed[k] / ctx.horizon[k]:6.2f}  {choice}"
            )
    return "\n".join(lines)


def render_figure(env: Any) -> Figure:
    """The ``rgb_array`` picture as a Matplotlib figure (Agg canvas): per-instance queues and
    decode KV use (left), and the prefill and decode service of the most recent calls per
    instance (right). The caller closes it (``matplotlib.pyplot.close``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    sim = env.sim
    fig, (ax_q, ax_t) = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    if sim is not None:
        num_p = len(sim.prefill)
        labels = instance_labels([i.index for i in sim.prefill], [i.index for i in sim.decode])
        row = {g: r for r, g in enumerate(labels)}
        x = np.arange(len(labels))

        queues = [len(p.queue) for p in sim.prefill] + [len(d.waiting) for d in sim.decode]
        kv = [d.reserved / d.capacity for d in sim.decode]
        ax_q.bar(x, queues, color="tab:blue", label="queued calls (left axis)")
        ax_q.set_ylim(0, max(1.0, 1.15 * max(queues)))  # an idle frame still reads 0..1
        ax_q.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax_q.set_ylabel("queued calls")
        ax_q.set_xticks(x, list(labels.values()), rotation=90, fontsize=7)
        ax_kv = ax_q.twinx()
        ax_kv.plot(x[num_p:], kv, "o", color="tab:red", label="decode KV used (right axis)")
        ax_kv.set_ylim(0, 1.05)
        ax_kv.set_ylabel("decode KV used (fraction)")
        handles = ax_q.get_legend_handles_labels()[0] + ax_kv.get_legend_handles_labels()[0]
        ax_kv.legend(handles=handles, **LEGEND_ABOVE)
        ax_q.set_title(f"queues and KV at t={sim.now:.1f} s", fontsize=9, loc="left")

        recent = [c for c in sim.calls if c.prefill_start >= 0][-TIMELINE_CALLS:]
        for c in recent:
            y = row[c.prefill_instance]
            end = c.prefill_end if c.prefill_end >= 0 else sim.now
            ax_t.plot([c.prefill_start, end], [y, y], color="tab:green", lw=4)
            if c.decode_start >= 0 and c.decode_instance is not None:
                y = row[c.decode_instance]
                end = c.decode_end if c.decode_end >= 0 else sim.now
                ax_t.plot([c.decode_start, end], [y, y], color="tab:orange", lw=2)
        start = min((c.prefill_start for c in recent), default=sim.now)
        ax_t.set_xlim(start, max(sim.now, start + 1.0))
        ax_t.set_ylim(len(labels) - 0.5, -0.5)  # P0 on top
        ax_t.set_yticks(x, list(labels.values()), fontsize=7)
        ax_t.legend(
            handles=[
                Line2D([], [], color="tab:green", lw=4, label="prefill"),
                Line2D([], [], color="tab:orange", lw=2, label="decode"),
            ],
            **LEGEND_ABOVE,
        )
        ax_t.set_title(f"last {TIMELINE_CALLS} calls started", fontsize=9, loc="left")
        ax_t.set_xlabel("simulated time (s)")
        ax_t.set_ylabel("instance")
    fig.tight_layout()
    return fig
