"""System-level calibration of the engine presets against measured serving deployments.

Data: ``aiconfigurator/silicon_sample_calibration.csv`` in the measured-latency folder
(``--data-dir``, else ``$SERVEGYM_LATENCY_DATA``, else ``../shared/latency-data``; section 1b of
its SOURCES.md; never copied into the repository). One row is one deployment measured end to
end: ``batch_size`` concurrent clients, each sending about 20 requests of ``isl`` prompt and
``osl`` output tokens back to back; the row gives the mean TTFT and TPOT. Each row is simulated
with :func:`envs.sim.calibration.benchmark_client.closed_loop` (same GPU, model, TP, precision,
engine, isl, osl, concurrency, 20 requests per client).

Rows the simulator cannot represent are counted and named, never silently dropped:
prefill-decode disaggregated (``mode=disagg``), pipeline or attention data parallelism, expert
parallelism over a GPU count other than the TP degree (MoE layers), fp4/int4 weights, and
models not in the catalog (MLA attention of the DeepSeek / Kimi / GLM families, the hybrid
linear attention of Qwen3.5, gpt-oss' sliding-window attention).

Expert parallelism over the TP group (``moe_ep_size × moe_tp_size = tp_size``) is simulated as
tensor parallelism: the same GPUs read the same expert bytes in total; the all-to-all exchange
and expert load imbalance are not modelled.

KV-cache precision: TensorRT-LLM's FP8 deployments quantise the KV cache to FP8 (its FP8
checkpoints carry ``kv_cache_quant_algo: FP8``), as do NVIDIA's FP8 checkpoints on any engine;
otherwise vLLM and SGLang keep it in bf16 (``kv_cache_dtype=auto``), so their fp8 rows use fp8
weights with a bf16 KV cache.

Engine configuration of each row: :data:`DEPLOYMENTS` (the rows record no engine flags; by
default the token budgets aiconfigurator's config generator writes). Clients:
:data:`envs.sim.calibration.benchmark_client.CALIBRATION_CLIENT` (all clients start together, every
request measured).

Fit (``--fit``): per engine, ``frontend_seconds`` (:data:`DEFAULT_FIT`) by the grid search
of ``envs.sim.calibration.serving_fit.fit_frontend``: the rows are simulated once without it and the
value minimising the mean |log(predicted / measured)| TTFT with it added is kept (a client-side
constant, so this is exact). ``--params`` with other constants (the per-iteration overheads of
:class:`envs.sim.latency.model.Calibration`, ``moe_kernel_efficiency``) runs a coordinate search on
the mean |log| of TTFT plus TPOT with every row re-simulated instead. Results are written to
the ``calibrated:`` blocks of ``envs/configs/engines.yaml``. Held-out check (``--heldout``):
leave one model out (``envs.sim.calibration.serving_fit.leave_one_group_out``);
``benchmarks/serving_fidelity.py`` adds leave one engine / GPU out.

Usage::

    python -m envs.sim.calibration.calibrate_serving [--data-dir D] [--fit] [--heldout] [--jobs 2]
"""

from __future__ import annotations

import csv
import dataclasses
import multiprocessing
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.sim.calibration.benchmark_client import AIC_BUDGET_SLACK_TOKENS, benchmark_token_budget
from envs.sim.calibration.data import find_data_dir
from envs.sim.calibration.serving_fit import fit_frontends, leave_one_group_out
from envs.sim.core.progress import progress as progress_bar
from envs.sim.engines.presets import ENGINES_YAML, get_engine
from envs.sim.hardware.catalog import get_gpu, get_model

