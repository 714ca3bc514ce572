"""The ranked fallback of the Scepsy GPU scheduler (§5–§6): when the best predicted allocation
does not place on the pool, the next-ranked candidates are tried, and the result says why the
better ones did not place.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from envs.sim.allocation.allocations import (
    Allocation,
    Placement,
)
from envs.sim.allocation.placement import PlacementError, place
from envs.sim.hardware.cluster import Topology
from heuristics.allocation.scepsy.interface import INF, SearchError
from heuristics.allocation.scepsy.tables import Cfg


def close_enough(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def ranked_fallback(
    pool: list[tuple[tuple[float, float], tuple[int, ...]]],
    lists: Callable[[Sequence[int], bool], list[list[Cfg]]],
    build: Callable[[Sequence[int], Sequence[Cfg]], Allocation],
    sustaining: bool,
    try_alloc: Callable[[Allocation], Placement | None],
    exhausted: Callable[[], bool],
) -> tuple[tuple[Placement, Allocation, list[Cfg], int] | None, int]:
    """Candidates in rank order (lazily; k-best over a heap of vectors) until one places:
    ((placement, allocation, its configurations, rank) or None, candidates popped).

    ``pool`` holds every vector to consider with the rank key of its best parallelism: (latency
    sum, −T_w) among sustaining candidates (``sustaining``), else (−T_w, latency sum); ties →
    enumeration order, as in :func:`search`'s pass. The primary key is monotone when one LLM
    moves to its next configuration (lists sorted by it), so popping the heap and pushing each
    popped candidate's successors (one LLM one step down, at positions ≥ the last one moved, so
    every combination is generated once) yields candidates in exact rank order. ``try_alloc``
    memoises placement attempts; ``exhausted`` says when the attempt budget is spent.
    """

    def key(ls: list[list[Cfg]], idx: Sequence[int]) -> tuple[float, float]:
        lat = 0.0
        tw = INF
        for i, j in enumerate(idx):
            c = ls[i][j]
            lat += c.latency
            tw = min(tw, c.throughput)
        return (lat, -tw) if sustaining else (-tw, lat)

    # (key, vector id, configuration indices or () for "best, lists not built yet", last moved)
    heap: list[tuple[tuple[float, float], int, tuple[int, ...], int]] = [
        (kv, vid, (), 0) for vid, (kv, _) in enumerate(pool)
    ]
    heapq.heapify(heap)
    built: dict[int, list[list[Cfg]]] = {}
    rank = 0
    while heap and not exhausted():
        _, vid, idx, last = heapq.heappop(heap)
        vec = pool[vid][1]
        ls = built.get(vid)
        if ls is None:
            ls = built[vid] = lists(vec, sustaining)
        if not idx:
            idx = (0,) * len(ls)
        rank += 1
        cfgs = [ls[i][j] for i, j in enumerate(idx)]
        alloc = build(vec, cfgs)
        p = try_alloc(alloc)
        if p is not None:
            return (p, alloc, cfgs, rank), rank
        for pos in range(last, len(idx)):
            if idx[pos] + 1 < len(ls[pos]):
                nxt = idx[:pos] + (idx[pos] + 1,) + idx[pos + 1 :]
                heapq.heappush(heap, (key(ls, nxt), vid, nxt, pos))
    return None, rank


def why_unplaceable(
    alloc: Allocation,
    topology: Topology,
    keep: Placement | None,
    allowed: frozenset[tuple[int, int]] | None,
) -> str:
    """The placer's reason ``alloc`` does not place."""
    try:
        place(alloc, topology, keep=keep, gpus=allowed)
    except PlacementError as e:
        return str(e)
    return "(it places now)"


def place_in_rank_order(
    pool_s: list[tuple[tuple[float, float], tuple[int, ...]]] | None,
    pool_t: list[tuple[tuple[float, float], tuple[int, ...]]],
    lists: Callable[[Sequence[int], bool], list[list[Cfg]]],
    build: Callable[[Sequence[int], Sequence[Cfg]], Allocation],
    try_alloc: Callable[[Allocation], Placement | None],
    exhausted: Callable[[], bool],
    failure: Callable[[], SearchError],
) -> tuple[Placement, Allocation, list[Cfg], int]:
    """The first candidate that places, in rank order: the sustaining candidates by latency
    (``pool_s``, None when none sustains), then every candidate by throughput;
    ``(placement, allocation, per-LLM configurations, rank)``.

    :raises SearchError: ``failure()`` when none places.
    """
    phases = [(pool_s, True), (pool_t, False)] if pool_s is not None else [(pool_t, False)]
    offset = 0
    for pool, mode in phases:
        found, pops = ranked_fallback(pool, lists, build, mode, try_alloc, exhausted)
        if found is not None:
            placement, alloc, chosen, rank = found
            return placement, alloc, chosen, offset + rank
        offset += pops
    raise failure()


def unplaced_error(
    best: Allocation,
    attempts: int,
    max_attempts: int,
    topology: Topology,
    keep: Placement | None,
    allowed: frozenset[tuple[int, int]] | None,
) -> SearchError:
    """No candidate of the pruned space places: say how many were tried and why the best
    fails."""
    return SearchError(
        f"no candidate of the pruned space places on the topology after {attempts} "
        f"placement attempts (max_placement_attempts={max_attempts}); the "
        f"best, {best.describe()}, fails: {why_unplaceable(best, topology, keep, allowed)}"
    )
