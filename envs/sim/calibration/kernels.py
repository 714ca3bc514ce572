"""Kernel-level fits of the latency model (steps 1–3 of :mod:`envs.sim.calibration.calibrate`): GEMM
efficiencies and floor per GPU family (bf16 and FP8), the elementwise-op constant, attention
efficiencies, and NVLink / PCIe all-reduce efficiency and latency.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.sim.calibration.data import (
    MAX_POINTS_PER_TABLE,
    V100_PCIE_BANDWIDTH,
    V100_PCIE_LINK,
    V100_PCIE_PEAK_FLOPS,
    msle,
    read_csv,
    thin,
)
from envs.sim.hardware.catalog import get_gpu
from envs.sim.latency.model import (
    elementwise_bytes_per_token,
)


# ---------------------------------------------------------------------------------------------
# 1. GEMM
@dataclass
class GemmTable:
    """GEMM shapes and times of one GPU: m, n, k (elements), seconds; peak FLOP/s, bytes/s.

    ``operand_bytes`` is the size of one input element (2 for bf16/fp16, 1 for fp8); the m×n
    output is always 2-byte (bf16/fp16).
    """

    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    seconds: np.ndarray
    peak_flops: np.ndarray
    bandwidth: np.ndarray
    label: str
    operand_bytes: int = 2

    def moved_bytes(self) -> np.ndarray:
        """Bytes each GEMM reads and writes: both operands once, the output once."""
        return self.operand_bytes * (self.m * self.k + self.k * self.n) + 2 * self.m * self.n


def _gemm_rows_csv(
    path: Path,
    time_column: str,
    seconds_per_unit: float,
    peak_flops: float,
    bandwidth: float,
    label: str,
    operand_bytes: int = 2,
    dtype: str | None = None,
) -> GemmTable:
    """A GEMM kernel table with m, n, k columns: rows with n, k >= 256 (and ``dtype`` when
    given), thinned to :data:`MAX_POINTS_PER_TABLE`."""
    rows = [
        r
        for r in read_csv(path)
        if int(r["n"]) >= 256 and int(r["k"]) >= 256 and (dtype is None or r["dtype"] == dtype)
    ]
    rows = thin(rows)
    m, n, k = (np.array([float(r[c]) for r in rows]) for c in ("m", "n", "k"))
    t = np.array([float(r[time_column]) for r in rows]) * seconds_per_unit
    return GemmTable(
        m,
        n,
        k,
        t,
        np.full(len(t), peak_flops),
        np.full(len(t), bandwidth),
        label,
        operand_bytes=operand_bytes,
    )


def _gemm_rows_aic(path: Path, gpu: str) -> GemmTable:
    spec = get_gpu(gpu)
    return _gemm_rows_csv(
        path, "latency", 1e-3, spec.peak_flops, spec.hbm_bandwidth, f"{path.parent.name} gemm"
    )


def _gemm_rows_v100(path: Path) -> GemmTable:
    return _gemm_rows_csv(
        path,
        "time(us)",
        1e-6,
        V100_PCIE_PEAK_FLOPS,
        V100_PCIE_BANDWIDTH,
        "V100-PCIE gemm",
        dtype="half",
    )


def _gemm_rows_vidur(path: Path, gpu: str) -> GemmTable:
    """Linear-layer ops of Vidur's per-layer profile as GEMMs (shapes from the model columns)."""
    spec = get_gpu(gpu)
    ms, ns, ks, ts = [], [], [], []
    for r in read_csv(path):
        tokens, tp = float(r["num_tokens"]), float(r["num_tensor_parallel_workers"])
        h, ffn = float(r["n_embd"]), float(r["n_expanded_embd"])
        heads, kv = float(r["n_head"]), float(r["n_kv_head"])
        hd = h / heads
        gate = 2.0 if r["use_gated_mlp"] == "True" else 1.0
        shapes = {
            "attn_pre_proj": ((heads + 2 * kv) * hd / tp, h),
            "attn_post_proj": (h, heads * hd / tp),
            "mlp_up_proj": (gate * ffn / tp, h),
            "mlp_down_proj": (h, ffn / tp),
        }
        for op, (n_dim, k_dim) in shapes.items():
            ms.append(tokens)
            ns.append(n_dim)
            ks.append(k_dim)
            ts.append(float(r[f"time_stats.{op}.median"]) / 1e3)
    m, n, k, t = (np.array(v) for v in (ms, ns, ks, ts))
    idx = np.arange(0, len(t), max(1, math.ceil(len(t) / MAX_POINTS_PER_TABLE)))
    return GemmTable(
        m[idx],
        n[idx],
        k[idx],
        t[idx],
        np.full(len(idx), spec.peak_flops),
        np.full(len(idx), spec.hbm_bandwidth),
        f"vidur {gpu} linear ops",
    )


