"""The ablation of the ``smooth-roofline`` per-op fit (part of
:mod:`envs.sim.calibration.calibrate`'s ``--ablation``): the whole-prefill check without the smooth
GEMM roofline and/or the elementwise kernel floor, and the GEMM tables' error near the ridge point
under the hard and the smooth roofline.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from envs.sim.calibration.kernels import (
    concat,
    elementwise_tables,
    fit_elementwise,
    fit_gemm,
    fp8_gemm_tables,
    gemm_tables,
    smooth_max,
)
from envs.sim.calibration.prefill import (
    anl_prefill_points,
    llmservingsim_prefill_points,
    summarize_prefill,
    vidur_prefill_points,
)
from envs.sim.latency.model import Calibration


def ablation_calibrations(data_dir: Path, cal: Calibration) -> dict[str, Calibration]:
    """``cal`` and the variants without each of the smooth variant's two per-op changes, refitted
    the ``roofline`` way: the hard roofline (GEMM constants refitted at ``p`` = ∞, bf16 and fp8)
    and no elementwise floor (refitted with the floor fixed at 0 on Vidur rows of >= 256
    tokens). Attention, all-reduce and framework constants stay ``cal``'s.

    :param data_dir: the measured-latency folder.
    :param cal: the committed constants.
    :return: variant name -> constants, ``"both (smooth-roofline)"`` being ``cal``.
    """
    hard: dict[str, dict[str, float | None]] = {}
    for fam, tables in gemm_tables(data_dir).items():
        ec, em, t0, _ = fit_gemm(concat(tables), exponents=(math.inf,))
        hard[fam] = {
            "gemm_compute": ec,
            "gemm_memory": em,
            "gemm_floor_seconds": t0,
            "gemm_roofline_exponent": None,
        }
    for fam, tables in fp8_gemm_tables(data_dir).items():
        ec, em, _, _ = fit_gemm(concat(tables), exponents=(math.inf,))
        hard[fam].update(gemm_compute_fp8=ec, gemm_memory_fp8=em)
    no_floor: dict[str, dict[str, float]] = {}
    for fam, (ideal, measured) in elementwise_tables(data_dir, min_tokens=256).items():
        eff, _ = fit_elementwise(ideal, measured, floors=np.array([0.0]))
        no_floor[fam] = {"elementwise_memory": eff, "elementwise_floor_seconds": 0.0}

    def variant(*changes: dict[str, dict]) -> Calibration:
        families = dict(cal.families)
        for change in changes:
            for fam, values in change.items():
                families[fam] = dataclasses.replace(families[fam], **values)
        return dataclasses.replace(cal, families=families)

    return {
        "hard roofline, no elementwise floor": variant(hard, no_floor),
        "smooth roofline only": variant(no_floor),
        "elementwise floor only": variant(hard),
        "both (smooth-roofline)": cal,
    }


def print_gemm_ridge(data_dir: Path, hard: Calibration, smooth: Calibration, out) -> None:
    """Print the GEMM tables' median signed error near the ridge point (``|log(C/R)| < 0.25``,
    C and R the compute and weight-read bounds of the fitted efficiencies) and over all rows,
    under the hard-roofline fit ``hard`` and the smooth one ``smooth``.

    :param data_dir: the measured-latency folder.
    :param hard: constants with ``gemm_roofline_exponent`` None (the hard ``max``).
    :param smooth: the committed constants.
    :param out: text stream.
    """
    print("\n## GEMM tables: median signed error, hard roofline -> smooth roofline", file=out)
    print(f"{'table':<26} {'rows':>5} {'near ridge':>20} {'all rows':>20}", file=out)
    for fam, tables in gemm_tables(data_dir).items():
        for t in tables:
            cells = []
            for sel in ("ridge", "all"):
                errs = []
                for cal in (hard, smooth):
                    eff = cal.family(fam)
                    ec, em, t0 = eff.gemm_compute, eff.gemm_memory, eff.gemm_floor_seconds
                    compute = 2 * t.m * t.n * t.k / (ec * t.peak_flops)
                    read = t.moved_bytes() / (em * t.bandwidth)
                    pred = smooth_max(compute, read, eff.gemm_roofline_exponent) + t0
                    keep = np.abs(np.log(compute / read)) < 0.25 if sel == "ridge" else slice(None)
                    errs.append(float(np.median(pred[keep] / t.seconds[keep] - 1)))
                cells.append(f"{errs[0]:+7.1%} -> {errs[1]:+7.1%}")
            print(f"{t.label:<26} {len(t.seconds):5d} {cells[0]:>20} {cells[1]:>20}", file=out)


def print_ablation(data_dir: Path, cal: Calibration, out) -> None:
    """Print the whole-prefill check per source under each of :func:`ablation_calibrations`
    (Vidur's elementwise constants in-sample, the same for every variant).

    :param data_dir: the measured-latency folder.
    :param cal: the committed constants.
    :param out: text stream.
    """
    variants = ablation_calibrations(data_dir, cal)
    print_gemm_ridge(data_dir, variants["elementwise floor only"], cal, out)
    print("\n## ablation: whole-prefill signed error per source (median / worst)", file=out)
    for name, variant in variants.items():
        points = (
            anl_prefill_points(data_dir, variant)
            + vidur_prefill_points(data_dir, variant, leave_model_out=False)
            + llmservingsim_prefill_points(data_dir, variant)
        )
        worst = max(points, key=lambda p: abs(p.relative_error))
        print(f"{name}: worst {worst.relative_error:+.1%} ({worst.label})", file=out)
        for (gen, src), s in summarize_prefill(points, by_source=True).items():
            print(f"  {gen:<9} {src:<36} {s.points:4d} {s.median:+8.1%} {s.worst:+8.1%}", file=out)
