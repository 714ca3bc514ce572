"""Fitting the engine presets' system-level constants on measured deployments, and the held-out
checks that validate them (leave one model / engine / GPU out: whole groups, never single rows).

Used by ``python -m envs.sim.calibration.calibrate_serving --fit`` and ``python -m
benchmarks.serving_fidelity``. A *row* is an
:class:`envs.sim.calibration.calibrate_serving.SiliconRow` (``backend``, ``model``, ``gpu``,
measured ``ttft_s`` / ``tpot_s``); a *prediction* is a dict with the simulated mean ``ttft_s``,
``tpot_s`` and ``latency_s`` (seconds).

``frontend_seconds`` is a client-side constant (:mod:`envs.sim.calibration.benchmark_client`), so it
is fitted exactly on predictions simulated once without it: :func:`fit_frontend`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: ``frontend_seconds`` candidates of :func:`fit_frontend`, seconds (0 and 0.1 ms ... 1 s).
FRONTEND_GRID_S = np.concatenate([[0.0], np.geomspace(1e-4, 1.0, 401)])
#: Row groupings of the held-out checks: leave one model / engine / GPU out.
HOLDOUT_KEYS = {"model": "model", "engine": "backend", "gpu": "gpu"}


def with_frontend(pred: dict, frontend_seconds: float) -> dict:
    """An engine-only prediction (``frontend_seconds`` 0) with the client-side frontend added:
    TTFT and latency grow by it, TPOT does not change (exactly what :func:`predict_row` gives
    with that constant; see :mod:`envs.sim.calibration.benchmark_client`)."""
    return {
        **pred,
        "ttft_s": pred["ttft_s"] + frontend_seconds,
        "latency_s": pred["latency_s"] + frontend_seconds,
        "frontend_seconds": frontend_seconds,
    }


def fit_frontend(rows: list[Any], preds0: list[dict]) -> float:
    """The ``frontend_seconds`` of :data:`FRONTEND_GRID_S` minimising the mean |log(predicted /
    measured)| TTFT of ``rows``, from their engine-only predictions ``preds0``."""
    if not rows:
        raise ValueError("no rows to fit frontend_seconds on")
    meas = np.array([r.ttft_s for r in rows])
    sim0 = np.array([p["ttft_s"] for p in preds0])
    losses = np.abs(np.log((sim0[None, :] + FRONTEND_GRID_S[:, None]) / meas[None, :])).mean(1)
    return float(FRONTEND_GRID_S[int(np.argmin(losses))])


def fit_frontends(rows: list[Any], preds0: list[dict]) -> dict[str, float]:
    """``frontend_seconds`` per engine among ``rows`` (each on its own rows), plus ``"*"``:
    one value fitted on every row, for an engine that has no rows to fit on."""
    out = {"*": fit_frontend(rows, preds0)}
    for engine in sorted({r.backend for r in rows}):
        idx = [i for i, r in enumerate(rows) if r.backend == engine]
        out[engine] = fit_frontend([rows[i] for i in idx], [preds0[i] for i in idx])
    return out


def leave_one_group_out(
    rows: list[Any], preds0: list[dict], key: str
) -> tuple[list[tuple[Any, dict]], dict[str, dict[str, float]]]:
    """For each value of ``key`` (``model``, ``engine`` or ``gpu``; whole groups, never single
    rows): fit ``frontend_seconds`` on the other groups' rows, predict the group's rows with it
    (an engine with no rows left, i.e. the held-out engine, takes the value fitted on all the
    other engines' rows together).

    :param preds0: engine-only predictions of ``rows`` (``frontend_seconds`` 0), in order.
    :return: (row, prediction) for every row, and the constants fitted per held-out group.
    """
    attr = HOLDOUT_KEYS[key]
    out: list[tuple[Any, dict]] = []
    fitted: dict[str, dict[str, float]] = {}
    for group in sorted({getattr(r, attr) for r in rows}):
        train = [i for i, r in enumerate(rows) if getattr(r, attr) != group]
        if not train:
            raise ValueError(f"every row has {key}={group!r}: nothing left to fit on")
        f = fit_frontends([rows[i] for i in train], [preds0[i] for i in train])
        fitted[group] = f
        for r, p in zip(rows, preds0, strict=True):
            if getattr(r, attr) == group:
                out.append((r, with_frontend(p, f.get(r.backend, f["*"]))))
    return out, fitted


__all__ = [
    "FRONTEND_GRID_S",
    "HOLDOUT_KEYS",
    "fit_frontend",
    "fit_frontends",
    "leave_one_group_out",
    "with_frontend",
]
