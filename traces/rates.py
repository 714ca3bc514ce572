"""Arrival-rate schedules for multi-period episodes (``servegym/Allocation-v0``'s autoscaling
variant): a constant rate, or a window of a real service's rate shape scaled to a base rate.

The shapes are fitted by :func:`traces.fit.fit_rate_traces` into ``traces/stats/rate_traces.yaml``
(requests per bin divided by the trace's mean rate):

``ragpulse_hourly``
    168 hourly bins of the 7-day RAGPulse trace (a university RAG service; diurnal, with quiet
    nights). Days 0–4 (bins 0–119) are the **training** windows, days 5–6 (120–167) **held out**.
``azure_code_minutely``
    58 one-minute bins of the Azure LLM code trace (Splitwise, 2023; bursty).

One bin of the shape becomes one allocation period of the episode (time is compressed: an hour
of RAGPulse lasts ``period_seconds`` of simulated time).

Example::

    rate_schedule("ragpulse_hourly", base_rate=8.0, periods=12, start=24)   # hours 24-35
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from traces.generators._common import load_stats

#: Bins of each shape that training may use; the rest are held out for evaluation.
TRAIN_BINS = {"ragpulse_hourly": range(0, 120), "azure_code_minutely": range(0, 40)}
HELDOUT_BINS = {"ragpulse_hourly": range(120, 168), "azure_code_minutely": range(40, 58)}


@cache
def _shapes() -> dict[str, Any]:
    return load_stats("rate_traces")


def rate_trace_names() -> list[str]:
    """Names of the packaged rate shapes."""
    return sorted(_shapes())


def rate_shape(name: str) -> np.ndarray:
    """The normalised shape ``name`` (mean 1 over the whole trace).

    :raises ValueError: for an unknown name, listing the known ones.
    """
    shapes = _shapes()
    if name not in shapes:
        raise ValueError(f"unknown rate trace {name!r}; known: {rate_trace_names()}")
    return np.asarray(shapes[name]["shape"], dtype=float)


def rate_schedule(
    name: str, base_rate: float, periods: int, start: int = 0, floor: float = 0.0
) -> list[float]:
    """``periods`` consecutive bins of shape ``name`` from bin ``start`` (wrapping around),
    each times ``base_rate`` (workflows/s), at least ``floor``.

    :raises ValueError: for an unknown name, ``base_rate`` <= 0, ``periods`` < 1 or a
        negative ``start``.
    """
    if not base_rate > 0:
        raise ValueError(f"base_rate must be > 0 workflows/s, got {base_rate}")
    if isinstance(periods, bool) or not isinstance(periods, int) or periods < 1:
        raise ValueError(f"periods must be an integer >= 1, got {periods!r}")
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    shape = rate_shape(name)
    idx = (start + np.arange(periods)) % shape.size
    return [max(float(floor), float(base_rate * x)) for x in shape[idx]]
