"""Plan validation: a plan for an invocation is checked whole before any of it is applied
(unknown call or instance, wrong stage, a call twice, an instance that does not serve the call's
model or cannot hold it, an illegal migration), raising
:class:`~envs.sim.core.protocol.SchedulingError` and leaving the state untouched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from envs.sim.core.protocol import (
    Assignment,
    Invocation,
    SchedulingError,
)
from envs.sim.core.workflows import (
    DECODE,
    WAIT_DECODE,
    WAIT_PREFILL,
    Call,
)


class PlanValidationMixin:
    """The plan-validation methods of :class:`envs.sim.core.simulation.Simulation`."""

    def _validate(self, inv: Invocation, plan: Sequence[Assignment]) -> None:
        seen: set[int] = set()
        n_inst = len(self.instances)
        for a in plan:
            c = a.call
            self._check_once(a, seen)
            if inv.stage == "decode":
                if c.stage != WAIT_DECODE or c.uid not in self.waiting_decode:
                    raise SchedulingError(
                        f"call {c.id} is not waiting for decode (stage {c.stage!r})"
                    )
                continue
            if c.stage != WAIT_PREFILL or c.uid not in self.waiting_prefill:
                raise SchedulingError(
                    f"call {c.id} is not waiting for {inv.stage} (stage {c.stage!r}); a call "
                    "that started service never moves"
                )
            p = a.prefill_instance
            role = "prefill" if self.pd else "monolithic"
            if p is None or not 0 <= p < n_inst or self.instances[p].role != role:
                raise SchedulingError(
                    f"call {c.id}: {role} instance {p!r} is not a {role} instance of cluster "
                    f"{self.cluster.name!r} (valid: "
                    f"{[i.index for i in self.instances if i.role == role]})"
                )
            self._check_serves(c, p, "instance")
            if not self.pd and self.instances[p].retired and c.prefill_instance != p:
                raise SchedulingError(
                    f"call {c.id}: instance {p} is retired and takes no new calls"
                )
            d = a.decode_instance if self.pd else p
            if self.pd and (d is None or not 0 <= d < n_inst or self.instances[d].role != "decode"):
                raise SchedulingError(
                    f"call {c.id}: decode instance {d!r} is not a decode instance (valid: "
                    f"{[i.index for i in self.decode]})"
                )
            self._check_holds(c, d, "instance")
        if inv.stage != "decode":
            # The unplanned calls of ``inv.calls``: a call never loses its instance once placed,
            # and calls revealed after ``inv`` was raised have larger uids (the bound).
            bound = self._uid_bound.get(inv.seq, len(self.calls))
            for c in self._unplanned.values():
                if c.uid >= bound:
                    break
                if c.uid not in seen:
                    raise SchedulingError(
                        f"plan leaves call {c.id} without an instance; every call that has no "
                        "plan yet must be assigned"
                    )

    @staticmethod
    def _check_once(a: Assignment, seen: set[int]) -> None:
        """A call appears once in a plan, with a finite priority."""
        if a.call.uid in seen:
            raise SchedulingError(f"plan assigns call {a.call.id} twice")
        seen.add(a.call.uid)
        if not math.isfinite(a.priority):
            raise SchedulingError(f"call {a.call.id}: priority must be finite, got {a.priority}")

    def _check_serves(self, call: Call, index: int, what: str) -> None:
        served = self.instances[index].spec.model
        if served != call.model:
            raise SchedulingError(
                f"call {call.id} needs model {call.model!r} but {what} {index} serves {served!r}"
            )

    def _check_holds(self, call: Call, index: int, what: str) -> None:
        cap = self.instances[index].capacity
        if call.kv_tokens > cap:
            raise SchedulingError(
                f"call {call.id} needs {call.kv_tokens} KV tokens (input {call.input_tokens} + "
                f"output {call.output_tokens}) but {what} {index} holds at most {cap}"
            )

    def _validate_migration(self, inv: Invocation, plan: Sequence[Assignment]) -> None:
        src = inv.instance
        listed = {c.uid for c in inv.calls}
        seen: set[int] = set()
        for a in plan:
            c = a.call
            self._check_once(a, seen)
            if c.uid not in listed:
                raise SchedulingError(
                    f"call {c.id} is not one of this migrate invocation's calls (the running "
                    f"calls of instance {src} at the check)"
                )
            queued = self.check_queued and c.stage == WAIT_PREFILL
            if (c.stage != DECODE and not queued) or c.prefill_instance != src:
                raise SchedulingError(
                    f"call {c.id} is no longer running on instance {src} (stage {c.stage!r}, "
                    f"instance {c.prefill_instance}); expected a decoding call of instance {src}"
                )
            p = a.prefill_instance
            if (
                p is None
                or not 0 <= p < len(self.instances)
                or self.instances[p].role != "monolithic"
            ):
                raise SchedulingError(
                    f"call {c.id}: migration target {p!r} is not a monolithic instance of cluster "
                    f"{self.cluster.name!r} (valid: {[m.index for m in self.monolithic]})"
                )
            self._check_serves(c, p, "migration target")
            self._check_holds(c, p, "migration target")
