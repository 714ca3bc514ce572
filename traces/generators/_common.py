"""Shared helpers for the trace generators: stats loading, seeded sampling, arrival processes.

All randomness flows through a ``numpy.random.Generator`` passed in by the caller; nothing here
touches a global RNG.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

STATS_DIR = Path(__file__).resolve().parent.parent / "stats"


@cache
def _load(name: str) -> dict[str, Any]:
    path = STATS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"fitted statistics {str(path)!r} missing; run python -m traces.fit"
        )
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def load_stats(name: str) -> dict[str, Any]:
    """The fitted statistics ``traces/stats/<name>.yaml`` (written by :mod:`traces.fit`).

    :param name: stats file stem, e.g. ``"sharegpt"``.
    """
    return _load(name)


def data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The raw-trace data directory: ``path`` if given, else ``$SERVEGYM_DATA``.

    :param path: explicit directory, or None.
    :raises ValueError: when neither is set or the directory does not exist.
    """
    chosen = path if path is not None else os.environ.get("SERVEGYM_DATA")
    if not chosen:
        raise ValueError("no data dir: pass data_dir=... or set SERVEGYM_DATA")
    p = Path(chosen)
    if not p.is_dir():
        raise ValueError(f"data dir {str(p)!r} is not a directory")
    return p


def sample_quantiles(rng: np.random.Generator, table: list[int], size: int) -> np.ndarray:
    """Inverse-CDF sample from a 101-point percentile table (see :mod:`traces.fit`).

    :param rng: random generator.
    :param table: the 0th..100th percentiles, non-decreasing.
    :param size: number of samples.
    :return: float array of ``size`` samples, piecewise-linear between percentiles.
    """
    grid = np.linspace(0.0, 1.0, len(table))
    return np.interp(rng.random(size), grid, np.asarray(table, dtype=float))


def sample_tokens(
    rng: np.random.Generator, table: list[int], size: int, minimum: int = 1
) -> np.ndarray:
    """Integer token counts from a percentile table, at least ``minimum``.

    :param rng: random generator.
    :param table: the 0th..100th percentiles (tokens).
    :param size: number of samples.
    :param minimum: smallest allowed value (tokens).
    """
    return np.maximum(np.rint(sample_quantiles(rng, table, size)), minimum).astype(int)


def sample_hist(rng: np.random.Generator, hist: dict[int, float], size: int) -> np.ndarray:
    """Integers drawn from a ``{value: probability}`` histogram.

    :param rng: random generator.
    :param hist: value -> probability (renormalised).
    :param size: number of samples.
    """
    values = np.array(sorted(hist), dtype=int)
    p = np.array([hist[v] for v in sorted(hist)], dtype=float)
    return rng.choice(values, size=size, p=p / p.sum())


def arrivals(
    rng: np.random.Generator,
    count: int,
    rate: float,
    process: str = "poisson",
    cv: float = 1.0,
) -> np.ndarray:
    """Sorted arrival times (seconds, first at 0) of a renewal process with mean rate ``rate``.

    :param rng: random generator.
    :param count: number of arrivals (>= 1).
    :param rate: mean arrival rate (arrivals per second, > 0).
    :param process: ``"poisson"`` (exponential gaps) or ``"bursty"`` (Gamma gaps with
        coefficient of variation ``cv``, the ServeGen model).
    :param cv: coefficient of variation of the gaps for ``"bursty"``.
    """
    check_count(count)
    if not rate > 0:
        raise ValueError(f"rate must be > 0 arrivals/s, got {rate}")
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate, count - 1)
    elif process == "bursty":
        if not cv > 0:
            raise ValueError(f"bursty cv must be > 0, got {cv}")
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0 / (rate * shape), count - 1)
    else:
        raise ValueError(f"unknown arrival process {process!r}; expected 'poisson' or 'bursty'")
    return np.round(np.concatenate([[0.0], np.cumsum(gaps)]), 6)


#: Most records one generator call makes: 2,500x the largest paper workload (BFCL, 400 workflows).
#: A million workflows take minutes and gigabytes; a larger count is a typo, not a hang to wait on.
MAX_COUNT = 1_000_000


def check_count(count: int) -> int:
    """Validate a record count.

    :param count: number of records requested.
    :raises ValueError: unless ``count`` is an integer in [1, :data:`MAX_COUNT`].
    """
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")
    if count > MAX_COUNT:
        raise ValueError(f"count must be at most {MAX_COUNT:,} records, got {count:,}")
    return int(count)


def generate_family(
    stats_name: str,
    id_prefix: str,
    build_workflow: Callable[..., Any],
    seed: int,
    count: int | None,
    rate: float | None,
    model: str | None,
    arrival_process: str,
) -> list[Any]:
    """The shared body of the single-family generators: draw ``count`` arrivals at ``rate``
    (defaults from the family's stats YAML), then build one workflow per arrival with
    ``build_workflow(rng, id, arrival, model, stats)``, all from one seeded RNG."""
    stats = load_stats(stats_name)
    d = stats["defaults"]
    count = check_count(d["count"] if count is None else count)
    rng = np.random.default_rng(seed)
    times = arrivals(rng, count, d["rate_per_s"] if rate is None else rate, arrival_process)
    model = model or d["model"]
    return [
        build_workflow(rng, f"{id_prefix}-{i}", float(times[i]), model, stats) for i in range(count)
    ]
