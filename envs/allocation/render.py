"""Allocation-v0's ``rgb_array`` picture: the GPU pool, each GPU's share per LLM as placed, and
per LLM the units it holds and its last period's call rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from envs.common.render import LEGEND_ABOVE, agg_pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def allocation_figure(env: Any) -> Figure:
    """Allocation-v0's ``rgb_array`` picture (Agg canvas): the GPU pool as placed (one column per
    GPU, grouped by node, each replica's share stacked in its LLM's colour; empty before the first
    period), and per LLM the GPU units it holds (this period's choice so far, else the last
    period's) beside its last period's call rate. The caller closes it."""
    plt = agg_pyplot()
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
