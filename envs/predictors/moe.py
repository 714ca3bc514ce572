"""GoodServe's Mixture-of-Experts output-length predictor (GoodServe §3.2, Fig. 4).

* Features h_r: TF-IDF of the prompt (+ log input length and task one-hot, see
  :mod:`envs.predictors.features`).
* K = tiers² = 9 experts E_k, each a four-layer MLP (d → hidden → hidden → hidden → 1, ReLU).
  Phase 1: one random half of the training set is cut into a 3 × 3 grid of (input-length tier ×
  output-length tier), tiers being the training set's tertiles; expert k trains only on cell k
  (a cell with fewer than ``min_cell`` requests trains on the whole half instead).
* Gating router R: a two-layer MLP (d → hidden → K). Phase 2: with the experts frozen, R trains
  on the other half; the prediction is ŷ_r = Σ_k softmax(R(h_r))_k · E_k(h_r).
* Everything is in standardised log(1 + tokens) space with an L1 loss
  (:mod:`envs.predictors.learned`).
"""

from __future__ import annotations

import json

import numpy as np
import torch

from envs.predictors import nets
from envs.predictors.learned import (
    LearnedPredictor,
    TrainConfig,
    TrainingSet,
    pack,
    tier_of,
    tier_thresholds,
)


class _MoE:
    """numpy MoE: stacked experts (K, ...) and the gate's layers."""

    def __init__(self, experts: list[tuple[np.ndarray, np.ndarray]], gate: nets.Layers):
        self.experts = experts
        self.gate = gate

    def expert_outputs(self, x: np.ndarray) -> np.ndarray:
        """(n, K) expert predictions."""
        return nets.forward_stacked(self.experts, x)[:, :, 0].T

    def weights(self, x: np.ndarray) -> np.ndarray:
        """(n, K) softmax gate probabilities p_r."""
        logits = nets.forward(self.gate, x)
        logits = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (self.weights(x) * self.expert_outputs(x)).sum(axis=1)


def _fit_gate(
    x: np.ndarray, experts_out: np.ndarray, y: np.ndarray, cfg: TrainConfig
) -> nets.Layers:
    """Phase 2: train R minimising |Σ_k softmax(R(x))_k E_k(x) − y| with E frozen (precomputed)."""
    k = experts_out.shape[1]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed * 1000 + k)
        gate = nets.mlp([x.shape[1], cfg.hidden, k])
    xt, et, yt = torch.from_numpy(x), torch.from_numpy(experts_out), torch.from_numpy(y)
    opt = torch.optim.Adam(gate.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    for _ in range(cfg.steps):
        opt.zero_grad()
        pred = (torch.softmax(gate(xt), dim=1) * et).sum(dim=1)
        loss = (pred - yt).abs().mean()
        loss.backward()
        opt.step()
    return nets.layers_of(gate)


def train_moe(cfg: TrainConfig) -> dict[str, np.ndarray]:
    """Both training phases; return the cache state."""
    ts = TrainingSet.load(cfg)
    n, d, h = len(ts.y), ts.x.shape[1], cfg.hidden
    out_thr = tier_thresholds(ts.outputs(), cfg.tiers)
    in_thr = tier_thresholds(ts.inputs(), cfg.tiers)
    cell = tier_of(ts.inputs(), in_thr) * cfg.tiers + tier_of(ts.outputs(), out_thr)
    perm = np.random.default_rng(cfg.seed).permutation(n)
    expert_half, gate_half = perm[: n // 2], perm[n // 2 :]
    experts = []
    for k in range(cfg.tiers**2):
        idx = expert_half[cell[expert_half] == k]
        if len(idx) < cfg.min_cell:
            idx = expert_half
        experts.append(
            nets.fit_regressor(
                ts.x[idx],
                ts.y[idx],
                [d, h, h, h, 1],
                cfg.seed * 1000 + k,
                cfg.steps,
                cfg.lr,
                cfg.weight_decay,
            )
        )
    stacked = nets.stack(experts)
    frozen = _MoE(stacked, [])
    gate = _fit_gate(
        ts.x[gate_half],
        frozen.expert_outputs(ts.x[gate_half]).astype(np.float32),
        ts.y[gate_half],
        cfg,
    )
    predicted = np.expm1(_MoE(stacked, gate)(ts.x) * ts.log_std + ts.log_mean)
    arrays = {}
    for i, (w, b) in enumerate(stacked):
        arrays[f"expert_w{i}"], arrays[f"expert_b{i}"] = w, b
    for i, (w, b) in enumerate(gate):
        arrays[f"gate_w{i}"], arrays[f"gate_b{i}"] = w, b
    meta = {
        "kind": "moe",
        "expert_layers": len(stacked),
        "gate_layers": len(gate),
        "cell_sizes": np.bincount(cell[expert_half], minlength=cfg.tiers**2).tolist(),
    }
    return pack(meta, arrays, ts, cfg, out_thr, predicted)


def _build(state: dict[str, np.ndarray]) -> MoEPredictor:
    meta = json.loads(str(state["meta"]))
    experts = [(state[f"expert_w{i}"], state[f"expert_b{i}"]) for i in range(meta["expert_layers"])]
    gate = [(state[f"gate_w{i}"], state[f"gate_b{i}"]) for i in range(meta["gate_layers"])]
    return MoEPredictor(_MoE(experts, gate), state)


class MoEPredictor(LearnedPredictor):
    """GoodServe's MoE predictor (see the module docstring)."""

    name = "moe"
    train_state = staticmethod(train_moe)
    from_state = staticmethod(_build)
