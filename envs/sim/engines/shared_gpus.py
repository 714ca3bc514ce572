"""The MPS partitions of a simulation's GPUs (Allocation-v0's fractional instances): which
instances share each physical GPU, each one's share of HBM bandwidth given which neighbours are
busy (:func:`envs.sim.latency.model.contended_bandwidth_shares`), and their latency-model variants.
"""

from __future__ import annotations

from typing import Any

from envs.sim.engines.contention import BANDWIDTH_SATURATION_SHARE, contended_bandwidth_shares


class SharedGPUs:
    """The MPS partitions of a simulation's GPUs: which instances share each physical GPU, which
    of them are busy, and the latency model each gets for the bandwidth left to it.

    :param variant: ``variant(instance, bandwidth_share)`` → the instance's latency model with
        that share of HBM bandwidth (same SM and memory cap).
    :param saturation: share of SMs that saturates HBM alone (see
        :func:`envs.sim.latency.model.contended_bandwidth_shares`).
    """

    def __init__(self, variant: Any, saturation: float = BANDWIDTH_SATURATION_SHARE) -> None:
        if not 0 < saturation <= 1:
            raise ValueError(f"saturation={saturation!r}; expected (0, 1]")
        self.variant = variant
        self.saturation = saturation
        self.on_gpu: dict[tuple[int, int], list[Any]] = {}
        self.active: set[int] = set()  # indices of the busy instances
        # GPU -> SM share of a neighbour outside the simulation that is always busy (profiling a
        # share next to a busy co-located partition; empty in deployment simulations)
        self.background: dict[tuple[int, int], float] = {}

    def fill_with_busy_neighbours(self) -> None:
        """Give every registered GPU's untaken share to an always-busy neighbour (a co-located
        pair profile: the replica next to a partition that keeps HBM busy)."""
        for g, insts in self.on_gpu.items():
            rest = 1.0 - sum(o.spec.fraction for o in insts)
            if rest > 1e-9:
                self.background[g] = rest
        for insts in self.on_gpu.values():
            for o in insts:
                o.latency = self.latency_for(o)

    def add(self, inst: Any) -> None:
        """Register ``inst`` (its spec names its GPUs) and give it the latency model of a
        partition whose neighbours are idle.

        :raises ValueError: if its share would take a GPU's live (not retired) shares above 1,
            or it names a GPU twice or not ``tp`` GPUs.
        """
        spec = inst.spec
        gpus = spec.gpu_ids
        if len(gpus) != spec.tp or len(set(gpus)) != len(gpus):
            raise ValueError(f"{spec.name}: gpu_ids {gpus} must name {spec.tp} distinct GPUs")
        for g in gpus:
            live = sum(o.spec.fraction for o in self.on_gpu.get(g, ()) if not o.retired)
            live += self.background.get(g, 0.0)
            if live + spec.fraction > 1 + 1e-9:
                raise ValueError(
                    f"{spec.name}: a {spec.fraction:g} share on GPU {g} next to {live:g} taken "
                    "exceeds the GPU"
                )
        for g in gpus:
            self.on_gpu.setdefault(g, []).append(inst)
        inst.shared = self
        inst.latency = self.latency_for(inst)

    def bandwidth_share(self, inst: Any) -> float:
        """Share of HBM bandwidth ``inst`` gets if it runs now: the smallest over its GPUs (the
        slowest shard paces a tensor-parallel iteration), counting it as busy."""
        share = 1.0
        for g in inst.spec.gpu_ids:
            busy: dict[Any, float] = {
                o.index: o.spec.fraction for o in self.on_gpu[g] if o.index in self.active
            }
            busy[inst.index] = inst.spec.fraction
            if g in self.background:
                busy["background"] = self.background[g]
            got = contended_bandwidth_shares(busy, set(busy), self.saturation, check_sum=False)
            share = min(share, got[inst.index])
        return share

    def latency_for(self, inst: Any) -> Any:
        """The latency model ``inst`` runs its next segment with."""
        return self.variant(inst, self.bandwidth_share(inst))

    def neighbours(self, inst: Any) -> list[Any]:
        """The other instances on any of ``inst``'s GPUs."""
        seen: dict[int, Any] = {}
        for g in inst.spec.gpu_ids:
            for o in self.on_gpu[g]:
                if o is not inst:
                    seen[o.index] = o
        return list(seen.values())

    def set_active(self, inst: Any, busy: bool) -> None:
        """Record whether ``inst`` is working; busy neighbours whose bandwidth share changes
        re-price their decode jump."""
        if busy == (inst.index in self.active):
            return
        others = [o for o in self.neighbours(inst) if o.index in self.active]
        before = [self.bandwidth_share(o) for o in others]
        if busy:
            self.active.add(inst.index)
        else:
            self.active.discard(inst.index)
        for o, b in zip(others, before, strict=True):
            if self.bandwidth_share(o) != b:
                o.bandwidth_changed()
