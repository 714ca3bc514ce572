"""The whole-prefill check (step 5 of :mod:`envs.sim.calibration.calibrate`): the latency model's
prefill time against measured prefills of Vidur, LLMServingSim and the ANL runs, per prefill-token
band, and the agreement of the two GEMM sources it composes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envs.sim.calibration.data import Point, read_csv
from envs.sim.calibration.e2e import anl_runs, predict_run
from envs.sim.calibration.eager import (
    LLMSERVINGSIM_ELEMENTWISE_OPS,
    eager_elementwise_s,
    fit_eager_elementwise,
    llmservingsim_files,
)
from envs.sim.calibration.kernels import (
    VIDUR_ELEMENTWISE_GPUS,
    VIDUR_ELEMENTWISE_OPS,
    CommTable,
    nvlink_table,
)
from envs.sim.calibration.perop import PER_OP_FITS
from envs.sim.hardware.catalog import get_gpu, get_model
from envs.sim.latency.efficiency import resolve_calibration_variant
from envs.sim.latency.model import (
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
VIDUR_GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
LLMSERVINGSIM_ONCE = ("embedding", "final_layernorm", "lm_head")
#: LLMServingSim's per-layer linear ops (HuggingFace's unfused q/k/v and gate/up projections).
LLMSERVINGSIM_GEMM_OPS = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
#: Parts of a composed prefill compared one by one (``LatencyModel.prefill_components``).
COMPONENTS = ("gemm", "attention", "allreduce", "elementwise")


@dataclass(frozen=True)
class PrefillPoint(Point):
    """A whole-prefill prediction/measurement pair.

    :param gpu: catalog GPU.
    :param tokens: new tokens in the prefill iteration (all sequences together).
    :param source: which measurement it is (a file of the measured-latency folder).
    :param components: (part, predicted seconds, measured seconds) of the parts a composed
        measurement times separately (:data:`COMPONENTS`); empty for end-to-end rows.
    """

    gpu: str = ""
    tokens: int = 0
    source: str = ""
    components: tuple[tuple[str, float, float], ...] = ()

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


def context_attention_s(data_dir: Path, folder: str) -> dict[tuple[int, int, int], float]:
    """Single-sequence prefill attention of one layer from aiconfigurator, seconds per
    (query heads, KV heads, isl) on one GPU (median of repeated rows)."""
    times: dict[tuple[int, int, int], list[float]] = {}
    path = data_dir / "aiconfigurator" / folder / "context_attention_perf.csv"
    for r in read_csv(path):
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


def _components(
    m: LatencyModel, n: int, measured: dict[str, float]
) -> tuple[tuple[str, float, float], ...]:
    pred = m.prefill_components(n)
    return tuple((k, pred[k], measured[k]) for k in COMPONENTS if measured.get(k, 0.0) > 0)


def _without_model_elementwise(
    data_dir: Path, cal: Calibration, sku: str, hf_name: str, variant: str
) -> Calibration:
    """``cal`` with the elementwise constants of Vidur GPU ``sku``'s family refitted on
    Vidur's other models the way of per-op calibration ``variant`` (the leave-one-model-out
    check of the composed prefills)."""
    family, _ = VIDUR_ELEMENTWISE_GPUS[sku]
    eff, floor = PER_OP_FITS[variant].elementwise(data_dir, (hf_name,))[family]
    families = dict(cal.families)
    families[family] = dataclasses.replace(
        families[family], elementwise_memory=eff, elementwise_floor_seconds=floor
    )
    return dataclasses.replace(cal, families=families)


def vidur_prefill_points(
    data_dir: Path,
    cal: Calibration,
    leave_model_out: bool = True,
    variant: str | None = None,
) -> list[PrefillPoint]:
    """Whole prefills composed from kernel measurements, one sequence of n tokens:
    ``num_layers`` × (Vidur's per-layer non-attention ops at n tokens, ``vidur/compute/<gpu>/
    <model>/mlp.csv``, + aiconfigurator prefill attention at isl n with the shard's heads
    + 2 measured NVLink all-reduces of n · hidden · 2 bytes when TP > 1) + the embedding op.
    Compared with ``prefill_time(n)`` less the model's framework overhead (which no kernel
    measures). The composition has no LM head (one token's logits: < 1% above 512 tokens).
    Only n on aiconfigurator's isl grid are used (no interpolation of attention).

    The A100 and Hopper GEMM constants are fitted on aiconfigurator's tables only, but the
    elementwise constants on Vidur's own profiles (step 1c); with ``leave_model_out`` each
    model's prefills are predicted with the elementwise constants refitted without that model.

    :param data_dir: the measured-latency folder.
    :param cal: constants to evaluate.
    :param leave_model_out: refit the elementwise constants without the model predicted.
    :param variant: the per-op calibration variant ``cal`` was fitted as (how the elementwise
        constants are refitted); ``None``: the one in force
        (``envs.sim.latency.efficiency.resolve_calibration_variant``).
    """
    variant = resolve_calibration_variant(variant)
    comm, comm_gpu = _nvlink_by_gpu(data_dir)
    points = []
    for sku, (gpu, folder) in VIDUR_GPUS.items():
        attention = context_attention_s(data_dir, folder)
        for hf_name, name in VIDUR_MODELS.items():
            path = data_dir / "vidur" / "compute" / sku / hf_name / "mlp.csv"
            if not path.exists():
                continue
            spec = get_model(name)
            cal_m = (
                _without_model_elementwise(data_dir, cal, sku, hf_name, variant)
                if leave_model_out
                else cal
            )
            for r in read_csv(path):
                n, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
                key = (spec.num_heads // tp, max(1, spec.num_kv_heads // tp), n)
                if key not in attention:
                    continue
                try:
                    m = LatencyModel(get_gpu(gpu), spec, tp, 1.0, cal_m)
                except InsufficientMemoryError:
                    continue
                layers = spec.num_layers
                parts = {
                    part: layers * sum(float(r[f"time_stats.{op}.median"]) for op in ops) / 1e3
                    for part, ops in (
                        ("gemm", VIDUR_GEMM_OPS),
                        ("elementwise", VIDUR_ELEMENTWISE_OPS),
                    )
                }
                parts["attention"] = layers * attention[key]
                if tp > 1:
                    ar = _allreduce_s(comm, comm_gpu, gpu, tp, n * spec.hidden_size * 2)
                    parts["allreduce"] = 2 * layers * ar
                meas = sum(parts.values()) + float(r["time_stats.emb.median"]) / 1e3
                pred = m.prefill_time(n) - _framework_overhead_s(cal_m, tp, 1)
                src = f"vidur {sku} layers + aic attention"
                label = f"{name} {tp}x{gpu} n={n}"
                comps = _components(m, n, parts)
                points.append(PrefillPoint(src, label, pred, meas, gpu, n, src, comps))
    return points


def llmservingsim_prefill_points(
    data_dir: Path, cal: Calibration, eager: bool = True
) -> list[PrefillPoint]:
    """Whole prefills composed from LLMServingSim's H100 per-layer profile
    (``llmservingsim/H100/<model>_tp<k>_layers.csv``, one sequence of n tokens):
    ``num_layers`` × the layer's ops at n + embedding and final norm at n + the LM head at one
    token + 2 measured NVLink all-reduces per layer when TP > 1 (aiconfigurator). Compared with
    ``prefill_time(n)`` less the model's framework overhead. Its small ops were timed with
    PyTorch hooks and run long (SOURCES.md §5): HuggingFace's eager RMSNorm and rotary
    embedding, several kernels each where vLLM runs one. With ``eager`` (the default) that
    implementation is taken as a property of the measured deployment: the prediction's
    elementwise part is :mod:`envs.sim.calibration.eager`'s cost fitted on the other
    LLMServingSim models (leave one model out), its other parts the latency model's.

    :param data_dir: the measured-latency folder.
    :param cal: constants to evaluate.
    :param eager: price the elementwise ops as HuggingFace eager (else as vLLM's fused kernels).
    """
    comm, comm_gpu = _nvlink_by_gpu(data_dir)
    gpu = "h100-sxm"
    points = []
    for path, name, tp in llmservingsim_files(data_dir):
        spec = get_model(name)
        eager_fit = fit_eager_elementwise(data_dir, name) if eager else None
        per_layer: dict[int, float] = {}
        ops: dict[tuple[str, int], float] = {}
        for r in read_csv(path):
            n, sec = int(r["input"]), float(r["latency(ns)"]) / 1e9
            ops[(r["layer_name"], n)] = sec
            if r["layer_name"] not in LLMSERVINGSIM_ONCE:
                per_layer[n] = per_layer.get(n, 0.0) + sec
        m = LatencyModel(get_gpu(gpu), spec, tp, 1.0, cal)
        layers = spec.num_layers
        for n in sorted(per_layer):
            if n < 16 or (n & (n - 1)):  # powers of two from 16: a readable spread of sizes
                continue
            meas = layers * per_layer[n] + ops[("embedding", n)]
            meas += ops[("final_layernorm", n)] + ops[("lm_head", 1)]
            parts = {
                "gemm": layers * sum(ops[(op, n)] for op in LLMSERVINGSIM_GEMM_OPS)
                + ops[("lm_head", 1)],
                "attention": layers * ops[("attn", n)],
                "elementwise": layers * sum(ops[(op, n)] for op in LLMSERVINGSIM_ELEMENTWISE_OPS),
            }
            if tp > 1:
                ar = _allreduce_s(comm, comm_gpu, gpu, tp, n * spec.hidden_size * 2)
                parts["allreduce"] = 2 * layers * ar
                meas += parts["allreduce"]
            pred = m.prefill_time(n) - _framework_overhead_s(cal, tp, 1)
            src = "llmservingsim H100 layers"
            comps = _components(m, n, parts)
            if eager_fit is not None:
                elem = eager_elementwise_s(name, tp, n, *eager_fit)
                pred += elem - m.prefill_components(n)["elementwise"]
                comps = tuple((k, elem if k == "elementwise" else pr, me) for k, pr, me in comps)
            points.append(
                PrefillPoint(src, f"{name} {tp}x{gpu} n={n}", pred, meas, gpu, n, src, comps)
            )
    return points


def prefill_points(
    data_dir: Path, cal: Calibration, variant: str | None = None
) -> list[PrefillPoint]:
    """Every whole-prefill measurement of the measured-latency folder against
    ``LatencyModel.prefill_time`` (the iteration as the engine runs it, TP included).

    :param data_dir: the measured-latency folder.
    :param cal: constants to evaluate.
    :param variant: the per-op calibration variant ``cal`` was fitted as (see
        :func:`vidur_prefill_points`); ``None``: the one in force.
    """
    return (
        anl_prefill_points(data_dir, cal)
        + vidur_prefill_points(data_dir, cal, variant=variant)
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


#: The per-op accuracy target: every held-out composed or end-to-end prefill within
#: this |relative error|.
PER_OP_TARGET = 0.30
#: Components of the vLLM-comparable subtotal: the kernels HuggingFace's eager layer (which
#: LLMServingSim times) runs as vLLM does (cuBLAS GEMMs, the attention kernel, NCCL).
KERNEL_SUBTOTAL = ("gemm", "attention", "allreduce")


def summarize_components(
    points: Iterable[PrefillPoint],
) -> dict[tuple[str, str, str], PrefillSummary]:
    """Signed errors of each component of the composed prefills, per (generation, source,
    component), plus ``"gemm+attention+allreduce"``: the subtotal of :data:`KERNEL_SUBTOTAL`.

    :param points: prefill points (end-to-end rows, which have no components, are skipped).
    """
    groups: dict[tuple[str, str, str], list[float]] = {}
    for p in points:
        if not p.components:
            continue
        for name, pred, meas in p.components:
            groups.setdefault((p.generation, p.source, name), []).append(pred / meas - 1)
        sub = [(pr, me) for name, pr, me in p.components if name in KERNEL_SUBTOTAL]
        subtotal = "+".join(KERNEL_SUBTOTAL)
        groups.setdefault((p.generation, p.source, subtotal), []).append(
            sum(pr for pr, _ in sub) / sum(me for _, me in sub) - 1
        )
    out = {}
    for key in sorted(groups):
        errs = np.array(groups[key])
        worst = float(errs[np.argmax(np.abs(errs))])
        out[key] = PrefillSummary(len(errs), float(np.median(errs)), worst)
    return out


def print_component_report(points: Sequence[PrefillPoint], out) -> None:
    """Print the per-component errors of the composed prefills and the per-op target check.

    :param points: prefill points.
    :param out: text stream.
    """
    print("\n## composed prefills: signed error per component", file=out)
    print(
        f"{'generation':<11} {'source':<36} {'component':<26} {'points':>6} {'median':>8} "
        f"{'worst':>8}",
        file=out,
    )
    for (gen, src, comp), s in summarize_components(points).items():
        print(
            f"{gen:<11} {src:<36} {comp:<26} {s.points:6d} {s.median:+8.1%} {s.worst:+8.1%}",
            file=out,
        )
    worst = max(points, key=lambda p: abs(p.relative_error))
    print(
        f"\nper-op held-out worst |error|: {abs(worst.relative_error):.1%} "
        f"({worst.source}: {worst.label}; target {PER_OP_TARGET:.0%}: "
        f"{'met' if abs(worst.relative_error) <= PER_OP_TARGET else 'NOT met'})",
        file=out,
    )


def norm_rotary_source_agreement(data_dir: Path) -> list[tuple[int, float, float]]:
    """LLMServingSim's two RMSNorms and rotary embedding of one layer against Vidur's, same GPU
    (H100), same width (hidden 4096, 32 query heads of 128): Llama-3.1-8B TP1 against
    Llama-2-7B TP1, at every token count both profile, seconds. The norms see the same tensors;
    Vidur's rotary does more work (32 KV heads against 8), so the ratio understates the gap.
    Token counts: the powers of two both profile.

    :param data_dir: the measured-latency folder.
    :return: [(tokens, LLMServingSim seconds, Vidur seconds)], sorted by tokens.
    """
    ls: dict[int, float] = {}
    path = data_dir / "llmservingsim" / "H100" / "Llama-3.1-8B_tp1_layers.csv"
    for r in read_csv(path):
        if r["layer_name"] in ("input_layernorm", "post_layernorm", "rope"):
            n = int(r["input"])
            ls[n] = ls.get(n, 0.0) + float(r["latency(ns)"]) / 1e9
    vidur: dict[int, float] = {}
    path = data_dir / "vidur" / "compute" / "h100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"
    for r in read_csv(path):
        if r["num_tensor_parallel_workers"] == "1":
            ops = ("input_layernorm", "post_attention_layernorm", "attn_rope")
            vidur[int(r["num_tokens"])] = (
                sum(float(r[f"time_stats.{op}.median"]) for op in ops) / 1e3
            )
    # powers of two, as in the LLMServingSim prefill check
    return [(n, ls[n], vidur[n]) for n in sorted(set(ls) & set(vidur)) if not n & (n - 1)]


def print_norm_rotary_agreement(rows: Sequence[tuple[int, float, float]], out) -> None:
    """Print :func:`norm_rotary_source_agreement`'s rows with their ratio.

    :param rows: (tokens, LLMServingSim seconds, Vidur seconds).
    :param out: text stream.
    """
    print(
        "\n## LLMServingSim (HuggingFace eager) / Vidur RMSNorm x2 + rotary, one layer, H100, "
        "hidden 4096",
        file=out,
    )
    print(f"{'tokens':>7} {'LLMServingSim us':>17} {'Vidur us':>9} {'ratio':>6}", file=out)
    for n, a, b in rows:
        print(f"{n:7d} {a * 1e6:17.1f} {b * 1e6:9.1f} {a / b:6.1f}", file=out)


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
            for r in read_csv(data_dir / "aiconfigurator" / folder / "gemm_perf.csv")
        }
        for hf_name in VIDUR_MODELS:
            path = data_dir / "vidur" / "compute" / sku / hf_name / "mlp.csv"
            if not path.exists():
                continue
            for r in read_csv(path):
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
