"""Picklable SimPy pieces: event callbacks that ignore their event, and an environment that
survives ``pickle`` (a live episode pickles mid-run, for multiprocessing and Ray users).

A lambda in SimPy's event queue cannot be pickled; ``callback(fn, *args)`` is a
:func:`functools.partial` of a bound method and its arguments, which can.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import simpy
from simpy.core import BoundClass


def callback(fn: Callable[..., None], *args: Any) -> Callable[[Any], None]:
    """An event callback that runs ``fn(*args)`` and ignores the event (a picklable
    ``lambda _e: fn(*args)``)."""
    return functools.partial(_call_ignoring_event, fn, args)


def _call_ignoring_event(fn: Callable[..., None], args: tuple[Any, ...], _event: Any) -> None:
    fn(*args)


class PicklableEnvironment(simpy.Environment):
    """A :class:`simpy.Environment` that pickles: SimPy binds its event classes to the instance
    (``BoundClass.bind_early``), and those bound classes are rebuilt on load rather than pickled;
    the event-id counter is stored as its next value (``itertools.count`` is not picklable
    on every Python)."""

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
