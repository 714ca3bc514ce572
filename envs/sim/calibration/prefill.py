"""The whole-prefill check (step 5 of :mod:`envs.sim.calibrate`): the latency model's prefill
time against measured prefills of Vidur, LLMServingSim and the ANL runs, per prefill-token band,
and the agreement of the two GEMM sources it composes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envs.sim.calibration.data import Point, _read_csv
from envs.sim.calibration.e2e import anl_runs, predict_run
from envs.sim.calibration.kernels import CommTable, nvlink_table
from envs.sim.catalog import get_gpu, get_model
from envs.sim.latency import (
    Calibration,
    InsufficientMemoryError,
    LatencyModel,
)

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
