"""Online per-task mean of finished calls' output lengths (a cheap proxy; servegym's own).

The PDCluster env's original ``TaskMeanPredictor``: before any call of the task has finished it
predicts a prior of 256 tokens; afterwards the rounded running mean of the finished calls of
that task in this episode.
"""

from __future__ import annotations

from typing import Any

from envs.common.predictors.base import BasePredictor, task_of


class TaskMeanPredictor(BasePredictor):
    """Running mean of observed output tokens per task; ``prior_tokens`` before any observation.

    :param prior_tokens: prediction for a task with no finished call yet, in tokens.
    :ivar observed: number of finished calls fed to :meth:`observe` this episode.
    """

    name = "task-mean"

    def __init__(self, prior_tokens: int = 256):
        self.prior_tokens = int(prior_tokens)
        self.sums: dict[str, list[float]] = {}
        self.observed = 0

    def predict(self, call: Any) -> int:
        s = self.sums.get(task_of(call))
        return int(round(s[0] / s[1])) if s else self.prior_tokens

    def observe(self, call: Any) -> None:
        s = self.sums.setdefault(task_of(call), [0.0, 0.0])
        s[0] += call.output_tokens
        s[1] += 1
        self.observed += 1

    def reset(self, seed: int | None = None) -> None:
        self.sums.clear()
        self.observed = 0
