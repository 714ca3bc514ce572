"""Reward functions shared by every servegym env, by name (``reward="..."``).

Each env reduces a finished unit of work (a workflow in PDCluster, a request in Routing) to one
**ratio** = achieved / target: C_w / H_w for a workflow (HexAgent §7.3), end-to-end latency /
E2E-SLO for a request (GoodServe §4). A reward turns ratios into per-step rewards
(:meth:`Reward.on_complete`, dense) and/or one terminal reward (:meth:`Reward.terminal`, given
every unit's ratio; unfinished ones are charged by the env). When an episode is truncated, the
units that arrived but have not finished are charged once (:meth:`Reward.on_truncate`) with their
ratio so far (elapsed / target): as if they completed at the truncation instant, a lower bound of
what they will cost, so a policy cannot earn a better return by leaving work unfinished. Whatever
the training reward, the
env's episode-end ``info["metrics"]`` carries the headline metrics from
:mod:`envs.sim.core.metrics`, so every policy is judged on identical numbers.

==============  ==========================================================  =================
name            per completion / at the end                                 episode return
==============  ==========================================================  =================
``slowdown``    −ratio^p / N (``p`` = 4)                                    −Σ ratio^p / N
``lateness``    −max(0, ratio − α) / N (``alpha`` = 2)                      −Σ lateness / N
``req99``       0; at the end −Req99 of all ratios                          −Req99
``goodput``     +1 if ratio ≤ 1 (met its SLO / target)                      units within SLO
==============  ==========================================================  =================
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.sim.core import metrics as sim_metrics


class Reward:
    """Base: no reward. ``num_units`` = N, the number of workflows or requests in the episode."""

    def __init__(self, num_units: int, **kwargs: Any):
        if kwargs:
            raise ValueError(f"{type(self).__name__} takes no options, got {sorted(kwargs)}")
        self.n = max(1, num_units)

    def on_complete(self, ratio: float) -> float:
        """Reward when one unit finishes with ``ratio`` = achieved / target."""
        return 0.0

    def terminal(self, ratios: np.ndarray) -> float:
        """Reward at the episode end, given every unit's ratio (inf for unfinished ones)."""
        return 0.0

    def on_truncate(self, ratios: np.ndarray) -> float:
        """Reward at truncation for the units that arrived and have not finished, given their
        ratios so far (elapsed / target): each is charged as if it completed now."""
        return float(sum(self.on_complete(float(r)) for r in ratios))


class SlowdownReward(Reward):
    """−ratio^p / N at each completion: a smooth surrogate of the tail (p → ∞ approaches the
    maximum ratio)."""

    def __init__(self, num_units: int, p: float = 4.0):
        super().__init__(num_units)
        self.p = float(p)

    def on_complete(self, ratio: float) -> float:
        return -(ratio**self.p) / self.n


class LatenessReward(Reward):
    """−max(0, ratio − α) / N at each completion."""

    def __init__(self, num_units: int, alpha: float = 2.0):
        super().__init__(num_units)
        self.alpha = float(alpha)

    def on_complete(self, ratio: float) -> float:
        return -max(0.0, ratio - self.alpha) / self.n


class Req99Reward(Reward):
    """−Req99 at the episode end (HexAgent's headline metric as a terminal, sparse reward)."""

    def terminal(self, ratios: np.ndarray) -> float:
        return -sim_metrics.req_tau(ratios, 0.99)


class GoodputReward(Reward):
    """+1 for each unit that finishes within its target (ratio ≤ 1): the return is the number of
    requests inside their E2E-SLO, i.e. goodput × trace duration (GoodServe Eq. 1)."""

    def on_complete(self, ratio: float) -> float:
        return 1.0 if ratio <= 1.0 else 0.0

    def on_truncate(self, ratios: np.ndarray) -> float:
        """Unfinished units earn nothing: goodput counts only completions within the target."""
        return 0.0


REWARDS: dict[str, type[Reward]] = {
    "slowdown": SlowdownReward,
    "lateness": LatenessReward,
    "req99": Req99Reward,
    "goodput": GoodputReward,
}


def make_reward(name: str, num_units: int, **kwargs: Any) -> Reward:
    """The reward registered as ``name`` for an episode of ``num_units`` units.

    :raises ValueError: for an unknown name (listing the known ones) or unknown options.
    """
    if name not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; known: {sorted(REWARDS)}")
    try:
        return REWARDS[name](num_units, **kwargs)
    except TypeError as exc:
        raise ValueError(f"reward {name!r}: bad reward_kwargs {kwargs}: {exc}") from exc
