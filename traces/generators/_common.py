"""Shared helpers for the trace generators: stats loading, seeded sampling, arrival processes.

All randomness flows through a ``numpy.random.Generator`` passed in by the caller; nothing here
touches a global RNG.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
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


def _checked_salt(salt: Any, block_tokens: Any) -> int:
    """``salt`` as an int, after checking it and ``block_tokens`` (:func:`chain_prefix_hashes`).

    :raises ValueError: for a ``block_tokens`` that is not an integer >= 1 or a non-integer salt.
    """
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
        raise ValueError(f"block_tokens must be an integer >= 1, got {block_tokens!r}")
    if isinstance(salt, bool) or not isinstance(salt, (int, np.integer)):
        raise ValueError(f"salt must be an integer, got {salt!r}")
    return int(salt)


def chain_prefix_hashes(nodes: Sequence[Any], salt: int, block_tokens: int) -> tuple[Any, ...]:
    """``nodes`` (one workflow's) with every LLM call's ``prefix_hashes`` derived from its
    ancestry, the prompt reuse of agent chains: a call whose prompt resends its parent's prompt
    and output (+ tool results + new text) shares the parent's leading blocks.

    A call's *chain parent* is its nearest LLM ancestor (through tool nodes) when that ancestor
    is unique and the call's input is at least the parent's input + output tokens. Its prompt
    then begins with the parent's prompt + output, so its first ⌊(L_in,p + L_out,p) / B⌋ block
    hashes are the parent's sequence's (the parent's full prompt blocks, then blocks of the
    parent's output); the rest are its own. Without a chain parent every block is its own. A
    prompt has ⌈L_in / B⌉ hashes (the last block may be partial; a partial block's hash is
    never shared, since the tokens after it differ). Block k's hash chains block k − 1's, so
    equal hashes mean equal prefixes. Hashes are of integer tuples only, stable across
    processes (no ``PYTHONHASHSEED`` dependence).

    :param nodes: the workflow's nodes (LLM calls and tools, parents named by id).
    :param salt: an integer distinguishing this workflow's content from every other's.
    :param block_tokens: tokens per block B (the simulator's ``prefix_block_tokens``).
    :return: the nodes in the given order, LLM calls with ``prefix_hashes`` set.
    :raises ValueError: on a bad ``block_tokens``/``salt``, an unknown parent or a cycle.
    """
    salt = _checked_salt(salt, block_tokens)
    by_id = {n.id: n for n in nodes}
    position = {n.id: i for i, n in enumerate(nodes)}
    llm_parents: dict[str, frozenset[str]] = {}  # nearest LLM ancestors of each node
    sequence: dict[str, list[int]] = {}  # an LLM call's prompt + output full-block hashes
    hashes: dict[str, tuple[int, ...]] = {}
    visiting: set[str] = set()

    def nearest(node_id: str) -> frozenset[str]:
        if node_id in llm_parents:
            return llm_parents[node_id]
        if node_id in visiting:
            raise ValueError(f"node {node_id!r} is on a cycle of parents")
        visiting.add(node_id)
        found: set[str] = set()
        for p in by_id[node_id].parents:
            if p not in by_id:
                raise ValueError(f"node {node_id!r} names unknown parent {p!r}")
            found |= {p} if by_id[p].kind == "llm" else nearest(p)
        visiting.discard(node_id)
        llm_parents[node_id] = frozenset(found)
        return llm_parents[node_id]

    def derive(node_id: str) -> None:
        if node_id in sequence:
            return
        node, i = by_id[node_id], position[node_id]
        parents = nearest(node_id)
        inherited: list[int] = []
        if len(parents) == 1:
            (pid,) = parents
            parent = by_id[pid]
            reused = parent.input_tokens + parent.output_tokens
            if node.input_tokens >= reused:
                derive(pid)
                inherited = sequence[pid][: reused // block_tokens]
        full = node.input_tokens // block_tokens
        blocks = list(inherited)
        h = blocks[-1] if blocks else hash((salt, i, -1))
        for k in range(len(blocks), full):
            h = hash((h, salt, i, k, 0))  # a prompt block holding this call's own tokens
            blocks.append(h)
        own = list(blocks)
        if node.input_tokens % block_tokens:
            own.append(hash((h, salt, i, full, 2)))  # the partial last prompt block
        hashes[node_id] = tuple(own)
        for k in range(full, (node.input_tokens + node.output_tokens) // block_tokens):
            h = hash((h, salt, i, k, 1))  # a block reaching into this call's output
            blocks.append(h)
        sequence[node_id] = blocks

    out = []
    for n in nodes:
        if n.kind == "llm":
            derive(n.id)
            n = dataclasses.replace(n, prefix_hashes=hashes[n.id])
        out.append(n)
    return tuple(out)
