"""A uniformly random legal action: the floor every scheduler must beat."""

from __future__ import annotations

from typing import Any

import numpy as np

from heuristics.base import register
from heuristics.pd_cluster.base import decision_context


@register("random")
class RandomPolicy:
    """Uniformly random legal action (over all legal (slot, p, d) triples of the step).

    :param seed: seed of the policy's own generator; ``reset`` re-seeds it, so every episode
        starts from the same stream.
    """

    name = "random"
    #: Acts on the decision context alone (its ``feasible``), never on the observation.
    context_only = True

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)

    def reset(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        legal = np.flatnonzero(decision_context(info).feasible.reshape(-1))
        if legal.size == 0:
            raise ValueError("no legal action in this step's decision context")
        return int(self.rng.choice(legal))