def _gemm_rows_infersim_fp8(path: Path, gpu: str) -> GemmTable:
    """DeepGEMM FP8 kernels (InferSim): 1-byte operands, bf16 output, FP8 peak."""
    spec = get_gpu(gpu)
    return _gemm_rows_csv(
        path,
        "latency_us",
        1e-6,
        spec.peak_flops_fp8,
        spec.hbm_bandwidth,
        f"{gpu} DeepGEMM fp8 gemm",
        operand_bytes=1,
    )


def fp8_gemm_tables(data_dir: Path) -> dict[str, list[GemmTable]]:
    """FP8 GEMM measurements grouped by GPU family (only Hopper has any).

    :param data_dir: the measured-latency folder.
    """
    return {"hopper": [_gemm_rows_infersim_fp8(data_dir / "infersim/h800/gemm.csv", "h800")]}


def vidur_profiles(data_dir: Path, sku: str, exclude: Iterable[str] = ()) -> list[Path]:
    """Vidur's ``mlp.csv`` profiles of one GPU folder, sorted, less the models in ``exclude``
    (``"<org>/<model>"`` names, e.g. ``"meta-llama/Llama-2-7b-hf"``)."""
    base = data_dir / "vidur" / "compute" / sku
    skip = set(exclude)
    return [
        p
        for p in sorted(base.glob("*/*/mlp.csv"))
        if f"{p.parent.parent.name}/{p.parent.name}" not in skip
    ]


def gemm_tables(data_dir: Path) -> dict[str, list[GemmTable]]:
    """GEMM measurements grouped by GPU family.

    :param data_dir: the measured-latency folder.
    """
    aic = data_dir / "aiconfigurator"
    return {
        "ampere-hbm": [_gemm_rows_aic(aic / "a100_sxm" / "gemm_perf.csv", "a100-80g")],
        "hopper": [
            _gemm_rows_aic(aic / "h100_sxm" / "gemm_perf.csv", "h100-sxm"),
            _gemm_rows_aic(aic / "h200_sxm" / "gemm_perf.csv", "h200"),
        ],
        "volta": [_gemm_rows_v100(data_dir / "apex_plus/comp/V100-PCIE-16GB/gemm_0_subset.csv")],
        "ampere-gddr": [
            _gemm_rows_vidur(data_dir / "vidur/compute/a40/meta-llama/Llama-2-7b-hf/mlp.csv", "a40")
        ],
    }


def smooth_max(a: np.ndarray, b: np.ndarray, p: float | None) -> np.ndarray:
    """The smooth roofline ``(a^p + b^p)^(1/p)`` of two bounds; ``max(a, b)`` for ``p`` None or
    infinite (see ``FamilyEfficiency.gemm_roofline_exponent``)."""
    if p is None or math.isinf(p):
        return np.maximum(a, b)
    return (a**p + b**p) ** (1.0 / p)


def gemm_predict(
    t: GemmTable, ec: float, em: float, t0: float, p: float | None = None
) -> np.ndarray:
    flops = 2 * t.m * t.n * t.k
    return smooth_max(flops / (ec * t.peak_flops), t.moved_bytes() / (em * t.bandwidth), p) + t0


def concat(tables: Iterable[GemmTable]) -> GemmTable:
    tables = list(tables)
    widths = {t.operand_bytes for t in tables}
    if len(widths) != 1:
        raise ValueError(f"cannot pool GEMM tables of different operand widths {sorted(widths)}")
    m, n, k, seconds, peak_flops, bandwidth = (
        np.concatenate([getattr(t, f) for t in tables])
        for f in ("m", "n", "k", "seconds", "peak_flops", "bandwidth")
    )
    return GemmTable(
        m,
        n,
        k,
        seconds,
        peak_flops,
        bandwidth,
        label="+".join(t.label for t in tables),
        operand_bytes=widths.pop(),
    )


