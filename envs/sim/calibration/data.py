"""Where the calibration's measured data lives (``--data-dir``, ``$SERVEGYM_LATENCY_DATA`` or
``../shared/latency-data``; never copied into the repository), the GPU and model names of the
ANL runs, and the helpers every fit shares (CSV reading, thinning, the loss).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[3]
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


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def thin(rows: Sequence, limit: int = MAX_POINTS_PER_TABLE) -> list:
    step = max(1, math.ceil(len(rows) / limit))
    return list(rows[::step])


def msle(pred: np.ndarray, meas: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(np.log(pred / meas) ** 2, axis=axis)