SILICON_CSV = Path("aiconfigurator") / "silicon_sample_calibration.csv"
REQUESTS_PER_CLIENT = 20
# Hugging Face id -> catalog model (every published id of an architecture the catalog has, not
# only those in the file, so deployments of the same architectures replay too; Llama-3.3-70B
# has Llama-3.1-70B's architecture)
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama3.1-8b",
    "meta-llama/Llama-3.1-8B": "llama3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama3.1-8b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama3.1-70b",
    "meta-llama/Llama-3.1-70B": "llama3.1-70b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama3.1-70b",
    "nvidia/Llama-3.1-70B-Instruct-FP8": "llama3.1-70b",
    "nvidia/Llama-3.3-70B-Instruct-FP8": "llama3.1-70b",
    "Qwen/Qwen2.5-14B-Instruct": "qwen2.5-14b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-32B-FP8": "qwen3-32b",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
}
# Why the other models cannot be represented
UNSUPPORTED_MODELS = {
    "deepseek-ai/DeepSeek-R1": "MLA attention (compressed KV) is not modelled",
    "deepseek-ai/DeepSeek-V3": "MLA attention (compressed KV) is not modelled",
    "moonshotai/Kimi-K2.5": "MLA attention (compressed KV) is not modelled",
    "zhipuai/GLM-5": "MLA/sparse attention is not modelled",
    "Qwen/Qwen3.5-397B-A17B": "hybrid linear attention (Gated DeltaNet) is not modelled",
    "openai/gpt-oss-120b": "sliding-window attention and MXFP4 weights are not modelled",
}
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200"}
#: Checkpoints whose quantisation config also puts the KV cache in FP8 (NVIDIA ModelOpt FP8
#: checkpoints carry ``kv_cache_quant_algo: FP8``), so every engine serves them with an FP8 KV.
FP8_KV_CHECKPOINTS = (
    "nvidia/Llama-3.1-8B-Instruct-FP8",
    "nvidia/Llama-3.1-70B-Instruct-FP8",
    "nvidia/Llama-3.3-70B-Instruct-FP8",
)
PRECISIONS = {"": "bf16", "bf16": "bf16", "fp8": "fp8"}
#: How each measured deployment's engine was configured. The rows record no engine flags; they
#: come from aiconfigurator's own gap analysis (``silicon_data_source``: ``aic-auto-gap-analysis``
#: and its database dumps), whose config generator
#: (``src/aiconfigurator/generator/rule_plugin/{trtllm,vllm,sglang}.rule`` in ai-dynamo/
#: aiconfigurator) writes, for aggregated serving, ``max_num_tokens = max_batch_size + isl +
#: 1500`` for TensorRT-LLM and vLLM (so a whole prompt fits beside a full decode batch: no
#: TensorRT-LLM prompt waits for the decodes to drain) and, for SGLang, ``max_prefill_tokens =
#: isl + 1500`` with ``enable_mixed_chunk``.
#:
#: - ``aiconfigurator`` (the default of the benchmark and the fit): TensorRT-LLM and vLLM with
#:   that token budget (``max_batch_size`` = the row's concurrency; TensorRT-LLM's rounded up to
#:   32-token blocks); SGLang at its own defaults, because its generator flags (mixed chunks)
#:   fit it worse (leave-one-model-out SGLang TPOT median 28.9 % against 9.8 %, TTFT 68.2 %
#:   against 32.9 %: ``python -m benchmarks.serving_fidelity --deployment aiconfigurator-all``),
#:   which suggests these rows predate that rule. A choice made on the rows, documented as such.
#: - ``aiconfigurator-versioned``: as ``aiconfigurator`` but vLLM before 0.14 at its default
#:   budget: the generator's ``vllm/cli_args.0.12.0.j2`` template passes no
#:   ``--max-num-batched-tokens`` (0.14.1 and the generic template do). It fits the vLLM 0.12
#:   rows worse (vLLM held-out TTFT median 49.5 % against 29.7 %), so which template produced
#:   them is uncertain and the default keeps the generated budget.
#: - ``aiconfigurator-all``: the generator's flags for all three engines.
#: - ``defaults``: every engine at its documented defaults (``envs/configs/engines.yaml``),
#:   TensorRT-LLM's ``max_num_tokens`` included (``budget_sizing="engine-default"``).
#:
#: TensorRT-LLM's generated ``extra_engine_args`` also write ``kv_cache_config.enable_block_reuse:
#: false`` (no shared prefix in the workload), so its replays run without prefix caching; vLLM and
#: SGLang keep theirs (the generator passes ``--no-enable-prefix-caching`` /
#: ``--disable-radix-cache`` only when asked). It matters only for clients that repeat prompts
#: (``dataset_entries``).
DEPLOYMENTS = ("aiconfigurator", "aiconfigurator-versioned", "aiconfigurator-all", "defaults")


