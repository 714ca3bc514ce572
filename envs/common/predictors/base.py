"""The output-length predictor interface every env and heuristic shares.

A predictor sees only what a scheduler may see of a just-revealed call (GoodServe §3.2): its
prompt text (``call.node.prompt``), task label (``call.node.task``), prompt length
(``call.input_tokens``) and, while it decodes, the tokens generated so far (``call.generated``).
Only the oracle predictors read the truth ``call.output_tokens`` of an unfinished call; the
online ones read it in :meth:`OutputPredictor.observe`, once the call has finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

#: Task label used when a call has none (the simulator's LLMNode default is ``chat``).
NO_TASK = ""


@runtime_checkable
class OutputPredictor(Protocol):
    """Predicts a call's output length in tokens.

    :ivar name: the registry name the predictor was made under.
    """

    name: str

    def predict(self, call: Any) -> int:
        """Predicted total output tokens of a just-revealed call (>= 0)."""
        ...

    def remaining(self, call: Any) -> int:
        """Predicted tokens still to generate after ``call.generated`` (>= 1 while unfinished).

        GoodServe §3.4 re-estimates this every τ decode iterations to track SLO risk."""
        ...

    def remaining_many(self, calls: Sequence[Any]) -> np.ndarray:
        """(n,) int64 :meth:`remaining` of each call, in order (one risk check's calls)."""
        ...

    def observe(self, call: Any) -> None:
        """A finished call, whose ``output_tokens`` is now known (online predictors learn)."""
        ...

    def reset(self, seed: int | None = None) -> None:
        """Forget per-episode online state (and reseed random draws when ``seed`` is given)."""
        ...

    def __call__(self, call: Any) -> int:
        """:meth:`predict` (a predictor is a :class:`~envs.sim.core.simulation.Simulation`
        ``output_predictor``)."""
        ...


class BasePredictor:
    """Defaults for the protocol: no online state, remaining = max(1, predict − generated).

    Instances are callable (``predictor(call) == predictor.predict(call)``), so one can be passed
    as ``output_predictor`` to :class:`envs.sim.core.simulation.Simulation`.
    """

    name = "base"

    def predict(self, call: Any) -> int:
        raise NotImplementedError

    def predict_many(self, calls: Sequence[Any]) -> np.ndarray:
        """:meth:`predict` of each call (learned predictors vectorise this)."""
        return np.asarray([self.predict(c) for c in calls], dtype=np.int64)

    def remaining(self, call: Any) -> int:
        return max(1, self.predict(call) - int(call.generated))

    def remaining_many(self, calls: Sequence[Any]) -> np.ndarray:
        """:meth:`remaining` of each call, in order (learned predictors batch their net)."""
        return np.asarray([self.remaining(c) for c in calls], dtype=np.int64)

    def observe(self, call: Any) -> None:
        return None

    def reset(self, seed: int | None = None) -> None:
        return None

    def __call__(self, call: Any) -> int:
        return self.predict(call)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def task_of(call: Any) -> str:
    """The call's task label ('' when it has none)."""
    return getattr(call.node, "task", None) or NO_TASK


def prompt_of(call: Any) -> str:
    """The call's prompt text ('' when the trace carries none)."""
    return getattr(call.node, "prompt", None) or ""


class ResidualLife:
    """Mean residual life E[L − g | L > g] of a sample of output lengths L, in tokens.

    g + E[L − g | L > g] = E[L | L > g] never decreases as g grows, so a remaining-length estimate
    built from it never predicts an earlier finish than it did before. (The remaining length
    itself may grow with g: for a heavy-tailed sample, a call that is already long is likely to
    run long — Past-Future, Gong et al. 2025, conditions on g for this reason.)

    :param lengths: observed output lengths in tokens (any order).
    """

    __slots__ = ("sorted", "suffix")

    def __init__(self, lengths: np.ndarray):
        self.sorted = np.sort(np.asarray(lengths, dtype=np.float64))
        self.suffix = np.concatenate([np.cumsum(self.sorted[::-1])[::-1], [0.0]])

    def __len__(self) -> int:
        return len(self.sorted)

    def max(self) -> float:
        return float(self.sorted[-1]) if len(self.sorted) else 0.0

    def remaining(self, generated: int) -> int | None:
        """E[L − g | L > g] rounded (>= 1), or None when no length exceeds ``generated``."""
        i = int(np.searchsorted(self.sorted, generated, side="right"))
        n = len(self.sorted) - i
        if n == 0:
            return None
        # Round half up (not Python's half-to-even): g + floor(E − g + 1/2) = floor(E + 1/2) is
        # then non-decreasing in g exactly like E[L | L > g].
        return max(1, int(np.floor(self.suffix[i] / n - generated + 0.5)))
