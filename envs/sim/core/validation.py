"""Plan validation, pure functions of the simulation's state: a plan for an invocation is checked
whole before any of it is applied (unknown call or instance, wrong stage, a call twice, an
instance that does not serve the call's model or cannot hold it, an illegal migration), raising
:class:`~envs.sim.core.protocol.SchedulingError`; nothing is changed either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

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


class PlanTarget(Protocol):
    """What plan validation reads of a simulation."""

    @property
    def cluster(self) -> Any: ...
    @property
    def pd(self) -> bool: ...
    @property
    def check_queued(self) -> bool: ...
    @property
    def instances(self) -> Sequence[Any]: ...
    @property
    def decode(self) -> Sequence[Any]: ...
    @property
    def monolithic(self) -> Sequence[Any]: ...
    @property
    def calls(self) -> Sequence[Call]: ...
    @property
    def waiting_prefill(self) -> dict[int, Call]: ...
    @property
    def waiting_decode(self) -> dict[int, Call]: ...
    @property
    def unplanned(self) -> dict[int, Call]: ...
    @property
    def uid_bounds(self) -> dict[int, int]: ...


def validate_plan(sim: PlanTarget, inv: Invocation, plan: Sequence[Assignment]) -> None:
    """Check ``plan`` for the ``prefill``, ``route`` or ``decode`` invocation ``inv`` of ``sim``:
    every call it names waits at the stage, once, on instances that serve and hold it, and every
    call without a plan yet is covered."""
    seen: set[int] = set()
    n_inst = len(sim.instances)
    for a in plan:
        c = a.call
        _check_once(a, seen)
        if inv.stage == "decode":
            if c.stage != WAIT_DECODE or c.uid not in sim.waiting_decode:
                raise SchedulingError(f"call {c.id} is not waiting for decode (stage {c.stage!r})")
            continue
        if c.stage != WAIT_PREFILL or c.uid not in sim.waiting_prefill:
            raise SchedulingError(
                f"call {c.id} is not waiting for {inv.stage} (stage {c.stage!r}); a call "
                "that started service never moves"
            )
        p = a.prefill_instance
        role = "prefill" if sim.pd else "monolithic"
        if p is None or not 0 <= p < n_inst or sim.instances[p].role != role:
            raise SchedulingError(
                f"call {c.id}: {role} instance {p!r} is not a {role} instance of cluster "
                f"{sim.cluster.name!r} (valid: "
                f"{[i.index for i in sim.instances if i.role == role]})"
            )
        _check_serves(sim, c, p, "instance")
        if not sim.pd and sim.instances[p].retired and c.prefill_instance != p:
            raise SchedulingError(f"call {c.id}: instance {p} is retired and takes no new calls")
        d = a.decode_instance if sim.pd else p
        if sim.pd and (d is None or not 0 <= d < n_inst or sim.instances[d].role != "decode"):
            raise SchedulingError(
                f"call {c.id}: decode instance {d!r} is not a decode instance (valid: "
                f"{[i.index for i in sim.decode]})"
            )
        assert d is not None  # checked above: the prefill or the decode instance
        _check_holds(sim, c, d, "instance")
    if inv.stage != "decode":
        # The unplanned calls of ``inv.calls``: a call never loses its instance once placed,
        # and calls revealed after ``inv`` was raised have larger uids (the bound).
        bound = sim.uid_bounds.get(inv.seq, len(sim.calls))
        for c in sim.unplanned.values():
            if c.uid >= bound:
                break
            if c.uid not in seen:
                raise SchedulingError(
                    f"plan leaves call {c.id} without an instance; every call that has no "
                    "plan yet must be assigned"
                )


def _check_once(a: Assignment, seen: set[int]) -> None:
    """A call appears once in a plan, with a finite priority."""
    if a.call.uid in seen:
        raise SchedulingError(f"plan assigns call {a.call.id} twice")
    seen.add(a.call.uid)
    if not math.isfinite(a.priority):
        raise SchedulingError(f"call {a.call.id}: priority must be finite, got {a.priority}")


def _check_serves(sim: PlanTarget, call: Call, index: int, what: str) -> None:
    served = sim.instances[index].spec.model
    if served != call.model:
        raise SchedulingError(
            f"call {call.id} needs model {call.model!r} but {what} {index} serves {served!r}"
        )


def _check_holds(sim: PlanTarget, call: Call, index: int, what: str) -> None:
    cap = sim.instances[index].capacity
    if call.kv_tokens > cap:
        raise SchedulingError(
            f"call {call.id} needs {call.kv_tokens} KV tokens (input {call.input_tokens} + "
            f"output {call.output_tokens}) but {what} {index} holds at most {cap}"
        )


def validate_migration(sim: PlanTarget, inv: Invocation, plan: Sequence[Assignment]) -> None:
    """Check ``plan`` for the ``migrate`` invocation ``inv`` of ``sim``: every call it names is
    one of the checked instance's listed calls, still running there, and moves to a monolithic
    instance that serves and holds it."""
    src = inv.instance
    listed = {c.uid for c in inv.calls}
    seen: set[int] = set()
    for a in plan:
        c = a.call
        _check_once(a, seen)
        if c.uid not in listed:
            raise SchedulingError(
                f"call {c.id} is not one of this migrate invocation's calls (the running "
                f"calls of instance {src} at the check)"
            )
        queued = sim.check_queued and c.stage == WAIT_PREFILL
        if (c.stage != DECODE and not queued) or c.prefill_instance != src:
            raise SchedulingError(
                f"call {c.id} is no longer running on instance {src} (stage {c.stage!r}, "
                f"instance {c.prefill_instance}); expected a decoding call of instance {src}"
            )
        p = a.prefill_instance
        if p is None or not 0 <= p < len(sim.instances) or sim.instances[p].role != "monolithic":
            raise SchedulingError(
                f"call {c.id}: migration target {p!r} is not a monolithic instance of cluster "
                f"{sim.cluster.name!r} (valid: {[m.index for m in sim.monolithic]})"
            )
        _check_serves(sim, c, p, "migration target")
        _check_holds(sim, c, p, "migration target")
