"""How each per-op calibration variant (``envs.sim.latency.efficiency.CALIBRATION_VARIANTS``) fits
its linear-layer and elementwise constants (:data:`PER_OP_FITS`); the rest of
:func:`envs.sim.calibration.calibrate.fit` is shared.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envs.sim.calibration.kernels import (
    ELEMENTWISE_FLOOR_GRID_S,
    ROOFLINE_EXPONENT_GRID,
    elementwise_tables,
    fit_elementwise,
)


@dataclass(frozen=True)
class PerOpFit:
    """How a per-op calibration variant (``envs.sim.latency.efficiency.CALIBRATION_VARIANTS``) fits
    the linear-layer and elementwise constants; the rest of the fit is shared.

    :param roofline_exponents: candidate GEMM roofline exponents (``(math.inf,)``: the hard
        ``max``).
    :param gemm_full_grid: search the GEMM fit's whole fine grid (else coarse to fine).
    :param elementwise_floors: candidate per-kernel elementwise floors, seconds (``(0.0,)``:
        none).
    :param elementwise_min_tokens: Vidur rows with fewer tokens are left out of the elementwise
        fit (without a floor, launches would dominate the small ones).
    """

    roofline_exponents: tuple[float, ...]
    gemm_full_grid: bool
    elementwise_floors: tuple[float, ...]
    elementwise_min_tokens: int

    def elementwise(
        self, data_dir: Path, exclude_vidur_models: Iterable[str] = ()
    ) -> dict[str, tuple[float, float]]:
        """Per GPU family with Vidur profiles: (elementwise_memory, elementwise_floor_seconds)
        fitted this variant's way, less the Vidur models in ``exclude_vidur_models``."""
        tables = elementwise_tables(data_dir, exclude_vidur_models, self.elementwise_min_tokens)
        floors = np.array(self.elementwise_floors)
        return {
            fam: fit_elementwise(ideal, measured, floors=floors)
            for fam, (ideal, measured) in tables.items()
        }


#: The fit of each per-op calibration variant: ``"roofline"`` is the paper's fit (hard
#: roofline on the whole fine grid; elementwise efficiency alone on Vidur rows of >= 256
#: tokens); ``"smooth-roofline"`` searches the exponent and fits the elementwise floor on every
#: row.
PER_OP_FITS = {
    "roofline": PerOpFit((math.inf,), True, (0.0,), 256),
    "smooth-roofline": PerOpFit(
        ROOFLINE_EXPONENT_GRID, False, tuple(float(x) for x in ELEMENTWISE_FLOOR_GRID_S), 1
    ),
}
