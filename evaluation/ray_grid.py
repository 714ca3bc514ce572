"""The evaluation grid as Ray tasks (``evaluate.py --ray``): each task rebuilds the env and
the policy on the worker and returns the same row the serial run does.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from evaluation.config import EvalConfig, EvaluationError, Sweep
from evaluation.runs import run_one


class PartialEvaluation(EvaluationError):
    """Some runs of a Ray evaluation failed: ``rows`` holds the others', ``failures`` one line
    per failed run naming its (workload, policy, seed) and error."""

    def __init__(self, rows: list[dict[str, Any]], failures: list[str]):
        super().__init__(
            f"{len(failures)} of {len(rows) + len(failures)} runs failed:\n  "
            + "\n  ".join(failures)
        )
        self.rows = rows
        self.failures = failures


def evaluate_task(
    config: Mapping[str, Any], workload: str, overrides: Mapping[str, Any], spec: str, seed: int
) -> dict[str, Any]:
    """One run on a Ray worker: ``config`` is a resolved :class:`EvalConfig` as a dict (sent as
    plain data, so a worker needs only this package on its path)."""
    fields = dict(config)
    if fields.get("sweep") is not None:
        fields["sweep"] = Sweep(**fields["sweep"])
    cfg = EvalConfig(**{**fields, "ray": None, "quiet": True})
    return run_one(cfg, workload, dict(overrides), spec, seed)


def evaluate_on_ray(
    config: EvalConfig, runs: Sequence[tuple[str, Mapping[str, Any], str, int]]
) -> list[dict[str, Any]]:
    """Every run as a Ray task (:func:`evaluate_task`; Ray connected by
    ``agents.distributed.init_ray``); rows in the serial order.

    :raises PartialEvaluation: if a task failed (after every other task finished).
    """
    from agents.distributed import init_ray
    from envs.sim.core.progress import progress

    ray = init_ray(config.ray)
    task = ray.remote(evaluate_task)
    payload = dataclasses.asdict(config)
    futures = [task.remote(payload, w, dict(o), p, s) for w, o, p, s in runs]
    index = {f: i for i, f in enumerate(futures)}
    results: list[Any] = [None] * len(futures)
    failures: dict[int, str] = {}
    pending = list(futures)
    with progress(
        total=len(futures), desc="evaluate (ray)", unit="run", disable=config.quiet, file=sys.stderr
    ) as bar:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for future in done:
                i = index[future]
                workload, overrides, spec, seed = runs[i]
                try:
                    results[i] = ray.get(future)
                except Exception as exc:  # a task's error: report it, keep the others' rows
                    cause = getattr(exc, "cause", None) or exc
                    where = f" {dict(overrides)}" if overrides else ""
                    failures[i] = (
                        f"policy {spec!r} on {workload}{where} seed {seed}: "
                        f"{type(cause).__name__}: {cause}"
                    )
                bar.update(1)
    rows = [r for i, r in enumerate(results) if i not in failures]
    if failures:
        raise PartialEvaluation(rows, [failures[i] for i in sorted(failures)])
    return rows
