"""The HuggingFace-eager elementwise kernels of LLMServingSim's H100 layer profiles, as a
property of that measurement (the per-op check; :mod:`envs.sim.calibration.prefill`).

LLMServingSim times a HuggingFace Llama layer op by op with PyTorch hooks
(``llmservingsim/H100/<model>_tp<k>_layers.csv``; ``SOURCES.md`` §5). Its RMSNorm (upcast,
square, mean, rsqrt, two multiplies, downcast) and rotary embedding (``rotate_half``'s slices,
negation and concatenation, four multiplies, two adds) run as several PyTorch kernels each
where vLLM runs one fused kernel, and the hooks' own time is in the numbers: on the same H100
and width they take 4.5–8.1x Vidur's fused kernels (``python -m envs.sim.calibration.calibrate
--prefill-report``). The latency model prices vLLM's fused layer, so it is compared with these
layers on the deployment they measured: the elementwise part of an LLMServingSim prefill is
predicted with an *eager* cost per layer ``n · bytes / (e · bw) + F`` (``bytes`` per token of
:func:`envs.sim.latency.efficiency.elementwise_bytes_per_token`, ``bw`` the H100's HBM bandwidth),
``(e, F)`` fitted on the four elementwise ops (``input_layernorm``, ``rope``,
``post_layernorm``, ``act_fn``) of the *other* LLMServingSim models at 64 log-spaced token
counts from 1 to 2,048 (leave one model out: never on the model predicted). The GEMM,
attention and all-reduce parts are predicted as for every other source.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from envs.sim.calibration.data import read_csv
from envs.sim.calibration.kernels import fit_elementwise
from envs.sim.hardware.catalog import get_gpu, get_model
from envs.sim.latency.efficiency import elementwise_bytes_per_token

LLMSERVINGSIM_MODELS = {"Llama-3.1-8B": "llama3.1-8b", "Llama-3.1-70B": "llama3.1-70b"}
#: LLMServingSim's per-layer elementwise ops: HuggingFace's eager RMSNorm and rotary embedding
#: (several PyTorch kernels each, where vLLM runs one fused kernel) and the activation.
LLMSERVINGSIM_ELEMENTWISE_OPS = ("input_layernorm", "rope", "post_layernorm", "act_fn")
LLMSERVINGSIM_GPU = "h100-sxm"
#: Candidate eager efficiencies (HBM bytes/s over peak) and per-layer floors (seconds).
EAGER_EFF_GRID = np.round(np.arange(0.01, 1.0001, 0.005), 3)
EAGER_FLOOR_GRID_S = np.arange(0.0, 200.01, 0.5) * 1e-6
#: Log-spaced token counts of each profile the eager cost is fitted and checked on.
FIT_TOKEN_COUNTS = 64


def llmservingsim_files(data_dir: Path) -> list[tuple[Path, str, int]]:
    """LLMServingSim's layer profiles of catalog models: (file, catalog model, TP), sorted.

    :param data_dir: the measured-latency folder.
    """
    out = []
    for path in sorted((data_dir / "llmservingsim" / "H100").glob("*_layers.csv")):
        stem, _, tp_part = path.name.removesuffix("_layers.csv").rpartition("_tp")
        if stem in LLMSERVINGSIM_MODELS:
            out.append((path, LLMSERVINGSIM_MODELS[stem], int(tp_part)))
    return out


def eager_bytes_per_token(model: str, tp: int) -> float:
    """Bytes one token moves through one layer's elementwise kernels on one of ``tp`` shards of
    catalog ``model`` (:func:`elementwise_bytes_per_token`, bf16)."""
    m = get_model(model)
    return elementwise_bytes_per_token(
        m.hidden_size,
        m.num_heads / tp,
        max(1.0, m.num_kv_heads / tp),
        m.head_dim,
        m.intermediate_size / tp,
        True,
        True,
        2,
    )


@functools.lru_cache(maxsize=4)
def _elementwise_rows(path: Path, model: str, tp: int) -> tuple[np.ndarray, np.ndarray]:
    """(bytes / peak bandwidth, measured seconds) of one layer's four elementwise ops at
    :data:`FIT_TOKEN_COUNTS` log-spaced token counts of one profile, sorted by tokens."""
    per_n: dict[int, float] = {}
    for r in read_csv(path):
        if r["layer_name"] in LLMSERVINGSIM_ELEMENTWISE_OPS:
            n = int(r["input"])
            per_n[n] = per_n.get(n, 0.0) + float(r["latency(ns)"]) / 1e9
    # a log-spaced subset (the profiles have every count from 1 to 2,048; the fit's grid over
    # all of them would take seconds, and neighbouring counts carry the same information)
    keep = set(np.unique(np.round(np.geomspace(1, max(per_n), FIT_TOKEN_COUNTS))).astype(int))
    ns = np.array(sorted(n for n in per_n if n in keep), dtype=float)
    bw = get_gpu(LLMSERVINGSIM_GPU).hbm_bandwidth
    return ns * eager_bytes_per_token(model, tp) / bw, np.array([per_n[int(n)] for n in ns])


def fit_eager_elementwise(data_dir: Path, exclude_model: str) -> tuple[float, float]:
    """The eager elementwise cost (efficiency, per-layer floor seconds) fitted on every
    LLMServingSim profile but ``exclude_model``'s, at :data:`FIT_TOKEN_COUNTS` log-spaced
    token counts (mean squared log error, :func:`~envs.sim.calibration.kernels.fit_elementwise`
    with one kernel per layer).

    :param data_dir: the measured-latency folder.
    :param exclude_model: catalog model left out (the one to predict).
    :raises ValueError: if no other model's profile is present.
    """
    rows = [
        _elementwise_rows(path, model, tp)
        for path, model, tp in llmservingsim_files(data_dir)
        if model != exclude_model
    ]
    if not rows:
        raise ValueError(
            f"no LLMServingSim profile besides {exclude_model!r} in {data_dir} to fit the "
            "eager elementwise cost on"
        )
    ideal = np.concatenate([i for i, _ in rows])
    measured = np.concatenate([m for _, m in rows])
    return fit_elementwise(ideal, measured, 1, EAGER_FLOOR_GRID_S, EAGER_EFF_GRID)


def eager_elementwise_s(model: str, tp: int, tokens: int, eff: float, floor_s: float) -> float:
    """Predicted eager elementwise seconds of a whole prefill of ``tokens`` tokens (every
    layer) of catalog ``model`` on ``tp`` H100 shards.

    :param eff: eager efficiency (:func:`fit_eager_elementwise`).
    :param floor_s: eager floor per layer, seconds.
    """
    bw = get_gpu(LLMSERVINGSIM_GPU).hbm_bandwidth
    per_layer = tokens * eager_bytes_per_token(model, tp) / (eff * bw) + floor_s
    return get_model(model).num_layers * per_layer


def eager_leave_one_out(data_dir: Path) -> dict[str, tuple[float, float, float, float]]:
    """The eager cost's own held-out check: per LLMServingSim model, the (efficiency, floor)
    fitted without it and the median and worst signed error of its predicted per-layer
    elementwise time at the same token counts of its profile.

    :param data_dir: the measured-latency folder.
    :return: catalog model -> (eff, floor seconds, median error, worst error).
    """
    out = {}
    for path, model, tp in llmservingsim_files(data_dir):
        eff, floor = fit_eager_elementwise(data_dir, model)
        ideal, measured = _elementwise_rows(path, model, tp)
        errs = (ideal / eff + floor) / measured - 1
        out[model] = (eff, floor, float(np.median(errs)), float(errs[np.argmax(np.abs(errs))]))
    return out


def print_eager_check(check: dict[str, tuple[float, float, float, float]], out) -> None:
    """Print :func:`eager_leave_one_out`'s rows.

    :param check: catalog model -> (eff, floor seconds, median error, worst error).
    :param out: text stream.
    """
    print(
        "\n## LLMServingSim eager elementwise cost, fitted without the model "
        "(per-layer norm + rotary + activation, held-out signed error)",
        file=out,
    )
    print(f"{'model':<14} {'eff':>6} {'floor us':>9} {'median':>8} {'worst':>8}", file=out)
    for model, (eff, floor, med, worst) in check.items():
        print(f"{model:<14} {eff:6.3f} {floor * 1e6:9.1f} {med:+8.1%} {worst:+8.1%}", file=out)
