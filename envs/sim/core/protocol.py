"""The simulator core's shared vocabulary: what the simulation, its instances and its schedulers
say to each other, in one module each of them imports (Vidur's base-class pattern).

* the plan protocol: :class:`Invocation` (a pending decision), :class:`Assignment` (one call's
  part of a plan), :class:`SchedulingError` (an illegal plan) and :class:`Scheduler` (anything
  with ``plan(sim, invocation)``);
* :class:`InstanceHost`: what an instance (:mod:`envs.sim.engines.instances`) calls on the
  simulation that owns it (clock, event queue, callbacks, listeners);
* :class:`SchedulerView`: the scheduler-visible state of a simulation that the built-in
  schedulers (:mod:`envs.sim.core.scheduler`) read;
* the scheduling constants the engine presets (:mod:`envs.sim.engines.presets`) validate against.

:class:`envs.sim.core.simulation.Simulation` implements both protocols; nothing here imports the
simulation, the instances or the schedulers, so the core has no import circle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from envs.sim.core.estimates import SchedulerEstimates
from envs.sim.core.workflows import Call

#: KV-cache admission policies of a batch engine (see :mod:`envs.sim.engines.instances`).
KV_POLICIES = ("reserve", "paged")
#: Tokens per iteration when no engine preset sets a budget.
DEFAULT_TOKEN_BUDGET = 2048
#: Monolithic scheduling modes (see :class:`envs.sim.engines.instances.MonolithicInstance`).
SCHEDULING_MODES = ("prefill-first", "chunked", "chunked-prefill-first", "mixed-whole")
#: Invocation stages; plans of ``ASYNC_STAGES`` may land late (``Simulation.apply``'s delay).
STAGES = ("prefill", "decode", "route", "migrate")
ASYNC_STAGES = ("prefill", "decode")  # stages whose plans may land late (``apply``'s delay)
#: Monolithic scheduling modes a simulation accepts (``Simulation(prefill_mode=...)``).
PREFILL_MODES = SCHEDULING_MODES
MIGRATION_MODES = ("token", "kv")
TOOL_ESTIMATES = ("history", "oracle")
TOKEN_ID_BYTES = 4  # bytes per token ID shipped by token-ID migration (int32)
# Methods a listener may define (all optional), with their arguments:
#   on_admit(call, inst, now)                      a batch engine admitted ``call``
#   on_prefill_done(call, inst, now, tokens, seconds)
#       a monolithic prefill finished: ``tokens`` prompt tokens computed (uncached, including a
#       re-prefill after migration) in ``seconds`` since its first chunk started
#   on_decode_progress(inst, iterations, seconds, batch)
#       a batch engine ran ``iterations`` decode iterations of ``batch`` sequences in ``seconds``
#       (a chunked mixed iteration with decodes counts as one)
#   on_call_done(call, inst, now)                  ``call`` finished on ``inst``
#   on_migrated(call, src, dst, now, seconds)      a migration landed in ``dst``'s queue after
#       ``seconds`` in transit
#   on_preempted(call, inst, now)                  a paging engine evicted running ``call``
#       back to its waiting queue (it is admitted again later: ``on_admit`` fires again)
LISTENER_METHODS = (
    "on_admit",
    "on_prefill_done",
    "on_decode_progress",
    "on_call_done",
    "on_migrated",
    "on_preempted",
)


class SchedulingError(ValueError):
    """A plan is illegal: unknown call or instance, wrong stage, infeasible placement."""


@dataclass
class Invocation:
    """A pending scheduling decision.

    :param stage: ``prefill``, ``decode``, ``route`` or ``migrate``.
    :param time: simulated time in seconds.
    :param trigger: ``arrival``, ``reveal``, ``transfer``, ``check`` (migrate) or ``replan``
        (a delayed plan landed on a stage that absorbed new work meanwhile; see ``apply``).
    :param calls: every call waiting at this stage when the decision is handed out (a call an
        engine started in the same event that raised the invocation is not listed), in reveal
        order (the plan may cover all); for ``migrate``, the instance's running calls past
        prefill, in admission order.
    :param new_calls: the calls whose arrival at the stage raised the invocation (``migrate``:
        the same calls as ``calls``).
    :param seq: invocation counter, from 0.
    :param instance: the instance whose check raised a ``migrate`` invocation (else None).
    """

    stage: str
    time: float
    trigger: str
    calls: list[Call]
    new_calls: list[Call]
    seq: int
    instance: int | None = None


@dataclass(frozen=True)
class Assignment:
    """One call's part of a plan.

    :param call: the call (from ``Invocation.calls``).
    :param priority: queue priority at the stage's instance (lower is served first).
    :param prefill_instance: prefill (``prefill`` stage) or monolithic (``route`` stage) instance
        index; the migration target (``migrate`` stage; the current instance = stay); ignored at
        the ``decode`` stage.
    :param decode_instance: planned decode instance index (``prefill`` stage only).
    :param decode_priority: priority the call will carry into the decode queue (default: the
        prefill priority).
    """

    call: Call
    priority: float
    prefill_instance: int | None = None
    decode_instance: int | None = None
    decode_priority: float | None = None


class Scheduler(Protocol):
    """What :meth:`envs.sim.core.simulation.Simulation.run` drives."""

    def plan(self, sim: Any, inv: Invocation) -> list[Assignment]:
        """Assignments for (a subset of) ``inv.calls``; every call without a plan is covered.
        ``sim`` is the simulation, read through :class:`SchedulerView`."""
        ...


class InstanceHost(Protocol):
    """What an instance calls on the simulation that owns it (times in simulated seconds)."""

    @property
    def now(self) -> float: ...
    @property
    def prefix_index(self) -> Any: ...
    @property
    def check_queued(self) -> bool: ...
    @property
    def listeners(self) -> dict[str, list[Callable[..., Any]]]: ...

    def next_seq(self) -> int: ...

    def schedule(self, delay: float, fn: Callable[..., Any]) -> None: ...

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> None: ...

    def schedule_late(self, fn: Callable[..., Any], *args: Any) -> None: ...

    def on_started(self, call: Call) -> None: ...

    def on_prefill_done(self, call: Call, inst: Any) -> None: ...

    def on_decode_done(self, call: Call, inst: Any) -> None: ...

    def raise_check(self, inst: Any, calls: list[Call]) -> None: ...


class SchedulerView(Protocol):
    """The scheduler-visible state of a simulation that :mod:`envs.sim.core.scheduler` reads: its
    clock (seconds), cluster, instance lists (:mod:`envs.sim.engines.instances` objects) and its
    estimates (run-alone times, prefix hits, KV links)."""

    @property
    def now(self) -> float: ...
    @property
    def cluster(self) -> Any: ...
    @property
    def instances(self) -> Sequence[Any]: ...
    @property
    def prefill(self) -> Sequence[Any]: ...
    @property
    def decode(self) -> Sequence[Any]: ...
    @property
    def monolithic(self) -> Sequence[Any]: ...
    @property
    def estimates(self) -> SchedulerEstimates: ...
