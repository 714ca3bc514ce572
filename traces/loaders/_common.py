"""Helpers shared by the trace loaders: locating source files, reading JSONL, Poisson arrivals."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from traces.sources import require_file


class FilteredRecordsWarning(UserWarning):
    """Emitted when a loader drops source records under a documented filter rule.

    The message names the source, the rule and how many records it removed.
    """


def source_file(data_dir: Path | str | None, relpath: str) -> Path:
    """Return the path of a raw source file inside the data directory.

    :param data_dir: data directory (``None``: ``$SERVEGYM_DATA``; see :mod:`traces.data`).
    :param relpath: path of the file relative to the data directory, e.g. ``"mooncake/x.jsonl"``.
    :raises traces.data.DataDirNotFoundError: when there is no data directory.
    :raises traces.sources.MissingDataFileError: naming the missing file and how to fetch it.
    """
    return require_file(relpath, data_dir)


def check_limit(limit: int | None) -> None:
    """Raise ``ValueError`` unless ``limit`` is ``None`` or a positive integer.

    :param limit: maximum number of records to return.
    """
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be None or a positive integer, got {limit!r}")


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSON Lines file.

    Blank lines carry no record (RAGPulse's trace ends with one) and are passed over.

    :param path: the file.
    :raises ValueError: naming the file and line of a line that is not a JSON object.
    """
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc})") from exc
            if not isinstance(obj, dict):
                raise ValueError(
                    f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}"
                )
            yield lineno, obj


def require_int(value: Any, *, field: str, where: str, minimum: int = 0) -> int:
    """Return ``value`` if it is an integer >= ``minimum``; otherwise raise naming the record.

    :param value: the source value.
    :param field: source field name, for the error message.
    :param where: record location (``file:line``), for the error message.
    :param minimum: smallest accepted value.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}: {field} must be an integer >= {minimum}, got {value!r}")
    return value


def poisson_arrivals(n: int, *, rate: float, seed: int) -> list[float]:
    """Arrival times of ``n`` workflows from a Poisson process, the first at 0.0.

    Used for sources without timestamps (BFCL, LATS), as in HexAgent §7.1.

    :param n: number of arrivals.
    :param rate: arrival rate in workflows per second (> 0).
    :param seed: seed of the numpy generator; the same seed gives the same arrivals.
    :return: sorted arrival times in seconds; gaps are exponential with mean ``1 / rate``.
    """
    if not rate > 0:
        raise ValueError(f"rate must be > 0 workflows/s, got {rate!r}")
    if n <= 0:
        return []
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def warn_filtered(source: str, counts: dict[str, int]) -> None:
    """Report records dropped under documented filter rules (no warning when all counts are 0).

    :param source: loader name.
    :param counts: rule description -> number of records it removed.
    """
    dropped = {rule: n for rule, n in counts.items() if n}
    if dropped:
        detail = "; ".join(f"{n} {rule}" for rule, n in dropped.items())
        warnings.warn(f"{source}: filtered {detail}", FilteredRecordsWarning, stacklevel=3)
