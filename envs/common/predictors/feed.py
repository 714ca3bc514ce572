"""Feed finished calls to an online predictor, through the simulation's listener hooks."""

from __future__ import annotations

from typing import Any


class PredictorFeed:
    """Simulation listener (``Simulation.add_listener``): shows each finished call's true output
    length to ``predictor.observe`` exactly once, when it finishes — what a proxy learns when a
    response ends. Online predictors (``history``, ``task-mean``) learn from it; the others
    ignore it."""

    def __init__(self, predictor: Any):
        self.predictor = predictor

    def on_call_done(self, call: Any, inst: Any, now: float) -> None:
        self.predictor.observe(call)
