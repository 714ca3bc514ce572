"""Render helpers every env shares (``render_mode="rgb_array"``): pictures are Matplotlib figures
on the Agg canvas (no display needed, :func:`agg_pyplot`), turned into an RGB array by
:func:`figure_to_rgb`; legends sit above their panel (:data:`LEGEND_ABOVE`). Each env's own
pictures are in its package: :mod:`envs.pd_cluster.render` (also the ``ansi`` text),
:mod:`envs.routing.render`, :mod:`envs.allocation.render`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Legends sit above the top-right corner of their panel, clear of the data.
LEGEND_ABOVE: dict[str, Any] = dict(
    loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False, borderaxespad=0.1
)


def figure_to_rgb(fig: Figure) -> np.ndarray:
    """A figure as an RGB array (uint8, H×W×3); closes the figure."""
    import matplotlib.pyplot as plt

    fig.canvas.draw()
    canvas: Any = fig.canvas  # an Agg canvas (the servegym figures are drawn off-screen)
    img = np.asarray(canvas.buffer_rgba())[:, :, :3].copy()
    plt.close(fig)
    return img


def agg_pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
