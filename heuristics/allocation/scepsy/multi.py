"""Several workflows on one pool (Scepsy §5's multi-workflow level): the GPUs are split among
the workflows by egalitarian welfare (maximise the worst workflow's utility), each part searched
by :func:`~heuristics.allocation.scepsy.search.search`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from envs.sim.allocation.allocations import (
    Allocation,
    LLMAllocation,
    Placement,
    ReplicaPlacement,
)
from envs.sim.allocation.placement import nvlink_domains
from envs.sim.hardware.cluster import Topology
from heuristics.allocation.scepsy.interface import (
    INF,
    PipelineModel,
    SearchError,
    SearchResult,
)
from heuristics.allocation.scepsy.search import search

# --------------------------------------------------------------------------------------------
# several workflows


@dataclass(frozen=True)
class WorkflowChoice:
    """One workflow's share of a multi-workflow allocation.

    :param name: workflow name (``stats.name``).
    :param rate: its target rate.
    :param gpus: the (node, GPU) pairs it was given.
    :param result: its search on them (placement restricted to them).
    :param utility: its utility (module docstring).
    """

    name: str
    rate: float
    gpus: tuple[tuple[int, int], ...]
    result: SearchResult
    utility: float


@dataclass(frozen=True)
class MultiSearchResult:
    """Outcome of :func:`search_multi`.

    :param workflows: per-workflow choice of the winning split.
    :param allocation: all workflows' LLMs, workflow by workflow (a model of two workflows
        appears twice: separate deployments).
    :param placement: every replica; a model shared by workflows has its replicas numbered
        consecutively across them, so instance names stay unique.
    :param owners: workflow index of each ``placement.replicas`` entry.
    :param welfare: egalitarian welfare (min utility) of the split.
    :param splits: GPU splits with an allocation for every workflow.
    :param searches: per-workflow searches run.
    :param seconds: wall time.
    """

    workflows: tuple[WorkflowChoice, ...]
    allocation: Allocation
    placement: Placement
    owners: tuple[int, ...]
    welfare: float
    splits: int
    searches: int
    seconds: float

    def describe(self) -> str:
        return " || ".join(
            f"{w.name} @ {w.rate:g}/s on {len(w.gpus)} GPUs (u={w.utility:.3f}): "
            f"{w.result.describe()}"
            for w in self.workflows
        )


def utility(res: SearchResult) -> float:
    """A workflow's utility for :func:`search_multi`: ``L_ref / L_w`` if it sustains its rate
    (``L_ref``: Σ of its LLMs' low-load whole-GPU latency contributions), else
    ``T_w / λ_w − 1`` (negative: any sustaining workflow has a higher utility)."""
    if res.sustains:
        lref = sum(res.reference_latency.values())
        return lref / res.latency if res.latency > 0 else INF
    return res.throughput / res.rate - 1.0 if res.rate > 0 else 0.0


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Ways to give ``parts`` workflows ≥ 1 GPU each, ``total`` in all."""
    if parts == 1:
        yield (total,)
        return
    for g in range(1, total - parts + 2):
        for rest in _compositions(total - g, parts - 1):
            yield (g, *rest)


def gpu_order(topology: Topology) -> tuple[tuple[int, int], ...]:
    """The cluster's GPUs node by node, each node's NVLink domains kept together — the list
    :func:`search_multi` cuts into contiguous per-workflow blocks."""
    return tuple(
        (n, g) for n in range(topology.num_nodes) for d in nvlink_domains(topology) for g in d
    )


def search_multi(
    workflows: Sequence[tuple[PipelineModel, float]],
    topology: Topology,
    *,
    units_per_gpu: int = 10,
    keep: Placement | None = None,
    **kwargs: Any,
) -> MultiSearchResult:
    """Split the GPUs between workflows for the highest egalitarian welfare (§5 "Scheduling
    multiple workflows"; utility: :func:`utility`).

    The outer level enumerates how many whole GPUs each workflow gets (≥ 1 each, all GPUs
    used); workflow ``w`` gets the next contiguous block of :func:`gpu_order` (workflows in the
    given order; blocks follow nodes and NVLink domains, so at most one domain per boundary is
    cut). "For each workflow and its assigned GPUs, the GPU scheduler searches for the
    per-workflow allocation independently": :func:`search` with ``gpus=`` that block, so each
    result also places inside its block and the union is a valid placement. Searches are
    cached per (workflow, block). The split of highest (min utility, sum utility) wins; a
    split where some workflow has no allocation on its block is skipped.

    :param workflows: (pipeline, target rate) per workflow.
    :param keep: previous placement: each workflow keeps matching replicas inside its block
        (a model shared by workflows matches either's old replicas).
    :param kwargs: passed to every :func:`search` (ablation flags, ``stat``, …).
    :raises SearchError: if no split gives every workflow an allocation.
    """
    t0 = time.perf_counter()
    W = len(workflows)
    if W == 0:
        raise SearchError("no workflows to schedule")
    order = gpu_order(topology)
    G = len(order)
    if W > G:
        raise SearchError(f"{W} workflows need at least one GPU each; the topology has {G}")
    names = [
        str(getattr(apl.stats, "name", f"workflow{w}")) for w, (apl, _) in enumerate(workflows)
    ]
    cache: dict[tuple[int, int, int], SearchResult | None] = {}

    def result(w: int, start: int, g: int) -> SearchResult | None:
        if (w, start, g) not in cache:
            apl, rate = workflows[w]
            try:
                cache[(w, start, g)] = search(
                    apl,
                    rate,
                    topology,
                    units_per_gpu=units_per_gpu,
                    gpus=order[start : start + g],
                    keep=keep,
                    **kwargs,
                )
            except SearchError:
                cache[(w, start, g)] = None
        return cache[(w, start, g)]

    best: tuple[float, float] | None = None
    best_split: list[tuple[int, int, SearchResult]] | None = None
    n_splits = 0
    for split in _compositions(G, W):
        parts, start = [], 0
        for w, g in enumerate(split):
            res = result(w, start, g)
            if res is None:
                break
            parts.append((start, g, res))
            start += g
        else:
            n_splits += 1
            utils = [utility(r) for _, _, r in parts]
            score = (min(utils), sum(utils))
            if best is None or score > best:
                best, best_split = score, parts
    if best is None or best_split is None:
        raise SearchError(
            f"no split of {G} GPUs gives every workflow of {names} an allocation on its GPUs"
        )

    llms: list[LLMAllocation] = []
    replicas: list[ReplicaPlacement] = []
    owners: list[int] = []
    next_number: dict[str, int] = {}
    choices = []
    for w, (start, g, res) in enumerate(best_split):
        llms.extend(res.allocation.llms)
        assert res.placement is not None
        base = dict(next_number)
        for r in res.placement.replicas:
            n = base.get(r.model, 0) + r.replica
            replicas.append(dataclasses.replace(r, replica=n))
            owners.append(w)
            next_number[r.model] = max(next_number.get(r.model, 0), n + 1)
        choices.append(
            WorkflowChoice(
                names[w], float(workflows[w][1]), order[start : start + g], res, utility(res)
            )
        )
    placement = Placement(tuple(replicas), topology, units_per_gpu)
    return MultiSearchResult(
        workflows=tuple(choices),
        allocation=Allocation(tuple(llms), units_per_gpu),
        placement=placement,
        owners=tuple(owners),
        welfare=best[0],
        splits=n_splits,
        searches=len(cache),
        seconds=time.perf_counter() - t0,
    )
