"""End-to-end runs (step 4 of :mod:`envs.sim.calibration.calibrate`): the ANL measured runs, the
model's prediction of each, the framework overhead fitted on them and the held-out check (median
absolute error).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envs.sim.calibration.data import (
    ANL_GPUS,
    ANL_MODELS,
    FIT_E2E_MODELS,
    HELDOUT_E2E_MODELS,
    Point,
    msle,
    read_csv,
)
from envs.sim.hardware.catalog import get_gpu, get_model
from envs.sim.latency.model import (
    Calibration,
    InsufficientMemoryError,
    LatencyModel,
    load_calibration,
)


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
    for r in read_csv(base / "All_results.csv"):
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
    for r in read_csv(base / "all_results_TTFT.csv"):
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
    loss = msle(pred, meas[None, None, :])
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return float(round(per_iter[i], 6)), float(round(per_gpu[j], 6))
