"""GPU allocations of multi-LLM workflows (Scepsy §5) and their placements on a topology (§6).

An :class:`Allocation` gives every LLM a number of **GPU-fraction units** (``units_per_gpu`` units
make one GPU: Scepsy §5 enumerates "10 fractions per GPU"), a tensor-parallel degree and a replica
count. Replicas of one LLM are identical: each of its ``tp × replicas`` GPU shares gets
``units / (tp · replicas)`` units of one GPU (:attr:`LLMAllocation.share_units`). This is how we
read §5's rule that "tensor parallelism degree times replica count evenly divides" the LLM's
resources: equal shares keep the APL's ``λ · n_m / d_m`` load split exact (§4) and no share is
left idle. A share is at most one GPU and at least the LLM's minimum for weights plus KV
(:func:`min_share_units`, §5 "the minimum number of GPU fractions required to load the LLM
parameters and initialize the KV cache").

A :class:`Placement` pins every replica to a node and to ``tp`` distinct GPUs of it
(:mod:`envs.sim.allocation.placement` computes it, §6). :meth:`Placement.instances` turns it into
the monolithic :class:`~envs.sim.hardware.cluster.InstanceSpec` list the simulator serves.

Example::

    alloc = Allocation((LLMAllocation("llama3-8b", units=8, tp=2, replicas=1),
                        LLMAllocation("e5-base-v2", units=1, tp=1, replicas=1)), units_per_gpu=4)
    alloc.check(topology)          # AllocationError naming the culprit, or None
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from envs.sim.hardware.catalog import get_gpu, get_model
from envs.sim.hardware.cluster import InstanceSpec, Topology
from envs.sim.latency.model import LatencyModel

#: Tensor-parallel degrees the allocation menus offer (Scepsy §4 profiles TP = 1, 2, 4).
TP_DEGREES = (1, 2, 4)
#: KV tokens a decoder LLM's share must hold beyond its weights (one long request: our
#: workloads' longest prompt + output is ~7.7 k tokens); encoder-only models need none.
DEFAULT_MIN_KV_TOKENS = 8192


class AllocationError(ValueError):
    """An allocation is malformed or infeasible (names the LLM and the rule it breaks)."""


class PlacementError(AllocationError):
    """An allocation does not fit the topology (names the replica that could not be placed)."""


@dataclass(frozen=True)
class LLMAllocation:
    """One LLM's share of the cluster.

    :param model: catalog model name.
    :param units: GPU-fraction units in total (``units_per_gpu`` units = one GPU).
    :param tp: tensor-parallel degree of each replica.
    :param replicas: number of identical replicas (data parallelism).
    """

    model: str
    units: int
    tp: int = 1
    replicas: int = 1

    @property
    def shares(self) -> int:
        """GPU shares the LLM occupies: ``tp × replicas``."""
        return self.tp * self.replicas

    @property
    def share_units(self) -> int:
        """Units of each GPU share (``units / (tp · replicas)``; exact for a valid allocation)."""
        return self.units // self.shares

    def fraction(self, units_per_gpu: int) -> float:
        """Share of one GPU each of the LLM's GPU shares gets."""
        return self.share_units / units_per_gpu

    def describe(self, units_per_gpu: int) -> str:
        """``llama3-8b: 2.00 GPUs = 1 x TP2 @ 1.00``."""
        return (
            f"{self.model}: {self.units / units_per_gpu:.2f} GPUs = {self.replicas} x "
            f"TP{self.tp} @ {self.fraction(units_per_gpu):.2f}"
        )


@functools.lru_cache(maxsize=4096)
def min_share_units(
    model: str,
    gpu: str,
    tp: int,
    units_per_gpu: int,
    memory_utilization: float = 0.9,
    min_kv_tokens: int = DEFAULT_MIN_KV_TOKENS,
) -> int | None:
    """Smallest per-GPU share (in units) on which ``model`` at ``tp`` holds its weights and
    ``min_kv_tokens`` of KV cache (Scepsy §5's lower bound); None if even a whole GPU cannot,
    or if ``tp`` does not split the model's heads."""
    spec_gpu, spec_model = get_gpu(gpu), get_model(model)
    for s in range(1, units_per_gpu + 1):
        try:
            lat = LatencyModel(
                spec_gpu,
                spec_model,
                tp,
                s / units_per_gpu,
                memory_utilization=memory_utilization,
            )
        except ValueError:  # weights do not fit (InsufficientMemoryError) or tp is illegal
            continue
        if spec_model.encoder_only or lat.kv_capacity_tokens >= min_kv_tokens:
            return s
    return None


