"""One replay point of a profile (the **Replay** paragraph of
:mod:`envs.sim.allocation.scepsy.profiling`): projected workflows arrive as a conditioned Poisson
process at one replica of an LLM (at a TP degree and GPU share, its co-located neighbours busy, idle
or static) in the simulator; the sustained throughput, the knee of the throughput-latency curve,
isolated timing and burst capacity.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.sim.allocation.scepsy.apl import ProfilePoint
from envs.sim.allocation.scepsy.projection import Projection
from envs.sim.core.scheduler import DefaultScheduler
from envs.sim.core.simulation import LatencyCache, Simulation
from envs.sim.hardware.cluster import ClusterSpec, InstanceSpec
from traces.generators.beam_search import PREFIX_BLOCK_TOKENS
from traces.schema import LLMNode, Node, Workflow

#: Per-cycle XOR salts of replayed prefix hashes (fixed: replays are reproducible).
_SALTS = tuple(int(x) for x in np.random.default_rng(20261201).integers(1, 2**62, 1024))


# -- replay ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplayResult:
    """One replay at one offered call rate.

    :param point: the profile point (window latency statistics, achieved throughput).
    :param workflows: projected workflows replayed.
    :param offered: calls whose open-loop time (workflow arrival + the call's offset) falls in
        the window.
    :param completed: calls completed inside the window (the point's throughput).
    :param sustained: ``finished >= (1 − tolerance) · offered``, no window call unfinished and
        the window's median latency within the bound (the knee rule, module docstring).
    :param window: the measurement window ``(start, end)`` in seconds.
    :param censored: window calls unfinished at the time limit (latency censored).
    :param wall: wall seconds of the simulation.
    :param latencies: the window calls' latencies, seconds.
    :param finished: offered calls that completed by the end of the replay (whenever).
    """

    point: ProfilePoint
    workflows: int
    offered: int
    completed: int
    sustained: bool
    window: tuple[float, float]
    censored: int
    wall: float
    latencies: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    finished: int = 0


#: How a sub-GPU share is profiled (see the module docstring): next to a busy partition, alone
#: on its GPU, or with bandwidth proportional to the share.
NEIGHBOURS = ("busy", "idle", "static")
#: ``ClusterSpec.description`` of a profile cluster whose GPUs' free shares are busy neighbours.
_BUSY_NEIGHBOUR = "profile: the rest of each GPU is a busy co-located partition"


def replica_cluster(
    model: str, tp: int, fraction: float, gpu: str, neighbour: str = "busy"
) -> ClusterSpec:
    """A one-instance monolithic cluster: ``model`` at ``tp`` on ``fraction`` of each GPU, with
    ``neighbour`` on the rest of each GPU (one of :data:`NEIGHBOURS`; ignored for whole GPUs).

    :raises ValueError: on an unknown ``neighbour``.
    """
    if neighbour not in NEIGHBOURS:
        raise ValueError(f"neighbour must be one of {NEIGHBOURS}, got {neighbour!r}")
    shared = fraction < 1 and neighbour != "static"
    spec = InstanceSpec(
        0,
        f"{model}-tp{tp}-{fraction:g}",
        "monolithic",
        gpu,
        model,
        tp,
        fraction,
        gpu_ids=tuple((0, g) for g in range(tp)) if shared else (),
    )
    busy = shared and neighbour == "busy"
    return ClusterSpec(
        f"profile-{model}", "monolithic", (spec,), description=_BUSY_NEIGHBOUR if busy else ""
    )


def _draw(projections: Sequence[Projection], workflows: int, rng: np.random.Generator) -> list[int]:
    order: list[int] = []
    while len(order) < workflows:
        order.extend(rng.permutation(len(projections)).tolist())
    return order[:workflows]


def _salted(nodes: tuple[Node, ...], salt: int) -> tuple[Node, ...]:
    """A replayed copy of a projection whose prefix hashes are XORed with ``salt`` (0: kept):
    two copies of one traced workflow then share no cached prefix (distinct requests in
    deployment), while the calls of one copy share exactly what they shared in the trace."""
    if not salt:
        return nodes
    out: list[Node] = []
    for n in nodes:
        if isinstance(n, LLMNode) and n.prefix_hashes:
            n = LLMNode(
                n.id,
                n.model,
                n.input_tokens,
                n.output_tokens,
                n.parents,
                n.task,
                n.prompt,
                tuple(h ^ salt for h in n.prefix_hashes),
            )
        out.append(n)
    return tuple(out)


def _simulate(
    projections: Sequence[Projection],
    picks: Sequence[int],
    times: np.ndarray,
    cluster: ClusterSpec,
    seed: int,
    engine: str,
    latency_cache: LatencyCache | None,
    time_limit: float | None = None,
    prefix_cache_blocks: int | str = "kv",
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS,
) -> Any:
    # picks cycle through permutations of the projections: copy j is in cycle j // len
    cycle = len(projections)
    wfs = [
        Workflow(
            f"{projections[k].workflow_id}#{j}",
            float(times[j]),
            _salted(projections[k].nodes, _SALTS[j // cycle % len(_SALTS)] if j >= cycle else 0),
        )
        for j, k in enumerate(picks)
    ]
    sim = Simulation(
        cluster,
        wfs,
        seed=seed,
        engine=engine,
        compute_horizons=False,
        online_horizons=False,
        latency_cache=latency_cache,
        time_limit=time_limit,
        prefix_cache_blocks=prefix_cache_blocks,
        prefix_block_tokens=prefix_block_tokens,
    )
    if cluster.description == _BUSY_NEIGHBOUR:
        sim.shared_gpus.fill_with_busy_neighbours()
    return sim.run(DefaultScheduler())


def replay_point(
    projections: Sequence[Projection],
    cluster: ClusterSpec,
    rate: float,
    *,
    workflows: int,
    seed: int = 0,
    engine: str = "vllm",
    warmup: float | Callable[[float], float] = 0.25,
    tolerance: float = 0.01,
    latency_bound: float = math.inf,
    latency_cache: LatencyCache | None = None,
    prefix_cache_blocks: int | str = "kv",
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS,
) -> ReplayResult:
    """Replay ``workflows`` projected workflows on ``cluster`` at LLM call rate ``rate``
    (calls/s; the module docstring gives the arrival process, the window and the rule).

    :param warmup: window start as a share of the arrival span ``T``, or a function of ``T``
        giving it in seconds.
    :param tolerance: sustained if at least ``1 − tolerance`` of the offered window calls
        complete in the window.
    :param latency_bound: sustained only if the window calls' median latency is at most this,
        seconds (the knee rule's ``latency_factor`` × unloaded median; ``inf``: no bound).
    :param prefix_cache_blocks: the replica's prefix cache (see :class:`ReplayConfig`).
    :param prefix_block_tokens: tokens per block of the calls' ``prefix_hashes``.
    :raises ValueError: on an empty projection list, a non-positive rate or an empty window.
    """
    if not projections:
        raise ValueError("nothing to replay: no projected workflows")
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a positive number of calls/s, got {rate}")
    if workflows < 1:
        raise ValueError(f"workflows must be >= 1, got {workflows}")
    rng = np.random.default_rng(seed)
    picks = _draw(projections, workflows, rng)
    horizon = sum(projections[k].calls for k in picks) / rate
    times = np.sort(rng.uniform(0.0, horizon, workflows))
    t0 = warmup(horizon) if callable(warmup) else warmup * horizon
    t1 = horizon
    if not 0 <= t0 < t1:
        raise ValueError(f"measurement window [{t0}, {t1}] s is empty; check `warmup`")
    longest = max(projections[k].span for k in picks)
    limit = horizon + max(0.25 * horizon, 2.0 * longest)
    res = _simulate(
        projections,
        picks,
        times,
        cluster,
        seed,
        engine,
        latency_cache,
        limit,
        prefix_cache_blocks,
        prefix_block_tokens,
    )
    offered_ids: set[tuple[str, str]] = set()
    for j, k in enumerate(picks):
        p = projections[k]
        wid = f"{p.workflow_id}#{j}"
        ids = [n.id for n in p.nodes if isinstance(n, LLMNode)]
        if p.offsets:
            offered_ids.update(
                (wid, i) for i, o in zip(ids, p.offsets, strict=True) if t0 <= times[j] + o <= t1
            )
        elif t0 <= times[j] <= t1:  # untimed projection: its calls count at its arrival
            offered_ids.update((wid, i) for i in ids)
    offered = len(offered_ids)
    if offered == 0:
        raise RuntimeError(
            f"replay at {rate:.4g} calls/s offered no call in its window [{t0:.3g}, {t1:.3g}] s;"
            " raise `workflows`"
        )
    completed = sum(1 for c in res.calls if c.decode_end >= 0 and t0 <= c.decode_end <= t1)
    finished = sum(
        1 for c in res.calls if c.decode_end >= 0 and (c.workflow_id, c.node_id) in offered_ids
    )
    lat = []
    censored = 0
    for c in res.calls:
        if t0 <= c.revealed_at <= t1:
            if c.decode_end >= 0:
                lat.append(c.decode_end - c.revealed_at)
            else:
                lat.append(res.end_time - c.revealed_at)
                censored += 1
    if not lat:
        raise RuntimeError(
            f"replay at {rate:.4g} calls/s revealed no call in its window [{t0:.3g}, {t1:.3g}] s;"
            " raise `workflows`"
        )
    arr = np.asarray(lat)
    point = _point(rate, completed / (t1 - t0), arr, finished / offered, censored)
    sustained = _sustained(point, finished, offered, censored, tolerance, latency_bound)
    return ReplayResult(
        point,
        workflows,
        offered,
        completed,
        sustained,
        (t0, t1),
        censored,
        res.wall_seconds,
        arr,
        finished,
    )


def _sustained(
    point: ProfilePoint,
    completed: int,
    offered: int,
    censored: int,
    tolerance: float,
    latency_bound: float,
) -> bool:
    return censored == 0 and completed >= (1.0 - tolerance) * offered and point.p50 <= latency_bound


def _point(
    rate: float,
    throughput: float,
    latencies: np.ndarray,
    completion: float = 1.0,
    censored: int = 0,
) -> ProfilePoint:
    return ProfilePoint(
        rate=float(rate),
        throughput=float(throughput),
        mean=float(latencies.mean()),
        p50=float(np.percentile(latencies, 50)),
        p90=float(np.percentile(latencies, 90)),
        p95=float(np.percentile(latencies, 95)),
        p99=float(np.percentile(latencies, 99)),
        calls=len(latencies),
        completion=float(completion),
        censored=int(censored),
    )


def knee_throughput(
    points: Sequence[ProfilePoint],
    unloaded_p50: float,
    *,
    min_completion: float = 0.99,
    latency_factor: float = 2.0,
) -> float:
    """``T_m`` read at the knee of a throughput–latency sweep (module docstring): the completion
    rate ``rate · min(1, completion)`` at the highest swept rate at and below which every point
    completes at least ``min_completion`` of its offered calls, leaves none unfinished, and has a
    median latency at most ``latency_factor × unloaded_p50`` (a queue that is still stable).

    :param points: the sweep (any order).
    :param unloaded_p50: median call latency with nothing queued, seconds (> 0).
    :raises ValueError: for no points, a non-positive ``unloaded_p50`` or factor, a completion
        outside (0, 1], or when even the lowest swept rate is past the knee.
    """
    if not points:
        raise ValueError("knee_throughput needs at least one profile point")
    if not (unloaded_p50 > 0 and math.isfinite(unloaded_p50)):
        raise ValueError(f"unloaded_p50 must be a positive number of seconds, got {unloaded_p50}")
    if not latency_factor >= 1.0:
        raise ValueError(f"latency_factor must be >= 1, got {latency_factor}")
    if not 0.0 < min_completion <= 1.0:
        raise ValueError(f"min_completion must be in (0, 1], got {min_completion}")
    best: ProfilePoint | None = None
    for p in sorted(points, key=lambda q: q.rate):
        if p.completion < min_completion or p.censored or p.p50 > latency_factor * unloaded_p50:
            break
        best = p
    if best is None:
        low = min(points, key=lambda q: q.rate)
        raise ValueError(
            f"the lowest swept rate {low.rate:.4g} calls/s is already past the knee (completion "
            f"{low.completion:.3f} < {min_completion} or p50 {low.p50:.4g} s > {latency_factor} x "
            f"unloaded {unloaded_p50:.4g} s); start the sweep lower"
        )
    return best.rate * min(1.0, best.completion)


def merge_replays(
    results: Sequence[ReplayResult], tolerance: float, latency_bound: float = math.inf
) -> ReplayResult:
    """Pool replays of one rate (different seeds): latencies pooled, counts and window
    lengths summed, sustained judged on the pooled counts and latencies (knee rule)."""
    if len({r.point.rate for r in results}) != 1:
        raise ValueError("can only merge replays of one rate")
    lat = np.concatenate([r.latencies for r in results])
    span = sum(r.window[1] - r.window[0] for r in results)
    offered = sum(r.offered for r in results)
    completed = sum(r.completed for r in results)
    finished = sum(r.finished for r in results)
    censored = sum(r.censored for r in results)
    point = _point(results[0].point.rate, completed / span, lat, finished / offered, censored)
    return ReplayResult(
        point,
        sum(r.workflows for r in results),
        offered,
        completed,
        _sustained(point, finished, offered, censored, tolerance, latency_bound),
        results[0].window,
        censored,
        sum(r.wall for r in results),
        lat,
        finished,
    )


def isolated_timing(
    projections: Sequence[Projection],
    cluster: ClusterSpec,
    *,
    seed: int = 0,
    engine: str = "vllm",
    latency_cache: LatencyCache | None = None,
    prefix_cache_blocks: int | str = "kv",
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS,
    unloaded: list[float] | None = None,
) -> list[Projection]:
    """``projections`` with ``offsets`` and ``span`` re-measured by running each one alone on
    ``cluster``'s replica: the open-loop timing *on this replica* (a slower share stretches every
    workflow), so that only contention, not the share's speed, counts as falling behind.

    :param unloaded: if given, every call's latency in these alone runs (seconds) is appended to
        it: the unloaded latencies the knee rule compares against.
    """
    out = []
    for p in projections:
        res = _simulate(
            [p],
            [0],
            np.zeros(1),
            cluster,
            seed,
            engine,
            latency_cache,
            None,
            prefix_cache_blocks,
            prefix_block_tokens,
        )
        start = {c.node_id: c.revealed_at for c in res.calls}
        end = max(c.decode_end for c in res.calls)
        if unloaded is not None:
            unloaded.extend(c.decode_end - c.revealed_at for c in res.calls)
        ids = [n.id for n in p.nodes if isinstance(n, LLMNode)]
        origin = min(start.values())
        offsets = tuple(start[i] - origin for i in ids)
        out.append(dataclasses.replace(p, offsets=offsets, span=end - origin))
    return out


def burst_capacity(
    projections: Sequence[Projection],
    cluster: ClusterSpec,
    *,
    workflows: int,
    seed: int = 0,
    engine: str = "vllm",
    latency_cache: LatencyCache | None = None,
    prefix_cache_blocks: int | str = "kv",
    prefix_block_tokens: int = PREFIX_BLOCK_TOKENS,
) -> float:
    """Rough capacity (calls/s) that scales the sweep: all ``workflows`` arrive at once and the
    replica's completion rate until half of the calls are done is measured."""
    picks = _draw(projections, workflows, np.random.default_rng(seed))
    res = _simulate(
        projections,
        picks,
        np.zeros(len(picks)),
        cluster,
        seed,
        engine,
        latency_cache,
        None,
        prefix_cache_blocks,
        prefix_block_tokens,
    )
    ends = np.sort([c.decode_end for c in res.calls])
    half = max(len(ends) // 2, 1)
    t = float(ends[half - 1])
    if not t > 0:
        raise RuntimeError(f"capacity probe of {cluster.name}: calls finished in zero time")
    return half / t
