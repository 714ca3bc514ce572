"""Evaluation inside a training run, through :mod:`evaluation`'s own code so that its numbers
match ``evaluate.py`` exactly: held-out and validation configs, per-policy means, a model's
metrics, and the checkpoints of the final table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.config import TrainConfig


def eval_config(
    cfg: TrainConfig, policies: tuple[str, ...], seeds: tuple[int, ...] | None = None
) -> Any:
    """The ``evaluation.EvalConfig`` for ``policies`` on this run's env, on ``seeds`` (default:
    the held-out evaluation seeds)."""
    import evaluation
    from agents import eval_seeds

    opts = {
        name: getattr(cfg, name)
        for name in evaluation.ENV_FIELDS
        if hasattr(cfg, name) and getattr(cfg, name) is not None
    }
    reference = cfg.reference if cfg.reference in policies else None
    return evaluation.EvalConfig(
        env=cfg.env,
        workloads=None if cfg.workload is None else (cfg.workload,),
        policies=policies,
        reference=reference,
        seeds=eval_seeds(cfg.eval_episodes) if seeds is None else seeds,
        quiet=True,
        **opts,
    )


def mean_metrics(rows: list[dict[str, Any]], policy: str, metrics: Sequence[Any]) -> dict:
    """Mean over seeds of each metric (``evaluation.Metric``) of ``policy``; a run that did not
    report one counts as the worst value in the metric's direction."""
    out = {}
    for m in metrics:
        worst = math.inf if m.better == "lower" else -math.inf
        vals = [r["metrics"].get(m.key) for r in rows if r["policy"] == policy]
        out[m.key] = float(np.mean([worst if v is None else v for v in vals]))
    return out


def evaluate_model(model: Any, env: Any, seeds: tuple[int, ...], metrics: Sequence[Any]) -> dict:
    """Mean metrics of ``model`` (argmax actions) over ``seeds`` on ``env``."""
    import evaluation
    from agents import SB3Policy

    policy = SB3Policy(model, "current")
    rows = [{"policy": "current", **evaluation.run_episode(env, policy, s)} for s in seeds]
    return mean_metrics(rows, "current", metrics)


def latest_checkpoint(out: Path) -> Path | None:
    """The checkpoint with the most steps in ``out/checkpoints`` (SB3 ``*_<N>_steps.zip``)."""
    ckpts = sorted(
        (out / "checkpoints").glob("*_steps.zip"), key=lambda p: int(p.stem.split("_")[-2])
    )
    return ckpts[-1] if ckpts else None


def learned_rows(out: Path, history: list[dict[str, Any]], with_bc: bool) -> list[str]:
    """The checkpoints of the final table, in order: ``bc_model.zip`` (when it exists and RL
    followed), ``best_model.zip`` (when an earlier validation evaluation beat the last one, so it
    is not the final model), ``model.zip`` (always last).

    :param out: the run directory.
    :param history: the evaluations during RL (``PeriodicEvalCallback.history``).
    :param with_bc: RL ran after behaviour cloning.
    """
    rows = [f"ckpt:{out / 'model.zip'}"]
    if history and "saved_best" not in history[-1] and (out / "best_model.zip").exists():
        rows.insert(0, f"ckpt:{out / 'best_model.zip'}")
    if with_bc and (out / "bc_model.zip").exists():
        rows.insert(0, f"ckpt:{out / 'bc_model.zip'}")
    return rows
