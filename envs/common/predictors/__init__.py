"""Output-length predictors shared by every env (registry ``PREDICTORS``).

=================  ==========================================================  ==================
name               prediction of a just-revealed call's output tokens           source
=================  ==========================================================  ==================
``oracle``         the truth (an assumption, not a predictor)                   HexAgent §7
``oracle-error``   truth × U[1 − e, 1 + e], drawn once per call, seeded         HexAgent §7.4
``task-mean``      running mean of this episode's finished calls of the task    servegym
``history``        median of a sliding window of the task's finished calls      Past-Future
``mlp``            one four-layer MLP on prompt TF-IDF features                 STAR
``moe``            9 MLP experts (input × output tertile cells) + softmax gate  GoodServe §3.2
                   on prompt TF-IDF; ``remaining`` re-predicts with a second    GoodServe §3.4
                   MoE on the prompt features + generated-token count
``moe-residual``   the same MoE; ``remaining`` = mean residual life of the      servegym
                   training outputs of the prediction's (task, tier)
=================  ==========================================================  ==================

Every predictor implements :class:`OutputPredictor`: ``predict(call)``, ``remaining(call)`` (tokens
still to generate after ``call.generated``, for GoodServe §3.4's re-estimation every τ
iterations), ``observe(call)`` (a finished call) and ``reset(seed=None)`` (a new episode), and is
callable as ``predictor(call)`` so it can be given to the simulator as ``output_predictor``.

**The learned predictors (``mlp``, ``moe``) are trained on the** ``goodserve`` **generator's
synthetic prompts**: a per-task template, a difficulty phrase and requirement clauses whose
number and wording follow the output length's quartile within its task (a noisy copy of it). The
accuracy they reach measures how well they read that synthetic signal, not how well they would
predict from real prompts.

A call without prompt text still gets a prediction: its TF-IDF part is zero and it is told apart
by its log input length and task one-hot alone (a task label unseen in training, e.g. the
HexAgent workloads' ``chat``, is all zeros too, leaving the input length only).

The training / test split is fixed (:mod:`envs.common.predictors.data`); training is seeded and
cached (:mod:`envs.common.predictors.cache`). ``python -m envs.common.predictors --report``
measures all of them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from envs.common.predictors.base import BasePredictor, OutputPredictor
from envs.common.predictors.history import HistoryPredictor
from envs.common.predictors.learned import TrainConfig
from envs.common.predictors.mlp import MLPPredictor
from envs.common.predictors.moe import MoEPredictor
from envs.common.predictors.oracle import OracleErrorPredictor, OraclePredictor
from envs.common.predictors.task_mean import TaskMeanPredictor


def _learned(cls: type[MLPPredictor] | type[MoEPredictor]) -> Callable[..., OutputPredictor]:
    def make(
        model: str, seed: int, error: float, rng: Any, use_cache: bool = True, **kw: Any
    ) -> OutputPredictor:
        return cls.trained(TrainConfig(model=model, seed=seed, **kw), use_cache=use_cache)

    return make


#: name → factory(model, seed, error, rng, **kw).
PREDICTORS: dict[str, Callable[..., OutputPredictor]] = {
    "oracle": lambda model, seed, error, rng, **kw: OraclePredictor(**kw),
    "oracle-error": lambda model, seed, error, rng, **kw: OracleErrorPredictor(
        error, seed, rng, **kw
    ),
    "task-mean": lambda model, seed, error, rng, **kw: TaskMeanPredictor(**kw),
    "history": lambda model, seed, error, rng, **kw: HistoryPredictor(**kw),
    "mlp": _learned(MLPPredictor),
    "moe": _learned(MoEPredictor),
    "moe-residual": lambda model, seed, error, rng, **kw: _residual(
        _learned(MoEPredictor)(model, seed, error, rng, **kw)
    ),
}


def _residual(moe: OutputPredictor) -> OutputPredictor:
    """A view of the trained MoE (weights and memo shared) that re-predicts by residual life."""
    view = copy.copy(moe)
    assert isinstance(view, MoEPredictor), f"moe-residual wraps a MoEPredictor, got {moe!r}"
    view.set_reprediction("residual")
    return view


def make_predictor(
    name: str,
    *,
    model: str = "llama3.1-8b",
    seed: int = 0,
    error: float = 0.0,
    rng: np.random.Generator | None = None,
    **kw: Any,
) -> OutputPredictor:
    """A predictor from the registry.

    Learned predictors are trained once per configuration and process (and cached on disk); the
    returned object is shared, stateless and read-only, so calling this per env instance is
    cheap. The others are new objects with their own episode state.

    :param name: a key of :data:`PREDICTORS`.
    :param model: catalog model the training requests are generated for (learned only).
    :param seed: training seed (learned) or error-draw seed (``oracle-error``).
    :param error: relative error e of ``oracle-error``.
    :param rng: a Generator for ``oracle-error``'s draws instead of ``seed``.
    :param kw: the predictor's own options: ``prior_tokens`` (``task-mean``, ``history``),
        ``window`` / ``quantile`` (``history``), :class:`TrainConfig` fields and ``use_cache``
        (``mlp``, ``moe``).
    :raises ValueError: on an unknown name, listing the known ones.
    """
    if name not in PREDICTORS:
        raise ValueError(f"unknown output predictor {name!r}; known: {', '.join(PREDICTORS)}")
    return PREDICTORS[name](model, seed, error, rng, **kw)


__all__ = [
    "PREDICTORS",
    "BasePredictor",
    "HistoryPredictor",
    "MLPPredictor",
    "MoEPredictor",
    "OracleErrorPredictor",
    "OraclePredictor",
    "OutputPredictor",
    "TaskMeanPredictor",
    "TrainConfig",
    "make_predictor",
]