EFF_GRID = np.round(np.arange(0.30, 1.0001, 0.01), 2)
FLOOR_GRID_S = np.arange(0.0, 30.01, 1.0) * 1e-6
#: Candidate smooth-roofline exponents of the GEMM fit (inf: the hard roofline max).
ROOFLINE_EXPONENT_GRID = (1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0, math.inf)


def _gemm_grid(
    compute: np.ndarray,
    data: np.ndarray,
    seconds: np.ndarray,
    p: float,
    ecs: np.ndarray,
    ems: np.ndarray,
    floors: np.ndarray,
) -> tuple[float, float, float, float]:
    """Best (loss, ec, em, t0) over ``ecs`` × ``ems`` × ``floors`` at exponent ``p``
    (loss: the mean squared log error)."""
    best = (math.inf, 0.0, 0.0, 0.0)
    base = smooth_max(
        compute[None, None, :] / ecs[:, None, None], data[None, None, :] / ems[None, :, None], p
    )
    for t0 in floors:
        loss = msle(base + t0, seconds[None, None, :])
        i, j = np.unravel_index(np.argmin(loss), loss.shape)
        if loss[i, j] < best[0]:
            best = (float(loss[i, j]), float(ecs[i]), float(ems[j]), float(t0))
    return best


def fit_gemm(
    table: GemmTable,
    exponents: Sequence[float] = ROOFLINE_EXPONENT_GRID,
    full_grid: bool = False,
) -> tuple[float, float, float, float]:
    """Grid-search (compute eff, memory eff, floor seconds, roofline exponent) minimising the
    mean squared log error of ``smooth_max(FLOPs / (ec·peak), bytes / (em·bw), p) + t0``.

    Coarse to fine: every exponent on efficiencies in steps of 0.02 and floors in steps of
    2 µs; then, at the best exponent, steps of 0.01 and 1 µs in a window of ±0.04 and ±3 µs
    around the optimum, re-centred until the optimum stays inside it (the full fine grid at
    every exponent would take minutes). ``full_grid``: the whole fine grid at the one exponent
    given (the ``"roofline"`` variant's fit).

    :param table: GEMM measurements of one family.
    :param exponents: candidate exponents (``math.inf``: the hard roofline); one value fixes it.
    :param full_grid: search the whole fine grid (needs exactly one exponent).
    :return: (ec, em, t0 seconds, p) with ``p`` = ``math.inf`` for the hard roofline.
    """
    compute = 2 * table.m * table.n * table.k / table.peak_flops
    data = table.moved_bytes() / table.bandwidth
    if full_grid:
        if len(exponents) != 1:
            raise ValueError(f"full_grid needs exactly one exponent, got {tuple(exponents)}")
        (p,) = exponents
        _, ec, em, t0 = _gemm_grid(
            compute, data, table.seconds, p, EFF_GRID, EFF_GRID, FLOOR_GRID_S
        )
        return ec, em, t0, float(p)
    coarse = (math.inf, 0.0, 0.0, 0.0, math.inf)
    for p in exponents:
        loss, ec, em, t0 = _gemm_grid(
            compute, data, table.seconds, p, EFF_GRID[::2], EFF_GRID[::2], FLOOR_GRID_S[::2]
        )
        if loss < coarse[0]:
            coarse = (loss, ec, em, t0, p)
    _, ec, em, t0, p = coarse

    def near(grid: np.ndarray, centre: float, width: float) -> np.ndarray:
        return grid[np.abs(grid - centre) <= width + 1e-12]

    for _ in range(10):
        ecs, ems = near(EFF_GRID, ec, 0.04), near(EFF_GRID, em, 0.04)
        floors = near(FLOOR_GRID_S, t0, 3e-6)
        _, ec2, em2, t02 = _gemm_grid(compute, data, table.seconds, p, ecs, ems, floors)
        inside = all(
            abs(new - old) < width - 1e-12
            for new, old, width in ((ec2, ec, 0.04), (em2, em, 0.04), (t02, t0, 3e-6))
        )
        ec, em, t0 = ec2, em2, t02
        if inside:
            break
    return ec, em, t0, float(p)


