"""Mooncake (Kimi) request traces -> :class:`~traces.schema.Request` records.

Source: ``kvcache-ai/Mooncake`` ``FAST25-release/traces/*.jsonl`` (SOURCES.md §1, Apache-2.0;
cite the Mooncake FAST'25 paper). One JSON object per line:

==============  =====================================================  ======================
source field    meaning                                                ->  Request field
==============  =====================================================  ======================
timestamp       ms since trace start (sorted in the file)              arrival (s)
input_length    prompt tokens                                          input_tokens
output_length   generated tokens                                       output_tokens
hash_ids        remapped hashes of the prompt's 512-token prefix       prefix_hashes
                blocks (the last block may be partial)
==============  =====================================================  ======================

The traces do not name the serving model; ``model`` picks a catalog model for all requests
(default ``llama3.1-70b``: a 128k-token context holds the long Kimi prompts, p99 85k tokens).
"""

from __future__ import annotations

from pathlib import Path

from traces.loaders._common import check_limit, iter_jsonl, require_int, source_file
from traces.schema import Request

#: Tokens per ``hash_ids`` block (SOURCES.md §1).
MOONCAKE_BLOCK_TOKENS = 512

#: Loader name -> file inside the data directory.
MOONCAKE_FILES = {
    "conversation": "mooncake/conversation_trace.jsonl",
    "synthetic": "mooncake/synthetic_trace.jsonl",
    # Not in the traces-raw snapshot (>= 4 MiB), but same schema; loads if a user downloads it.
    "toolagent": "mooncake/toolagent_trace.jsonl",
}


def load_mooncake(
    data_dir: Path | str | None = None,
    *,
    trace: str = "conversation",
    model: str = "llama3.1-70b",
    task: str = "chat",
    limit: int | None = None,
) -> list[Request]:
    """Load a Mooncake trace as requests, arrivals in seconds from the first request.

    :param data_dir: data directory holding ``mooncake/`` (``None``: ``$SERVEGYM_DATA``).
    :param trace: ``conversation``, ``synthetic`` or ``toolagent`` (see :data:`MOONCAKE_FILES`).
    :param model: catalog model name given to every request.
    :param task: task label given to every request.
    :param limit: return only the first ``limit`` requests (``None``: all).
    :return: requests sorted by arrival; ``meta`` holds ``source`` and the source ``timestamp_ms``.
    :raises ValueError: for a record with a bad field or a timestamp earlier than its predecessor.
    """
    if trace not in MOONCAKE_FILES:
        raise ValueError(
            f"unknown Mooncake trace {trace!r}; expected one of {sorted(MOONCAKE_FILES)}"
        )
    check_limit(limit)
    path = source_file(data_dir, MOONCAKE_FILES[trace])
    records: list[Request] = []
    first_ms: int | None = None
    prev_ms = -1
    for lineno, obj in iter_jsonl(path):
        where = f"{path}:{lineno}"
        ts = require_int(obj.get("timestamp"), field="timestamp", where=where)
        if ts < prev_ms:
            raise ValueError(
                f"{where}: timestamp {ts} ms is earlier than the previous {prev_ms} ms"
            )
        prev_ms = ts
        if first_ms is None:
            first_ms = ts
        n_in = require_int(obj.get("input_length"), field="input_length", where=where, minimum=1)
        n_out = require_int(obj.get("output_length"), field="output_length", where=where, minimum=1)
        hashes = obj.get("hash_ids")
        if not isinstance(hashes, list) or not all(isinstance(h, int) for h in hashes):
            raise ValueError(f"{where}: hash_ids must be a list of integers, got {hashes!r}")
        n_blocks = -(-n_in // MOONCAKE_BLOCK_TOKENS)
        if len(hashes) != n_blocks:
            raise ValueError(
                f"{where}: {len(hashes)} hash_ids for input_length {n_in}; expected "
                f"ceil({n_in}/{MOONCAKE_BLOCK_TOKENS}) = {n_blocks}"
            )
        records.append(
            Request(
                id=f"mooncake-{trace}-{len(records)}",
                arrival=(ts - first_ms) / 1000.0,
                model=model,
                input_tokens=n_in,
                output_tokens=n_out,
                task=task,
                prefix_hashes=tuple(hashes),
                meta={"source": f"mooncake/{trace}", "line": lineno, "timestamp_ms": ts},
            )
        )
        if limit is not None and len(records) >= limit:
            break
    return records
