"""Azure LLM inference traces 2023 (Splitwise) -> :class:`~traces.schema.Request` records.

Source: ``Azure/AzurePublicDataset`` ``data/AzureLLMInferenceTrace_{code,conv}.csv``
(SOURCES.md §2, CC-BY-4.0; attribution: Patel et al., "Splitwise", ISCA 2024). CSV with header:

===============  ================================================  =====================
source column    meaning                                           ->  Request field
===============  ================================================  =====================
TIMESTAMP        wall clock ``YYYY-MM-DD HH:MM:SS.fffffff``        arrival (s from the
                 (2023-11-16, no timezone; sorted in the file)     first row)
ContextTokens    prompt tokens                                     input_tokens
GeneratedTokens  generated tokens                                  output_tokens
===============  ================================================  =====================

Only the code trace is in the traces-raw snapshot; ``trace="conversation"`` reads
``AzureLLMInferenceTrace_conv.csv`` (same schema) if a user downloads it. The trace does not
name the serving model (Splitwise served Llama-2-70B and BLOOM-176B); ``model`` defaults to
``llama3.1-70b`` because some prompts (max 7,437 tokens) exceed Llama-2's 4,096-token context.
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

from traces.loaders._common import check_limit, source_file
from traces.schema import Request

AZURE_FILES = {
    "code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "conversation": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
}
_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


def _parse_timestamp(text: str, where: str) -> float:
    """Seconds since the epoch (naive, read as UTC) of ``YYYY-MM-DD HH:MM:SS[.f...]``."""
    base, _, frac = text.partition(".")
    try:
        whole = datetime.strptime(base, "%Y-%m-%d %H:%M:%S")
        fraction = int(frac) / 10 ** len(frac) if frac else 0.0
    except ValueError as exc:
        raise ValueError(
            f"{where}: TIMESTAMP {text!r} is not 'YYYY-MM-DD HH:MM:SS.fffffff'"
        ) from exc
    # Differences are all we use, so the (unknown) timezone cancels out.
    return (whole - datetime(1970, 1, 1)).total_seconds() + fraction


def _int_field(text: str, column: str, where: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ValueError(f"{where}: {column} must be an integer >= {minimum}, got {text!r}")
    return value


def load_azure(
    data_dir: Path | str | None = None,
    *,
    trace: str = "code",
    model: str = "llama3.1-70b",
    limit: int | None = None,
) -> list[Request]:
    """Load an Azure 2023 LLM inference trace as requests, arrivals in seconds from the first.

    :param data_dir: data directory holding ``azure_llm_2023/`` (``None``: ``$SERVEGYM_DATA``).
    :param trace: ``code`` (task label ``code``) or ``conversation`` (task label ``chat``).
    :param model: catalog model name given to every request.
    :param limit: return only the first ``limit`` requests (``None``: all).
    :return: requests sorted by arrival; ``meta`` holds ``source``, ``row`` and the wall-clock
        ``timestamp`` string.
    :raises ValueError: for a malformed row or a timestamp earlier than its predecessor.
    """
    if trace not in AZURE_FILES:
        raise ValueError(f"unknown Azure trace {trace!r}; expected one of {sorted(AZURE_FILES)}")
    check_limit(limit)
    path = source_file(data_dir, AZURE_FILES[trace])
    task = "code" if trace == "code" else "chat"
    records: list[Request] = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header != _HEADER:
            raise ValueError(f"{path}: header {header!r}; expected {_HEADER!r}")
        first = prev = None
        for row_no, row in enumerate(reader, 1):
            where = f"{path}: data row {row_no}"
            if len(row) != 3:
                raise ValueError(f"{where}: expected 3 columns {_HEADER}, got {row!r}")
            t = _parse_timestamp(row[0], where)
            if prev is not None and t < prev:
                raise ValueError(f"{where}: TIMESTAMP {row[0]} is earlier than the previous row")
            prev = t
            if first is None:
                first = t
            records.append(
                Request(
                    id=f"azure-{trace}-{len(records)}",
                    arrival=round(t - first, 7),
                    model=model,
                    input_tokens=_int_field(row[1], "ContextTokens", where, 1),
                    output_tokens=_int_field(row[2], "GeneratedTokens", where, 1),
                    task=task,
                    meta={"source": f"azure_llm_2023/{trace}", "row": row_no, "timestamp": row[0]},
                )
            )
            if limit is not None and len(records) >= limit:
                break
    return records
