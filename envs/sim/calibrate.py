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
import csv
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from envs.sim.catalog import get_gpu, get_model
from envs.sim.latency import (
    CALIBRATION_YAML,
    Calibration,
    InsufficientMemoryError,
    LatencyModel,
    elementwise_bytes_per_token,
    load_calibration,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_POINTS_PER_TABLE = 3000
FIT_E2E_MODELS = ("llama2-7b",)
HELDOUT_E2E_MODELS = ("mistral-7b", "qwen2-7b", "qwen2-72b", "mixtral-8x7b")
# Argonne LLM-Inference-Bench "Hardware" column -> catalog GPU. Their A100 runs are on Polaris
# (4x A100-SXM4-40GB per node); their H100s are taken to be 80GB SXM parts.
ANL_GPUS = {"Nvidia A100 GPU": "a100-40g", "Nvidia H100 GPU": "h100-sxm"}
ANL_MODELS = {
    "meta-llama/Llama-2-7b-hf": "llama2-7b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "Qwen/Qwen2-7B": "qwen2-7b",
    "Qwen/Qwen2-72B": "qwen2-72b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
}
# V100-PCIE datasheet (the APEX+ measurements' part): 112 TFLOP/s fp16 tensor, 900 GB/s HBM2,
# PCIe Gen3 x16 32 GB/s. Efficiencies fitted against it transfer to the catalog's v100-32g.
V100_PCIE_PEAK_FLOPS = 112.0e12
V100_PCIE_BANDWIDTH = 900.0e9
V100_PCIE_LINK = 32.0e9


def find_data_dir(explicit: str | None = None) -> Path:
    """Locate the measured-latency folder.

    :param explicit: ``--data-dir`` value, if given.
    :return: ``explicit``, else ``$SERVEGYM_LATENCY_DATA``, else ``<repo>/../shared/latency-data``.
    """
    if explicit:
        return Path(explicit)
    env = os.environ.get("SERVEGYM_LATENCY_DATA")
    if env:
        return Path(env)
    return REPO_ROOT.parent / "shared" / "latency-data"


@dataclass(frozen=True)
class Point:
    """One prediction-vs-measurement pair.

    :param group: which fit or check it belongs to.
    :param label: what was measured.
    :param predicted_s: model prediction, seconds.
    :param measured_s: measurement, seconds.
    """

    group: str
    label: str
    predicted_s: float
    measured_s: float

    @property
    def relative_error(self) -> float:
        """(predicted − measured) / measured."""
        return (self.predicted_s - self.measured_s) / self.measured_s


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _thin(rows: Sequence, limit: int = MAX_POINTS_PER_TABLE) -> list:
    step = max(1, math.ceil(len(rows) / limit))
    return list(rows[::step])


def _msle(pred: np.ndarray, meas: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(np.log(pred / meas) ** 2, axis=axis)


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
        for r in _read_csv(path)
        if int(r["n"]) >= 256 and int(r["k"]) >= 256 and (dtype is None or r["dtype"] == dtype)
    ]
    rows = _thin(rows)
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
    for r in _read_csv(path):
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
        for op, (n, k) in shapes.items():
            ms.append(tokens)
            ns.append(n)
            ks.append(k)
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


def _gemm_predict(t: GemmTable, ec: float, em: float, t0: float) -> np.ndarray:
    flops = 2 * t.m * t.n * t.k
    return np.maximum(flops / (ec * t.peak_flops), t.moved_bytes() / (em * t.bandwidth)) + t0


def _concat(tables: Iterable[GemmTable]) -> GemmTable:
    tables = list(tables)
    widths = {t.operand_bytes for t in tables}
    if len(widths) != 1:
        raise ValueError(f"cannot pool GEMM tables of different operand widths {sorted(widths)}")
    cat = [
        np.concatenate([getattr(t, f) for t in tables])
        for f in ("m", "n", "k", "seconds", "peak_flops", "bandwidth")
    ]
    return GemmTable(*cat, label="+".join(t.label for t in tables), operand_bytes=widths.pop())


EFF_GRID = np.round(np.arange(0.30, 1.0001, 0.01), 2)
FLOOR_GRID_S = np.arange(0.0, 30.01, 1.0) * 1e-6


def fit_gemm(table: GemmTable) -> tuple[float, float, float]:
    """Grid-search (compute eff, memory eff, floor seconds) minimising mean squared log error.

    :param table: GEMM measurements of one family.
    """
    flops = 2 * table.m * table.n * table.k / table.peak_flops
    data = table.moved_bytes() / table.bandwidth
    best = (math.inf, 0.0, 0.0, 0.0)
    for t0 in FLOOR_GRID_S:
        # shape (ec, em, points)
        pred = (
            np.maximum(
                flops[None, None, :] / EFF_GRID[:, None, None],
                data[None, None, :] / EFF_GRID[None, :, None],
            )
            + t0
        )
        loss = _msle(pred, table.seconds[None, None, :])
        i, j = np.unravel_index(np.argmin(loss), loss.shape)
        if loss[i, j] < best[0]:
            best = (float(loss[i, j]), float(EFF_GRID[i]), float(EFF_GRID[j]), float(t0))
    return best[1], best[2], best[3]


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
ELEMENTWISE_MIN_TOKENS = 256


def elementwise_tables(data_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Vidur's per-layer elementwise kernels as (bandwidth-seconds at peak, measured seconds)
    per GPU family: every ``vidur/compute/<gpu>/<org>/<model>/mlp.csv`` row with at least
    :data:`ELEMENTWISE_MIN_TOKENS` tokens (where bytes, not launches, set the time), the
    measured time being the sum of the :data:`VIDUR_ELEMENTWISE_OPS` medians and the bytes
    :func:`envs.sim.latency.elementwise_bytes_per_token` of the row's shape.

    :param data_dir: the measured-latency folder.
    """
    out = {}
    for sku, (family, gpu) in VIDUR_ELEMENTWISE_GPUS.items():
        bandwidth = get_gpu(gpu).hbm_bandwidth
        ideal, measured = [], []
        for path in sorted((data_dir / "vidur" / "compute" / sku).glob("*/*/mlp.csv")):
            for r in _read_csv(path):
                tokens, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
                if tokens < ELEMENTWISE_MIN_TOKENS:
                    continue
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
        if ideal:
            out[family] = (np.array(ideal), np.array(measured))
    return out


def fit_elementwise(ideal_s: np.ndarray, measured_s: np.ndarray) -> float:
    """Grid-search the elementwise memory efficiency: ``measured ≈ ideal / eff``.

    :param ideal_s: bytes / peak bandwidth of each measurement, seconds.
    :param measured_s: measured seconds.
    """
    loss = _msle(ideal_s[None, :] / EFF_GRID[:, None], measured_s[None, :])
    return float(EFF_GRID[int(np.argmin(loss))])


# ---------------------------------------------------------------------------------------------
# 2. attention
HEAD_DIM = 128  # every aiconfigurator attention row has head_dim 128 (SOURCES.md)


def _attention_arrays(path: Path, decode: bool) -> dict[str, np.ndarray]:
    rows = _read_csv(path)
    if not decode:
        rows = [r for r in rows if int(r["isl"]) >= 16]
    rows = _thin(rows)
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
    dec = {"f": [], "b": [], "t": []}
    pre = {"f": [], "b": [], "t": []}
    for folder, gpu in gpus:
        spec = get_gpu(gpu)
        for decode, acc in ((True, dec), (False, pre)):
            name = "generation" if decode else "context"
            a = _attention_arrays(
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
        loss = _msle(pred, dt[None, None, :])
        i, j = np.unravel_index(np.argmin(loss), loss.shape)
        if loss[i, j] < best[0]:
            best = (float(loss[i, j]), float(EFF_GRID[i]), float(EFF_GRID[j]), float(t0))
    _, _, em, t0 = best
    pf, pb, pt, pisl = (np.concatenate(pre[k]) for k in ("f", "b", "t", "isl"))
    best_pre = (math.inf, 0.0, 0.0)
    for half in HALF_TOKENS_GRID:
        flops = pf * (1.0 + half / pisl)
        pred = np.maximum(flops[None, :] / EFF_GRID[:, None], pb[None, :] / em) + t0
        loss = _msle(pred, pt[None, :])
        i = int(np.argmin(loss))
        if loss[i] < best_pre[0]:
            best_pre = (float(loss[i]), float(EFF_GRID[i]), float(half))
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
        for r in _read_csv(base / "nccl_perf.csv"):
            if r["op_name"] == "all_reduce" and r["nccl_dtype"] == "half":
                key = (gpu, int(r["num_gpus"]), float(r["message_size"]) * 2)
                best[key] = min(best.get(key, math.inf), float(r["latency"]) / 1e3)
        for r in _read_csv(base / "custom_allreduce_perf.csv"):
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
        for r in _read_csv(data_dir / "apex_plus/comm/V100-PCIE-16GB/all_reduce.csv")
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


def _ring(c: CommTable, eff: float | np.ndarray, lat: float | np.ndarray) -> np.ndarray:
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
    loss = _msle(pred, c.seconds[None, None, :])
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return float(effs[i]), float(lats[j])


# ---------------------------------------------------------------------------------------------
# 4. end-to-end runs
@dataclass(frozen=True)
class E2ERun:
    """One end-to-end batch run: batch_size prompts of input_tokens, output_tokens each."""

    source: str
    gpu: str
    model: str
    tp: int
    batch_size: int
    input_tokens: int
    output_tokens: int
    seconds: float

    @property
    def label(self) -> str:
        """Human-readable description."""
        return (
            f"{self.model} {self.tp}x{self.gpu} B={self.batch_size} "
            f"in={self.input_tokens} out={self.output_tokens} [{self.source}]"
        )


def anl_runs(data_dir: Path) -> list[E2ERun]:
    """vLLM rows of Argonne LLM-Inference-Bench on catalogued GPUs and models.

    :param data_dir: the measured-latency folder.
    """
    base = data_dir / "llm_inference_bench_anl"
    runs = []
    for r in _read_csv(base / "All_results.csv"):
        if r["Framework"] != "vLLM" or r["Hardware"] not in ANL_GPUS:
            continue
        if r["Model"] not in ANL_MODELS:
            continue
        length = int(r["Input Output Length"])
        runs.append(
            E2ERun(
                "All_results.csv",
                ANL_GPUS[r["Hardware"]],
                ANL_MODELS[r["Model"]],
                int(r["Num of Hardware"]),
                int(r["Batch Size"]),
                length,
                length,
                float(r["Latency"]),
            )
        )
    for r in _read_csv(base / "all_results_TTFT.csv"):
        if r["Framework"] != "vLLM" or r["Hardware"] not in ANL_GPUS:
            continue
        if r["Model"] not in ANL_MODELS:
            continue
        runs.append(
            E2ERun(
                "all_results_TTFT.csv",
                ANL_GPUS[r["Hardware"]],
                ANL_MODELS[r["Model"]],
                int(r["Num of Hardware"]),
                int(r["Batch Size"]),
                int(r["Input Length"]),
                int(r["Output Length"]),
                float(r["Latency"]),
            )
        )
    return runs


def predict_run(run: E2ERun, calibration: Calibration) -> float | None:
    """Predicted seconds of a batch run, or None if its KV demand exceeds the KV capacity.

    One prefill of all prompts, then ``output_tokens − 1`` decode steps (the prefill emits the
    first token); the first decode step attends to every prompt plus its first output token.

    :param run: the measured run.
    :param calibration: constants to evaluate.
    """
    try:
        m = LatencyModel(get_gpu(run.gpu), get_model(run.model), run.tp, 1.0, calibration)
    except InsufficientMemoryError:
        return None
    b, lin, lout = run.batch_size, run.input_tokens, run.output_tokens
    if b * (lin + lout) > m.kv_capacity_tokens:
        return None
    t = m.prefill_time(b * lin, b, 0)
    return t + m.decode_steps_time(b, b * (lin + 1), lout - 1)


def e2e_points(runs: Iterable[E2ERun], calibration: Calibration, group: str) -> list[Point]:
    """Prediction/measurement pairs of the runs that fit in KV memory.

    :param runs: measured runs.
    :param calibration: constants to evaluate.
    :param group: name of the table section.
    """
    points = []
    for run in runs:
        pred = predict_run(run, calibration)
        if pred is not None:
            points.append(Point(group, run.label, pred, run.seconds))
    return points


def heldout_points(data_dir: Path, calibration: Calibration | None = None) -> list[Point]:
    """End-to-end vLLM runs of models not used in the fit.

    :param data_dir: the measured-latency folder.
    :param calibration: constants to evaluate (the packaged fit by default).
    """
    cal = calibration if calibration is not None else load_calibration()
    runs = [r for r in anl_runs(data_dir) if r.model in HELDOUT_E2E_MODELS]
    return e2e_points(runs, cal, "held-out e2e")


def median_abs_error(points: Sequence[Point]) -> float:
    """Median of |relative error| over ``points``."""
    return float(np.median([abs(p.relative_error) for p in points]))


def fit_overhead(data_dir: Path, base: Calibration) -> tuple[float, float]:
    """Grid-search the per-iteration overheads on the Llama-2-7B end-to-end runs.

    The prediction is linear in both overheads (a run has ``output_tokens`` iterations: one
    prefill and ``output_tokens − 1`` decode steps), so the grid is evaluated in closed form.

    :param data_dir: the measured-latency folder.
    :param base: calibration with every other constant fitted and both overheads 0.
    :return: (iteration_overhead_seconds, iteration_overhead_per_extra_gpu_seconds).
    """
    runs = [r for r in anl_runs(data_dir) if r.model in FIT_E2E_MODELS]
    rows = [(predict_run(r, base), r) for r in runs]
    rows = [(p, r) for p, r in rows if p is not None]
    pred0 = np.array([p for p, _ in rows])
    meas = np.array([r.seconds for _, r in rows])
    iters = np.array([float(r.output_tokens) for _, r in rows])
    extra = np.array([float(r.tp - 1) for _, r in rows])
    per_iter = np.arange(0.0, 0.01001, 0.0001)
    per_gpu = np.arange(0.0, 0.005001, 0.0001)
    pred = pred0[None, None, :] + iters * (per_iter[:, None, None] + per_gpu[None, :, None] * extra)
    loss = _msle(pred, meas[None, None, :])
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return float(round(per_iter[i], 6)), float(round(per_gpu[j], 6))


# ---------------------------------------------------------------------------------------------
# 5. whole-prefill check
#: Prefill-token bands of the prefill check: [lower, upper) tokens in the prefill iteration.
PREFILL_BANDS = ((1, 512), (512, 2048), (2048, 8192), (8192, math.inf))
#: GPU family -> generation named in the prefill check.
GENERATIONS = {
    "ampere-hbm": "Ampere",
    "ampere-gddr": "Ampere",
    "hopper": "Hopper",
    "volta": "Volta",
}
# Vidur compute-profile folder -> catalog model (models the catalog has; Qwen-72B is Qwen v1).
VIDUR_MODELS = {
    "meta-llama/Llama-2-7b-hf": "llama2-7b",
    "meta-llama/Llama-2-70b-hf": "llama2-70b",
    "meta-llama/Meta-Llama-3-8B": "llama3-8b",
    "meta-llama/Meta-Llama-3-70B": "llama3-70b",
}
VIDUR_GPUS = {"a100": ("a100-80g", "a100_sxm"), "h100": ("h100-sxm", "h100_sxm")}
VIDUR_LAYER_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
LLMSERVINGSIM_MODELS = {"Llama-3.1-8B": "llama3.1-8b", "Llama-3.1-70B": "llama3.1-70b"}
LLMSERVINGSIM_ONCE = ("embedding", "final_layernorm", "lm_head")


@dataclass(frozen=True)
class PrefillPoint(Point):
    """A whole-prefill prediction/measurement pair.

    :param gpu: catalog GPU.
    :param tokens: new tokens in the prefill iteration (all sequences together).
    :param source: which measurement it is (a file of the measured-latency folder).
    """

    gpu: str = ""
    tokens: int = 0
    source: str = ""

    @property
    def generation(self) -> str:
        """GPU generation (Ampere, Hopper, ...) of :attr:`gpu`."""
        family = get_gpu(self.gpu).family
        return GENERATIONS.get(family, family)

    @property
    def band(self) -> str:
        """Prefill-token band of :data:`PREFILL_BANDS` holding :attr:`tokens`."""
        for lo, hi in PREFILL_BANDS:
            if lo <= self.tokens < hi:
                return f"{lo}-{hi - 1}" if math.isfinite(hi) else f">={lo}"
        raise ValueError(f"tokens={self.tokens}; expected >= {PREFILL_BANDS[0][0]}")


def _framework_overhead_s(cal: Calibration, tp: int, num_seqs: int) -> float:
    """Per-iteration framework time of the model (not part of a kernel-level composition)."""
    return (
        cal.iteration_overhead_seconds
        + (tp - 1) * cal.iteration_overhead_per_extra_gpu_seconds
        + num_seqs * cal.iteration_overhead_per_seq_seconds
    )


def _context_attention_s(data_dir: Path, folder: str) -> dict[tuple[int, int, int], float]:
    """Single-sequence prefill attention of one layer from aiconfigurator, seconds per
    (query heads, KV heads, isl) on one GPU (median of repeated rows)."""
    times: dict[tuple[int, int, int], list[float]] = {}
    path = data_dir / "aiconfigurator" / folder / "context_attention_perf.csv"
    for r in _read_csv(path):
        if r["batch_size"] == "1":
            key = (int(r["num_heads"]), int(r["num_key_value_heads"]), int(r["isl"]))
            times.setdefault(key, []).append(float(r["latency"]) / 1e3)
    return {k: float(np.median(v)) for k, v in times.items()}


def _allreduce_s(
    table: CommTable, gpu_labels: np.ndarray, gpu: str, n: int, nbytes: float
) -> float:
    """Measured NVLink all-reduce seconds of ``nbytes`` over ``n`` GPUs of ``gpu``: log-log
    interpolation between measured sizes (bandwidth-proportional beyond the largest)."""
    sel = (gpu_labels == gpu) & (table.n == n)
    if not sel.any():
        raise ValueError(f"no all-reduce measurement of {n}x {gpu} in the aiconfigurator tables")
    size, sec = table.size[sel], table.seconds[sel]
    order = np.argsort(size)
    size, sec = size[order], sec[order]
    if nbytes >= size[-1]:
        return float(sec[-1] * nbytes / size[-1])
    return float(np.exp(np.interp(math.log(nbytes), np.log(size), np.log(sec))))


def _nvlink_by_gpu(data_dir: Path) -> tuple[CommTable, np.ndarray]:
    table = nvlink_table(data_dir)
    return table, np.array([lab.split()[0] for lab in table.labels])


def anl_prefill_points(data_dir: Path, cal: Calibration) -> list[PrefillPoint]:
    """Argonne ``all_results_TTFT.csv`` vLLM rows (batch of prompts, one output token): the
    measured TTFT of the batch against one prefill iteration of the whole batch.

    :param data_dir: the measured-latency folder.
    :param cal: constants to evaluate.
    """
    points = []
    for run in anl_runs(data_dir):
        if run.source != "all_results_TTFT.csv" or run.output_tokens != 1:
            continue
        pred = predict_run(run, cal)
        if pred is not None:
            tokens = run.batch_size * run.input_tokens
            src = "anl all_results_TTFT (vLLM e2e)"
            points.append(PrefillPoint(src, run.label, pred, run.seconds, run.gpu, tokens, src))
    return points


def vidur_prefill_points(data_dir: Path, cal: Calibration) -> list[PrefillPoint]:
    """Whole prefills composed from kernel measurements, one sequence of n tokens:
    ``num_layers`` × (Vidur's per-layer non-attention ops at n tokens, ``vidur/compute/<gpu>/
    <model>/mlp.csv``, + aiconfigurator prefill attention at isl n with the shard's heads
    + 2 measured NVLink all-reduces of n · hidden · 2 bytes when TP > 1) + the embedding op.
    Compared with ``prefill_time(n)`` less the model's framework overhead (which no kernel
    measures). The composition has no LM head (one token's logits: < 1% above 512 tokens).
    Only n on aiconfigurator's isl grid are used (no interpolation of attention).

    :param data_dir: the measured-latency folder.
    :param cal: constants to evaluate.
    """
    comm, comm_gpu = _nvlink_by_gpu(data_dir)
    points = []
    for sku, (gpu, folder) in VIDUR_GPUS.items():
        attention = _context_attention_s(data_dir, folder)
        for hf_name, name in VIDUR_MODELS.items():
            path = data_dir / "vidur" / "compute" / sku / hf_name / "mlp.csv"
            if not path.exists():
                continue
            spec = get_model(name)
            for r in _read_csv(path):
                n, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
                key = (spec.num_heads // tp, max(1, spec.num_kv_heads // tp), n)
                if key not in attention:
                    continue
                try:
                    m = LatencyModel(get_gpu(gpu), spec, tp, 1.0, cal)
                except InsufficientMemoryError:
                    continue
                layer = sum(float(r[f"time_stats.{op}.median"]) for op in VIDUR_LAYER_OPS) / 1e3
                layer += attention[key]
                if tp > 1:
                    layer += 2 * _allreduce_s(comm, comm_gpu, gpu, tp, n * spec.hidden_size * 2)
                meas = spec.num_layers * layer + float(r["time_stats.emb.median"]) / 1e3
                pred = m.prefill_time(n) - _framework_overhead_s(cal, tp, 1)
                src = f"vidur {sku} layers + aic attention"
                label = f"{name} {tp}x{gpu} n={n}"
                points.append(PrefillPoint(src, label, pred, meas, gpu, n, src))
    return points


def llmservingsim_prefill_points(data_dir: Path, cal: Calibration) -> list[PrefillPoint]:
    """Whole prefills composed from LLMServingSim's H100 per-layer profile
    (``llmservingsim/H100/<model>_tp<k>_layers.csv``, one sequence of n tokens):
    ``num_layers`` × the layer's ops at n + embedding and final norm at n + the LM head at one
    token + 2 measured NVLink all-reduces per layer when TP > 1 (aiconfigurator). Compared with
    ``prefill_time(n)`` less the model's framework overhead. Its small ops were timed with
    PyTorch hooks and run long (SOURCES.md §5), so it bounds the time from above.

    :param data_dir: the measured-latency folder.
    :param cal: constants to evaluate.
    """
    comm, comm_gpu = _nvlink_by_gpu(data_dir)
    gpu = "h100-sxm"
    points = []
    for path in sorted((data_dir / "llmservingsim" / "H100").glob("*_layers.csv")):
        stem, _, tp_part = path.name.removesuffix("_layers.csv").rpartition("_tp")
        if stem not in LLMSERVINGSIM_MODELS:
            continue
        name, tp = LLMSERVINGSIM_MODELS[stem], int(tp_part)
        spec = get_model(name)
        per_layer: dict[int, float] = {}
        once: dict[tuple[str, int], float] = {}
        for r in _read_csv(path):
            n, sec = int(r["input"]), float(r["latency(ns)"]) / 1e9
            if r["layer_name"] in LLMSERVINGSIM_ONCE:
                once[(r["layer_name"], n)] = sec
            else:
                per_layer[n] = per_layer.get(n, 0.0) + sec
        m = LatencyModel(get_gpu(gpu), spec, tp, 1.0, cal)
        for n in sorted(per_layer):
            if n < 16 or (n & (n - 1)):  # powers of two from 16: a readable spread of sizes
                continue
            meas = spec.num_layers * per_layer[n] + once[("embedding", n)]
            meas += once[("final_layernorm", n)] + once[("lm_head", 1)]
            if tp > 1:
                meas += (
                    2
                    * spec.num_layers
                    * _allreduce_s(comm, comm_gpu, gpu, tp, n * spec.hidden_size * 2)
                )
            pred = m.prefill_time(n) - _framework_overhead_s(cal, tp, 1)
            src = "llmservingsim H100 layers"
            points.append(PrefillPoint(src, f"{name} {tp}x{gpu} n={n}", pred, meas, gpu, n, src))
    return points


def prefill_points(data_dir: Path, cal: Calibration) -> list[PrefillPoint]:
    """Every whole-prefill measurement of the measured-latency folder against
    ``LatencyModel.prefill_time`` (the iteration as the engine runs it, TP included).

    :param data_dir: the measured-latency folder.
    :param cal: constants to evaluate.
    """
    return (
        anl_prefill_points(data_dir, cal)
        + vidur_prefill_points(data_dir, cal)
        + llmservingsim_prefill_points(data_dir, cal)
    )


@dataclass(frozen=True)
class PrefillSummary:
    """Signed relative errors of one group of prefill points.

    :param points: number of points.
    :param median: median signed relative error (negative: predicted faster than measured).
    :param worst: the signed error of largest magnitude.
    """

    points: int
    median: float
    worst: float


def summarize_prefill(
    points: Iterable[PrefillPoint], by_source: bool = False
) -> dict[tuple[str, str], PrefillSummary]:
    """Group prefill points by (generation, token band) — or (generation, source) — and
    summarise their signed errors.

    :param points: prefill points.
    :param by_source: group by measurement source instead of token band.
    :return: (generation, band or source) -> summary, in sorted key order.
    """
    groups: dict[tuple[str, str], list[float]] = {}
    for p in points:
        key = (p.generation, p.source if by_source else p.band)
        groups.setdefault(key, []).append(p.relative_error)
    out = {}
    for key in sorted(groups, key=lambda k: (k[0], _band_order(k[1]))):
        errs = np.array(groups[key])
        worst = float(errs[np.argmax(np.abs(errs))])
        out[key] = PrefillSummary(len(errs), float(np.median(errs)), worst)
    return out


def _band_order(name: str) -> tuple[float, str]:
    for lo, hi in PREFILL_BANDS:
        if name in (f"{lo}-{hi - 1}", f">={lo}"):
            return (lo, name)
    return (math.inf, name)


def print_prefill_report(points: Sequence[PrefillPoint], out) -> None:
    """Print the prefill check: per generation × token band, then per generation × source.

    :param points: prefill points.
    :param out: text stream.
    """
    for by_source, what in ((False, "prefill tokens"), (True, "source")):
        print(f"\n## whole-prefill signed error by generation and {what}", file=out)
        print(f"{'generation':<11} {what:<36} {'points':>6} {'median':>8} {'worst':>8}", file=out)
        for (gen, key), s in summarize_prefill(points, by_source).items():
            print(f"{gen:<11} {key:<36} {s.points:6d} {s.median:+8.1%} {s.worst:+8.1%}", file=out)


def gemm_source_agreement(data_dir: Path) -> dict[tuple[str, str], list[float]]:
    """Vidur's per-layer GEMM ops over aiconfigurator's GEMM table for the *same* (m, n, k) on
    the same GPU: the two sources the prefill check composes, compared with each other. Shapes:
    fused QKV (n = (heads + 2 kv heads) x head dim / tp, k = hidden), output (n = hidden,
    k = hidden / tp), gated up (n = 2 ffn / tp), down (k = ffn / tp); only shapes present in
    both tables. Returns {(gpu, token band): [ratios]} (> 1: Vidur slower)."""
    out: dict[tuple[str, str], list[float]] = {}
    for sku, (gpu, folder) in VIDUR_GPUS.items():
        aic = {
            (int(r["m"]), int(r["n"]), int(r["k"])): float(r["latency"])
            for r in _read_csv(data_dir / "aiconfigurator" / folder / "gemm_perf.csv")
        }
        for hf_name in VIDUR_MODELS:
            path = data_dir / "vidur" / "compute" / sku / hf_name / "mlp.csv"
            if not path.exists():
                continue
            for r in _read_csv(path):
                m, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
                h, ffn = int(r["n_embd"]), int(r["n_expanded_embd"])
                hd = h // int(r["n_head"])
                up = (2 if r["use_gated_mlp"] in ("True", "true", "1") else 1) * ffn // tp
                shapes = {
                    "attn_pre_proj": ((int(r["n_head"]) + 2 * int(r["n_kv_head"])) * hd // tp, h),
                    "attn_post_proj": (h, h // tp),
                    "mlp_up_proj": (up, h),
                    "mlp_down_proj": (h, ffn // tp),
                }
                band = PrefillPoint("", "", 0, 0, gpu, m, "").band
                for op, (n, k) in shapes.items():
                    if (m, n, k) in aic and m >= 16:
                        ratio = float(r[f"time_stats.{op}.median"]) / aic[(m, n, k)]
                        out.setdefault((gpu, band), []).append(ratio)
    return out


def print_gemm_agreement(table: dict[tuple[str, str], list[float]], out) -> None:
    print("\n## Vidur GEMM ops / aiconfigurator GEMM, same (m, n, k) and GPU", file=out)
    print(
        f"{'gpu':<10} {'tokens (m)':<12} {'shapes':>6} {'median':>7} {'min':>6} {'max':>6}",
        file=out,
    )
    for (gpu, band), r in sorted(table.items(), key=lambda kv: (kv[0][0], _band_order(kv[0][1]))):
        print(
            f"{gpu:<10} {band:<12} {len(r):6d} {np.median(r):7.2f} {min(r):6.2f} {max(r):6.2f}",
            file=out,
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