@dataclass(frozen=True)
class SiliconRow:
    """One measured deployment that the simulator can represent.

    :param id: the row's ``id``.
    :param backend: engine preset (``vllm``, ``sglang``, ``trtllm``).
    :param backend_version: the engine's version string.
    :param hf_model: Hugging Face id.
    :param model: catalog model.
    :param gpu: catalog GPU.
    :param tp: tensor-parallel degree.
    :param precision: weight precision.
    :param kv_precision: KV-cache precision (see the module docstring).
    :param isl: prompt tokens per request.
    :param osl: output tokens per request.
    :param concurrency: concurrent clients.
    :param ttft_s: measured mean TTFT, seconds.
    :param tpot_s: measured mean TPOT, seconds.
    """

    id: str
    backend: str
    backend_version: str
    hf_model: str
    model: str
    gpu: str
    tp: int
    precision: str
    kv_precision: str
    isl: int
    osl: int
    concurrency: int
    ttft_s: float
    tpot_s: float

    def closed_loop_kwargs(
        self, deployment: str = "aiconfigurator", client: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Arguments of :func:`envs.sim.calibration.benchmark_client.closed_loop` that reproduce the
        deployment, its engine configured as ``deployment`` says (see :data:`DEPLOYMENTS`), the
        clients as ``client`` (default
        :data:`envs.sim.calibration.benchmark_client.CALIBRATION_CLIENT`)."""
        from envs.sim.calibration.benchmark_client import CALIBRATION_CLIENT

        if deployment not in DEPLOYMENTS:
            raise ValueError(f"deployment={deployment!r}; expected one of {DEPLOYMENTS}")
        kwargs: dict[str, Any] = {
            "gpu": self.gpu,
            "model": self.model,
            "tp": self.tp,
            "precision": self.precision,
            "kv_precision": self.kv_precision,
            "engine": self.backend,
            "isl": self.isl,
            "osl": self.osl,
            "concurrency": self.concurrency,
            "requests_per_client": REQUESTS_PER_CLIENT,
            **(CALIBRATION_CLIENT if client is None else client),
        }
        if deployment == "defaults":
            kwargs["budget_sizing"] = "engine-default"
            return kwargs
        budget = benchmark_token_budget(self.isl, self.concurrency, block_tokens=1)
        if self.backend == "trtllm":
            kwargs["token_budget"] = benchmark_token_budget(self.isl, self.concurrency)
            # the generated extra_engine_args write enable_block_reuse: false (no shared prefix)
            kwargs["prefix_caching"] = False
        elif self.backend == "vllm" and (
            deployment != "aiconfigurator-versioned" or _version(self.backend_version) >= (0, 14)
        ):
            kwargs["token_budget"] = budget
        elif self.backend == "sglang" and deployment == "aiconfigurator-all":
            preset = get_engine("sglang")
            tier = preset.token_budget_for(get_gpu(self.gpu))
            kwargs["engine"] = dataclasses.replace(preset, scheduling="chunked")
            kwargs["token_budget"] = min(tier, self.isl + AIC_BUDGET_SLACK_TOKENS)
        return kwargs


def _version(text: str) -> tuple[int, ...]:
    """``"0.12.0"`` -> (0, 12, 0); an empty or unparsable version sorts as the newest."""
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) if parts else (10**6,)


def _int(value: str, default: int = 1) -> int:
    return int(float(value)) if value not in ("", None) else default


def classify(raw: dict[str, str]) -> tuple[SiliconRow | None, str]:
    """Map one CSV row to a :class:`SiliconRow`, or ``(None, reason)`` when the simulator
    cannot represent it."""
    hf = raw["model_path"]
    if raw["mode"] != "agg":
        return None, f"mode={raw['mode']} (prefill-decode disaggregated deployments)"
    if hf not in MODELS:
        return None, f"{hf}: " + UNSUPPORTED_MODELS.get(hf, "model not in the catalog")
    precision = PRECISIONS.get(raw["precision"])
    if precision is None:
        return None, f"precision={raw['precision']} (only bf16 and fp8 are modelled)"
    if _int(raw["pp_size"]) > 1:
        return None, "pipeline parallelism (pp_size > 1)"
    if _int(raw["attention_dp_size"]) > 1:
        return None, "attention data parallelism (attention_dp_size > 1)"
    tp = _int(raw["tp_size"])
    ep, moe_tp = max(1, _int(raw["moe_ep_size"])), max(1, _int(raw["moe_tp_size"]))
    if get_model(MODELS[hf]).is_moe and ep * moe_tp != tp:
        return None, "MoE layers sharded over a different GPU count than the attention TP"
    if raw["system"] not in SYSTEMS:
        return None, f"system={raw['system']} not in the catalog"
    backend = raw["backend"]
    kv = precision if backend == "trtllm" or hf in FP8_KV_CHECKPOINTS else "bf16"
    try:
        ttft = float(raw["silicon_ttft_ms"]) / 1e3
        tpot = float(raw["silicon_tpot_ms"]) / 1e3
    except ValueError:
        return None, "missing TTFT/TPOT measurement"
    if not (ttft > 0 and tpot > 0):
        return None, "non-positive TTFT/TPOT measurement"
    row = SiliconRow(
        id=raw["id"],
        backend=backend,
        backend_version=raw["backend_version"],
        hf_model=hf,
        model=MODELS[hf],
        gpu=SYSTEMS[raw["system"]],
        tp=tp,
        precision=precision,
        kv_precision=kv,
        isl=_int(raw["isl"]),
        osl=_int(raw["osl"]),
        concurrency=_int(raw["batch_size"]),
        ttft_s=ttft,
        tpot_s=tpot,
    )
    return row, ""


def load_rows(data_dir: str | Path | None = None) -> tuple[list[SiliconRow], Counter]:
    """The representable rows of the silicon CSV and a count of the others by reason.

    :raises FileNotFoundError: naming the expected path when the data is missing.
    """
    path = find_data_dir(None if data_dir is None else str(data_dir)) / SILICON_CSV
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: pass --data-dir or set SERVEGYM_LATENCY_DATA to the "
            "measured-latency folder (see its SOURCES.md, section 1b)"
        )
    rows: list[SiliconRow] = []
    skipped: Counter = Counter()
    with open(path, newline="") as fh:
        for raw in csv.DictReader(fh):
            row, reason = classify(raw)
            if row is None:
                skipped[reason] += 1
            else:
                rows.append(row)
    return rows, skipped


# -- prediction ----------------------------------------------------------------------------------
def predict_row(
    row: SiliconRow,
    overrides: dict[str, dict[str, float]] | None = None,
    deployment: str = "aiconfigurator",
    client: dict[str, Any] | None = None,
) -> dict:
    """Simulate ``row``'s deployment; ``overrides`` maps engine -> Calibration fields that
    replace the preset's whole fitted block (for fitting and the held-out checks; ``{}`` for an
    engine runs it with no fitted constant, e.g. ``frontend_seconds`` 0)."""
    from envs.sim.calibration.benchmark_client import closed_loop

    kwargs = row.closed_loop_kwargs(deployment, client)
    if overrides is not None and row.backend in overrides:
        preset = kwargs["engine"]
        preset = get_engine(preset) if isinstance(preset, str) else preset
        kwargs["engine"] = dataclasses.replace(preset, calibrated=dict(overrides[row.backend]))
    r = closed_loop(**kwargs)
    return {
        "id": row.id,
        "ttft_s": r["ttft_mean_s"],
        "tpot_s": r["tpot_mean_s"],
        "latency_s": r["latency_mean_s"],
        "preemptions": r["preemptions"],
        "wall_seconds": r["wall_seconds"],
    }


def _predict_star(args: tuple) -> dict:
    return predict_row(*args)


def predict_rows(
    rows: list[SiliconRow],
    overrides: dict[str, dict[str, float]] | None = None,
    jobs: int = 1,
    progress: bool = False,
    deployment: str = "aiconfigurator",
    client: dict[str, Any] | None = None,
) -> list[dict]:
    """:func:`predict_row` for every row, in order, on ``jobs`` processes."""
    work = [(r, overrides, deployment, client) for r in rows]
    it: Iterable[dict]
    if jobs <= 1:
        it = map(_predict_star, work)
        if progress:
            it = progress_bar(it, total=len(work), desc="deployments", unit="row")
        return list(it)
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        it = pool.imap(_predict_star, work, chunksize=4)
        if progress:
            it = progress_bar(it, total=len(work), desc="deployments", unit="row")
        return list(it)


# -- fitting -------------------------------------------------------------------------------------
#: Calibration fields fitted per engine, their starting values and bounds.
FIT_PARAMS: dict[str, tuple[float, float, float]] = {
    "iteration_overhead_seconds": (1.4e-3, 1e-5, 0.05),
    "iteration_overhead_per_extra_gpu_seconds": (3e-4, 1e-6, 0.01),
    "iteration_overhead_per_seq_seconds": (1e-5, 1e-7, 1e-3),
    "moe_kernel_efficiency": (1.0, 0.1, 1.5),
    "frontend_seconds": (0.02, 1e-4, 0.5),
}
STEP_FACTORS = (3.0, 1.7, 1.3)
#: What ``--fit`` fits by default: only the client-side frontend time per engine. Fitting the
#: iteration overheads or the MoE kernel efficiency as well lowers the error on the rows fitted
#: but raises it on models left out (leave-one-model-out TPOT median 14.8 % with the frontend
#: only; 18.8 % adding the per-GPU overhead, 20.5 % adding the MoE efficiency, 26.1 % fitting
#: all five; measured by a coordinate-search leave-one-model-out, kept in the git history of
#: this module): those constants absorb model-specific errors and do not transfer. The others
#: keep the kernel-level calibration's values (latency_calibration.yaml).
DEFAULT_FIT = ("frontend_seconds",)


def errors(rows: list[SiliconRow], preds: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Relative errors (predicted − measured) / measured of TTFT and TPOT, per row."""
    ttft = np.array([p["ttft_s"] / r.ttft_s - 1.0 for r, p in zip(rows, preds, strict=True)])
    tpot = np.array([p["tpot_s"] / r.tpot_s - 1.0 for r, p in zip(rows, preds, strict=True)])
    return ttft, tpot


