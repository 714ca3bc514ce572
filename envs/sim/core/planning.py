"""Asynchronous planning (HexAgent §4.3 "Asynchronous planning avoids blocking", §5.2, Algorithm 1
lines 5–7 and 23; P-D stages only): a plan in flight, the fallback placement of the calls that
wait meanwhile, absorbing new work while a plan is in flight, and landing the plan (see the
:mod:`envs.sim.core.simulation` docstring).
"""

from __future__ import annotations

from collections.abc import Sequence

from envs.sim.core.protocol import (
    Assignment,
    Invocation,
)
from envs.sim.core.simpy_parts import callback
from envs.sim.core.workflows import (
    Call,
)


class AsyncPlanningMixin:
    """The asynchronous-planning methods of :class:`envs.sim.core.simulation.Simulation`."""

    # -- asynchronous planning (HexAgent §4.3, §5.2) -----------------------------------------
    def _plan_in_flight(self, inv: Invocation, plan: Sequence[Assignment], delay: float) -> None:
        """Put ``inv``'s validated ``plan`` in flight for ``delay`` seconds: fallback for its
        calls without a plan now, the other pending invocations of the stage absorbed, and the
        landing scheduled (Algorithm 1 line 23)."""
        stage = inv.stage
        assert self._in_flight[stage] is None, "a stage's invocations are absorbed in flight"
        stats = self.planning
        stats.plans += 1
        stats.delay_total += delay
        stats.delay_max = max(stats.delay_max, delay)
        self._in_flight[stage] = (list(inv.calls), list(plan))
        if stage == "prefill":
            self._fallback_place([c for c in inv.calls if c.uid in self._unplanned])
        else:
            self._decode_fallback(inv.new_calls)
        # Invocations of this stage raised in the same event wait behind ``inv``: absorb them.
        for other in [p for p in self.pending if p.stage == stage]:
            self.pending.remove(other)
            self._uid_bound.pop(other.seq, None)
            self._absorb(stage, other.new_calls)
        self.schedule(delay, callback(self._land, stage))

    def _absorb(self, stage: str, new_calls: list[Call]) -> None:
        """New work entered ``stage`` while its plan is in flight (Algorithm 1 lines 5–7): no
        invocation; the calls take the fallback plan now and the stage is marked dirty."""
        self.planning.absorbed += 1
        self._dirty[stage] = True
        self._absorbed[stage].extend(new_calls)
        if stage == "prefill":
            self._fallback_place([c for c in new_calls if c.uid in self._unplanned])
        else:
            self._decode_fallback(new_calls)

    def _decode_fallback(self, calls: list[Call]) -> None:
        """``calls`` wait for decode without a decode plan: they keep the priority they carried
        from prefill (the fallback plan of the decode stage, as :class:`DefaultScheduler`'s)."""
        fallback = self._on_fallback["decode"]
        for c in calls:
            if c.uid in self.waiting_decode and c.uid not in fallback:
                fallback.add(c.uid)
                self.planning.fallback_calls["decode"] += 1

    def _fallback_place(self, calls: list[Call]) -> None:
        """Place ``calls`` (waiting for prefill, without a plan) by the fallback plan: the
        least-loaded (prefill, decode) pair of :class:`envs.sim.core.scheduler.DefaultScheduler` —
        the simulator's no-RL default — at the back of the prefill instance's queue (priority
        one above the largest queued there; the decode priority is the same). Schedulers'
        priority scales differ (reveal times, ranks), so a call without a plan joins behind the
        planned ones instead of cutting into an order it cannot read."""
        if not calls:
            return
        from envs.sim.core.scheduler import DefaultScheduler

        inv = Invocation("prefill", self.env.now, "fallback", calls, calls, -1)
        back: dict[int, float] = {}
        plan = []
        for a in DefaultScheduler().plan(self, inv):
            p = a.prefill_instance
            if p not in back:
                back[p] = max((c.prefill_priority for c in self.instances[p].queue), default=-1.0)
            back[p] += 1.0
            plan.append(Assignment(a.call, back[p], p, a.decode_instance))
        self._apply_plan("prefill", plan)
        self.planning.fallback_calls["prefill"] += len(plan)
        self._on_fallback["prefill"].update(a.call.uid for a in plan)

    def _land(self, stage: str) -> None:
        """The plan in flight for ``stage`` arrives: apply it to the calls still waiting there
        (a started call is never moved: HexAgent §4.3, §5.2), then, if the stage absorbed work
        meanwhile and calls wait there, raise one fresh invocation for them."""
        flight = self._in_flight[stage]
        assert flight is not None
        self._in_flight[stage] = None
        calls, plan = flight
        waiting = self.waiting_decode if stage == "decode" else self.waiting_prefill
        live = [a for a in plan if a.call.uid in waiting]
        self.planning.skipped[stage] += len(plan) - len(live)
        # The plan reached every call of its invocation: those it leaves out keep their plan.
        fallback = self._on_fallback[stage]
        for c in calls:
            fallback.discard(c.uid)
        self._apply_plan(stage, live)
        absorbed, self._absorbed[stage] = self._absorbed[stage], []
        if self._dirty[stage]:
            self._dirty[stage] = False
            if waiting:
                self.planning.replans += 1
                self._raise(stage, "replan", [c for c in absorbed if c.uid in waiting])

    def _drop_started_calls(self) -> None:
        """Take calls out of the pending invocations that started service after the invocation
        was raised but within the same event (an engine that finished a call starts its next
        queued one in the callback that revealed the finished call's children): a scheduler is
        shown only calls it can still plan."""
        started, self._started_while_pending = self._started_while_pending, []
        # Only a call that left a waiting dict can have left an invocation's list (a call is
        # listed only while it waits, and re-enters no waiting dict once started), so the lists
        # are rebuilt only when one of them names such a call: the same lists as filtering every
        # call by ``uid in waiting``, without a pass over every waiting call per event.
        gone = {id(c) for c in started}
        for inv in self.pending:
            if inv.stage == "migrate":
                continue
            if inv.__dict__.get("_calls", ()) is None:  # built lazily from the waiting calls
                if any(id(c) in gone for c in inv.new_calls):
                    waiting = self.waiting_prefill
                    inv.new_calls = [c for c in inv.new_calls if c.uid in waiting]
                continue
            if any(id(c) in gone for c in inv.new_calls) or any(c in inv.calls for c in started):
                waiting = self.waiting_decode if inv.stage == "decode" else self.waiting_prefill
                inv.calls = [c for c in inv.calls if c.uid in waiting]
                inv.new_calls = [c for c in inv.new_calls if c.uid in waiting]
