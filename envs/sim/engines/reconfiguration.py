"""Building monolithic instances and changing them during a run (``servegym/Allocation-v0``'s
reconfiguration): add instances that become ready after a cold start, retire instances, size their
prefix caches, and give instances sharing a GPU their HBM-bandwidth variant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from envs.sim.core.protocol import (
    InstanceHost,
    SchedulingError,
)
from envs.sim.core.simpy_parts import callback
from envs.sim.core.state import SimulationState
from envs.sim.core.workflows import (
    Call,
)
from envs.sim.engines.instances import MonolithicInstance
from envs.sim.engines.prefill import PrefillInstance
from envs.sim.engines.presets import resolve_token_budget
from envs.sim.hardware.cluster import InstanceSpec
from envs.sim.latency.model import LatencyModel


class ReconfigurationMixin(SimulationState):
    """The instance-building and reconfiguration methods of
    :class:`envs.sim.core.simulation.Simulation`."""

    # -- reconfiguration (servegym/Allocation-v0) --------------------------------------------
    def add_instances(
        self, specs: Sequence[InstanceSpec], ready_at: float | None = None
    ) -> list[MonolithicInstance]:
        """Start monolithic instances mid-run (an autoscaler or a new allocation adding
        replicas). They take indices after the existing ones (``specs``' own indices are
        replaced) and serve from ``ready_at`` (default: now); calls routed to them earlier wait
        in their queue, as requests wait for a pod that is loading its model.

        :raises SchedulingError: on a P-D cluster, a non-monolithic spec or ``ready_at`` in the
            past.
        """
        if self.pd:
            raise SchedulingError("instances can be added to monolithic clusters only")
        now = self.env.now
        ready = now if ready_at is None else float(ready_at)
        if not ready >= now:
            raise SchedulingError(f"ready_at {ready_at} is before the current time {now}")
        added: list[MonolithicInstance] = []
        new_specs = []
        for spec in specs:
            if spec.role != "monolithic":
                raise SchedulingError(
                    f"instance {spec.name!r}: role {spec.role!r} is not monolithic"
                )
            spec = dataclasses.replace(spec, index=len(self.instances))
            new_specs.append(spec)
            inst = self._make_monolithic(spec)
            inst.ready_at = ready
            if ready > now:
                inst.paused = True
                self.schedule(ready - now, callback(self._instance_ready, inst))
            self.monolithic.append(inst)
            self.instances.append(inst)
            self.served_models.add(spec.model)
            added.append(inst)
        self.cluster = dataclasses.replace(
            self.cluster, instances=self.cluster.instances + tuple(new_specs)
        )
        return added

    def _instance_ready(self, inst: MonolithicInstance) -> None:
        inst.paused = False
        inst.on_queue_changed()

    def retire_instance(self, index: int) -> None:
        """Stop routing to monolithic instance ``index`` (a replica scaled away): it takes no new
        calls and finishes the ones it runs, like a gracefully terminated server; calls queued
        there and not started stay unless a plan moves them (plans may move them elsewhere)."""
        if not 0 <= index < len(self.instances) or self.instances[index].role != "monolithic":
            raise SchedulingError(f"instance {index!r} is not a monolithic instance")
        self.instances[index].retired = True

    def _dequeue_waiting(self, call: Call, inst: Any) -> None:
        if isinstance(inst, PrefillInstance):
            inst.remove(call)
        else:
            inst.remove_waiting(call)

    def _prefix_blocks(self, lat: Any) -> int:
        """Prefix-cache blocks of an instance with latency model ``lat`` (see
        ``prefix_cache_blocks``)."""
        blocks = self.prefix_cache_blocks
        if blocks == "kv":
            return int(lat.kv_capacity_tokens) // self.prefix_block_tokens
        if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)) or blocks < 0:
            raise ValueError(
                f"prefix_cache_blocks must be an integer >= 0 blocks or 'kv', got {blocks!r}"
            )
        return int(blocks)

    def _make_monolithic(self, spec: InstanceSpec) -> MonolithicInstance:
        preset = self.engine
        lat = self.latency_cache.get(spec, preset)
        inst = MonolithicInstance(
            cast(InstanceHost, self),  # Simulation, this mixin's host class, is one
            spec,
            lat,
            self.token_by_token,
            prefix_cache_blocks=self._prefix_blocks(lat),
            block_tokens=self.prefix_block_tokens,
            prefill_mode=self.prefill_mode,
            token_budget=resolve_token_budget(preset, lat.gpu, self.token_budget),
            check_interval=self.check_interval,
            kv_policy=self.kv_policy,
            max_batch=None if preset is None else preset.max_batch_for(lat.gpu),
        )
        if spec.gpu_ids and spec.fraction < 1:
            self.shared_gpus.add(inst)
        return inst

    def _bandwidth_variant(self, inst: MonolithicInstance, share: float) -> LatencyModel:
        """``inst``'s latency model with ``share`` of each GPU's HBM bandwidth."""
        return self.latency_cache.get(inst.spec, self.engine, bandwidth_share=share)