def loss(rows: list[SiliconRow], preds: list[dict]) -> float:
    """Mean |log(predicted / measured)| of TTFT plus that of TPOT."""
    ttft, tpot = errors(rows, preds)
    return float(np.mean(np.abs(np.log1p(ttft))) + np.mean(np.abs(np.log1p(tpot))))


def fit_engine(
    rows: list[SiliconRow],
    engine: str,
    jobs: int = 1,
    log=print,
    factors: tuple[float, ...] = STEP_FACTORS,
    names: tuple[str, ...] | None = None,
) -> tuple[dict[str, float], float]:
    """Coordinate search of :data:`FIT_PARAMS` for ``engine`` on its rows in ``rows``.

    Each round tries every parameter times and divided by the round's step factor and keeps a
    change when it lowers :func:`loss`; ``moe_kernel_efficiency`` is only fitted when MoE
    models are among the rows. Deterministic.

    :return: the fitted constants and their loss.
    """
    mine = [r for r in rows if r.backend == engine]
    if not mine:
        raise ValueError(f"no rows of engine {engine!r} to fit")
    moe = any(get_model(r.model).is_moe for r in mine)
    names = DEFAULT_FIT if names is None else names
    unknown = set(names) - set(FIT_PARAMS)
    if unknown:
        raise ValueError(f"cannot fit {sorted(unknown)}; fittable constants: {list(FIT_PARAMS)}")
    params = {k: FIT_PARAMS[k][0] for k in names if moe or k != "moe_kernel_efficiency"}

    def evaluate(p: dict[str, float]) -> float:
        return loss(mine, predict_rows(mine, {engine: p}, jobs=jobs))

    best = evaluate(params)
    log(f"  {engine}: {len(mine)} rows, start loss {best:.4f}")
    for factor in factors:
        for name in list(params):
            lo, hi = FIT_PARAMS[name][1:]
            for cand in (params[name] * factor, params[name] / factor):
                cand = min(hi, max(lo, cand))
                if cand == params[name]:
                    continue
                trial = {**params, name: cand}
                value = evaluate(trial)
                if value < best:
                    best, params = value, trial
        log(f"  {engine}: step x{factor}: loss {best:.4f} " + _fmt(params))
    return params, best


