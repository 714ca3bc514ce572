"""What schedulers may use of a simulation, as a read-only view it holds
(``Simulation.estimates``): run-alone call times (from the scheduler-visible estimate or the
truth), prefix-cache hits per instance, the KV links between instances and transfer times. The
view reads the simulation and never changes it; it keeps only its own caches of pure functions.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from envs.sim.core.workflows import (
    Call,
)

#: Entries of the isolated-time cache (keyed on model, prompt and output tokens) before it is
#: cleared: a long episode's distinct calls would otherwise grow it without bound.
ISOLATED_CACHE_ENTRIES = 1 << 15


class EstimatesSource(Protocol):
    """What the estimates read of a simulation."""

    @property
    def cluster(self) -> Any: ...
    @property
    def pd(self) -> bool: ...
    @property
    def instances(self) -> list[Any]: ...
    @property
    def prefill(self) -> list[Any]: ...
    @property
    def decode(self) -> list[Any]: ...
    @property
    def monolithic(self) -> list[Any]: ...
    @property
    def prefix_index(self) -> dict[int, set[int]]: ...


class SchedulerEstimates:
    """The scheduler-visible estimates of a simulation (HexAgent §4.2's run-alone times,
    GoodServe §3.3's prefix hits, the KV links).

    :param sim: the simulation it reads.
    """

    sim: EstimatesSource
    _isolated_cache: dict[tuple[str, int, int], float]
    #: (instance count it was built for, the classes :meth:`_isolated_time` prices on)
    _isolated_classes: tuple[int, Any] | None
    _bandwidth: dict[tuple[str, str], float]
    _bandwidth_rows: dict[str, list[float]]
    _kv_links: tuple[np.ndarray, np.ndarray] | None

    def __init__(self, sim: EstimatesSource) -> None:
        self.sim = sim
        self._isolated_cache = {}
        self._isolated_classes = None
        self._bandwidth = {}
        self._bandwidth_rows = {}
        self._kv_links = None

    def isolated_call_time(self, call: Call, use_truth: bool = False) -> float:
        """Seconds ``call`` takes on the fastest path of an empty cluster (prefill + transfer +
        decode, batch of one), from the estimate (default) or the truth."""
        out = call.output_tokens if use_truth else call.predicted_output_tokens
        key = (call.model, call.input_tokens, out)
        t = self._isolated_cache.get(key)
        if t is None:
            t = self._isolated_time(call.model, call.input_tokens, out)
            if len(self._isolated_cache) >= ISOLATED_CACHE_ENTRIES:
                self._isolated_cache.clear()  # a pure function's cache: bounded, same values
            self._isolated_cache[key] = t
        return t if use_truth else t * call.time_error

    def _isolated_time(self, model: str, input_tokens: int, output_tokens: int) -> float:
        best = math.inf
        classes = self._isolated_classes
        if classes is None or classes[0] != len(self.sim.instances):
            classes = self._isolated_classes = (len(self.sim.instances), self._instance_classes())
        if self.sim.pd:
            prefill_classes, decode_classes, transfer = classes[1]
            need = input_tokens + output_tokens
            seen_d = []  # (decode class number, its decode seconds)
            for k, (_, group) in enumerate(decode_classes):
                # the class's first instance that holds the call prices it
                for capacity, lat in group:
                    if need <= capacity:
                        # unmemoised: each (prompt, output) pair is priced once per run here
                        # (the isolated-time cache above), so the decode-step memo only misses
                        seen_d.append((k, lat._decode_steps_time(1, input_tokens, output_tokens)))
                        break
            latency_s = transfer.latency_s
            # ``best = min(best, x)`` as ``if x < best: best = x`` (the same float, NaN included)
            for pg, lat in prefill_classes:
                tp = lat.prefill_time(input_tokens)
                if not output_tokens:
                    if seen_d and tp + 0.0 < best:
                        best = tp + 0.0
                    continue
                kv_bytes = lat.kv_bytes_per_token * input_tokens  # this class's KV precision
                links = self._bandwidth_rows[pg]  # bytes/s to each decode class, in order
                for k, td in seen_d:
                    x = tp + ((latency_s + kv_bytes / links[k]) + td)
                    if x < best:
                        best = x
        else:
            for lat in classes[1].get(model, ()):
                t = lat.prefill_time(input_tokens)
                if output_tokens > 1:  # the prefill emits the first token (unmemoised, as above)
                    t += lat._decode_steps_time(1, input_tokens + 1, output_tokens - 1)
                best = min(best, t)
        return best

    def _instance_classes(self) -> Any:
        """What :meth:`_isolated_time` prices a call on: for P-D clusters each distinct prefill
        latency model (instances of one spec share one: GPU, TP, fraction, precision) and each
        distinct decode one with its instances' capacities, and the pair bandwidths; for
        monolithic clusters each model's distinct latency models."""
        if self.sim.pd:
            prefill: dict[int, tuple[str, Any]] = {}
            for p in self.sim.prefill:
                prefill.setdefault(id(p.latency), (p.gpu, p.latency))
            decode: dict[int, tuple[str, list[tuple[int, Any]]]] = {}
            for d in self.sim.decode:
                decode.setdefault(id(d.latency), (d.gpu, []))[1].append((d.capacity, d.latency))
            kv = self.sim.cluster.kv_transfer
            self._bandwidth = {
                (pg, dg): kv.bandwidth(pg, dg)
                for pg, _ in prefill.values()
                for dg, _ in decode.values()
            }
            # the same bandwidths as a row per prefill GPU, in decode-class order
            self._bandwidth_rows = {
                pg: [self._bandwidth[pg, dg] for dg, _ in decode.values()]
                for pg, _ in prefill.values()
            }
            return list(prefill.values()), list(decode.values()), kv
        by_model: dict[str, list[Any]] = {}
        for m in self.sim.monolithic:
            lats = by_model.setdefault(m.spec.model, [])
            if not any(lat is m.latency for lat in lats):
                lats.append(m.latency)
        return by_model

    def prefix_hits(self, call: Call) -> dict[int, int]:
        """Instance index -> prompt tokens of ``call`` cached there, for the instances that hold
        at least its first prefix block (all others: 0): monolithic instances, or a P-D
        cluster's prefill instances."""
        hashes = call.node.prefix_hashes
        if not hashes:
            return {}
        holders = self.sim.prefix_index.get(hashes[0])
        if not holders:
            return {}
        return {i: self.sim.instances[i].prefix_hit_tokens(call) for i in sorted(holders)}

    def kv_links(self) -> tuple[np.ndarray, np.ndarray]:
        """P-D clusters: the (P, D) bytes/s of the KV link from each prefill to each decode
        instance, and the (D,) KV capacity in tokens of each decode instance (fixed per run)."""
        if self._kv_links is None:
            kv = self.sim.cluster.kv_transfer
            bandwidth = np.array(
                [[kv.bandwidth(p.gpu, d.gpu) for d in self.sim.decode] for p in self.sim.prefill]
            )
            capacity = np.array([d.capacity for d in self.sim.decode])
            bandwidth.flags.writeable = capacity.flags.writeable = False
            self._kv_links = (bandwidth, capacity)
        return self._kv_links

    def transfer_time(self, call: Call, prefill_index: int, decode_index: int) -> float:
        """Seconds to move ``call``'s prompt KV between two instances."""
        p = self.sim.instances[prefill_index]
        d = self.sim.instances[decode_index]
        kv = p.latency.kv_bytes_per_token * call.input_tokens
        return self.sim.cluster.kv_transfer.transfer_time(kv, p.gpu, d.gpu)
