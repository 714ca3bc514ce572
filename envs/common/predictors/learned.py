"""What the learned predictors (``mlp``, ``moe``) share: training configuration, data,
tiers, the residual-life pools behind ``remaining``, state (de)serialisation and the predictor
class that wraps a trained model.

Targets are log(1 + output tokens), standardised, fit with an L1 loss: outputs span 1 to ~17k
tokens across tasks, and the minimiser of L1 is the conditional median, which is also the
minimiser of the MAE the predictors are judged by (the median commutes with the monotone log).

``remaining`` (GoodServe §3.4 re-estimation; the paper re-featurises the tokens generated so far,
which our simulator does not produce) is the mean residual life E[L − g | L > g] of the training
outputs whose *prediction* fell in the same (task, output tier) — so it is calibrated to this
predictor's own errors —, falling back to the tier over all tasks, then to all training outputs,
then to max(1, predict − g). Pools with fewer than ``min_pool`` outputs are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from envs.common.predictors.base import BasePredictor, ResidualLife, task_of
from envs.common.predictors.data import Probe, goodserve_requests, probes
from envs.common.predictors.features import Featurizer, prompt_of

#: Memoised predictions kept per learned predictor before the memo is cleared.
MEMO_SIZE = 200_000


@dataclass(frozen=True)
class TrainConfig:
    """Everything a learned predictor's weights depend on (hashed for the cache).

    :param model: catalog model name passed to the goodserve generator.
    :param seed: seed of the half split and of every network's initialisation.
    :param train_count: training requests (see :mod:`envs.common.predictors.data`).
    :param hidden: hidden width of each MLP.
    :param steps: full-batch Adam steps per network.
    :param lr: Adam learning rate.
    :param weight_decay: Adam weight decay.
    :param tiers: tiers per length axis (MoE: K = tiers², GoodServe §3.2 uses 3).
    :param min_cell: an MoE cell with fewer expert-half requests trains on the whole half.
    :param min_pool: smallest residual-life pool used by ``remaining``.
    """

    model: str = "llama3.1-8b"
    seed: int = 0
    train_count: int = 4000
    hidden: int = 32
    steps: int = 300
    lr: float = 1e-2
    weight_decay: float = 1e-3
    tiers: int = 3
    min_cell: int = 16
    min_pool: int = 20


@dataclass
class TrainingSet:
    """Featurised training requests: features x (n, d), standardised log targets y."""

    calls: list[Probe]
    featurizer: Featurizer
    x: np.ndarray
    y: np.ndarray
    log_mean: float
    log_std: float

    @classmethod
    def load(cls, cfg: TrainConfig) -> TrainingSet:
        calls = probes(goodserve_requests("train", cfg.train_count, cfg.model))
        feat = Featurizer.fit(calls)
        logs = np.log1p(np.array([c.output_tokens for c in calls], dtype=np.float64))
        mean, std = float(logs.mean()), float(logs.std()) or 1.0
        y = ((logs - mean) / std).astype(np.float32)
        return cls(calls, feat, feat.transform(calls), y, mean, std)

    def outputs(self) -> np.ndarray:
        return np.array([c.output_tokens for c in self.calls], dtype=np.float64)

    def inputs(self) -> np.ndarray:
        return np.array([c.input_tokens for c in self.calls], dtype=np.float64)


def tier_thresholds(values: np.ndarray, tiers: int) -> np.ndarray:
    """The inner quantiles splitting ``values`` into ``tiers`` equal-count tiers (tertiles)."""
    return np.quantile(values, np.arange(1, tiers) / tiers)


def tier_of(values: np.ndarray | float, thresholds: np.ndarray) -> np.ndarray:
    """Tier index (0 = shortest) of each value."""
    return np.searchsorted(thresholds, values, side="right")


class Model(Protocol):
    """A trained network: standardised log-length predictions from features."""

    def __call__(self, x: np.ndarray) -> np.ndarray: ...


def pack(
    meta: dict[str, Any],
    arrays: dict[str, np.ndarray],
    ts: TrainingSet,
    cfg: TrainConfig,
    thresholds: np.ndarray,
    predicted: np.ndarray,
) -> dict[str, np.ndarray]:
    """State to cache: the networks' arrays, residual-life pools and a JSON ``meta`` string."""
    tasks = [task_of(c) for c in ts.calls]
    tiers = tier_of(predicted, thresholds)
    outs = ts.outputs()
    keys, chunks = [], []
    for task in sorted(set(tasks)):
        for t in range(cfg.tiers):
            keys.append(f"{task}|{t}")
            chunks.append(outs[(np.array(tasks) == task) & (tiers == t)])
    for t in range(cfg.tiers):
        keys.append(f"*|{t}")
        chunks.append(outs[tiers == t])
    keys.append("*|*")
    chunks.append(outs)
    meta = dict(
        meta,
        config=asdict(cfg),
        featurizer=ts.featurizer.to_state(),
        log_mean=ts.log_mean,
        log_std=ts.log_std,
        output_thresholds=[float(v) for v in thresholds],
        pool_keys=keys,
        pool_sizes=[len(c) for c in chunks],
    )
    return dict(arrays, meta=np.array(json.dumps(meta)), pool_outputs=np.concatenate(chunks))