def _fmt(params: dict[str, float]) -> str:
    return " ".join(f"{k.replace('iteration_overhead_', '')}={v:.3g}" for k, v in params.items())


def fit_all(
    rows: list[SiliconRow],
    jobs: int = 1,
    log=print,
    stride: int = 1,
    factors: tuple[float, ...] = STEP_FACTORS,
    names: tuple[str, ...] | None = None,
) -> dict[str, dict[str, float]]:
    """Fit every engine that has rows; ``stride`` > 1 fits on every stride-th row of each."""
    out = {}
    for engine in sorted({r.backend for r in rows}):
        mine = [r for r in rows if r.backend == engine][::stride]
        out[engine], _ = fit_engine(mine, engine, jobs=jobs, log=log, factors=factors, names=names)
    return out


def write_engine_constants(fitted: dict[str, dict[str, float]], path: Path | None = None) -> None:
    """Replace the ``calibrated:`` block of each fitted engine in ``engines.yaml`` (the rest of
    the file, comments included, is kept)."""
    path = ENGINES_YAML if path is None else path
    lines = path.read_text().splitlines()
    out: list[str] = []
    engine = None
    skipping = False
    for line in lines:
        if line and not line.startswith((" ", "#")) and line.endswith(":"):
            engine = line[:-1]
        if skipping:
            if line.startswith("    ") or not line.strip():
                if not line.strip():
                    skipping = False
                    out.append(line)
                continue
            skipping = False
        if line.strip() == "calibrated:" and engine in fitted:
            skipping = True
            continue
        out.append(line)
    text = "\n".join(out) + "\n"
    for engine, params in fitted.items():
        block = "  calibrated:\n" + "".join(
            f"    {k}: {float(f'{v:.3g}')!r}\n" for k, v in sorted(params.items())
        )
        marker = f"\n{engine}:\n"
        start = text.index(marker) + len(marker)
        nxt = text.find("\n\n", start)
        end = len(text.rstrip("\n")) if nxt < 0 else nxt
        text = text[:end] + "\n" + block.rstrip("\n") + text[end:]
    path.write_text(text)


