"""GoodServe's Mixture-of-Experts output-length predictor (GoodServe §3.2, Fig. 4).

* Features h_r: TF-IDF of the prompt (+ log input length and task one-hot, see
  :mod:`envs.common.predictors.features`).
* K = tiers² = 9 experts E_k, each a four-layer MLP (d → hidden → hidden → hidden → 1, ReLU).
  Phase 1: one random half of the training set is cut into a 3 × 3 grid of (input-length tier ×
  output-length tier), tiers being the training set's tertiles; expert k trains only on cell k
  (a cell with fewer than ``min_cell`` requests trains on the whole half instead).
* Gating router R: a two-layer MLP (d → hidden → K). Phase 2: with the experts frozen, R trains
  on the other half; the prediction is ŷ_r = Σ_k softmax(R(h_r))_k · E_k(h_r).
* Everything is in standardised log(1 + tokens) space with an L1 loss
  (:mod:`envs.common.predictors.learned`).

**Re-prediction** (§3.4: every τ iterations GoodServe re-estimates "the future generation
length" with the §3.2 method; §3.2 featurises "the token window so far", i.e. the prompt plus
the tokens generated). ``remaining(call)`` is a second MoE of the same shape trained on features
h_r ++ [log(1 + g) standardised] with target log(1 + L − g), for g drawn uniformly in [0, L) for
every training request (``REPREDICT_DRAWS`` draws each; g = 0 included), i.e. conditioned on the
request still running after g tokens. Our simulator generates token *counts*, not text, so the
generated window enters through its length g only; the paper's TF-IDF over the generated text
is not reproducible here (said, not hidden). The earlier rule -- the mean residual life of the
training outputs whose prediction fell in the same (task, tier) -- stays as the named
alternative ``moe-residual`` (:meth:`LearnedPredictor.remaining`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import envs.common.predictors.nets as nets
from envs.common.predictors.learned import (
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


#: Generated-token counts g drawn per training request for the re-prediction MoE.
REPREDICT_DRAWS = 3


def _fit_moe(
    x: np.ndarray, y: np.ndarray, inputs: np.ndarray, outputs: np.ndarray, cfg: TrainConfig
) -> tuple[list[tuple[np.ndarray, np.ndarray]], nets.Layers, list[int]]:
    """Both training phases on (x, y); cells by tiers of ``inputs`` × ``outputs``."""
    n, d, h = len(y), x.shape[1], cfg.hidden
    cell = tier_of(inputs, tier_thresholds(inputs, cfg.tiers)) * cfg.tiers + tier_of(
        outputs, tier_thresholds(outputs, cfg.tiers)
    )
    perm = np.random.default_rng(cfg.seed).permutation(n)
    expert_half, gate_half = perm[: n // 2], perm[n // 2 :]
    experts = []
    for k in range(cfg.tiers**2):
        idx = expert_half[cell[expert_half] == k]
        if len(idx) < cfg.min_cell:
            idx = expert_half
        experts.append(
            nets.fit_regressor(
                x[idx],
                y[idx],
                [d, h, h, h, 1],
                cfg.seed * 1000 + k,
                cfg.steps,
                cfg.lr,
                cfg.weight_decay,
            )  # fmt: skip
        )
    stacked = nets.stack(experts)
    frozen = _MoE(stacked, [])
    gate = _fit_gate(
        x[gate_half], frozen.expert_outputs(x[gate_half]).astype(np.float32), y[gate_half], cfg
    )
    return stacked, gate, np.bincount(cell[expert_half], minlength=cfg.tiers**2).tolist()


def repredict_set(
    x: np.ndarray, outputs: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, float]]:
    """Re-prediction training rows: for each request REPREDICT_DRAWS generated counts g
    (the first 0, the others uniform in [0, L)), features x ++ standardised log(1 + g), log
    target log(1 + L − g). Returns (features, standardised targets, remaining tokens, scaling)."""
    rng = np.random.default_rng(seed + 7)
    n = len(outputs)
    g = np.floor(rng.random((n, REPREDICT_DRAWS)) * outputs[:, None])
    g[:, 0] = 0.0
    g = g.reshape(-1)
    rep = np.repeat(np.arange(n), REPREDICT_DRAWS)
    left = outputs[rep] - g
    lg = np.log1p(g)
    scale = {"g_mean": float(lg.mean()), "g_std": float(lg.std()) or 1.0}
    logs = np.log1p(left)
    scale.update(log_mean=float(logs.mean()), log_std=float(logs.std()) or 1.0)
    feats = np.concatenate(
        [x[rep], ((lg - scale["g_mean"]) / scale["g_std"])[:, None].astype(np.float32)], axis=1
    )
    y = ((logs - scale["log_mean"]) / scale["log_std"]).astype(np.float32)
    return feats, y, left, scale


def train_moe(cfg: TrainConfig) -> dict[str, np.ndarray]:
    """Both training phases of the length MoE and of the re-prediction MoE; the cache state."""
    ts = TrainingSet.load(cfg)
    out_thr = tier_thresholds(ts.outputs(), cfg.tiers)
    stacked, gate, cell_sizes = _fit_moe(ts.x, ts.y, ts.inputs(), ts.outputs(), cfg)
    predicted = np.expm1(_MoE(stacked, gate)(ts.x) * ts.log_std + ts.log_mean)
    rx, ry, left, scale = repredict_set(ts.x, ts.outputs(), cfg.seed)
    rep_inputs = np.repeat(ts.inputs(), REPREDICT_DRAWS)
    re_stacked, re_gate, _ = _fit_moe(rx, ry, rep_inputs, left, cfg)
    arrays = {}
    for prefix, (ex, gt) in {"": (stacked, gate), "re_": (re_stacked, re_gate)}.items():
        for i, (w, b) in enumerate(ex):
            arrays[f"{prefix}expert_w{i}"], arrays[f"{prefix}expert_b{i}"] = w, b
        for i, (w, b) in enumerate(gt):
            arrays[f"{prefix}gate_w{i}"], arrays[f"{prefix}gate_b{i}"] = w, b
    meta = {
        "kind": "moe",
        "expert_layers": len(stacked),
        "gate_layers": len(gate),
        "cell_sizes": cell_sizes,
        "repredict": scale,
    }
    return pack(meta, arrays, ts, cfg, out_thr, predicted)


def _layers(state: dict[str, np.ndarray], prefix: str, meta: dict) -> _MoE:
    experts = [
        (state[f"{prefix}expert_w{i}"], state[f"{prefix}expert_b{i}"])
        for i in range(meta["expert_layers"])
    ]
    gate = [
        (state[f"{prefix}gate_w{i}"], state[f"{prefix}gate_b{i}"])
        for i in range(meta["gate_layers"])
    ]
    return _MoE(experts, gate)


def _build(state: dict[str, np.ndarray]) -> MoEPredictor:
    meta = json.loads(str(state["meta"]))
    return MoEPredictor(_layers(state, "", meta), state, _layers(state, "re_", meta))


class MoEPredictor(LearnedPredictor):
    """GoodServe's MoE predictor (see the module docstring).

    :param net: the length MoE.
    :param state: the cached state.
    :param renet: the re-prediction MoE (features ++ generated count -> remaining tokens).
    :param reprediction: ``"moe"`` (the re-prediction MoE, default) or ``"residual"`` (the
        residual-life pools of :class:`LearnedPredictor`; registry name ``moe-residual``).
    """

    name = "moe"
    keep_features = True
    train_state = staticmethod(train_moe)
    from_state = staticmethod(_build)

    def __init__(
        self,
        net: _MoE,
        state: dict[str, np.ndarray],
        renet: _MoE,
        reprediction: str = "moe",
    ):
        super().__init__(net, state)
        self.renet = renet
        scale = json.loads(str(state["meta"]))["repredict"]
        self._g = (scale["g_mean"], scale["g_std"])
        self._re_log = (scale["log_mean"], scale["log_std"])
        self.set_reprediction(reprediction)

    def set_reprediction(self, reprediction: str) -> None:
        """Pick the re-prediction rule (``moe`` or ``residual``) and the registry name."""
        if reprediction not in ("moe", "residual"):
            raise ValueError(f"reprediction must be 'moe' or 'residual', got {reprediction!r}")
        self.reprediction = reprediction
        self.name = "moe" if reprediction == "moe" else "moe-residual"

    def remaining(self, call: Any) -> int:
        """Predicted tokens still to generate after ``call.generated`` (>= 1): the
        re-prediction MoE on the prompt features and log(1 + generated) (see the module
        docstring), or the residual-life pool under ``reprediction="residual"``."""
        if self.reprediction == "residual":
            return super().remaining(call)
        return int(self.remaining_many([call])[0])

    def remaining_many(self, calls: Sequence[Any]) -> np.ndarray:
        """:meth:`remaining` of each call, the re-prediction MoE run once on all their rows (a
        τ-iteration risk check, §3.4, re-estimates every ongoing call of an instance at once)."""
        if self.reprediction == "residual":
            return super().remaining_many(calls)
        out = np.empty(len(calls), dtype=np.int64)
        feats, gxs, idx = [], [], []
        for i, call in enumerate(calls):
            g = int(call.generated)
            if g == 0:  # nothing generated yet: the §3.2 prediction itself
                out[i] = max(1, self.predict(call))
                continue
            feats.append(self.features(call))
            gxs.append((np.log1p(g) - self._g[0]) / self._g[1])
            idx.append(i)
        if idx:
            # rows = features ++ [float32(gx)], written in place of one concatenate per row
            rows = np.empty((len(idx), len(feats[0]) + 1), dtype=np.float32)
            rows[:, :-1] = feats
            rows[:, -1] = gxs
            # float64 from here, as the one-call formula float(net(x)) * std + mean computes it
            z = self.renet(rows).astype(np.float64) * self._re_log[1] + self._re_log[0]
            for i, zi in zip(idx, z.tolist(), strict=True):
                out[i] = max(1, int(round(np.expm1(zi))))
        return out
