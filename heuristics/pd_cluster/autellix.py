"""Autellix's attained-service schedulers (Luo et al. 2025, cited as [26] in HexAgent), as
HexAgent adapts them for its "Autellix-ATLAS" baseline (§7.2).

Rules used (from Autellix §4; the Autellix paper is not one of the three papers servegym
implements, so this is from its text as we know it — flagged where we simplify):

* PLAS (Program-Level Attained Service, single-threaded programs): a call's priority is its
  program's cumulative service so far, the sum of the service times of its finished calls;
  least attained service first. Here: ``attained_service`` (GPU seconds of the workflow's
  finished calls, prefill + decode).
* ATLAS (Adaptive Thread-Level Attained Service, DAG programs): priority is the attained service
  along the critical path, p(c) = max over parents c' of (p(c') + t_{c'}), kept at the program
  level as the largest such path; least first. Here: ``attained_critical`` (the workflow's
  largest finished-path service, seconds). For chains both quantities coincide.
* Autellix discretises priorities into multi-level queues (FCFS by arrival inside a queue) and
  promotes starving calls (waiting/service ratio above β); it also preempts decode. The
  simulator does not preempt. By default we use the plain least-attained-service rule, ties by
  workflow arrival then reveal time (the "FCFS inside a level" part); passing ``thresholds``
  (seconds, ascending) groups the attained service into queue levels first. No starvation
  promotion is implemented.
* Placement: load-balanced, as for HexAgent's other baselines (Autellix's own locality-aware
  load balancer targets KV-cache reuse, which this P-D simulator does not model).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from envs.pd_cluster import DecisionContext
from heuristics.base import Policy, register
from heuristics.pd_cluster.base import ComposedPolicy, KeyOrdering
from heuristics.pd_cluster.placement import earliest_finish, load_balanced

SERVICE_FIELDS = ("attained_service", "attained_critical")


class AttainedServiceOrdering(KeyOrdering):
    """Least attained service first; ties by workflow arrival, reveal time, slot index.

    :param field: ``attained_service`` (PLAS) or ``attained_critical`` (ATLAS).
    :param thresholds: optional ascending queue boundaries in seconds; the primary key becomes
        the queue level ``#{q in thresholds : q <= service}`` instead of the raw service.
    """

    def __init__(self, field: str, thresholds: Sequence[float] | None = None):
        if field not in SERVICE_FIELDS:
            raise ValueError(f"field must be one of {SERVICE_FIELDS}, got {field!r}")
        self.field = field
        self.thresholds: np.ndarray | None = None
        if thresholds is not None:
            q = np.asarray(thresholds, dtype=float)
            if q.ndim != 1 or q.size == 0 or np.any(np.diff(q) <= 0) or np.any(q < 0):
                raise ValueError(
                    "thresholds must be a non-empty, strictly ascending list of seconds >= 0, "
                    f"got {list(thresholds)!r}"
                )
            self.thresholds = q
        super().__init__(self._key)

    def _key(self, ctx: DecisionContext) -> list[np.ndarray]:
        service = np.asarray(getattr(ctx, self.field), dtype=float)
        if self.thresholds is not None:
            service = np.searchsorted(self.thresholds, service, side="right").astype(float)
        return [service, ctx.workflow_arrival, ctx.revealed_at]


@register("atlas")
def atlas(thresholds: Sequence[float] | None = None) -> Policy:
    """Autellix ATLAS (HexAgent §7.2 "Autellix-ATLAS"): least ``attained_critical`` (service
    along the workflow's critical path, seconds) first, ties by workflow arrival, reveal time;
    load-balanced placement. See the module docstring for the rules and simplifications.

    :param thresholds: optional multi-level-queue boundaries in seconds (default: none).
    """
    return ComposedPolicy(
        "atlas", AttainedServiceOrdering("attained_critical", thresholds), load_balanced
    )


@register("plas")
def plas(thresholds: Sequence[float] | None = None) -> Policy:
    """Autellix PLAS: least ``attained_service`` (total finished-call service of the workflow,
    seconds) first, ties by workflow arrival, reveal time; load-balanced placement.

    :param thresholds: optional multi-level-queue boundaries in seconds (default: none).
    """
    return ComposedPolicy(
        "plas", AttainedServiceOrdering("attained_service", thresholds), load_balanced
    )


@register("atlas+earliest-finish")
def atlas_earliest_finish(thresholds: Sequence[float] | None = None) -> Policy:
    """ATLAS order with earliest-finish placement: the speed-aware variant of ``atlas``
    (:func:`heuristics.pd_cluster.placement.earliest_finish`).

    :param thresholds: optional multi-level-queue boundaries in seconds (default: none).
    """
    return ComposedPolicy(
        "atlas+earliest-finish",
        AttainedServiceOrdering("attained_critical", thresholds),
        earliest_finish,
    )


@register("plas+earliest-finish")
def plas_earliest_finish(thresholds: Sequence[float] | None = None) -> Policy:
    """PLAS order with earliest-finish placement: the speed-aware variant of ``plas``
    (:func:`heuristics.pd_cluster.placement.earliest_finish`).

    :param thresholds: optional multi-level-queue boundaries in seconds (default: none).
    """
    return ComposedPolicy(
        "plas+earliest-finish",
        AttainedServiceOrdering("attained_service", thresholds),
        earliest_finish,
    )
