"""Asynchronous planning (HexAgent §4.3 "Asynchronous planning avoids blocking", §5.2, Algorithm 1
lines 5–7 and 23; P-D stages only): the :class:`AsyncPlanner` a simulation holds owns the plan in
flight per stage, whether the stage absorbed new work meanwhile (dirty), the calls it absorbed
and the calls that wait under the fallback plan; it places those calls by the fallback plan and
lands the plan (see the :mod:`envs.sim.core.simulation` docstring).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from envs.sim.core.protocol import (
    Assignment,
    Invocation,
    SchedulerView,
)
from envs.sim.core.records import PlanningStats
from envs.sim.core.scheduler import DefaultScheduler
from envs.sim.core.simpy_parts import callback
from envs.sim.core.workflows import (
    Call,
)

#: The stages that plan asynchronously, the keys of the planner's per-stage state.
PLANNED_STAGES = ("prefill", "decode")


class PlanningHost(SchedulerView, Protocol):
    """What the asynchronous planner uses of the simulation that holds it."""

    @property
    def pending(self) -> list[Invocation]: ...
    @property
    def waiting_prefill(self) -> dict[int, Call]: ...
    @property
    def waiting_decode(self) -> dict[int, Call]: ...
    @property
    def unplanned(self) -> dict[int, Call]: ...
    @property
    def uid_bounds(self) -> dict[int, int]: ...

    def schedule(self, delay: float, fn: Callable[[Any], None]) -> None: ...

    def apply_placements(self, stage: str, plan: Sequence[Assignment]) -> None: ...

    def raise_invocation(self, stage: str, trigger: str, new_calls: list[Call]) -> None: ...


class AsyncPlanner:
    """The asynchronous-planning state of a simulation and what changes it.

    :param sim: the simulation that holds the planner.
    """

    sim: PlanningHost
    #: Per stage, the plan in flight: the calls of its invocation and its assignments (None: none).
    in_flight: dict[str, tuple[list[Call], list[Assignment]] | None]
    #: Per stage, whether it absorbed invocations while its plan was in flight.
    dirty: dict[str, bool]
    #: Per stage, the calls it absorbed while its plan was in flight.
    absorbed: dict[str, list[Call]]
    #: Per stage, the uids of waiting calls no plan has reached yet (they wait under the fallback).
    on_fallback: dict[str, set[int]]
    #: What happened (``Simulation.planning`` is this object).
    stats: PlanningStats

    def __init__(self, sim: PlanningHost) -> None:
        self.sim = sim
        self.in_flight = dict.fromkeys(PLANNED_STAGES)
        self.dirty = dict.fromkeys(PLANNED_STAGES, False)
        self.absorbed = {stage: [] for stage in PLANNED_STAGES}
        self.on_fallback = {stage: set() for stage in PLANNED_STAGES}
        self.stats = PlanningStats()

    def put_in_flight(self, inv: Invocation, plan: Sequence[Assignment], delay: float) -> None:
        """Put ``inv``'s validated ``plan`` in flight for ``delay`` seconds: fallback for its
        calls without a plan now, the other pending invocations of the stage absorbed, and the
        landing scheduled (Algorithm 1 line 23)."""
        sim = self.sim
        stage = inv.stage
        assert self.in_flight[stage] is None, "a stage's invocations are absorbed in flight"
        stats = self.stats
        stats.plans += 1
        stats.delay_total += delay
        stats.delay_max = max(stats.delay_max, delay)
        self.in_flight[stage] = (list(inv.calls), list(plan))
        if stage == "prefill":
            self.fallback_place([c for c in inv.calls if c.uid in sim.unplanned])
        else:
            self.decode_fallback(inv.new_calls)
        # Invocations of this stage raised in the same event wait behind ``inv``: absorb them.
        for other in [p for p in sim.pending if p.stage == stage]:
            sim.pending.remove(other)
            sim.uid_bounds.pop(other.seq, None)
            self.absorb(stage, other.new_calls)
        sim.schedule(delay, callback(self.land, stage))

    def absorb(self, stage: str, new_calls: list[Call]) -> None:
        """New work entered ``stage`` while its plan is in flight (Algorithm 1 lines 5–7): no
        invocation; the calls take the fallback plan now and the stage is marked dirty."""
        self.stats.absorbed += 1
        self.dirty[stage] = True
        self.absorbed[stage].extend(new_calls)
        if stage == "prefill":
            unplanned = self.sim.unplanned
            self.fallback_place([c for c in new_calls if c.uid in unplanned])
        else:
            self.decode_fallback(new_calls)

    def decode_fallback(self, calls: list[Call]) -> None:
        """``calls`` wait for decode without a decode plan: they keep the priority they carried
        from prefill (the fallback plan of the decode stage, as :class:`DefaultScheduler`'s)."""
        fallback = self.on_fallback["decode"]
        waiting = self.sim.waiting_decode
        for c in calls:
            if c.uid in waiting and c.uid not in fallback:
                fallback.add(c.uid)
                self.stats.fallback_calls["decode"] += 1

    def fallback_place(self, calls: list[Call]) -> None:
        """Place ``calls`` (waiting for prefill, without a plan) by the fallback plan: the
        least-loaded (prefill, decode) pair of :class:`envs.sim.core.scheduler.DefaultScheduler` —
        the simulator's no-RL default — at the back of the prefill instance's queue (priority
        one above the largest queued there; the decode priority is the same). Schedulers'
        priority scales differ (reveal times, ranks), so a call without a plan joins behind the
        planned ones instead of cutting into an order it cannot read."""
        if not calls:
            return
        sim = self.sim
        inv = Invocation("prefill", sim.now, "fallback", calls, calls, -1)
        back: dict[int, float] = {}
        plan = []
        for a in DefaultScheduler().plan(sim, inv):
            p = a.prefill_instance
            assert p is not None, "the default scheduler places every prefill call"
            if p not in back:
                back[p] = max((c.prefill_priority for c in sim.instances[p].queue), default=-1.0)
            back[p] += 1.0
            plan.append(Assignment(a.call, back[p], p, a.decode_instance))
        sim.apply_placements("prefill", plan)
        self.stats.fallback_calls["prefill"] += len(plan)
        self.on_fallback["prefill"].update(a.call.uid for a in plan)

    def land(self, stage: str) -> None:
        """The plan in flight for ``stage`` arrives: apply it to the calls still waiting there
        (a started call is never moved: HexAgent §4.3, §5.2), then, if the stage absorbed work
        meanwhile and calls wait there, raise one fresh invocation for them."""
        sim = self.sim
        flight = self.in_flight[stage]
        assert flight is not None
        self.in_flight[stage] = None
        calls, plan = flight
        waiting = sim.waiting_decode if stage == "decode" else sim.waiting_prefill
        live = [a for a in plan if a.call.uid in waiting]
        self.stats.skipped[stage] += len(plan) - len(live)
        # The plan reached every call of its invocation: those it leaves out keep their plan.
        fallback = self.on_fallback[stage]
        for c in calls:
            fallback.discard(c.uid)
        sim.apply_placements(stage, live)
        absorbed, self.absorbed[stage] = self.absorbed[stage], []
        if self.dirty[stage]:
            self.dirty[stage] = False
            if waiting:
                self.stats.replans += 1
                sim.raise_invocation(stage, "replan", [c for c in absorbed if c.uid in waiting])

    def started(self, call: Call, stage: str) -> None:
        """``call`` started service at ``stage``: count it if it started on the fallback plan."""
        fallback = self.on_fallback[stage]
        if fallback and call.uid in fallback:
            fallback.discard(call.uid)
            self.stats.started_on_fallback[stage] += 1
