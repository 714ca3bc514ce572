"""How a fitted statistic summarises a raw sample, for :mod:`traces.fit`: 101-point quantile
tables (the mean of a heavy tail kept), count histograms, stable rounding, and the readers of
raw files the fits share. The conventions are described in :mod:`traces.fit`'s docstring.
"""

from __future__ import annotations

import ast
import csv
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

#: The percentiles of a quantile table: 0, 1, ..., 100.
PERCENTILES = np.arange(101)


def quantiles(values: Iterable[float]) -> list[int]:
    """The 0th..100th percentiles of ``values`` as integers.

    :param values: a non-empty sample (tokens, milliseconds, ...).
    :return: 101 integers, non-decreasing.
    """
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        raise ValueError("quantiles() needs a non-empty sample, got 0 values")
    q = np.percentile(arr, PERCENTILES)
    # Heavy tails: a straight line from p99 to the sample maximum would inflate the mean, so
    # the last entry ends a linear top segment whose mean is the mean of the top 1 % instead.
    top = arr[arr >= q[99]]
    q[100] = max(q[99], 2 * top.mean() - q[99])
    return [int(round(v)) for v in q]


def histogram(values: Iterable[int]) -> dict[int, float]:
    """Empirical probability of each integer value.

    :param values: a non-empty sample of integers.
    :return: ``{value: probability}`` sorted by value, probabilities rounded to 6 decimals.
    """
    counts = Counter(int(v) for v in values)
    total = sum(counts.values())
    if total == 0:
        raise ValueError("histogram() needs a non-empty sample, got 0 values")
    return {k: round(counts[k] / total, 6) for k in sorted(counts)}


def round_sig(x: float, digits: int = 4) -> float:
    """Round to ``digits`` significant digits so the YAML is stable across platforms."""
    return float(f"{float(x):.{digits}g}")


def chars4(text: str) -> int:
    """``chars/4``: the usual rough token estimate of a text (at least 1)."""
    return max(1, round(len(text) / 4))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every non-blank line of a JSON Lines file, parsed."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def csv_column(path: Path, column: str) -> np.ndarray:
    """One column of a CSV file with a header row, as floats."""
    with open(path, encoding="utf-8", newline="") as f:
        return np.array([float(row[column]) for row in csv.DictReader(f)])


def pdf_samples(pdf_literal: str, n: int = 20000) -> np.ndarray:
    """Deterministic sample (by quantile grid) of a ServeGen ``{value: probability}`` PDF."""
    pdf = ast.literal_eval(pdf_literal)
    values = np.array(sorted(pdf), dtype=float)
    cdf = np.cumsum([pdf[v] for v in sorted(pdf)])
    cdf /= cdf[-1]
    grid = (np.arange(n) + 0.5) / n
    return values[np.searchsorted(cdf, grid)]
