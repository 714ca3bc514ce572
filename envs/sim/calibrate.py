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

    python -m envs.sim.calibrate [--data-dir D] [--fit] [--summary]
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
    """Run the whole fit (steps 1–4 of the module docstring).

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
    # GPUs with no measurements (Ada L40S) get the geometric mean of the fitted families.
    keys = ("gemm_compute", "gemm_memory", "attention_compute", "attention_memory")
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
