"""Text and picture renderings of the envs' states (``render_mode="ansi"`` / ``"rgb_array"``).

Pictures are Matplotlib figures on the Agg canvas (no display needed), turned into an RGB array
by :func:`figure_to_rgb`:

* PDCluster (:func:`render_figure`): per-instance queues and decode KV use, and a timeline of
  the most recent calls' prefill and decode per instance. Instances are named as everywhere
  else in the env: ``P<j>`` / ``D<j>`` for the j-th prefill / decode instance in cluster order
  (the pool-local indices of the action space).
* Routing (:func:`routing_figure`): per-instance running and waiting requests and KV use, and
  the pending request's estimated latency T(r, g) on each instance against its slack.
* Allocation (:func:`allocation_figure`): the GPU pool, each GPU's share per LLM as placed, and
  per LLM the units it holds and its last period's call rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Most recent calls drawn in the timeline panel.
TIMELINE_CALLS = 60
#: Legends sit above the top-right corner of their panel, clear of the data.
LEGEND_ABOVE: dict[str, Any] = dict(
    loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False, borderaxespad=0.1
)


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


def figure_to_rgb(fig: Figure) -> np.ndarray:
    """A figure as an RGB array (uint8, H×W×3); closes the figure."""
    import matplotlib.pyplot as plt

    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[:, :, :3].copy()
    plt.close(fig)
    return img


def render_rgb(env: Any) -> np.ndarray:
    """:func:`render_figure` as an RGB array (uint8, H×W×3)."""
    return figure_to_rgb(render_figure(env))


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def routing_figure(env: Any) -> Figure:
    """Routing-v0's ``rgb_array`` picture (Agg canvas): per instance (``<g>:<gpu>``) the running
    and waiting requests (bars) and the KV used (dots, right axis); and, while a decision is
    pending, the request's estimated latency T(r, g) on every instance against its slack to the
    deadline (hatched: masked instances; the current instance of a migrate decision is marked).
    The caller closes it."""
    plt = _pyplot()
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


def allocation_figure(env: Any) -> Figure:
    """Allocation-v0's ``rgb_array`` picture (Agg canvas): the GPU pool as placed (one column per
    GPU, grouped by node, each replica's share stacked in its LLM's colour; empty before the first
    period), and per LLM the GPU units it holds (this period's choice so far, else the last
    period's) beside its last period's call rate. The caller closes it."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    topo, F = env.topology, env.F
    models = list(env.models)
    colors = {m: plt.get_cmap("tab10")(k % 10) for k, m in enumerate(models)}
    fig, (ax_p, ax_m) = plt.subplots(
        1, 2, figsize=(10, 4), dpi=80, gridspec_kw={"width_ratios": [3, 2]}
    )
    n = topo.num_gpus
    used = np.zeros(n)
    placement = env.placement
    if placement is not None:
        for r in placement.replicas:
            for g in r.gpus:
                col = r.node * topo.gpus_per_node + g
                ax_p.bar(
                    col, r.share_units / F, bottom=used[col] / F, color=colors[r.model],
                    edgecolor="white",
                )  # fmt: skip
                used[col] += r.share_units
    for node in range(1, topo.num_nodes):
        ax_p.axvline(node * topo.gpus_per_node - 0.5, color="grey", lw=0.8)
    ax_p.set_xlim(-0.5, n - 0.5)
    ax_p.set_ylim(0, 1.05)
    ax_p.set_xticks(
        np.arange(n),
        [f"n{k // topo.gpus_per_node}g{k % topo.gpus_per_node}" for k in range(n)],
        fontsize=7,
        rotation=90 if n > 8 else 0,
    )
    ax_p.set_ylabel("GPU share")
    ax_p.legend(handles=[Patch(color=colors[m], label=m) for m in models], **LEGEND_ABOVE)
    period = min(env.period, env.periods - 1)
    ax_p.set_title(
        f"placement, period {period + 1}/{env.periods} ({topo.num_gpus} × {topo.gpu})",
        fontsize=9,
        loc="left",
    )
    chosen = {a.model: a for a in env._chosen}
    prev = {a.model: a for a in env.allocation.llms} if env.allocation is not None else {}
    units = [
        (chosen[m].units if m in chosen else prev[m].units if m in prev else 0) / F for m in models
    ]
    y = np.arange(len(models))
    ax_m.barh(y, units, color=[colors[m] for m in models])
    ax_m.set_yticks(y, models, fontsize=7)
    ax_m.invert_yaxis()
    ax_m.set_xlabel("GPUs held (units / F)")
    metrics = env._llm_metrics
    for k, m in enumerate(models):
        rate = metrics[m].call_rate if m in metrics else 0.0
        ax_m.annotate(
            f" {rate:.1f} calls/s", (units[k], k), va="center", fontsize=7
        )  # fmt: skip
    ax_m.set_xlim(0, max(1.0, 1.35 * max(units, default=1.0)))
    ax_m.set_title("per LLM: GPUs, last period's call rate", fontsize=9, loc="left")
    fig.tight_layout()
    return fig
