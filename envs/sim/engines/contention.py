"""HBM-bandwidth contention between co-located MPS partitions of one GPU: each partition's share
of the bandwidth given its SM share and which neighbours are busy (MPS partitions SMs and
memory but not HBM bandwidth or L2; see the MPS paragraph of :mod:`envs.sim.latency.model`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Share of a GPU's SMs whose memory traffic alone saturates its HBM bandwidth (see
#: :func:`contended_bandwidth_shares`). 1.0 would make bandwidth proportional to SMs (no gain from
#: idle neighbours, no contention: the model before MPS partitions).
BANDWIDTH_SATURATION_SHARE = 0.5


def contended_bandwidth_shares(
    fractions: Mapping[Any, float],
    active: set[Any] | frozenset[Any],
    saturation: float = BANDWIDTH_SATURATION_SHARE,
    *,
    check_sum: bool = True,
) -> dict[Any, float]:
    """HBM bandwidth shares of the busy MPS partitions of one GPU.

    NVIDIA MPS limits a client's SMs (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, the share of
    threads/SMs it may use) and its device memory (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``); nothing
    partitions DRAM bandwidth or the L2 cache, which all clients of the GPU use concurrently
    (NVIDIA, *Multi-Process Service*, "Appendix: Environment Variables"; NVIDIA's developer
    forum threads "MPS interference problem" and "Interference between MPS Client Process"
    report 50%/50% clients slowing 10–40% when both run, and a 10% client slowing ~1.5× next to a
    busy 90% client while running ~4x, not 9x, slower than the 90% one alone). Scepsy §6 uses
    MPS "with static limits on SMs and memory". The rule here:

    * an instance's SMs can pull at most ``min(1, f / saturation)`` of the GPU's bandwidth: a
      partition with ``f ≥ saturation`` can saturate HBM alone (memory-bound kernels reach the
      HBM peak well before every SM is busy), a smaller one proportionally less;
    * the busy (``active``) instances' demands are served in full when they sum to at most the
      GPU's bandwidth, and scaled down in proportion otherwise (the memory system arbitrates
      among the outstanding requests, which scale with the issuing SMs);
    * an idle instance takes nothing. L2 contention is folded into this DRAM-bandwidth share.

    Consequences: a whole GPU (f = 1) alone gets exactly 1; an instance next to idle neighbours
    gets more than its f; when a GPU is fully packed (Σ f = 1) with every share ≤ saturation and
    all are busy, each gets exactly its f (the static-partition model). ``saturation = 1``
    reproduces that static model in every case.

    :param fractions: SM share of every instance on the GPU (key → f in (0, 1]; Σ f ≤ 1).
    :param active: keys of the instances running an iteration now.
    :param saturation: share of SMs that saturates HBM alone, in (0, 1].
    :param check_sum: raise when the shares sum above 1 (off for a GPU whose retired instance
        still drains next to its successor).
    :return: key → bandwidth share in (0, 1] for every active key.
    :raises ValueError: on shares outside (0, 1], a sum above 1 or an unknown active key.
    """
    if not 0 < saturation <= 1:
        raise ValueError(f"saturation={saturation!r}; expected (0, 1]")
    total_f = 0.0
    for key, f in fractions.items():
        if not 0 < f <= 1:
            raise ValueError(f"{key!r}: share {f!r} outside (0, 1]")
        total_f += f
    if check_sum and total_f > 1 + 1e-9:
        raise ValueError(f"GPU shares sum to {total_f:g} > 1 (an MPS GPU cannot be oversubscribed)")
    unknown = set(active) - set(fractions)
    if unknown:
        raise ValueError(f"active instances {sorted(map(repr, unknown))} are not on this GPU")
    demand = {k: min(1.0, fractions[k] / saturation) for k in active}
    total = sum(demand.values())
    if total <= 1.0:
        return demand
    return {k: d / total for k, d in demand.items()}