def summarize(pairs: list[tuple[SiliconRow, dict]]) -> list[dict[str, Any]]:
    """Median / p90 / max |error| of TTFT and TPOT per (backend, precision) and overall."""
    groups: dict[tuple[str, str], list[tuple[SiliconRow, dict]]] = {}
    for r, p in pairs:
        groups.setdefault((r.backend, r.precision), []).append((r, p))
    groups[("all", "all")] = list(pairs)
    out = []
    for (backend, precision), items in sorted(groups.items(), key=lambda kv: kv[0] == ("all",) * 2):
        ttft, tpot = errors([r for r, _ in items], [p for _, p in items])
        row: dict[str, Any] = {"backend": backend, "precision": precision, "rows": len(items)}
        for name, e in (("ttft", np.abs(ttft)), ("tpot", np.abs(tpot))):
            row[f"{name}_median"] = float(np.median(e))
            row[f"{name}_p90"] = float(np.percentile(e, 90))
            row[f"{name}_max"] = float(e.max())
        row["ttft_within_3x"] = float(np.mean((ttft + 1 <= 3) & (ttft + 1 >= 1 / 3)))
        out.append(row)
    return out


def format_summary(table: list[dict[str, Any]], title: str) -> str:
    lines = [
        title,
        f"{'backend':8} {'precision':9} {'rows':>5}  {'TTFT med':>8} {'p90':>7} {'max':>8}"
        f"  {'TPOT med':>8} {'p90':>7} {'max':>7}  {'TTFT<=3x':>8}",
    ]
    for t in table:
        lines.append(
            f"{t['backend']:8} {t['precision']:9} {t['rows']:5d}  {t['ttft_median']:8.1%} "
            f"{t['ttft_p90']:7.1%} {t['ttft_max']:8.1%}  {t['tpot_median']:8.1%} "
            f"{t['tpot_p90']:7.1%} {t['tpot_max']:7.1%}  {t['ttft_within_3x']:8.1%}"
        )
    return "\n".join(lines)


