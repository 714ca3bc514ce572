"""Picklable SimPy pieces: event callbacks that ignore their event, and an environment that
survives ``pickle`` (a live episode pickles mid-run, for multiprocessing and Ray users).

A lambda in SimPy's event queue cannot be pickled; ``callback(fn, *args)`` is a
:func:`functools.partial` of a bound method and its arguments, which can.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import BoundClass

#: SimPy's queue priorities: ``NORMAL`` (timeouts) and the one after every normal event of an
#: instant (``Simulation.schedule_late``).
NORMAL = 1
LATE = 2


def callback(fn: Callable[..., None], *args: Any) -> Callable[[Any], None]:
    """An event callback that runs ``fn(*args)`` and ignores the event (a picklable
    ``lambda _e: fn(*args)``)."""
    return functools.partial(_call_ignoring_event, fn, args)


def _call_ignoring_event(fn: Callable[..., None], args: tuple[Any, ...], _event: Any) -> None:
    fn(*args)


#: A due call in the SimPy queue is the tuple ``(fn, args)`` in an entry's event slot: what a
#: :class:`simpy.events.Timeout` with one callback does, without the event object, its callback
#: list and the partial around the callback (the simulator schedules ~100,000 of them per 1,000
#: workflows, and no process ever waits on one). :meth:`PicklableEnvironment.step` runs it; it
#: takes one event id and one queue entry, exactly as the ``Timeout`` it replaces, so the event
#: order is the same (entries compare by time, priority, then the unique id).
DUE = tuple


class PicklableEnvironment(simpy.Environment):
    """A :class:`simpy.Environment` that pickles: SimPy binds its event classes to the instance
    (``BoundClass.bind_early``), and those bound classes are rebuilt on load rather than pickled;
    the event-id counter is stored as its next value (``itertools.count`` is not picklable
    on every Python)."""

    def call_at(self, delay: float, priority: int, fn: Callable[..., None], *args: Any) -> None:
        """Queue ``fn(*args)`` at ``now + delay`` seconds with SimPy queue ``priority`` (see
        :data:`DUE`); the same time arithmetic and tie-breaking as ``timeout(delay)``."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        queue: list[Any] = self._queue  # SimPy's events and (fn, args) due calls
        heappush(queue, (self._now + delay, priority, next(self._eid), (fn, args)))

    def step(self) -> None:
        """Process the next event: a due call (:data:`DUE`) directly, any other event as SimPy
        does."""
        queue = self._queue
        if not queue or type(queue[0][3]) is not DUE:
            super().step()
            return
        self._now, _, _, (fn, args) = heappop(queue)
        fn(*args)

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if not _is_bound_class(self, k)}
        nxt = next(self._eid)
        self._eid = itertools.count(nxt)  # this live copy continues from the same id
        state["_eid"] = nxt
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        state["_eid"] = itertools.count(state["_eid"])
        self.__dict__.update(state)
        BoundClass.bind_early(self)


def _is_bound_class(env: simpy.Environment, name: str) -> bool:
    return any(type(vars(c).get(name)) is BoundClass for c in type(env).__mro__)


class ClockMixin:
    """The clock and timer methods of :class:`envs.sim.core.simulation.Simulation` (its ``env`` is a
    :class:`PicklableEnvironment`)."""

    env: PicklableEnvironment

    @property
    def now(self) -> float:
        """Current simulated time in seconds."""
        return self.env._now  # SimPy's ``Environment.now``, without its property call

    def schedule(self, delay: float, fn: Callable[[Any], None]) -> None:
        """Run ``fn(None)`` after ``delay`` seconds of simulated time (``fn`` takes the place of
        a SimPy event callback; no event object is made: see
        :data:`envs.sim.core.simpy_parts.DUE`)."""
        self.env.call_at(delay, NORMAL, fn, None)

    def call_later(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` after ``delay`` seconds of simulated time (as :meth:`schedule`;
        :meth:`envs.sim.core.simpy_parts.PicklableEnvironment.call_at` inlined: the hottest
        call)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        env = self.env
        queue: list[Any] = env._queue  # SimPy's events and (fn, args) due calls
        heappush(queue, (env._now + delay, NORMAL, next(env._eid), (fn, args)))

    def schedule_late(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at the current instant, after every other event of this instant
        (including those scheduled later at the same time): SimPy orders its queue by time,
        then priority (URGENT 0, NORMAL 1); this uses 2."""
        self.env.call_at(0.0, LATE, fn, *args)
