"""A uniformly random legal action: the floor every scheduler must beat."""

from __future__ import annotations

from typing import Any

import numpy as np

from heuristics.base import register
from heuristics.pd_cluster.base import decision_context


@register("random")
class RandomPolicy:
    """Uniformly random legal action (over all legal (slot, p, d) triples of the step; in the
    two-step space the triple is drawn at the slot step and its pair taken at the pair step).

    :param seed: seed of the policy's own generator; ``reset`` re-seeds it, so every episode
        starts from the same stream.
    """

    name = "random"
    #: Acts on the decision context alone (its ``feasible``), never on the observation.
    context_only = True

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self._pick: tuple[int, int, int] | None = None

    def reset(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self._pick = None

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        ctx = decision_context(info)
        if ctx.selected_slot >= 0 and self._pick is not None:
            # the pair step (two-step action space) of the triple drawn at the slot step
            return ctx.action(*self._pick)
        legal = np.flatnonzero(ctx.feasible.reshape(-1))
        if legal.size == 0:
            raise ValueError("no legal action in this step's decision context")
        self._pick = ctx.unflatten(int(self.rng.choice(legal)))
        return ctx.action(*self._pick)