def _main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m envs.sim.calibration.calibrate_serving",
        description="Fit and check the engine presets against measured serving deployments "
        "(aiconfigurator silicon_sample_calibration.csv).",
    )
    parser.add_argument("--data-dir", help="measured-latency folder (see its SOURCES.md)")
    parser.add_argument("--fit", action="store_true", help="refit and rewrite engines.yaml")
    parser.add_argument(
        "--heldout",
        action="store_true",
        help="leave-one-model-out check (frontend refit per model)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--params",
        default=",".join(DEFAULT_FIT),
        help=f"comma-separated constants to fit (default: %(default)s; any of {list(FIT_PARAMS)})",
    )
    args = parser.parse_args(argv)
    names = tuple(p for p in args.params.split(",") if p)
    if set(names) - set(FIT_PARAMS):
        parser.error(f"--params: unknown {sorted(set(names) - set(FIT_PARAMS))}")
    if args.heldout and names != DEFAULT_FIT:
        parser.error("--heldout refits frontend_seconds only; run it without --params")
    try:
        rows, skipped = load_rows(args.data_dir)
    except FileNotFoundError as exc:
        parser.exit(2, f"error: {exc}\n")
    print(f"{len(rows)} representable deployments; left out:")
    for reason, n in skipped.most_common():
        print(f"  {n:4d}  {reason}")
    preds0 = None
    if args.fit or args.heldout:
        engines: dict[str, dict[str, float]] = {r.backend: {} for r in rows}
        preds0 = predict_rows(rows, engines, jobs=args.jobs, progress=True)
    if args.fit:
        if names == DEFAULT_FIT:
            assert preds0 is not None  # predicted above for --fit
            fitted = {
                k: {"frontend_seconds": v}
                for k, v in fit_frontends(rows, preds0).items()
                if k != "*"
            }
        else:
            fitted = fit_all(rows, jobs=args.jobs, names=names)
        write_engine_constants(fitted)
        print(f"wrote {ENGINES_YAML}: {fitted}")
        pairs = list(zip(rows, predict_rows(rows, fitted, jobs=args.jobs), strict=True))
    else:
        pairs = list(zip(rows, predict_rows(rows, jobs=args.jobs, progress=True), strict=True))
    print(format_summary(summarize(pairs), "\ncalibration rows (constants fitted on all of them):"))
    if args.heldout:
        assert preds0 is not None  # predicted above for --heldout
        held, _ = leave_one_group_out(rows, preds0, "model")
        print(
            format_summary(
                summarize(held), "\nheld out (each model predicted by a fit on the others):"
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
