"""Migration (GoodServe §3.4, §4.3): risk checks every τ decode iterations raise ``migrate``
invocations; a planned migration ships token IDs and re-prefills (``token``) or moves the KV
(``kv``) over the pair's link, then the call joins the target's queue (see the
:mod:`envs.sim.core.simulation` docstring).
"""

from __future__ import annotations

from envs.sim.core.protocol import (
    TOKEN_ID_BYTES,
    Invocation,
)
from envs.sim.core.simpy_parts import callback
from envs.sim.core.state import SimulationState
from envs.sim.core.workflows import (
    MIGRATING,
    WAIT_DECODE,
    WAIT_PREFILL,
    Call,
)
from envs.sim.engines.instances import MonolithicInstance


class MigrationMixin(SimulationState):
    """The migration methods of :class:`envs.sim.core.simulation.Simulation`."""

    # -- migration ---------------------------------------------------------------------------
    def raise_check(self, inst: MonolithicInstance, calls: list[Call]) -> None:
        """Raise a ``migrate`` invocation for ``inst``'s decoding ``calls`` (the instance pauses
        until the plan is applied)."""
        self.pending.append(
            Invocation(
                "migrate",
                self.env.now,
                "check",
                calls,
                list(calls),
                self.invocation_count,
                instance=inst.index,
            )
        )
        self.invocation_count += 1

    def _migrate(
        self, call: Call, src: MonolithicInstance, dst: MonolithicInstance, priority: float
    ) -> None:
        tokens = call.input_tokens + call.generated
        queued = call.stage == WAIT_PREFILL  # a pending call holds no KV: ship its token IDs
        if queued:
            src.remove_waiting(call)
            num_bytes = TOKEN_ID_BYTES * tokens
        elif self.migration == "token":
            src.running.remove(call)
            src.release(call)
            num_bytes = TOKEN_ID_BYTES * tokens
        else:
            src.running.remove(call)
            num_bytes = src.latency.kv_bytes_per_token * tokens
        dt = self.cluster.kv_transfer.transfer_time(num_bytes, src.gpu, dst.gpu)
        call.stage = MIGRATING
        call.migrations += 1
        call.prefill_priority = call.decode_priority = float(priority)
        self.schedule(dt, callback(self._on_migration_landed, call, src, dst, dt, queued))

    def _on_migration_landed(
        self,
        call: Call,
        src: MonolithicInstance,
        dst: MonolithicInstance,
        seconds: float,
        queued: bool = False,
    ) -> None:
        call.migration_seconds += seconds
        if self.migration == "kv" and not queued:
            src.release(call)
            call.resident = True
            call.stage = WAIT_DECODE
        else:
            call.resident = False
            call.stage = WAIT_PREFILL
        now = self.env.now
        for f in self.listeners["on_migrated"]:
            f(call, src, dst, now, seconds)
        dst.enqueue(call)
        if self.migration == "kv" and not queued:
            src.on_queue_changed()  # the freed KV may admit a waiting call
