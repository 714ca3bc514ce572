"""Text and picture renderings of a PDCluster state (``render_mode="ansi"`` / ``"rgb_array"``)."""

from __future__ import annotations

from typing import Any

import numpy as np


def render_ansi(env: Any) -> str:
    """A text table of the instances and the waiting calls of the current decision."""
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
        for k in np.flatnonzero(ctx.valid):
            r = ctx.projected_ratio[k]
            best = float(np.min(r)) if np.isfinite(r).any() else float("nan")
            mark = "x" if ctx.picked[k] else " "
            lines.append(
                f"  [{mark}] slot {k:<3} {ctx.call_ids[k]:<20} in {int(ctx.input_tokens[k]):>6} "
                f"out^ {int(ctx.predicted_output_tokens[k]):>5}  elapsed/H "
                f"{ctx.elapsed[k] / ctx.horizon[k]:6.2f}  best R {best:6.2f}"
            )
    return "\n".join(lines)


def render_rgb(env: Any) -> np.ndarray:
    """An RGB picture: per-instance queue lengths, decode KV use and recent call timelines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sim = env.sim
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), dpi=80)
    if sim is not None:
        names = [f"P{j}" for j in range(len(sim.prefill))] + [
            f"D{j}" for j in range(len(sim.decode))
        ]
        queues = [len(p.queue) for p in sim.prefill] + [len(d.waiting) for d in sim.decode]
        kv = [0.0] * len(sim.prefill) + [d.reserved / d.capacity for d in sim.decode]
        ax = axes[0]
        ax.bar(names, queues, color="tab:blue", label="queued calls")
        ax2 = ax.twinx()
        ax2.plot(names, kv, "o", color="tab:red", label="KV used")
        ax2.set_ylim(0, 1)
        ax.set_title(f"queues and KV at t={sim.now:.1f}s")
        ax.tick_params(axis="x", labelrotation=90, labelsize=7)
        ax = axes[1]
        recent = [c for c in sim.calls if c.prefill_start >= 0][-60:]
        for c in recent:
            y = c.prefill_instance
            ax.plot(
                [c.prefill_start, c.prefill_end if c.prefill_end >= 0 else sim.now],
                [y, y],
                color="tab:green",
                lw=4,
            )
            if c.decode_start >= 0 and c.decode_instance is not None:
                end = c.decode_end if c.decode_end >= 0 else sim.now
                ax.plot([c.decode_start, end], [c.decode_instance] * 2, color="tab:orange", lw=2)
        ax.set_title("recent calls: prefill (green), decode (orange)")
        ax.set_xlabel("simulated time (s)")
        ax.set_ylabel("instance")
    fig.tight_layout()
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[:, :, :3].copy()
    plt.close(fig)
    return img
