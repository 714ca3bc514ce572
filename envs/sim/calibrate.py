"""Fit and check the latency model's efficiency constants against measured latencies.

Reads the measured data from a directory (never copied into the repository): ``--data-dir``,
else ``$SERVEGYM_LATENCY_DATA``, else ``../shared/latency-data`` next to the repository root.
The folder layout and the meaning of every column are in that folder's ``SOURCES.md``.

Fit procedure (deterministic grid searches in numpy, loss = mean squared log(pred / measured)):

1. **GEMM** per GPU family: ``t = max(2mnk / (e_c·peak), 2(mk + kn + mn) / (e_m·bw)) + t_0``
   fitted on kernel tables (A100: aiconfigurator ``a100_sxm/gemm_perf.csv``; Hopper:
   aiconfigurator ``h100_sxm`` + ``h200_sxm/gemm_perf.csv``; Volta: APEX+
   ``comp/V100-PCIE-16GB/gemm_0_subset.csv``; Ampere GDDR: Vidur ``compute/a40/.../mlp.csv``
   QKV/output/up/down projections), rows with n, k >= 256, every j-th row kept so each table
   contributes at most 3000 points.
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
   */*/mlp.csv``, every model and TP degree, rows with >= 256 tokens), ``t = bytes /
   (e·bw)`` with the bytes of :func:`envs.sim.latency.elementwise_bytes_per_token`; no floor is
   kept (below 256 tokens launches dominate, and decode runs under CUDA graphs). Volta: its
   ``gemm_memory`` times the measured families' geometric-mean ratio. Without this term the
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

    python -m envs.sim.calibrate [--data-dir D] [--fit] [--summary] [--prefill-report]

Prefill check (``--prefill-report``): :meth:`LatencyModel.prefill_time` against every
measurement in the folder that isolates a whole prefill — the Argonne batch-TTFT rows (vLLM,
end to end), and whole prefills composed from kernel measurements: Vidur's per-layer
non-attention ops + aiconfigurator prefill attention + aiconfigurator all-reduce (A100, H100),
and LLMServingSim's H100 per-layer profile + aiconfigurator all-reduce — grouped by GPU
generation and prefill-token band, with the median and worst signed error (negative: the model
is faster than measured). Not covered: DistServe's coefficients (OPT models, not in the
catalog), Argonne's GH200 rows (not in the catalog), aiconfigurator's deployment rows (TTFT under
concurrency >= 2 includes queueing) and InferSim (decode attention and FP8 GEMM only).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml

from envs.sim.calibration.data import FIT_E2E_MODELS, HELDOUT_E2E_MODELS, Point, find_data_dir
from envs.sim.calibration.e2e import (
    anl_runs,
    e2e_points,
    fit_overhead,
    heldout_points,
    median_abs_error,
)
from envs.sim.calibration.kernels import (
    _attention_arrays,
    _concat,
    _gemm_predict,
    _ring,
    elementwise_tables,
    fit_attention,
    fit_elementwise,
    fit_gemm,
    fit_link,
    fp8_gemm_tables,
    gemm_tables,
    nvlink_table,
    pcie_table,
)
from envs.sim.calibration.prefill import (
    gemm_source_agreement,
    prefill_points,
    print_gemm_agreement,
    print_prefill_report,
)
from envs.sim.catalog import get_gpu
from envs.sim.latency import (
    CALIBRATION_YAML,
    Calibration,
    load_calibration,
)


def _with(cal: Calibration, **changes: object) -> Calibration:
    data = _to_dict(cal)
    data.update(changes)
    return Calibration.from_dict(data)


def _to_dict(cal: Calibration) -> dict:
    return {
        "iteration_overhead_seconds": cal.iteration_overhead_seconds,
        "iteration_overhead_per_extra_gpu_seconds": cal.iteration_overhead_per_extra_gpu_seconds,
        "gemms_per_layer": cal.gemms_per_layer,
        "target_heldout_median_error": cal.target_heldout_median_error,
        "links": {k: vars(v).copy() for k, v in cal.links.items()},
        # unset optional constants (fp8 fits of families without FP8 data) are left out
        "families": {
            k: {n: x for n, x in vars(v).items() if x is not None} for k, v in cal.families.items()
        },
    }


# ---------------------------------------------------------------------------------------------
def fit(data_dir: Path) -> Calibration:
    """Run the whole fit (steps 1–4 of the module docstring, with 1b and 1c).

    :param data_dir: the measured-latency folder.
    """
    families: dict[str, dict[str, float]] = {}
    for fam, tables in gemm_tables(data_dir).items():
        ec, em, t0 = fit_gemm(_concat(tables))
        families[fam] = {"gemm_compute": ec, "gemm_memory": em, "gemm_floor_seconds": t0}
    for fam, tables in fp8_gemm_tables(data_dir).items():
        ec, em, _ = fit_gemm(_concat(tables))  # floor not kept, see step 1b
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
    elem_fit = {
        fam: fit_elementwise(ideal, meas)
        for fam, (ideal, meas) in elementwise_tables(data_dir).items()
    }
    ratio_e = np.exp(np.mean([np.log(e / families[f]["gemm_memory"]) for f, e in elem_fit.items()]))
    for fam, vals in families.items():
        vals["elementwise_memory"] = elem_fit.get(
            fam, min(1.0, round(float(ratio_e * vals["gemm_memory"]), 2))
        )
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
    for k in ("gemm_floor_seconds", "attention_floor_seconds", "attention_half_tokens"):
        default[k] = float(np.mean([v[k] for v in families.values()]))
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


YAML_HEADER = """\
# Fitted constants of the roofline latency model (envs/sim/latency.py).
# Written by `python -m envs.sim.calibrate --fit` (deterministic grid searches, loss = mean
# squared log(predicted / measured)); do not hand-edit, refit instead. Data: the measured-latency
# folder described in ../shared/latency-data/SOURCES.md (never committed here). Paths below are
# relative to that folder.
#
# families.<f>.gemm_*: fit of t = max(2mnk/(gemm_compute*peak), 2(mk+kn+mn)/(gemm_memory*bw))
#   + gemm_floor_seconds on GEMM kernel rows with n,k >= 256 (<= 3000 evenly spaced rows/table):
#   ampere-hbm  aiconfigurator/a100_sxm/gemm_perf.csv (vLLM 0.14, bf16)
#   hopper      aiconfigurator/h100_sxm/gemm_perf.csv + aiconfigurator/h200_sxm/gemm_perf.csv
#   volta       apex_plus/comp/V100-PCIE-16GB/gemm_0_subset.csv (peak 112 TFLOP/s, 900 GB/s)
#   ampere-gddr vidur/compute/a40/meta-llama/Llama-2-7b-hf/mlp.csv (attn_pre_proj,
#               attn_post_proj, mlp_up_proj, mlp_down_proj medians as GEMMs)
#   default     geometric mean of the four (used by Ada / L40S, which has no measurements)
# families.hopper.gemm_*_fp8: the same fit for fp8-weight linear layers, with 1-byte operands and
#   a bf16 output, t = max(2mnk/(gemm_compute_fp8*peak_fp8), (mk+kn+2mn)/(gemm_memory_fp8*bw))
#   + floor, on infersim/h800/gemm.csv (DeepGEMM fp8_gemm_nt kernels on H800 = H100-SXM compute
#   and memory, n,k >= 256). The fitted floor (DeepGEMM's small-shape minimum) is not kept: fp8
#   kernels share gemm_floor_seconds (see envs/sim/calibrate.py step 1b). Families without
#   these keys (no FP8 data) use their bf16 gemm_* constants at the FP8 peak.
# families.<f>.attention_*: ampere-hbm and hopper from aiconfigurator/<gpu>/
#   generation_attention_perf.csv (memory efficiency + floor) then context_attention_perf.csv
#   (isl >= 16; compute efficiency). volta and ampere-gddr have no attention tables: their
#   GEMM efficiencies times the geometric-mean attention/GEMM ratio of ampere-hbm and hopper.
# families.<f>.elementwise_memory: fit of t = bytes/(elementwise_memory*bw) (bytes per token of
#   the fused add+RMSNorm, rotary and activation kernels, envs/sim/latency.py
#   elementwise_bytes_per_token) on the summed input_layernorm, attn_rope,
#   post_attention_layernorm, mlp_act and add medians of vidur/compute/<gpu>/*/*/mlp.csv rows
#   with >= 256 tokens (every model and TP degree): ampere-hbm a100, hopper h100, ampere-gddr
#   a40; volta its gemm_memory times their geometric-mean ratio; default the geometric mean.
# links.nvlink: ring all-reduce fit on the faster of aiconfigurator/<gpu>/nccl_perf.csv
#   (all_reduce, half) and custom_allreduce_perf.csv (CUDA-graph rows) per (GPU, n, bytes),
#   A100/H100/H200, link bandwidth = datasheet NVLink (bidirectional aggregate).
# links.pcie: apex_plus/comm/V100-PCIE-16GB/all_reduce.csv single-node half rows, PCIe Gen3
#   32 GB/s.
# iteration_overhead_seconds + iteration_overhead_per_extra_gpu_seconds * (tp - 1): 2-D grid on
#   llm_inference_bench_anl/All_results.csv vLLM Llama-2-7B rows (A100-40GB and H100,
#   TP 1/2/4) whose KV demand fits, all other constants fixed (the TP term is the engine's
#   per-step driver-to-worker synchronisation, which grows with the worker count).
# target_heldout_median_error: the committed accuracy target for the held-out end-to-end check
#   (vLLM runs of Mistral-7B, Qwen2-7B, Qwen2-72B, Mixtral-8x7B in the same Argonne files).
"""


def write_yaml(cal: Calibration, path: Path = CALIBRATION_YAML) -> None:
    """Write ``cal`` as the packaged calibration YAML with its provenance header.

    :param cal: fitted constants.
    :param path: destination file.
    """
    data = _to_dict(cal)
    # round away float noise of the grids (e.g. 1.9999999999999998e-05) so the file reads cleanly
    for group in ("families", "links"):
        for entry in data[group].values():
            for k, v in entry.items():
                entry[k] = float(f"{v:.4g}")
    for k in ("iteration_overhead_seconds", "iteration_overhead_per_extra_gpu_seconds"):
        data[k] = float(f"{data[k]:.4g}")
    body = yaml.safe_dump(data, sort_keys=True, default_flow_style=False)
    path.write_text(YAML_HEADER + body)


def kernel_points(data_dir: Path, cal: Calibration) -> list[Point]:
    """Prediction/measurement pairs of every kernel-table point used in the fit.

    :param data_dir: the measured-latency folder.
    :param cal: constants to evaluate.
    """
    points = []
    for fam, tables in gemm_tables(data_dir).items():
        eff = cal.family(fam)
        for t in tables:
            pred = _gemm_predict(t, eff.gemm_compute, eff.gemm_memory, eff.gemm_floor_seconds)
            points += [
                Point(f"gemm {fam}", f"{t.label} m={m:.0f} n={n:.0f} k={k:.0f}", p, s)
                for m, n, k, p, s in zip(t.m, t.n, t.k, pred, t.seconds, strict=True)
            ]
    for fam, tables in fp8_gemm_tables(data_dir).items():
        eff = cal.family(fam)
        ec, em = eff.gemm_efficiency("fp8")
        for t in tables:
            pred = _gemm_predict(t, ec, em, eff.gemm_floor_seconds)
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
                a = _attention_arrays(
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
        pred = _ring(table, link.efficiency, link.latency_seconds)
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
    parser.add_argument("--fit", action="store_true", help=f"refit and rewrite {CALIBRATION_YAML}")
    parser.add_argument(
        "--summary", action="store_true", help="print only per-group summaries, not every point"
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
    if args.fit:
        cal = fit(data_dir)
        write_yaml(cal)
        print(f"wrote {CALIBRATION_YAML}")
    else:
        cal = load_calibration()
    fit_runs = [r for r in anl_runs(data_dir) if r.model in FIT_E2E_MODELS]
    points = kernel_points(data_dir, cal) + e2e_points(fit_runs, cal, "fit e2e (overhead)")
    held = heldout_points(data_dir, cal)
    _print_points(points + held, args.summary, sys.stdout)
    if args.prefill_report:
        print_prefill_report(prefill_points(data_dir, cal), sys.stdout)
        print_gemm_agreement(gemm_source_agreement(data_dir), sys.stdout)
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
