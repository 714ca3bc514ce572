"""Fit the MoE kernel efficiencies (:class:`envs.sim.latency.moe.MoEKernelEfficiency`) on
AIConfigurator's measured MoE kernel tables, and check them leave one model shape out.

Data: ``moe_perf`` tables of ai-dynamo/aiconfigurator (``aic-core/src/aiconfigurator_core/
systems/data/<gpu>/moe/vllm/0.14.0/moe_perf.parquet``, vLLM 0.14's ``fused_moe`` kernel on
H100-SXM and H200, the engine version of the measured-latency folder's other AIConfigurator
tables), converted to CSV (any Parquet reader; the columns are kept) and named
``<gpu>_moe_perf.csv`` (``h100_sxm``, ``h200_sxm``) in the folder ``--tables`` names; never
committed here. One row is the time of one MoE layer's routed part on one GPU (``latency``, ms)
for ``num_tokens`` tokens, a shape (``hidden_size``, ``inter_size`` = expert FFN, ``topk``,
``num_experts``), ``moe_tp_size`` x ``moe_ep_size`` GPUs, a weight dtype and a routing
``distribution``.

Rows fitted: ``distribution == balanced`` (the collector's ``balanced_logits`` spreads the ``T ·
k`` assignments over ``min(E, T · k)`` distinct experts, so the touched count is known exactly;
the power-law rows' is not), kernel ``vllm_fused_moe``, ``moe_tp_size · moe_ep_size <= 8`` (one
node), weights ``bfloat16`` (-> ``bf16``) and ``fp8_block`` (-> ``fp8``: the 128x128 block-scaled
FP8 of the FP8 MoE checkpoints the deployments serve, Qwen3-235B-A22B-FP8 and MiniMax-M2.5).
Per precision a deterministic grid search of ``compute``, ``memory`` and ``floor_seconds``
minimises the mean squared log(predicted / measured), with the smooth-roofline exponent of the
calibration's hopper family (``--calibration``). Held-out check: each model shape is predicted by
constants fitted on the others.

Usage::

    python -m envs.sim.calibration.moe_kernels --tables DIR [--calibration smooth-roofline]
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envs.sim.hardware.catalog import get_gpu
from envs.sim.latency.efficiency import load_calibration
from envs.sim.latency.moe import MoEKernelEfficiency, MoELayerCost

TABLE_GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200"}
#: Engine -> (AIConfigurator table version, kernel sources of its gated MoE layer). SGLang's
#: tables hold only power-law routing (touched count unknown); it runs the same Triton
#: fused_moe kernel as vLLM and takes vLLM's fit.
ENGINE_KERNELS = {
    "vllm": ("0.14.0", ("vllm_fused_moe",)),
    "trtllm": ("1.2.0rc5", ("moe_torch_flow_cutlass", "moe_torch_flow")),
}
DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8"}
MAX_GPUS = 8
GRID_COMPUTE = np.geomspace(0.05, 1.2, 48)
GRID_MEMORY = np.geomspace(0.2, 1.2, 48)
GRID_FLOOR_S = np.arange(0.0, 61e-6, 2.5e-6)


@dataclass(frozen=True)
class KernelRow:
    """One measured MoE kernel time with its roofline bounds at efficiency 1.

    :param shape: ``h<hidden>-f<expert ffn>-k<top k>-e<experts>``.
    :param precision: weight precision (``bf16`` / ``fp8``).
    :param label: GPU, parallelism and tokens, for printing.
    :param compute_s: compute bound at efficiency 1, seconds.
    :param read_s: byte bound at efficiency 1, seconds.
    :param measured_s: the measured time, seconds.
    """

    shape: str
    precision: str
    label: str
    compute_s: float
    read_s: float
    measured_s: float


def load_rows(
    tables: Path, engine: str = "vllm", distribution: str = "balanced"
) -> list[KernelRow]:
    """The fitted rows of every ``<engine>/<gpu>_moe_perf.csv`` in ``tables`` (see the module
    docstring).

    :param tables: folder of the converted tables, one subfolder per engine.
    :param engine: a key of :data:`ENGINE_KERNELS`.
    :param distribution: routing of the rows fitted: ``balanced`` (touched experts counted
        exactly) or a power-law one (``power_law_1.01``, ``power_law_1.2``: touched experts
        taken as the uniform-routing expectation, as the simulator prices them, so the
        efficiencies absorb the skew).
    :raises FileNotFoundError: naming the folder if it holds none.
    """
    _, sources = ENGINE_KERNELS[engine]
    unit = MoEKernelEfficiency(1.0, 1.0, 0.0)
    rows: list[KernelRow] = []
    for table, gpu_name in TABLE_GPUS.items():
        path = tables / engine / f"{table}_moe_perf.csv"
        if not path.exists():
            continue
        gpu = get_gpu(gpu_name)
        with open(path, newline="") as fh:
            for r in csv.DictReader(fh):
                precision = DTYPES.get(r["moe_dtype"])
                tp, ep = int(r["moe_tp_size"]), int(r["moe_ep_size"])
                if (
                    precision is None
                    or r["distribution"] != distribution
                    or r["kernel_source"] not in sources
                    or tp * ep > MAX_GPUS
                ):
                    continue
                hidden, ffn = int(r["hidden_size"]), int(r["inter_size"])
                k, experts, tokens = int(r["topk"]), int(r["num_experts"]), int(r["num_tokens"])
                cost = MoELayerCost(
                    num_layers=1,
                    hidden_size=hidden,
                    expert_ffn=ffn,
                    num_experts=experts,
                    top_k=k,
                    weight_bytes=2 if precision == "bf16" else 1,
                    activation_bytes=2,
                    peak_flops=gpu.peak_flops if precision == "bf16" else gpu.peak_flops_fp8,
                    hbm_bandwidth=gpu.hbm_bandwidth,
                    efficiency=unit,
                    tp=tp,
                    ep=ep,
                )
                touched = min(experts, tokens * k) if distribution == "balanced" else None
                compute, read = cost.bounds(tokens, touched=touched)
                rows.append(
                    KernelRow(
                        f"h{hidden}-f{ffn}-k{k}-e{experts}",
                        precision,
                        f"{table} tp{tp} ep{ep} T={tokens}",
                        compute,
                        read,
                        float(r["latency"]) * 1e-3,
                    )
                )
    if not rows:
        raise FileNotFoundError(
            f"{tables / engine}: no <gpu>_moe_perf.csv with balanced {sources} rows; expected "
            f"{sorted(TABLE_GPUS)} tables converted from AIConfigurator's moe_perf.parquet"
        )
    return rows


def predict(rows: Sequence[KernelRow], eff: MoEKernelEfficiency, p: float | None) -> np.ndarray:
    """Predicted seconds of ``rows`` under ``eff`` (the formula of :meth:`MoELayerCost.time`)."""
    c = np.array([r.compute_s for r in rows]) / eff.compute
    m = np.array([r.read_s for r in rows]) / eff.memory
    kernel = np.maximum(c, m) if p is None else (c**p + m**p) ** (1.0 / p)
    return eff.floor_seconds + kernel


def fit(rows: Sequence[KernelRow], p: float | None) -> MoEKernelEfficiency:
    """Grid search of (compute, memory, floor) minimising the mean squared log error.

    :param rows: rows of one precision.
    :param p: smooth-roofline exponent; ``None``: the hard ``max``.
    """
    c = np.array([r.compute_s for r in rows])[None, None, :]
    m = np.array([r.read_s for r in rows])[None, None, :]
    y = np.log(np.array([r.measured_s for r in rows]))
    ec = GRID_COMPUTE[:, None, None]
    em = GRID_MEMORY[None, :, None]
    cc, mm = c / ec, m / em
    kernel = np.maximum(cc, mm) if p is None else (cc**p + mm**p) ** (1.0 / p)
    best = (np.inf, 0, 0, 0.0)
    for floor in GRID_FLOOR_S:
        loss = np.mean((np.log(kernel + floor) - y) ** 2, axis=2)
        i, j = np.unravel_index(np.argmin(loss), loss.shape)
        if loss[i, j] < best[0]:
            best = (float(loss[i, j]), int(i), int(j), float(floor))
    _, bi, bj, floor = best
    return MoEKernelEfficiency(
        float(f"{GRID_COMPUTE[bi]:.3g}"), float(f"{GRID_MEMORY[bj]:.3g}"), floor
    )


def errors(rows: Sequence[KernelRow], eff: MoEKernelEfficiency, p: float | None) -> np.ndarray:
    """|predicted / measured − 1| of ``rows``."""
    measured = np.array([r.measured_s for r in rows])
    return np.abs(predict(rows, eff, p) / measured - 1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m envs.sim.calibration.moe_kernels", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--tables", required=True, help="folder of <gpu>_moe_perf.csv tables")
    parser.add_argument("--calibration", default="smooth-roofline", help="per-op variant")
    parser.add_argument("--engine", default="vllm", choices=sorted(ENGINE_KERNELS))
    parser.add_argument(
        "--distribution",
        default="balanced",
        choices=("balanced", "power_law_1.01", "power_law_1.2"),
        help="routing distribution of the fitted rows",
    )
    args = parser.parse_args(argv)
    cal = load_calibration(variant=args.calibration)
    hopper = cal.family("hopper")
    p = hopper.gemm_roofline_exponent
    rows = load_rows(Path(args.tables), args.engine, args.distribution)
    version, sources = ENGINE_KERNELS[args.engine]
    print(
        f"{len(rows)} {args.distribution} {args.engine} {version} {'/'.join(sources)} rows; "
        f"smooth-roofline exponent p = {p}"
    )
    for precision in ("bf16", "fp8"):
        sub = [r for r in rows if r.precision == precision]
        eff = fit(sub, p)
        e = errors(sub, eff, p)
        # the dense GEMM efficiencies' roofline over the measured kernel (no floor)
        dense_c, dense_m = hopper.gemm_efficiency(precision)
        dense = predict(sub, MoEKernelEfficiency(dense_c, dense_m, 0.0), p)
        ratio = dense / np.array([r.measured_s for r in sub])
        print(
            f"\n{precision}: {len(sub)} rows; fitted compute {eff.compute}, memory {eff.memory}, "
            f"floor {eff.floor_seconds * 1e6:.1f} us; |error| median {np.median(e):.1%}, "
            f"p90 {np.quantile(e, 0.9):.1%}, worst {e.max():.1%}"
        )
        print(
            f"  dense-efficiency roofline / measured: median {np.median(ratio):.2f} "
            f"(p10 {np.quantile(ratio, 0.1):.2f}, p90 {np.quantile(ratio, 0.9):.2f})"
        )
        print(f"  leave one model shape out:\n    {'held-out shape':24} rows  median   worst")
        held_all = []
        for shape in sorted({r.shape for r in sub}):
            train = [r for r in sub if r.shape != shape]
            test = [r for r in sub if r.shape == shape]
            e_held = errors(test, fit(train, p), p)
            held_all.append(e_held)
            print(f"    {shape:24} {len(test):4d}  {np.median(e_held):6.1%}  {e_held.max():6.1%}")
        e_all = np.concatenate(held_all)
        print(
            f"    {'all held out':24} {len(e_all):4d}  {np.median(e_all):6.1%}  {e_all.max():6.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
