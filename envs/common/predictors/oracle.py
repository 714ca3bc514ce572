"""Oracle predictors: the truth, and the truth with bounded relative error.

Knowing every call's output length is an *assumption* several papers evaluate under (HexAgent
§7 runs with true lengths; its sensitivity study multiplies them by a random factor). These are
upper bounds for the learned predictors, not something a deployed scheduler can have.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.common.predictors.base import BasePredictor


class OraclePredictor(BasePredictor):
    """The true output length; remaining = true length − generated (>= 1)."""

    name = "oracle"

    def predict(self, call: Any) -> int:
        return int(call.output_tokens)

    def remaining(self, call: Any) -> int:
        return max(1, int(call.output_tokens) - int(call.generated))


class OracleErrorPredictor(BasePredictor):
    """Truth × f with f ~ U[1 − e, 1 + e] drawn once per call (keyed by ``call.uid``), from a
    seeded numpy Generator in the order calls are first seen: deterministic for a seed and call
    order. ``remaining`` = max(1, round((L − g) × f)), the same relative error on what is left.

    :param error: e in [0, 1).
    :param seed: seed of the Generator (ignored when ``rng`` is given).
    :param rng: a Generator to draw from instead.
    """

    name = "oracle-error"

    def __init__(self, error: float = 0.0, seed: int = 0, rng: np.random.Generator | None = None):
        if not 0.0 <= error < 1.0:
            raise ValueError(f"oracle-error needs error e in [0, 1), got {error}")
        self.error = float(error)
        self._seed = seed
        self.rng = rng if rng is not None else np.random.default_rng(seed)
        self._factors: dict[Any, float] = {}

    def factor(self, call: Any) -> float:
        """This call's error factor f (drawn on first sight)."""
        key = getattr(call, "uid", None)
        if key is None:
            key = id(call)
        f = self._factors.get(key)
        if f is None:
            f = self._factors[key] = float(self.rng.uniform(1.0 - self.error, 1.0 + self.error))
        return f

    def predict(self, call: Any) -> int:
        return max(0, int(round(call.output_tokens * self.factor(call))))

    def remaining(self, call: Any) -> int:
        left = int(call.output_tokens) - int(call.generated)
        return max(1, int(round(left * self.factor(call))))

    def reset(self, seed: int | None = None) -> None:
        """Forget the per-call factors; reseed when ``seed`` is given."""
        self._factors.clear()
        if seed is not None:
            self.rng = np.random.default_rng(seed)
