"""What the Scepsy GPU scheduler (§5) reads and returns: the pipeline protocol it queries
(:class:`PipelineModel`, an Aggregate LLM Pipeline), :class:`SearchResult` and
:class:`SearchError`, and the Fig. 10 :data:`ABLATIONS` and :data:`DEFAULT_HEADROOM`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from envs.sim.allocation.allocations import (
    Allocation,
    Placement,
)

#: Fig. 10 ablation name -> (fractional, tensor_parallel).
ABLATIONS: dict[str, tuple[bool, bool]] = {
    "scepsy": (True, True),
    "parallelism-only": (False, True),
    "fractional-only": (True, False),
    "naive": (False, False),
}

#: Share of the APL's predicted throughput the search plans on (Scepsy's prototype: 0.9).
DEFAULT_HEADROOM = 0.9

INF = math.inf
NO_SPAN_LIMIT = 1 << 30


class SearchError(ValueError):
    """The search space is empty (names the LLM or bound responsible) or no candidate places."""


class _StagePrediction(Protocol):
    @property
    def latency(self) -> float: ...

    @property
    def throughput(self) -> float: ...


class _Prediction(Protocol):
    @property
    def latency(self) -> float: ...

    @property
    def throughput(self) -> float: ...


class PipelineModel(Protocol):
    """What the search needs from an Aggregate LLM Pipeline (§4)."""

    stats: Any  # .models: the workflow's LLMs; .name: the workflow's name

    def stage(
        self, alloc: Allocation, model: str, rate: float, stat: str = ...
    ) -> _StagePrediction: ...

    def predict(self, alloc: Allocation, rate: float, stat: str = ...) -> _Prediction: ...


@dataclass(frozen=True)
class SearchResult:
    """Outcome of :func:`search`.

    :param allocation: the chosen allocation (LLMs in the pipeline's model order).
    :param prediction: the APL's prediction of it at ``rate``.
    :param sustains: whether ``headroom ×`` its predicted throughput ``T_w`` reaches ``rate``
        with a finite predicted latency.
    :param placement: where its replicas run (None when ``require_placement=False``).
    :param rate: target workflow rate.
    :param order: LLMs from highest to lowest low-load latency contribution (pruning (i)).
    :param reference_latency: those contributions, seconds per workflow (NaN for a model
        without a whole-GPU profile when ``order`` was given).
    :param budget_units: units searched over.
    :param vectors: fraction vectors enumerated after pruning.
    :param feasible_vectors: of which every LLM has at least one valid parallelism.
    :param candidates: allocations in the pruned space (Σ over vectors of Π per-LLM choices).
    :param stage_evaluations: APL stage predictions computed.
    :param placements_tried: distinct allocations tried on the placer (1 when the best placed).
    :param rank: rank of the chosen candidate (1 = the best predicted one; sustaining
        candidates by latency first, then — if none of those places — all by throughput).
    :param unplaceable: the better-ranked candidates that did not place (first 10).
    :param unprofiled: (model, tp, share units) skipped for lack of a profile.
    :param seconds: wall time of the search.
    :param fractional: ablation flag used.
    :param tensor_parallel: ablation flag used.
    :param headroom: share of ``T_w`` planned on.
    :param planned_rate: the rate ``prediction`` is for: ``rate``, or under overload the
        fallback's ``headroom × T_max`` (module docstring).
    """

    allocation: Allocation
    prediction: Any
    sustains: bool
    placement: Placement | None
    rate: float
    order: tuple[str, ...]
    reference_latency: dict[str, float]
    budget_units: int
    vectors: int
    feasible_vectors: int
    candidates: int
    stage_evaluations: int
    placements_tried: int
    rank: int
    unplaceable: tuple[str, ...]
    unprofiled: tuple[tuple[str, int, int], ...]
    seconds: float
    fractional: bool = True
    tensor_parallel: bool = True
    headroom: float = 1.0
    planned_rate: float = math.nan

    def __post_init__(self) -> None:
        if math.isnan(self.planned_rate):
            object.__setattr__(self, "planned_rate", float(self.rate))

    @property
    def latency(self) -> float:
        return float(self.prediction.latency)

    @property
    def throughput(self) -> float:
        return float(self.prediction.throughput)

    def describe(self) -> str:
        ok = "sustains" if self.sustains else "DOES NOT sustain"
        if self.planned_rate != self.rate:
            ok += f"; planned for {self.planned_rate:.3g}/s"
        return (
            f"{self.allocation.describe()} | L={self.latency:.3f}s T={self.throughput:.2f}/s "
            f"({ok} {self.rate:g}/s, headroom {self.headroom:g}) | {self.vectors} vectors, "
            f"{self.candidates} candidates, rank {self.rank}, {self.seconds * 1e3:.0f} ms"
        )
