"""Single-MLP predictor in the style of STAR (Wang et al. 2025), GoodServe §3.2's baseline.

One four-layer MLP (features → 2·hidden → 2·hidden → 2·hidden → 1, ReLU; twice the MoE expert
width so its parameter count is comparable to a few experts) on the TF-IDF features of
:mod:`envs.common.predictors.features`, trained on the whole training set with the log-L1 target of
:mod:`envs.common.predictors.learned`.
"""

from __future__ import annotations

import json

import numpy as np

import envs.common.predictors.nets as nets
from envs.common.predictors.learned import (
    LearnedPredictor,
    TrainConfig,
    TrainingSet,
    pack,
    tier_thresholds,
)


class _SingleMLP:
    def __init__(self, layers: nets.Layers):
        self.layers = layers

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return nets.forward(self.layers, x)[:, 0]


def train_mlp(cfg: TrainConfig) -> dict[str, np.ndarray]:
    """Train the single MLP; return its cache state."""
    ts = TrainingSet.load(cfg)
    h = 2 * cfg.hidden
    layers = nets.fit_regressor(
        ts.x, ts.y, [ts.x.shape[1], h, h, h, 1], cfg.seed, cfg.steps, cfg.lr, cfg.weight_decay
    )
    predicted = np.expm1(_SingleMLP(layers)(ts.x) * ts.log_std + ts.log_mean)
    arrays = {f"w{i}": w for i, (w, _) in enumerate(layers)}
    arrays.update({f"b{i}": b for i, (_, b) in enumerate(layers)})
    thresholds = tier_thresholds(ts.outputs(), cfg.tiers)
    return pack({"kind": "mlp", "layers": len(layers)}, arrays, ts, cfg, thresholds, predicted)


def _build(state: dict[str, np.ndarray]) -> MLPPredictor:
    n = json.loads(str(state["meta"]))["layers"]
    layers = [(state[f"w{i}"], state[f"b{i}"]) for i in range(n)]
    return MLPPredictor(_SingleMLP(layers), state)


class MLPPredictor(LearnedPredictor):
    """STAR-style single MLP (see the module docstring)."""

    name = "mlp"
    train_state = staticmethod(train_mlp)
    from_state = staticmethod(_build)
