"""History-based prediction in the style of Past-Future (Gong et al. 2025), GoodServe §3.2.

Past-Future predicts a request's output length from the distribution of recently finished
requests rather than from the request itself. What is implemented here:

* per task, a sliding window of the output lengths (tokens) of the last ``window`` finished
  calls of this episode (fed by :meth:`HistoryPredictor.observe`);
* ``predict`` = the ``quantile`` (default: median, the MAE-optimal point) of the task's window;
  a task with no history uses the window of all tasks, and with no history at all the prior
  (256 tokens, as ``task-mean``);
* ``remaining`` = E[L − g | L > g] over the same window: the conditional distribution of the
  history given that the call has already generated g tokens (Past-Future's conditioning);
  when no history length exceeds g, max(1, predict − g).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from envs.common.predictors.base import BasePredictor, ResidualLife, task_of


class HistoryPredictor(BasePredictor):
    """Quantile of the recent finished outputs of the same task.

    :param window: finished calls kept per task (and for the all-task fallback).
    :param quantile: which quantile of the window to predict (0.5 = median).
    :param prior_tokens: prediction before any call has finished, in tokens.
    """

    name = "history"

    def __init__(self, window: int = 200, quantile: float = 0.5, prior_tokens: int = 256):
        if window < 1:
            raise ValueError(f"history window must be >= 1 call, got {window}")
        if not 0.0 <= quantile <= 1.0:
            raise ValueError(f"history quantile must be in [0, 1], got {quantile}")
        self.window = int(window)
        self.quantile = float(quantile)
        self.prior_tokens = int(prior_tokens)
        self._by_task: dict[str, deque[int]] = {}
        self._all: deque[int] = deque(maxlen=self.window)

    def _history(self, call: Any) -> deque[int]:
        h = self._by_task.get(task_of(call))
        return h if h else self._all

    def predict(self, call: Any) -> int:
        h = self._history(call)
        if not h:
            return self.prior_tokens
        return int(round(np.quantile(np.fromiter(h, dtype=np.float64), self.quantile)))

    def remaining(self, call: Any) -> int:
        h = self._history(call)
        g = int(call.generated)
        if h:
            left = ResidualLife(np.fromiter(h, dtype=np.float64)).remaining(g)
            if left is not None:
                return left
        return max(1, self.predict(call) - g)

    def observe(self, call: Any) -> None:
        out = int(call.output_tokens)
        self._by_task.setdefault(task_of(call), deque(maxlen=self.window)).append(out)
        self._all.append(out)

    def reset(self, seed: int | None = None) -> None:
        self._by_task.clear()
        self._all.clear()