@dataclass(frozen=True)
class Allocation:
    """A GPU allocation of every LLM of one or more workflows.

    :param llms: one entry per LLM (distinct models).
    :param units_per_gpu: fraction units per GPU (Scepsy §5 uses 10).
    """

    llms: tuple[LLMAllocation, ...]
    units_per_gpu: int = 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "llms", tuple(self.llms))

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(a.model for a in self.llms)

    @property
    def total_units(self) -> int:
        return sum(a.units for a in self.llms)

    @property
    def total_gpus(self) -> float:
        return self.total_units / self.units_per_gpu

    def get(self, model: str) -> LLMAllocation:
        for a in self.llms:
            if a.model == model:
                return a
        raise KeyError(f"allocation has no entry for model {model!r}; it has {list(self.models)}")

    def describe(self) -> str:
        return "; ".join(a.describe(self.units_per_gpu) for a in self.llms)

    def check(
        self,
        topology: Topology,
        *,
        memory_utilization: float = 0.9,
        min_kv_tokens: int = DEFAULT_MIN_KV_TOKENS,
        max_tp: int | None = None,
    ) -> None:
        """Raise :class:`AllocationError` naming the first LLM that breaks a rule: a known
        model once, units > 0, ``tp × replicas`` dividing the units, a share within one GPU and
        above the weights + KV minimum, TP no larger than ``max_tp`` (default: the node size),
        and the total within the cluster's units."""
        F = self.units_per_gpu
        if isinstance(F, bool) or not isinstance(F, int) or F < 1:
            raise AllocationError(f"units_per_gpu must be an integer >= 1, got {F!r}")
        seen: set[str] = set()
        limit = topology.gpus_per_node if max_tp is None else max_tp
        for a in self.llms:
            where = f"allocation of {a.model!r}"
            if a.model in seen:
                raise AllocationError(f"{where}: the model appears twice")
            seen.add(a.model)
            get_model(a.model)  # UnknownNameError names the catalog's models
            for name, value in (("units", a.units), ("tp", a.tp), ("replicas", a.replicas)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise AllocationError(f"{where}: {name} must be an integer >= 1, got {value!r}")
            if a.units % a.shares:
                raise AllocationError(
                    f"{where}: tp {a.tp} x replicas {a.replicas} = {a.shares} does not divide its "
                    f"{a.units} units into equal GPU shares"
                )
            if a.share_units > F:
                raise AllocationError(
                    f"{where}: each of its {a.shares} GPU shares would get {a.share_units} units, "
                    f"more than one GPU ({F} units); raise tp or replicas"
                )
            if a.tp > limit:
                raise AllocationError(
                    f"{where}: tp {a.tp} exceeds the largest allowed TP group ({limit} GPUs)"
                )
            need = min_share_units(
                a.model, topology.gpu, a.tp, F, memory_utilization, min_kv_tokens
            )
            if need is None:
                raise AllocationError(
                    f"{where}: {a.model} at TP{a.tp} does not fit one {topology.gpu} share "
                    f"(weights + {min_kv_tokens} KV tokens)"
                )
            if a.share_units < need:
                raise AllocationError(
                    f"{where}: a share of {a.share_units}/{F} GPU is below the {need}/{F} its "
                    f"weights + {min_kv_tokens} KV tokens need at TP{a.tp}"
                )
        have = topology.num_gpus * F
        if self.total_units > have:
            raise AllocationError(
                f"allocation uses {self.total_units} units ({self.total_gpus:g} GPUs) but the "
                f"cluster has {have} ({topology.num_gpus} GPUs)"
            )


@dataclass(frozen=True)
class ReplicaPlacement:
    """One replica pinned to a node and to ``len(gpus) == tp`` distinct GPUs of it.

    :param model: catalog model name.
    :param replica: replica number within the LLM (0-based).
    :param node: node index.
    :param gpus: GPU indices within the node.
    :param share_units: units of each of those GPUs it takes.
    """

    model: str
    replica: int
    node: int
    gpus: tuple[int, ...]
    share_units: int

    @property
    def tp(self) -> int:
        return len(self.gpus)

    @property
    def key(self) -> tuple[str, int, int, tuple[int, ...], int]:
        """What identifies a running replica across reconfigurations. The replica number is part
        of it: several replicas of one model can share a GPU at the same share (four quarter-GPU
        replicas), and the placer keeps a kept replica's number."""
        return (self.model, self.replica, self.node, self.gpus, self.share_units)


@dataclass(frozen=True)
class Placement:
    """Where every replica of an allocation runs.

    :param replicas: the placed replicas.
    :param topology: the GPU pool.
    :param units_per_gpu: fraction units per GPU.
    """

    replicas: tuple[ReplicaPlacement, ...]
    topology: Topology
    units_per_gpu: int

    def used_units(self) -> dict[tuple[int, int], int]:
        """Units taken on each (node, GPU)."""
        used: dict[tuple[int, int], int] = {}
        for r in self.replicas:
            for g in r.gpus:
                used[(r.node, g)] = used.get((r.node, g), 0) + r.share_units
        return used

    def instances(self, start_index: int = 0, **extra: object) -> tuple[InstanceSpec, ...]:
        """Monolithic instance specs, one per replica, named
        ``<model>-r<replica>-n<node>g<gpus>``, with ``gpu_ids`` naming the GPUs their shares sit
        on (so the simulator knows which instances are co-located); ``extra`` goes to every
        spec."""
        out = []
        for k, r in enumerate(self.replicas):
            gpus = "".join(str(g) for g in r.gpus)
            out.append(
                InstanceSpec(
                    index=start_index + k,
                    name=f"{r.model}-r{r.replica}-n{r.node}g{gpus}",
                    role="monolithic",
                    gpu=self.topology.gpu,
                    model=r.model,
                    tp=r.tp,
                    fraction=r.share_units / self.units_per_gpu,
                    gpu_ids=tuple((r.node, g) for g in r.gpus),
                    **extra,  # type: ignore[arg-type]
                )
            )
        return tuple(out)
