"""The per-op calibration variants side by side (``python -m envs.sim.calibration.calibrate
--variants``): every held-out whole-prefill point of
:func:`envs.sim.calibration.prefill.prefill_points` under each variant's own fitted constants
(``envs.sim.latency.efficiency.CALIBRATION_VARIANTS``), with the Vidur prefills' elementwise
constants refitted without the predicted model the variant's way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envs.sim.calibration.prefill import (
    PER_OP_TARGET,
    PrefillPoint,
    llmservingsim_prefill_points,
    prefill_points,
    summarize_prefill,
)
from envs.sim.latency.efficiency import CALIBRATION_VARIANTS, load_calibration


@dataclass(frozen=True)
class PerOpSummary:
    """Held-out whole-prefill errors of one per-op calibration variant.

    :param points: held-out points.
    :param median_abs: median |relative error|.
    :param worst_abs: largest |relative error|.
    :param worst_label: that point's source and label.
    :param within_target: points with |relative error| <= :data:`PER_OP_TARGET`.
    """

    points: int
    median_abs: float
    worst_abs: float
    worst_label: str
    within_target: int


def summarize_per_op(points: Sequence[PrefillPoint]) -> PerOpSummary:
    """Median and worst |error| of ``points`` and how many are within :data:`PER_OP_TARGET`.

    :param points: prefill points (non-empty).
    """
    if not points:
        raise ValueError("summarize_per_op: no prefill points")
    errs = np.abs([p.relative_error for p in points])
    worst = points[int(np.argmax(errs))]
    return PerOpSummary(
        len(points),
        float(np.median(errs)),
        float(errs.max()),
        f"{worst.source}: {worst.label}",
        int(np.sum(errs <= PER_OP_TARGET)),
    )


def variant_points(
    data_dir: Path, variants: Sequence[str] = tuple(CALIBRATION_VARIANTS)
) -> dict[str, list[PrefillPoint]]:
    """Held-out whole-prefill points of each variant under its packaged constants.

    :param data_dir: the measured-latency folder.
    :param variants: names from ``CALIBRATION_VARIANTS``.
    """
    return {v: prefill_points(data_dir, load_calibration(variant=v), v) for v in variants}


def print_variant_comparison(by_variant: Mapping[str, Sequence[PrefillPoint]], out) -> None:
    """Print, per (GPU generation, source), each variant's points / median / worst signed
    error, then each variant's overall median and worst |error| against the per-op target.

    :param by_variant: variant name -> its prefill points (:func:`variant_points`).
    :param out: text stream.
    """
    names = list(by_variant)
    sums = {v: summarize_prefill(pts, by_source=True) for v, pts in by_variant.items()}
    keys = sorted({k for s in sums.values() for k in s})
    print("\n## per-op calibration variants: held-out whole-prefill signed error", file=out)
    head = "".join(f" | {v + ' median/worst':>31}" for v in names)
    print(f"{'generation':<9} {'source':<36} {'points':>6}{head}", file=out)
    for key in keys:
        cells = ""
        for v in names:
            s = sums[v].get(key)
            cells += " | " + (f"{s.median:+15.1%} {s.worst:+15.1%}" if s else f"{'-':>31}")
        n = next(sums[v][key].points for v in names if key in sums[v])
        print(f"{key[0]:<9} {key[1]:<36} {n:6d}{cells}", file=out)
    for v in names:
        per_op = summarize_per_op(by_variant[v])
        met = "met" if per_op.worst_abs <= PER_OP_TARGET else "NOT met"
        print(
            f"{v}: {per_op.points} held-out points, median |error| {per_op.median_abs:.1%}, "
            f"worst {per_op.worst_abs:.1%} ({per_op.worst_label}); {per_op.within_target}/"
            f"{per_op.points} within the {PER_OP_TARGET:.0%} target ({met})",
            file=out,
        )


def print_fused_llmservingsim(data_dir: Path, out) -> None:
    """Print each variant's LLMServingSim points priced with vLLM's fused elementwise kernels
    instead of the eager cost (:mod:`envs.sim.calibration.eager`): what the check gave before
    the measured implementation was modelled.

    :param data_dir: the measured-latency folder.
    :param out: text stream.
    """
    for v in CALIBRATION_VARIANTS:
        points = llmservingsim_prefill_points(data_dir, load_calibration(variant=v), eager=False)
        s = summarize_per_op(points)
        print(
            f"{v}, LLMServingSim priced with vLLM's fused elementwise kernels: {s.points} points, "
            f"median |error| {s.median_abs:.1%}, worst {s.worst_abs:.1%} ({s.worst_label})",
            file=out,
        )
