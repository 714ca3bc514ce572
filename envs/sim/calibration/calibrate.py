"""Fit and check the latency model's efficiency constants against measured latencies.

Reads the measured data from a directory (never copied into the repository): ``--data-dir``,
else ``$SERVEGYM_LATENCY_DATA``, else ``../shared/latency-data`` next to the repository root.
The folder layout and the meaning of every column are in that folder's ``SOURCES.md``.

Fit procedure (deterministic grid searches in numpy, loss = mean squared log(pred / measured)):

1. **GEMM** per GPU family: the smooth roofline ``t = (C^p + R^p)^(1/p) + t_0`` with
   ``C = 2mnk / (e_c·peak)`` and ``R = 2(mk + kn + mn) / (e_m·bw)`` (``p`` = ∞ is the hard
   ``max(C, R)``), (e_c, e_m, t_0, p) fitted on kernel tables (A100: aiconfigurator
   ``a100_sxm/gemm_perf.csv``; Hopper: aiconfigurator ``h100_sxm`` + ``h200_sxm/gemm_perf.csv``;
   Volta: APEX+ ``comp/V100-PCIE-16GB/gemm_0_subset.csv``; Ampere GDDR: Vidur
   ``compute/a40/.../mlp.csv`` QKV/output/up/down projections), rows with n, k >= 256, every
   j-th row kept so each table contributes at most 3000 points; ``p`` from
   :data:`~envs.sim.calibration.kernels.ROOFLINE_EXPONENT_GRID`. With the hard ``max`` the
   tables' GEMMs near the ridge point (``|log(C/R)| < 0.25``) were slower than predicted by a
   median 16 % (A100), 11 % (H200), 18 % (A40), 7 % (V100), 3.5 % (H100); every family's fit
   prefers a finite ``p`` (the smooth form is ours: HexAgent §4.2 names a roofline model
   without a formula; ``--ablation`` prints the comparison).
1b. **FP8 GEMM** (Hopper only; ``gemm_*_fp8``): the same model with 1-byte operands and a
   bf16 output, ``t = max(2mnk / (e_c·peak_fp8), (mk + kn + 2mn) / (e_m·bw)) + t_0``, fitted on
   InferSim ``infersim/h800/gemm.csv`` (DeepGEMM ``fp8_gemm_nt`` on H800, whose compute and
   memory are H100-SXM's), rows with n, k >= 256. Only e_c and e_m are kept: the fitted floor
   (DeepGEMM's small-shape minimum, about 2.5x the bf16 tables' floor) is a property of that
   kernel library (and perhaps of how it was timed), and charged on every linear layer it would
   make fp8 decode of many-layer MoE models slower than bf16; fp8 kernels share the family's
   ``gemm_floor_seconds``, which is what ``--summary`` evaluates. Other families have no FP8
   measurements and fall back to their bf16 constants at the FP8 peak.
1c. **Elementwise kernels** per family (``elementwise_memory``): the per-layer norm, rotary,
   activation and residual-add ops of Vidur's layer profiles (``vidur/compute/<a100|h100|a40>/
   */*/mlp.csv``, every model, TP degree and token count), ``t = bytes / (e·bw) + 5·t_e``
   with the bytes of :func:`envs.sim.latency.model.elementwise_bytes_per_token` and ``t_e``
   (``elementwise_floor_seconds``) the fixed time of each of Vidur's five ops; the model
   charges it for each of vLLM's four fused kernels per layer (``elementwise_kernels_per_layer``).
   Volta: its ``gemm_memory`` times the measured families' geometric-mean ratio and their mean
   floor. Without this term the
   model priced only GEMMs, attention and all-reduce, and whole prefills on Hopper came out
   16–27 % fast (median per token band; A100 4–14 %): the ops are bandwidth-bound, and Hopper's
   FLOP/s grew 3.2× over A100's but its bandwidth only 1.6×, so they are a larger share of a
   Hopper prefill. See ``--prefill-report``.
2. **Attention** per family (A100, Hopper; aiconfigurator): decode attention
   (``generation_attention_perf.csv``) fixes the KV-read efficiency and kernel floor, then prefill
   attention (``context_attention_perf.csv``, isl >= 16) the attention compute efficiency.
3. **All-reduce** per link: NVLink from aiconfigurator ``nccl_perf.csv`` (all_reduce, half) and
   ``custom_allreduce_perf.csv`` (CUDA-graph rows), taking the faster of the two per
   (GPU, GPUs, size) as vLLM does; PCIe from APEX+ ``comm/V100-PCIE-16GB/all_reduce.csv``
   (single node). Ring model ``latency + 2(n-1)/n · bytes / (e·link bandwidth)``.
4. **Per-iteration framework overhead** (a constant plus a term per extra TP GPU): end-to-end
   vLLM runs of Llama-2-7B only (Argonne LLM-Inference-Bench ``All_results.csv``, A100 and
   H100, TP 1/2/4), predicted as one prefill of the whole batch plus ``L_out − 1`` decode steps.

Held-out check: the same end-to-end vLLM runs for the models *not* used in step 4 (Mistral-7B,
Qwen2-7B, Qwen2-72B, Mixtral-8x7B) and the Mistral-7B batch-TTFT rows of
``all_results_TTFT.csv``. Rows whose peak KV demand (batch · (input + output) tokens) exceeds the
instance's KV capacity are excluded: vLLM then preempts and recomputes, which a single-batch
prediction does not model (the simulator's instances never over-admit either).

Usage::

    python -m envs.sim.calibration.calibrate [--data-dir D] [--fit] [--summary] [--prefill-report]
        [--ablation]

Prefill check (``--prefill-report``): :meth:`LatencyModel.prefill_time` against every
measurement in the folder that isolates a whole prefill — the Argonne batch-TTFT rows (vLLM,
end to end), and whole prefills composed from kernel measurements: Vidur's per-layer
non-attention ops + aiconfigurator prefill attention + aiconfigurator all-reduce (A100, H100),
and LLMServingSim's H100 per-layer profile + aiconfigurator all-reduce — grouped by GPU
generation and prefill-token band, with the median and worst signed error (negative: the model
is faster than measured). Every point is held out: the Argonne TTFT rows are of models the
overhead fit never saw, no A100/Hopper GEMM constant is fitted on Vidur or LLMServingSim, and
each Vidur model's prefills are predicted with the elementwise constants refitted without that
model. The composed prefills are also compared part by part (GEMMs, attention, all-reduce,
elementwise; :meth:`LatencyModel.prefill_components`), with the worst |error| against the
30 % per-op target. ``--ablation`` repeats the check without the smooth GEMM roofline and/or the
elementwise floor. Not covered: DistServe's coefficients (OPT models, not in the
catalog), Argonne's GH200 rows (not in the catalog), aiconfigurator's deployment rows (TTFT under
concurrency >= 2 includes queueing) and InferSim (decode attention and FP8 GEMM only).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml

from envs.sim.calibration.ablation import print_ablation
from envs.sim.calibration.data import FIT_E2E_MODELS, HELDOUT_E2E_MODELS, Point, find_data_dir
from envs.sim.calibration.e2e import (
    anl_runs,
    e2e_points,
    fit_overhead,
    heldout_points,
    median_abs_error,
)
from envs.sim.calibration.eager import eager_leave_one_out, print_eager_check
from envs.sim.calibration.headers import yaml_header
from envs.sim.calibration.kernels import (
    attention_arrays,
    concat,
    fit_attention,
    fit_gemm,
    fit_link,
    fp8_gemm_tables,
    gemm_predict,
    gemm_tables,
    nvlink_table,
    pcie_table,
    ring_allreduce,
)
from envs.sim.calibration.perop import PER_OP_FITS
from envs.sim.calibration.prefill import (
    gemm_source_agreement,
    norm_rotary_source_agreement,
    prefill_points,
    print_component_report,
    print_gemm_agreement,
    print_norm_rotary_agreement,
    print_prefill_report,
)
from envs.sim.calibration.variants import (
    print_fused_llmservingsim,
    print_variant_comparison,
    variant_points,
)
from envs.sim.hardware.catalog import get_gpu
from envs.sim.latency.efficiency import (
    CALIBRATION_VARIANTS,
    DEFAULT_CALIBRATION_VARIANT,
    resolve_calibration_variant,
)
from envs.sim.latency.model import (
    Calibration,
    load_calibration,
)


def _with(cal: Calibration, **changes: object) -> Calibration:
    data = _to_dict(cal)
    data.update(changes)
    return Calibration.from_dict(data)


def _to_dict(cal: Calibration) -> dict:
    data = {
        "iteration_overhead_seconds": cal.iteration_overhead_seconds,
        "iteration_overhead_per_extra_gpu_seconds": cal.iteration_overhead_per_extra_gpu_seconds,
        "gemms_per_layer": cal.gemms_per_layer,
        "elementwise_kernels_per_layer": cal.elementwise_kernels_per_layer,
        "target_heldout_median_error": cal.target_heldout_median_error,
        "links": {k: vars(v).copy() for k, v in cal.links.items()},
        # unset optional constants (fp8 fits of families without FP8 data, the roofline
        # exponent and elementwise floor of the "roofline" variant) are left out
        "families": {
            k: {
                n: x
                for n, x in vars(v).items()
                if x is not None and not (n == "elementwise_floor_seconds" and x == 0)
            }
            for k, v in cal.families.items()
        },
    }
    if not any(v.elementwise_floor_seconds for v in cal.families.values()):
        del data["elementwise_kernels_per_layer"]  # it only counts floors

    def kernels(block):
        return {fam: {prec: vars(e).copy() for prec, e in by.items()} for fam, by in block.items()}

    if cal.moe_kernels:
        data["moe_kernels"] = kernels(cal.moe_kernels)
    if cal.engines:
        data["engines"] = {
            name: {k: kernels(v) if k == "moe_kernels" else v for k, v in fields.items()}
            for name, fields in cal.engines.items()
        }
    return data


# ---------------------------------------------------------------------------------------------
def fit(data_dir: Path, variant: str = DEFAULT_CALIBRATION_VARIANT) -> Calibration:
    """Run the whole fit (steps 1–4 of the module docstring, with 1b and 1c) the way of one
    per-op calibration variant (:data:`~envs.sim.calibration.perop.PER_OP_FITS`).

    :param data_dir: the measured-latency folder.
    :param variant: one of ``CALIBRATION_VARIANTS``.
    """
    spec = PER_OP_FITS[resolve_calibration_variant(variant)]
    families: dict[str, dict[str, float]] = {}
    for fam, tables in gemm_tables(data_dir).items():
        ec, em, t0, p = fit_gemm(concat(tables), spec.roofline_exponents, spec.gemm_full_grid)
        families[fam] = {"gemm_compute": ec, "gemm_memory": em, "gemm_floor_seconds": t0}
        if math.isfinite(p):
            families[fam]["gemm_roofline_exponent"] = p
    for fam, tables in fp8_gemm_tables(data_dir).items():
        # the family's bf16 exponent (the fp8 table is small); floor not kept, see step 1b
        p = families[fam].get("gemm_roofline_exponent", math.inf)
        ec, em, _, _ = fit_gemm(concat(tables), (p,), spec.gemm_full_grid)
        families[fam].update(gemm_compute_fp8=ec, gemm_memory_fp8=em)
    attn = {
        "ampere-hbm": [("a100_sxm", "a100-80g")],
        "hopper": [("h100_sxm", "h100-sxm"), ("h200_sxm", "h200")],
    }
    attn_fit = {fam: fit_attention(data_dir, gpus) for fam, gpus in attn.items()}
    # Families without attention tables borrow the measured families' attention/GEMM ratio
    # (attention kernels track the GEMM efficiency of the same part), averaged geometrically.
    ratios = np.array(
        [
            [
                attn_fit[f][0] / families[f]["gemm_compute"],
                attn_fit[f][1] / families[f]["gemm_memory"],
            ]
            for f in attn_fit
        ]
    )
    ratio_c, ratio_m = np.exp(np.log(ratios).mean(axis=0))
    floor_attn = float(np.mean([attn_fit[f][2] for f in attn_fit]))
    half_attn = float(np.mean([attn_fit[f][3] for f in attn_fit]))
    for fam, vals in families.items():
        if fam in attn_fit:
            ec, em, t0, half = attn_fit[fam]
        else:
            ec = min(1.0, round(float(ratio_c * vals["gemm_compute"]), 2))
            em = min(1.0, round(float(ratio_m * vals["gemm_memory"]), 2))
            t0, half = floor_attn, half_attn
        vals.update(
            attention_compute=ec,
            attention_memory=em,
            attention_floor_seconds=t0,
            attention_half_tokens=half,
        )
    # Elementwise kernels (step 1c); a family without Vidur profiles (Volta) takes its weight-read
    # efficiency times the measured families' geometric-mean elementwise/weight-read ratio.
    elem_fit = spec.elementwise(data_dir)
    ratio_e = np.exp(
        np.mean([np.log(e / families[f]["gemm_memory"]) for f, (e, _) in elem_fit.items()])
    )
    floor_e = float(np.mean([t0 for _, t0 in elem_fit.values()]))
    for fam, vals in families.items():
        e, t0 = elem_fit.get(
            fam, (min(1.0, round(float(ratio_e * vals["gemm_memory"]), 2)), floor_e)
        )
        vals["elementwise_memory"] = e
        if t0 > 0:  # a variant without a floor keeps its YAML free of zero floors
            vals["elementwise_floor_seconds"] = t0
    # GPUs with no measurements (Ada L40S) get the geometric mean of the fitted families.
    keys = (
        "gemm_compute",
        "gemm_memory",
        "attention_compute",
        "attention_memory",
        "elementwise_memory",
    )
    default = {
        k: round(float(np.exp(np.mean([np.log(v[k]) for v in families.values()]))), 2) for k in keys
    }
    for k in (
        "gemm_floor_seconds",
        "attention_floor_seconds",
        "attention_half_tokens",
        "elementwise_floor_seconds",
    ):
        if any(k in v for v in families.values()):
            default[k] = float(np.mean([v.get(k, 0.0) for v in families.values()]))
    exponents = [v.get("gemm_roofline_exponent", math.inf) for v in families.values()]
    if math.isfinite(float(np.median(exponents))):
        default["gemm_roofline_exponent"] = float(np.median(exponents))
    families["default"] = default
    links = {}
    for kind, table in (("nvlink", nvlink_table(data_dir)), ("pcie", pcie_table(data_dir))):
        eff, lat = fit_link(table)
        links[kind] = {"efficiency": eff, "latency_seconds": lat}
    base = Calibration.from_dict(
        {
            "families": families,
            "links": links,
            "iteration_overhead_seconds": 0.0,
            "target_heldout_median_error": 0.15,
        }
    )
    per_iter, per_gpu = fit_overhead(data_dir, base)
    return _with(
        base, iteration_overhead_seconds=per_iter, iteration_overhead_per_extra_gpu_seconds=per_gpu
    )


def write_yaml(
    cal: Calibration, path: Path | None = None, variant: str = DEFAULT_CALIBRATION_VARIANT
) -> None:
    """Write ``cal`` as per-op calibration ``variant``'s packaged YAML with its provenance
    header.

    :param cal: fitted constants.
    :param path: destination file; ``None``: the variant's (``CALIBRATION_VARIANTS``).
    :param variant: which variant's fit ``cal`` is (its header).
    """
    path = CALIBRATION_VARIANTS[variant] if path is None else path
    data = _to_dict(cal)
    # round away float noise of the grids (e.g. 1.9999999999999998e-05) so the file reads cleanly
    for group in ("families", "links"):
        for entry in data[group].values():
            for k, v in entry.items():
                entry[k] = float(f"{v:.4g}")
    for k in ("iteration_overhead_seconds", "iteration_overhead_per_extra_gpu_seconds"):
        data[k] = float(f"{data[k]:.4g}")
    if "moe_kernels" not in data and path.exists():
        # fitted by envs.sim.calibration.moe_kernels on tables outside the measured-latency
        # folder and chosen on serving deployments, so a refit of the rest keeps the file's
        # blocks
        previous = yaml.safe_load(path.read_text()) or {}
        for key in ("moe_kernels", "engines"):
            if key in previous:
                data[key] = previous[key]
    body = yaml.safe_dump(data, sort_keys=True, default_flow_style=False)
    path.write_text(yaml_header(variant) + body)


def kernel_points(data_dir: Path, cal: Calibration) -> list[Point]:
    """Prediction/measurement pairs of every kernel-table point used in the fit.

    :param data_dir: the measured-latency folder.
    :param cal: constants to evaluate.
    """
    points = []
    for fam, tables in gemm_tables(data_dir).items():
        eff = cal.family(fam)
        for t in tables:
            pred = gemm_predict(
                t,
                eff.gemm_compute,
                eff.gemm_memory,
                eff.gemm_floor_seconds,
                eff.gemm_roofline_exponent,
            )
            points += [
                Point(f"gemm {fam}", f"{t.label} m={m:.0f} n={n:.0f} k={k:.0f}", p, s)
                for m, n, k, p, s in zip(t.m, t.n, t.k, pred, t.seconds, strict=True)
            ]
    for fam, tables in fp8_gemm_tables(data_dir).items():
        eff = cal.family(fam)
        ec, em = eff.gemm_efficiency("fp8")
        for t in tables:
            pred = gemm_predict(t, ec, em, eff.gemm_floor_seconds, eff.gemm_roofline_exponent)
            points += [
                Point(f"gemm {fam} fp8", f"{t.label} m={m:.0f} n={n:.0f} k={k:.0f}", p, s)
                for m, n, k, p, s in zip(t.m, t.n, t.k, pred, t.seconds, strict=True)
            ]
    for fam, gpus in (
        ("ampere-hbm", [("a100_sxm", "a100-80g")]),
        ("hopper", [("h100_sxm", "h100-sxm"), ("h200_sxm", "h200")]),
    ):
        eff = cal.family(fam)
        for folder, gpu in gpus:
            spec = get_gpu(gpu)
            for decode in (True, False):
                name = "generation" if decode else "context"
                a = attention_arrays(
                    data_dir / "aiconfigurator" / folder / f"{name}_attention_perf.csv", decode
                )
                flops = a["flops"]
                if not decode:
                    flops = flops * (1.0 + eff.attention_half_tokens / a["isl"])
                pred = np.maximum(
                    flops / (eff.attention_compute * spec.peak_flops),
                    a["bytes"] / (eff.attention_memory * spec.hbm_bandwidth),
                )
                pred = pred + eff.attention_floor_seconds
                points += [
                    Point(f"{name} attention {fam}", f"{gpu} row {i}", p, s)
                    for i, (p, s) in enumerate(zip(pred, a["seconds"], strict=True))
                ]
    for kind, table in (("nvlink", nvlink_table(data_dir)), ("pcie", pcie_table(data_dir))):
        link = cal.links[kind]
        pred = ring_allreduce(table, link.efficiency, link.latency_seconds)
        points += [
            Point(f"all-reduce {kind}", lab, p, s)
            for lab, p, s in zip(table.labels, pred, table.seconds, strict=True)
        ]
    return points


def _print_points(points: Sequence[Point], summary_only: bool, out) -> None:
    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(p.group, []).append(p)
    for group, pts in groups.items():
        if not summary_only:
            print(f"\n## {group}", file=out)
            print(f"{'point':<70} {'pred (s)':>12} {'meas (s)':>12} {'rel err':>8}", file=out)
            for p in pts:
                print(
                    f"{p.label[:70]:<70} {p.predicted_s:12.6g} {p.measured_s:12.6g} "
                    f"{p.relative_error:+8.1%}",
                    file=out,
                )
    print("\n## summary (|relative error|)", file=out)
    print(f"{'group':<34} {'points':>7} {'median':>8} {'p90':>8} {'mean signed':>12}", file=out)
    for group, pts in groups.items():
        errs = np.array([p.relative_error for p in pts])
        print(
            f"{group:<34} {len(pts):7d} {np.median(np.abs(errs)):8.1%} "
            f"{np.quantile(np.abs(errs), 0.9):8.1%} {errs.mean():+12.1%}",
            file=out,
        )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description="Fit / check the latency model calibration.")
    parser.add_argument(
        "--data-dir",
        help="measured-latency folder (default: $SERVEGYM_LATENCY_DATA or ../shared/latency-data)",
    )
    parser.add_argument(
        "--calibration",
        choices=sorted(CALIBRATION_VARIANTS),
        default=None,
        help="per-op calibration variant to fit / check (default: $SERVEGYM_LATENCY_CALIBRATION, "
        f"else {DEFAULT_CALIBRATION_VARIANT!r})",
    )
    parser.add_argument(
        "--fit", action="store_true", help="refit and rewrite the variant's calibration YAML"
    )
    parser.add_argument(
        "--variants",
        action="store_true",
        help="also print every variant's held-out whole-prefill (per-op) errors side by side",
    )
    parser.add_argument(
        "--summary", action="store_true", help="print only per-group summaries, not every point"
    )
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="also print the smooth-roofline variant's whole-prefill check without the smooth "
        "GEMM roofline and/or the elementwise kernel floor (refits both the old way; ~2 minutes)",
    )
    parser.add_argument(
        "--prefill-report",
        action="store_true",
        help="also print the whole-prefill check by GPU generation and prefill-token band",
    )
    args = parser.parse_args(argv)
    data_dir = find_data_dir(args.data_dir)
    if not (data_dir / "SOURCES.md").exists():
        print(
            f"measured-latency folder not found at {data_dir} (no SOURCES.md); pass "
            "--data-dir or set SERVEGYM_LATENCY_DATA",
            file=sys.stderr,
        )
        return 2
    variant = resolve_calibration_variant(args.calibration)
    print(f"per-op calibration variant: {variant}")
    if args.fit:
        cal = fit(data_dir, variant)
        write_yaml(cal, variant=variant)
        print(f"wrote {CALIBRATION_VARIANTS[variant]}")
    else:
        cal = load_calibration(variant=variant)
    fit_runs = [r for r in anl_runs(data_dir) if r.model in FIT_E2E_MODELS]
    points = kernel_points(data_dir, cal) + e2e_points(fit_runs, cal, "fit e2e (overhead)")
    held = heldout_points(data_dir, cal)
    _print_points(points + held, args.summary, sys.stdout)
    if args.prefill_report:
        prefills = prefill_points(data_dir, cal, variant)
        print_prefill_report(prefills, sys.stdout)
        print_component_report(prefills, sys.stdout)
        print_gemm_agreement(gemm_source_agreement(data_dir), sys.stdout)
        print_norm_rotary_agreement(norm_rotary_source_agreement(data_dir), sys.stdout)
    if args.variants:
        print_variant_comparison(variant_points(data_dir), sys.stdout)
        print_fused_llmservingsim(data_dir, sys.stdout)
        print_eager_check(eager_leave_one_out(data_dir), sys.stdout)
    if args.ablation:
        print_ablation(data_dir, load_calibration(variant="smooth-roofline"), sys.stdout)
    n_all = sum(1 for r in anl_runs(data_dir) if r.model in HELDOUT_E2E_MODELS)
    med = median_abs_error(held)
    print(
        f"\nheld-out e2e: {len(held)} runs ({n_all - len(held)} excluded: KV demand over "
        f"capacity or weights do not fit); median |rel err| = {med:.1%} "
        f"(target {cal.target_heldout_median_error:.0%}: "
        f"{'met' if med <= cal.target_heldout_median_error else 'NOT met'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