# ---------------------------------------------------------------------------------------------
# 1c. elementwise ops
#: Vidur's per-layer elementwise ops (everything in mlp.csv but the four projections and the
#: once-per-model embedding).
VIDUR_ELEMENTWISE_OPS = (
    "input_layernorm",
    "attn_rope",
    "post_attention_layernorm",
    "mlp_act",
    "add",
)
#: Vidur compute-profile GPU folder -> (GPU family, catalog GPU of the measured part).
VIDUR_ELEMENTWISE_GPUS = {
    "a100": ("ampere-hbm", "a100-80g"),
    "h100": ("hopper", "h100-sxm"),
    "a40": ("ampere-gddr", "a40"),
}


@functools.lru_cache(maxsize=32)
def _elementwise_rows(path: Path, gpu: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bandwidth-seconds at ``gpu``'s peak, measured seconds, tokens) of every row of one
    Vidur ``mlp.csv`` (see :func:`elementwise_tables`)."""
    bandwidth = get_gpu(gpu).hbm_bandwidth
    ideal, measured, counts = [], [], []
    for r in read_csv(path):
        tokens, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
        counts.append(tokens)
        hidden, heads = float(r["n_embd"]), float(r["n_head"])
        per_token = elementwise_bytes_per_token(
            hidden,
            heads / tp,
            max(1.0, float(r["n_kv_head"]) / tp),
            hidden / heads,
            float(r["n_expanded_embd"]) / tp,
            r["use_gated_mlp"] == "True",
            True,
            2,
        )
        ideal.append(tokens * per_token / bandwidth)
        measured.append(
            sum(float(r[f"time_stats.{op}.median"]) for op in VIDUR_ELEMENTWISE_OPS) / 1e3
        )
    return np.array(ideal), np.array(measured), np.array(counts)


def elementwise_tables(
    data_dir: Path, exclude_vidur_models: Iterable[str] = (), min_tokens: int = 1
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Vidur's per-layer elementwise kernels as (bandwidth-seconds at peak, measured seconds)
    per GPU family: every ``vidur/compute/<gpu>/<org>/<model>/mlp.csv`` row (1 to 32,768
    tokens; the few-token rows, where launches rather than bytes set the time, fix the floor),
    the measured time being the sum of the :data:`VIDUR_ELEMENTWISE_OPS` medians and the bytes
    :func:`envs.sim.latency.model.elementwise_bytes_per_token` of the row's shape.

    :param data_dir: the measured-latency folder.
    :param exclude_vidur_models: Vidur models (``"<org>/<model>"``) left out.
    :param min_tokens: rows with fewer tokens are left out (256: the ``roofline`` fit,
        which has no floor).
    """
    out = {}
    for sku, (family, gpu) in VIDUR_ELEMENTWISE_GPUS.items():
        rows = [
            _elementwise_rows(p, gpu) for p in vidur_profiles(data_dir, sku, exclude_vidur_models)
        ]
        if rows:
            keep = np.concatenate([n for _, _, n in rows]) >= min_tokens
            out[family] = (
                np.concatenate([i for i, _, _ in rows])[keep],
                np.concatenate([m for _, m, _ in rows])[keep],
            )
    return out


#: Per-kernel floors the elementwise fit considers, seconds.
ELEMENTWISE_FLOOR_GRID_S = np.arange(0.0, 10.001, 0.25) * 1e-6


def fit_elementwise(
    ideal_s: np.ndarray,
    measured_s: np.ndarray,
    kernels: int = len(VIDUR_ELEMENTWISE_OPS),
    floors: np.ndarray = ELEMENTWISE_FLOOR_GRID_S,
    effs: np.ndarray = EFF_GRID,
) -> tuple[float, float]:
    """Grid-search the elementwise memory efficiency and per-kernel floor:
    ``measured ≈ ideal / eff + kernels · floor`` (mean squared log error). Coarse to fine:
    every other grid value (efficiencies in steps of 0.02 and floors in steps of 0.5 µs on
    the default grids), then the whole grids within one coarse step of the coarse optimum.

    :param ideal_s: bytes / peak bandwidth of each measurement, seconds.
    :param measured_s: measured seconds (``kernels`` kernels summed).
    :param kernels: kernels in each measurement.
    :param floors: candidate floors, seconds, evenly spaced (``[0.0]``: no floor).
    :param effs: candidate efficiencies, evenly spaced.
    :return: (efficiency, floor seconds per kernel).
    """

    def grid(effs: np.ndarray, floors: np.ndarray) -> tuple[float, float]:
        pred = ideal_s[None, None, :] / effs[:, None, None] + kernels * floors[None, :, None]
        loss = msle(pred, measured_s[None, None, :])
        i, j = np.unravel_index(np.argmin(loss), loss.shape)
        return float(effs[i]), float(floors[j])

    floors, effs = np.asarray(floors, dtype=float), np.asarray(effs, dtype=float)
    if len(floors) == 1:  # the efficiency alone (the "roofline" variant): the whole grid
        return grid(effs, floors)
    eff, floor = grid(effs[::2], floors[::2])
    return grid(
        effs[np.abs(effs - eff) <= 2 * (effs[1] - effs[0]) + 1e-9],
        floors[np.abs(floors - floor) <= 2 * (floors[1] - floors[0]) + 1e-12],
    )


# ---------------------------------------------------------------------------------------------
# 2. attention
HEAD_DIM = 128  # every aiconfigurator attention row has head_dim 128 (SOURCES.md)


def attention_arrays(path: Path, decode: bool) -> dict[str, np.ndarray]:
    rows = read_csv(path)
    if not decode:
        rows = [r for r in rows if int(r["isl"]) >= 16]
    rows = thin(rows)
    b = np.array([float(r["batch_size"]) for r in rows])
    h = np.array([float(r["num_heads"]) for r in rows])
    kv = np.array([float(r["num_key_value_heads"]) for r in rows])
    t = np.array([float(r["latency"]) for r in rows]) / 1e3
    if decode:
        ctx = np.array([float(r["step"]) + 1 for r in rows])
        flops = 4 * b * ctx * h * HEAD_DIM
        data = 2 * b * (ctx + 1) * kv * HEAD_DIM * 2  # K and V, bf16; read context, write new
    else:
        isl = np.array([float(r["isl"]) for r in rows])
        flops = 4 * b * isl * isl / 2 * h * HEAD_DIM  # causal: half the score matrix
        data = 2 * b * isl * kv * HEAD_DIM * 2
    out = {"flops": flops, "bytes": data, "seconds": t, "b": b}
    if not decode:
        out["isl"] = isl
    return out


HALF_TOKENS_GRID = np.array([0, 64, 128, 256, 384, 512, 768, 1024, 1280, 1536, 2048, 3072, 4096])


def fit_attention(
    data_dir: Path, gpus: Sequence[tuple[str, str]]
) -> tuple[float, float, float, float]:
    """Fit (attention compute eff, attention memory eff, floor seconds, half-efficiency tokens)
    for one family: decode attention fixes the memory efficiency and floor, then prefill
    attention the asymptotic compute efficiency and the sequence length s_half at which it
    reaches half of it (time = FLOPs · (1 + s_half / isl) / (eff · peak), a 2-D grid).

    :param data_dir: the measured-latency folder.
    :param gpus: (aiconfigurator folder, catalog GPU) pairs of the family.
    """
    dec: dict[str, list[Any]] = {"f": [], "b": [], "t": []}
    pre: dict[str, list[Any]] = {"f": [], "b": [], "t": []}
    for folder, gpu in gpus:
        spec = get_gpu(gpu)
        for decode, acc in ((True, dec), (False, pre)):
            name = "generation" if decode else "context"
            a = attention_arrays(
                data_dir / "aiconfigurator" / folder / f"{name}_attention_perf.csv", decode
            )
            acc["f"].append(a["flops"] / spec.peak_flops)
            acc["b"].append(a["bytes"] / spec.hbm_bandwidth)
            acc["t"].append(a["seconds"])
            if not decode:
                acc.setdefault("isl", []).append(a["isl"])
    df, db, dt = (np.concatenate(dec[k]) for k in ("f", "b", "t"))
    best = (math.inf, 0.0, 0.0, 0.0)
    for t0 in FLOOR_GRID_S:
        pred = (
            np.maximum(
                df[None, None, :] / EFF_GRID[:, None, None],
                db[None, None, :] / EFF_GRID[None, :, None],
            )
            + t0
        )
        loss = msle(pred, dt[None, None, :])
        i, j = np.unravel_index(np.argmin(loss), loss.shape)
        if loss[i, j] < best[0]:
            best = (float(loss[i, j]), float(EFF_GRID[i]), float(EFF_GRID[j]), float(t0))
    _, _, em, t0 = best
    pf, pb, pt, pisl = (np.concatenate(pre[k]) for k in ("f", "b", "t", "isl"))
    best_pre = (math.inf, 0.0, 0.0)
    for half in HALF_TOKENS_GRID:
        flops = pf * (1.0 + half / pisl)
        pred = np.maximum(flops[None, :] / EFF_GRID[:, None], pb[None, :] / em) + t0
        loss = msle(pred, pt[None, :])
        ip = int(np.argmin(loss))
        if loss[ip] < best_pre[0]:
            best_pre = (float(loss[ip]), float(EFF_GRID[ip]), float(half))
    _, ec, half = best_pre
    return ec, em, t0, half


# ---------------------------------------------------------------------------------------------
# 3. all-reduce
@dataclass
class CommTable:
    """All-reduce measurements: GPUs, message bytes, seconds, link bandwidth bytes/s."""

    n: np.ndarray
    size: np.ndarray
    seconds: np.ndarray
    link: np.ndarray
    labels: list[str]


def nvlink_table(data_dir: Path) -> CommTable:
    """Fastest of NCCL and vLLM custom all-reduce per (GPU, GPUs, bytes), aiconfigurator."""
    best: dict[tuple[str, int, float], float] = {}
    for folder, gpu in (("a100_sxm", "a100-80g"), ("h100_sxm", "h100-sxm"), ("h200_sxm", "h200")):
        base = data_dir / "aiconfigurator" / folder
        for r in read_csv(base / "nccl_perf.csv"):
            if r["op_name"] == "all_reduce" and r["nccl_dtype"] == "half":
                key = (gpu, int(r["num_gpus"]), float(r["message_size"]) * 2)
                best[key] = min(best.get(key, math.inf), float(r["latency"]) / 1e3)
        for r in read_csv(base / "custom_allreduce_perf.csv"):
            if "graph" in r["kernel_source"]:
                key = (gpu, int(r["num_gpus"]), float(r["message_size"]) * 2)
                best[key] = min(best.get(key, math.inf), float(r["latency"]) / 1e3)
    keys = sorted(best)
    return CommTable(
        np.array([k[1] for k in keys], float),
        np.array([k[2] for k in keys]),
        np.array([best[k] for k in keys]),
        np.array([get_gpu(k[0]).nvlink_bandwidth for k in keys]),
        [f"{k[0]} allreduce n={k[1]} {k[2]:.0f}B" for k in keys],
    )


def pcie_table(data_dir: Path) -> CommTable:
    """V100-PCIe single-node all-reduce, APEX+ (half precision rows)."""
    rows = [
        r
        for r in read_csv(data_dir / "apex_plus/comm/V100-PCIE-16GB/all_reduce.csv")
        if r["num_nodes"] == "1" and r["dtype"] == "half" and int(r["num_gpus_per_node"]) > 1
    ]
    n = np.array([float(r["num_gpus_per_node"]) for r in rows])
    size = np.array([float(r["size(kb)"]) * 1024 for r in rows])
    t = np.array([float(r["time(us)"]) for r in rows]) / 1e6
    return CommTable(
        n,
        size,
        t,
        np.full(len(t), V100_PCIE_LINK),
        [f"V100-PCIe allreduce n={int(a)} {b:.0f}B" for a, b in zip(n, size, strict=True)],
    )


def ring_allreduce(c: CommTable, eff: float | np.ndarray, lat: float | np.ndarray) -> np.ndarray:
    return lat + 2 * (c.n - 1) / c.n * c.size / (eff * c.link)


def fit_link(c: CommTable) -> tuple[float, float]:
    """Grid-search (efficiency, latency seconds) of the ring all-reduce model.

    :param c: all-reduce measurements of one link kind.
    """
    effs = np.round(np.arange(0.05, 1.5001, 0.01), 2)
    lats = np.arange(0.0, 60.01, 0.5) * 1e-6
    pred = (
        lats[None, :, None]
        + (2 * (c.n - 1) / c.n * c.size / c.link)[None, None, :] / effs[:, None, None]
    )
    loss = msle(pred, c.seconds[None, None, :])
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return float(effs[i]), float(lats[j])
