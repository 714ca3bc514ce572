"""Model instances: prefill servers, continuous-batching decode engines, monolithic engines.

All three follow one rule that keeps the simulator both exact and fast: a batch that does not
change needs no events. A decode batch of B sequences whose contexts sum to C takes
``decode_iteration_time(B, C)`` for one iteration, after which C grew by B; so the time to the
next completion (the smallest remaining output among the batch, n iterations) is the closed form
``decode_steps_time(B, C, n)``. The engine jumps straight there. When a waiting call that could be
admitted arrives mid-jump, the jump is cut short at the end of the iteration in progress
(``decode_steps_within`` gives how many iterations are done), which is exactly where a
token-by-token engine would admit it. ``token_by_token=True`` takes one iteration per event, for
testing that the fast path agrees.

Queues are priority queues: lower ``priority`` is served first, ties by arrival in the queue.
Queues stay short (tens of calls) and are re-prioritised by every scheduler invocation, so a list
scanned with ``min`` beats a heap that would need rebuilding.

KV accounting: a decode (or monolithic) engine reserves a call's final footprint
``input_tokens + output_tokens`` when it admits the call, and admits in strict priority order: the
first waiting call that does not fit blocks the ones behind it (no preemption, no overtaking).
The reservation therefore never exceeds ``kv_capacity_tokens``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from envs.sim.cluster import InstanceSpec
from envs.sim.workload import DECODE, PREFILL, Call

if TYPE_CHECKING:
    from envs.sim.simulation import Simulation

_NO_BATCH_CAP = 1 << 30


def _queue_key(call: Call) -> tuple[float, int]:
    return (call.prefill_priority, call.enqueue_seq)


def _decode_key(call: Call) -> tuple[float, int]:
    return (call.decode_priority, call.enqueue_seq)


class PrefillInstance:
    """A prefill server: one call at a time from a local priority queue (HexAgent §4.2).

    :param sim: the simulation that owns the instance.
    :param spec: the instance's specification.
    :param latency: its :class:`envs.sim.latency.LatencyModel`.
    """

    role = "prefill"

    def __init__(self, sim: Simulation, spec: InstanceSpec, latency: Any):
        self.sim = sim
        self.spec = spec
        self.index = spec.index
        self.gpu = spec.gpu
        self.latency = latency
        self.queue: list[Call] = []
        self.queued_seconds = 0.0  # prefill seconds of the queued calls, kept incrementally
        self.current: Call | None = None
        self.busy_until = 0.0
        self.busy_time = 0.0
        self._kick_pending = False

    def enqueue(self, call: Call) -> None:
        """Add ``call`` to the local queue (its ``prefill_priority`` is already set)."""
        call.enqueue_seq = self.sim.next_seq()
        call.prefill_instance = self.index
        self.queue.append(call)
        self.queued_seconds += self.latency.prefill_time(call.input_tokens)
        self.on_queue_changed()

    def remove(self, call: Call) -> None:
        """Take a still-waiting ``call`` out of the queue (it is being re-planned elsewhere)."""
        self.queue.remove(call)
        self._unqueue(call)

    def _unqueue(self, call: Call) -> None:
        if self.queue:
            self.queued_seconds -= self.latency.prefill_time(call.input_tokens)
        else:
            self.queued_seconds = 0.0  # no float drift across an emptied queue

    def on_queue_changed(self) -> None:
        """Start serving at the current instant if idle (after pending decisions are applied)."""
        if self.current is None and not self._kick_pending and self.queue:
            self._kick_pending = True
            self.sim.schedule(0.0, self._start_next)

    def queued_work_seconds(self) -> float:
        """Remaining seconds of the call in service plus all queued prefill work (truthful)."""
        now = self.sim.now
        work = max(0.0, self.busy_until - now) if self.current is not None else 0.0
        return work + max(0.0, self.queued_seconds)

    def _start_next(self, _event: Any = None) -> None:
        self._kick_pending = False
        if self.current is not None or not self.queue:
            return
        call = min(self.queue, key=_queue_key)
        self.queue.remove(call)
        self._unqueue(call)
        now = self.sim.now
        dt = self.latency.prefill_time(call.input_tokens)
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


class _BatchEngine:
    """Continuous batching under a KV-token capacity with the closed-form fast-forward."""

    role = "decode"

    def __init__(self, sim: Simulation, spec: InstanceSpec, latency: Any, token_by_token: bool):
        self.sim = sim
        self.spec = spec
        self.index = spec.index
        self.gpu = spec.gpu
        self.latency = latency
        self.capacity = int(latency.kv_capacity_tokens)
        self.max_batch = spec.max_batch_size or _NO_BATCH_CAP
        self.token_by_token = token_by_token
        self.waiting: list[Call] = []
        self.running: list[Call] = []
        self.reserved = 0
        self.peak_reserved = 0
        self.busy_time = 0.0
        # The current segment: ``seg_n`` iterations of a batch of ``seg_b`` sequences whose
        # contexts summed to ``seg_c`` at ``seg_start``; or a prefill pass when ``seg_prefill``.
        self.seg_start = 0.0
        self.seg_b = 0
        self.seg_c = 0
        self.seg_n = 0
        self.seg_prefill = False
        self.seg_end = 0.0
        self._version = 0
        self._scheduled = False

    # -- queue interface ---------------------------------------------------------------------
    def enqueue(self, call: Call) -> None:
        """Add ``call`` to the waiting queue (its ``decode_priority`` is already set)."""
        call.enqueue_seq = self.sim.next_seq()
        call.decode_instance = self.index
        self.waiting.append(call)
        self.on_queue_changed()

    def on_queue_changed(self) -> None:
        """Re-check admission: wake if idle, or cut the current jump short if the head fits."""
        if not self.waiting:
            return
        if not self._scheduled:
            self._schedule_boundary(0.0, 0)
            return
        if self.seg_prefill or self.token_by_token or self.seg_n <= 1:
            return  # the segment already ends at the next iteration boundary
        head = min(self.waiting, key=_decode_key)
        if not self._fits(head):
            return
        elapsed = self.sim.now - self.seg_start
        done = self.latency.decode_steps_within(self.seg_b, self.seg_c, elapsed)
        new_n = done + 1
        if new_n >= self.seg_n:
            return
        end = self.seg_start + self.latency.decode_steps_time(self.seg_b, self.seg_c, new_n)
        self._schedule_boundary(max(0.0, end - self.sim.now), new_n)

    def _fits(self, call: Call) -> bool:
        return (
            len(self.running) < self.max_batch and self.reserved + call.kv_tokens <= self.capacity
        )

    def free_kv_tokens(self) -> int:
        """KV tokens not reserved by running calls."""
        return self.capacity - self.reserved

    # -- segment machinery -------------------------------------------------------------------
    def _schedule_boundary(self, delay: float, n: int) -> None:
        self._version += 1
        self._scheduled = True
        self.seg_n = n
        self.seg_end = self.sim.now + delay
        version = self._version
        self.sim.schedule(delay, lambda _e: self._boundary(version))

    def _boundary(self, version: int) -> None:
        if version != self._version:
            return  # superseded by an earlier boundary
        self._scheduled = False
        now = self.sim.now
        if self.running:
            self.busy_time += now - self.seg_start
        if not self.seg_prefill:
            n = self.seg_n
            finished = []
            for c in self.running:
                c.generated += n
                if c.generated >= c.output_tokens:
                    finished.append(c)
            for c in finished:
                self.running.remove(c)
                self.reserved -= c.kv_tokens
                c.decode_end = now
                c.stage = "done"
                self.sim.on_decode_done(c, self)
        self.seg_prefill = False
        admitted = self._admit()
        self._start_segment(admitted)

    def _admit(self) -> list[Call]:
        admitted = []
        if self.waiting:
            self.waiting.sort(key=_decode_key)
            while self.waiting and self._fits(self.waiting[0]):
                c = self.waiting.pop(0)
                self.running.append(c)
                self.reserved += c.kv_tokens
                admitted.append(c)
                self.sim.on_started(c)
                self._on_admit(c)
            if self.reserved > self.peak_reserved:
                self.peak_reserved = self.reserved
        return admitted

    def _on_admit(self, call: Call) -> None:
        call.stage = DECODE
        call.decode_start = self.sim.now

    def _start_segment(self, admitted: list[Call]) -> None:
        self.seg_start = self.sim.now
        if not self.running:
            return
        b = len(self.running)
        c_total = 0
        n = _NO_BATCH_CAP
        for c in self.running:
            c_total += c.input_tokens + c.generated
            left = c.output_tokens - c.generated
            if left < n:
                n = left
        self.seg_b = b
        self.seg_c = c_total
        if self.token_by_token:
            n = min(n, 1)
        if n <= 0:
            self._schedule_boundary(0.0, 0)
            return
        self._schedule_boundary(self.latency.decode_steps_time(b, c_total, n), n)


class DecodeInstance(_BatchEngine):
    """A decode engine of a P-D cluster: continuous batching, KV capacity, priority admission.

    Calls arrive after their KV transfer, locked to this instance (HexAgent §5.4).
    """

    role = "decode"


class MonolithicInstance(_BatchEngine):
    """A vLLM-style engine: prefill and decode on one GPU set, batch cap, KV capacity, LRU prefix
    cache over block hashes (GoodServe §3; Preble-style prefix reuse).

    At an iteration boundary the engine admits waiting requests in priority order; if any were
    admitted it runs one prefill pass over their uncached tokens (running decodes wait, as in vLLM
    without chunked prefill), then decodes the whole batch.

    :param prefix_cache_blocks: LRU capacity in blocks (0 disables the prefix cache).
    :param block_tokens: tokens per prefix block (Mooncake hashes 512-token blocks).
    """

    role = "monolithic"

    def __init__(
        self,
        sim: Simulation,
        spec: InstanceSpec,
        latency: Any,
        token_by_token: bool,
        prefix_cache_blocks: int = 0,
        block_tokens: int = 512,
    ):
        super().__init__(sim, spec, latency, token_by_token)
        self.block_tokens = block_tokens
        self.prefix_cache_blocks = prefix_cache_blocks
        self.prefix_cache: OrderedDict[int, None] = OrderedDict()

    def prefix_hit_tokens(self, call: Call) -> int:
        """Tokens of ``call``'s prompt already cached here (leading blocks only)."""
        hashes = call.node.prefix_hashes
        if not hashes or not self.prefix_cache_blocks:
            return 0
        hit = 0
        for h in hashes:
            if h not in self.prefix_cache:
                break
            hit += 1
        # At least one token is always recomputed to produce logits.
        return min(hit * self.block_tokens, call.input_tokens - 1)

    def _touch_prefix(self, call: Call) -> None:
        hashes = call.node.prefix_hashes
        if not hashes or not self.prefix_cache_blocks:
            return
        cache = self.prefix_cache
        for h in hashes:
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
        while len(cache) > self.prefix_cache_blocks:
            cache.popitem(last=False)

    def enqueue(self, call: Call) -> None:
        call.prefill_instance = self.index
        super().enqueue(call)

    def _on_admit(self, call: Call) -> None:
        call.stage = PREFILL
        call.prefill_start = self.sim.now
        call.cached_tokens = self.prefix_hit_tokens(call)
        self._touch_prefix(call)

    def _start_segment(self, admitted: list[Call]) -> None:
        if not admitted:
            super()._start_segment(admitted)
            return
        new_tokens = sum(c.input_tokens - c.cached_tokens for c in admitted)
        cached = sum(c.cached_tokens for c in admitted)
        dt = self.latency.prefill_time(new_tokens, num_seqs=len(admitted), context_tokens=cached)
        self.seg_start = self.sim.now
        self.seg_prefill = True
        self.sim.schedule(dt, lambda _e: self._prefill_done(admitted))
        self._schedule_boundary(dt, 0)

    def _prefill_done(self, admitted: list[Call]) -> None:
        now = self.sim.now
        for c in admitted:
            c.prefill_end = now
            c.transfer_end = now
            c.stage = DECODE
            c.decode_start = now
        # Encoder-only calls (embeddings, rerankers) and zero-output calls end with the prefill.
        for c in [c for c in admitted if c.output_tokens == 0]:
            self.running.remove(c)
            self.reserved -= c.kv_tokens
            c.decode_end = now
            c.stage = "done"
            self.sim.on_decode_done(c, self)


__all__ = [
    "DecodeInstance",
    "MonolithicInstance",
    "PrefillInstance",
]
