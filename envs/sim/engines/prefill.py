"""P-D prefill instances (HexAgent §4.2): one call at a time from a local priority queue, the
prefill time charged on the uncached prompt tokens.
"""

from __future__ import annotations

import heapq
from typing import Any

from envs.sim.core.protocol import InstanceHost
from envs.sim.core.workflows import PREFILL, WAIT_PREFILL, Call
from envs.sim.engines.prefix_cache import PrefixCache
from envs.sim.hardware.cluster import InstanceSpec


class PrefillInstance(PrefixCache):
    """A prefill server: one call at a time from a local priority queue (HexAgent §4.2).

    With a prefix cache (SGLang, HexAgent's substrate, keeps one: RadixAttention) a call whose
    leading prompt blocks are cached here computes only the rest: its prefill is priced as
    ``prefill_time(uncached, 1, context_tokens=cached)`` and ``call.cached_tokens`` records the
    hit. The whole prompt's KV (cached and computed) is then shipped to the decode instance.

    :param sim: the simulation that owns the instance.
    :param spec: the instance's specification.
    :param latency: its :class:`envs.sim.latency.model.LatencyModel`.
    :param prefix_cache_blocks: LRU capacity in blocks (0, the default, disables the cache).
    :param block_tokens: tokens per prefix block.
    """

    role = "prefill"

    def __init__(
        self,
        sim: InstanceHost,
        spec: InstanceSpec,
        latency: Any,
        prefix_cache_blocks: int = 0,
        block_tokens: int = 512,
    ):
        self.sim = sim
        self.spec = spec
        self.index = spec.index
        self.gpu = spec.gpu
        self.latency = latency
        self.queue: list[Call] = []  # waiting calls in arrival order
        # Selection heap over ``queue``: (priority, enqueue_seq, push counter, call). An entry
        # is stale once its call left the queue or took another priority (a re-plan pushes a
        # fresh entry); stale entries are skipped when popped and purged when they dominate.
        self._heap: list[tuple[float, int, int, Call]] = []
        self._pushes = 0
        self.queued_seconds = 0.0  # prefill seconds of the queued calls, kept incrementally
        # Each queued call's share of ``queued_seconds`` (priced with its hits at enqueue), so
        # that leaving the queue subtracts exactly what entering added.
        self._queued_price: dict[int, float] = {}
        self.current: Call | None = None
        self.busy_until = 0.0
        self.busy_time = 0.0
        self._kick_pending = False
        self._init_prefix_cache(prefix_cache_blocks, block_tokens)

    def prefill_seconds(self, call: Call, cached: int | None = None) -> float:
        """Seconds to prefill ``call`` here with ``cached`` prompt tokens already in the cache
        (None: its hits now): the uncached tokens, attending to the cached ones as context."""
        hit = self.prefix_hit_tokens(call) if cached is None else cached
        return self.latency.prefill_time(call.input_tokens - hit, 1, hit)

    def enqueue(self, call: Call) -> None:
        """Add ``call`` to the local queue (its ``prefill_priority`` is already set)."""
        call.enqueue_seq = self.sim.next_seq()
        call.enqueued_at = self.sim.now
        call.prefill_instance = self.index
        self.queue.append(call)
        self._push(call)
        price = self._queued_price[call.uid] = self.prefill_seconds(call)
        self.queued_seconds += price
        self.on_queue_changed()

    def reprioritised(self, call: Call) -> None:
        """A plan gave the queued ``call`` a new ``prefill_priority``."""
        self._push(call)

    def _push(self, call: Call) -> None:
        self._pushes += 1
        heap = self._heap
        heapq.heappush(heap, (call.prefill_priority, call.enqueue_seq, self._pushes, call))
        if len(heap) > 2 * len(self.queue) + 64:
            self._heap = [
                (c.prefill_priority, c.enqueue_seq, i, c) for i, c in enumerate(self.queue)
            ]
            heapq.heapify(self._heap)

    def _pop_first(self) -> Call:
        """The queued call with the smallest (priority, enqueue order)."""
        heap = self._heap
        while True:
            prio, seq, _, call = heapq.heappop(heap)
            if (
                call.prefill_priority == prio
                and call.enqueue_seq == seq
                and call.prefill_instance == self.index
                and call.stage == WAIT_PREFILL
            ):
                return call

    def remove(self, call: Call) -> None:
        """Take a still-waiting ``call`` out of the queue (it is being re-planned elsewhere)."""
        self.queue.remove(call)
        self._unqueue(call)

    def _unqueue(self, call: Call) -> None:
        price = self._queued_price.pop(call.uid)
        if self.queue:
            self.queued_seconds -= price
        else:
            self.queued_seconds = 0.0  # no float drift across an emptied queue

    def on_queue_changed(self) -> None:
        """Start serving at the current instant if idle (after pending decisions are applied)."""
        if self.current is None and not self._kick_pending and self.queue:
            self._kick_pending = True
            self.sim.schedule(0.0, self._start_next)

    def queued_work_seconds(self) -> float:
        """Remaining seconds of the call in service plus all queued prefill work (truthful; with
        a prefix cache each queued call is priced with its hits when it was enqueued)."""
        # ``x if x > 0.0 else 0.0`` is ``max(0.0, x)`` (the same float, NaN included), inline
        work = 0.0
        if self.current is not None:
            left = self.busy_until - self.sim.now
            if left > 0.0:
                work = left
        queued = self.queued_seconds
        return work + (queued if queued > 0.0 else 0.0)

    def _start_next(self, _event: Any = None) -> None:
        self._kick_pending = False
        if self.current is not None or not self.queue:
            return
        call = self._pop_first()
        self.queue.remove(call)
        self._unqueue(call)
        now = self.sim.now
        hit = call.cached_tokens = self.prefix_hit_tokens(call)
        self._touch_prefix(call)
        dt = self.prefill_seconds(call, hit)
        call.stage = PREFILL
        call.prefill_start = now
        self.sim.on_started(call)
        self.current = call
        self.busy_until = now + dt
        self.busy_time += dt
        self.sim.schedule(dt, self._finish)

    def _finish(self, _event: Any) -> None:
        call = self.current
        assert call is not None
        self.current = None
        call.prefill_end = self.sim.now
        self.sim.on_prefill_done(call, self)
        self._start_next()