class LearnedPredictor(BasePredictor):
    """A trained model behind the predictor protocol (stateless: observe / reset do nothing).

    Build one per env cheaply with :func:`envs.common.predictors.make_predictor`: the weights are
    loaded once per process and shared read-only.

    :param net: standardised-log predictions from features.
    :param state: the cached state (``meta`` and ``pool_outputs``).
    """

    name = "learned"
    #: Memoise each call's features (:meth:`features`): only a predictor that reads them again
    #: after :meth:`predict` (the MoE's re-prediction) needs the memory (~1.5 KB per prompt).
    keep_features = False
    #: ``cfg -> state`` (the training run) and ``state -> predictor``, set by each subclass.
    train_state: Any = None
    from_state: Any = None

    @classmethod
    def trained(cls, cfg: TrainConfig, use_cache: bool = True) -> Any:
        """The predictor for ``cfg``: trained (on one torch thread) or loaded from the cache."""
        import envs.common.predictors.nets as nets
        from envs.common.predictors.cache import cached

        def train() -> dict[str, np.ndarray]:
            return nets.single_threaded(cls.train_state, cfg)

        return cached(cls.name, asdict(cfg), train, cls.from_state, use_cache)

    def __init__(self, net: Model, state: dict[str, np.ndarray]):
        meta = json.loads(str(state["meta"]))
        self.net = net
        self._memo: dict[tuple[str, int, str], int] = {}
        self._features: dict[tuple[str, int, str], np.ndarray] = {}
        self.featurizer = Featurizer.from_state(meta["featurizer"])
        self.log_mean = float(meta["log_mean"])
        self.log_std = float(meta["log_std"])
        self.thresholds = np.asarray(meta["output_thresholds"], dtype=np.float64)
        self.config = TrainConfig(**meta["config"])
        outs = np.asarray(state["pool_outputs"], dtype=np.float64)
        bounds = np.cumsum([0, *meta["pool_sizes"]])
        self.pools: dict[str, ResidualLife] = {}
        for key, a, b in zip(meta["pool_keys"], bounds[:-1], bounds[1:], strict=True):
            if b - a >= (1 if key == "*|*" else self.config.min_pool):
                self.pools[key] = ResidualLife(outs[a:b])
        if "*|*" not in self.pools:
            raise ValueError("learned predictor state has no training outputs")

    def predict_many(self, calls: Sequence[Any]) -> np.ndarray:
        z = self.net(self.featurizer.transform(calls)) * self.log_std + self.log_mean
        return np.maximum(0, np.rint(np.expm1(z))).astype(np.int64)

    def features(self, call: Any) -> np.ndarray:
        """(dim,) float32 features of ``call``; memoised on (prompt, prompt length, task) when
        the predictor re-reads them (:attr:`keep_features`: the MoE's re-prediction at every
        τ-iteration re-estimate, §3.4). The memo holds no episode state."""
        key = (prompt_of(call), int(call.input_tokens), task_of(call))
        x = self._features.get(key)
        if x is None:
            x = self.featurizer.transform([call])[0]
            if self.keep_features:
                if len(self._features) >= MEMO_SIZE:
                    self._features.clear()
                self._features[key] = x
        return x

    def predict(self, call: Any) -> int:
        # A prediction is a function of (prompt, prompt length, task) only, so it is memoised on
        # them: the τ-iteration re-estimates (§3.4) ask again for every running call. The memo
        # holds no episode state. One row through the net, as predict_many([call]) computes it.
        key = (prompt_of(call), int(call.input_tokens), task_of(call))
        pred = self._memo.get(key)
        if pred is None:
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            z = self.net(self.features(call)[None, :]) * self.log_std + self.log_mean
            pred = self._memo[key] = int(np.maximum(0, np.rint(np.expm1(z))).astype(np.int64)[0])
        return pred

    def remaining(self, call: Any) -> int:
        pred = self.predict(call)
        g = int(call.generated)
        tier = int(tier_of(pred, self.thresholds))
        for key in (f"{task_of(call)}|{tier}", f"*|{tier}", "*|*"):
            pool = self.pools.get(key)
            left = pool.remaining(g) if pool is not None else None
            if left is not None:
                return left
        return max(1, pred - g)
