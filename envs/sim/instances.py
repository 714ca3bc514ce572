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
The reservation therefore never exceeds ``kv_capacity_tokens``. A migrating call (GoodServe §3.4)
leaves the source's batch at once; by token IDs it frees its reservation at once, by KV transfer
only when its KV has arrived at the target.

Monolithic engines schedule prefill-first or chunked (see :class:`MonolithicInstance`). With a
check interval τ they count decode iterations, cut jumps so that a boundary falls on every
multiple of τ, and pause there while the simulation asks for a migration plan.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from envs.sim.cluster import InstanceSpec
from envs.sim.workload import DECODE, DONE, PREFILL, Call

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
        call.enqueued_at = self.sim.now
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
    """Continuous batching under a KV-token capacity with the closed-form fast-forward.

    The engine runs *segments* back to back. A decode segment advances ``seg_calls`` by
    ``seg_n`` iterations; any other segment (a prefill pass, a chunked mixed iteration) has
    ``seg_prefill`` set and cannot be cut short. At each segment end (``_boundary``) the engine
    finishes calls, raises a migration check when one is due (then it stays ``paused`` until the
    plan is applied), admits waiting calls and starts the next segment.
    """

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
        self._sorted = True  # ``waiting`` is in (priority, enqueue order)
        self.running: list[Call] = []
        self.reserved = 0
        self.peak_reserved = 0
        self.busy_time = 0.0
        # The current segment: ``seg_n`` iterations of the ``seg_b`` sequences ``seg_calls``
        # whose contexts summed to ``seg_c`` at ``seg_start``; or a prefill pass / mixed
        # iteration when ``seg_prefill``.
        self.seg_start = 0.0
        self.seg_b = 0
        self.seg_c = 0
        self.seg_n = 0
        self.seg_calls: list[Call] = []
        self.seg_prefill = False
        self.seg_end = 0.0
        self._version = 0
        self._scheduled = False
        # Periodic risk checks (GoodServe §3.4): decode iterations run so far, the interval τ
        # (None = no checks), and whether the instance waits for a pending check's plan.
        self.decode_iterations = 0
        self.check_interval: int | None = None
        self._check_due = False
        self.paused = False

    # -- queue interface ---------------------------------------------------------------------
    def enqueue(self, call: Call) -> None:
        """Add ``call`` to the waiting queue (its ``decode_priority`` is already set)."""
        call.enqueue_seq = self.sim.next_seq()
        call.enqueued_at = self.sim.now
        call.decode_instance = self.index
        waiting = self.waiting
        if waiting and self._sorted and _decode_key(call) < _decode_key(waiting[-1]):
            self._sorted = False
        waiting.append(call)
        self._wake()

    def on_queue_changed(self) -> None:
        """Priorities of waiting calls may have changed: re-sort before the next admission and
        re-check it (see :meth:`_wake`)."""
        self._sorted = False
        self._wake()

    def _sort_waiting(self) -> None:
        # Long queues (overload) are sorted only when an enqueue or a re-plan disordered them.
        if not self._sorted:
            self.waiting.sort(key=_decode_key)
            self._sorted = True

    def _wake(self) -> None:
        """Re-check admission: wake if idle, or cut the current jump short if the head fits."""
        if not self.waiting or self.paused:
            return
        if not self._scheduled:
            self._schedule_boundary(0.0, 0)
            return
        if self.seg_prefill or self.token_by_token or self.seg_n <= 1:
            return  # the segment already ends at the next iteration boundary
        self._sort_waiting()
        head = self.waiting[0]
        if not self._can_admit(head):
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

    def _can_admit(self, call: Call) -> bool:
        """Would ``call`` be admitted at the end of the current decode segment?"""
        return self._fits(call)

    def free_kv_tokens(self) -> int:
        """KV tokens not reserved by running (or outgoing KV-migrating) calls."""
        return self.capacity - self.reserved

    @property
    def num_running(self) -> int:
        """Calls admitted and not finished (prefilling or decoding)."""
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        """Calls in the waiting queue."""
        return len(self.waiting)

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
        if self.seg_prefill:
            self.seg_prefill = False
            self._end_iteration(now)
        else:
            self._end_decode_segment(now)
        if self._check_due:
            self._check_due = False
            calls = [c for c in self.running if c.stage == DECODE]
            if calls:
                # The plan is applied at this instant; Simulation.apply calls resume().
                self.paused = True
                self.sim.raise_check(self, calls)
                return
        self._next_segment()

    def resume(self) -> None:
        """Continue after the pending migration check's plan was applied (zero-delay event, so
        every invocation pending at this instant is answered first)."""
        self.sim.schedule(0.0, self._resume)

    def _resume(self, _event: Any) -> None:
        self.paused = False
        self._next_segment()

    def _count_decode_iterations(self, n: int) -> None:
        self.decode_iterations += n
        if self.check_interval and self.decode_iterations % self.check_interval == 0:
            self._check_due = True

    def _end_decode_segment(self, now: float) -> None:
        n = self.seg_n
        calls = self.seg_calls
        if n <= 0 or not calls:
            self.seg_calls = []
            return
        finished = []
        for c in calls:
            c.generated += n
            if c.generated >= c.output_tokens:
                finished.append(c)
        self._count_decode_iterations(n)
        for f in self.sim.listeners["on_decode_progress"]:
            f(self, n, now - self.seg_start, len(calls))  # seg_calls still names the batch
        self.seg_calls = []
        for c in finished:
            self._finish_call(c, now)

    def _end_iteration(self, now: float) -> None:
        """End of a segment that is not a decode jump (monolithic engines)."""

    def _finish_call(self, call: Call, now: float) -> None:
        self.running.remove(call)
        self.reserved -= call.kv_tokens
        call.decode_end = now
        call.stage = DONE
        self.sim.on_decode_done(call, self)

    def _next_segment(self) -> None:
        self._admit()
        self._start_decode_segment(list(self.running))

    def _admit(self) -> list[Call]:
        admitted = []
        if self.waiting:
            self._sort_waiting()
            while self.waiting and self._fits(self.waiting[0]):
                c = self.waiting.pop(0)
                self._take(c)
                admitted.append(c)
            if self.reserved > self.peak_reserved:
                self.peak_reserved = self.reserved
        return admitted

    def _take(self, call: Call) -> None:
        self.running.append(call)
        self.reserved += call.kv_tokens
        self.sim.on_started(call)
        self._on_admit(call)
        for f in self.sim.listeners["on_admit"]:
            f(call, self, self.sim.now)

    def _on_admit(self, call: Call) -> None:
        call.stage = DECODE
        call.decode_start = self.sim.now

    def _start_decode_segment(self, calls: list[Call]) -> None:
        """Jump over the iterations of ``calls`` to the next completion (or check boundary)."""
        self.seg_start = self.sim.now
        self.seg_calls = calls
        if not calls:
            return
        b = len(calls)
        c_total = 0
        n = _NO_BATCH_CAP
        for c in calls:
            c_total += c.input_tokens + c.generated
            left = c.output_tokens - c.generated
            if left < n:
                n = left
        self.seg_b = b
        self.seg_c = c_total
        if self.token_by_token:
            n = min(n, 1)
        if self.check_interval:
            n = min(n, self.check_interval - self.decode_iterations % self.check_interval)
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

    ``prefill-first``: at an iteration boundary the engine admits waiting requests in priority
    order; if any were admitted it runs one prefill pass over their uncached tokens (running
    decodes wait, as in vLLM without chunked prefill), then decodes the whole batch.

    ``chunked`` (vLLM's default): every iteration has a budget of ``token_budget`` tokens. Each
    decoding request takes one (decodes always run, even beyond the budget); the rest goes to
    prefill chunks, first to requests whose prefill is partly done (in admission order), then to
    newly admitted requests in priority order, each taking min(its uncached prompt tokens left,
    budget left). A request whose last chunk runs in an iteration decodes from the next one. An
    iteration with chunks is one event priced by ``mixed_iteration_time``; a pure decode batch
    keeps the closed-form jump. Encoder-only models (embeddings, rerankers) always prefill whole
    prompts (vLLM runs pooling models without chunked prefill).

    Requests that arrive by migration re-prefill their prompt and generated tokens (token-ID
    migration) or, when ``resident`` (KV migration), join the decode batch at admission.

    :param prefix_cache_blocks: LRU capacity in blocks (0 disables the prefix cache).
    :param block_tokens: tokens per prefix block (Mooncake hashes 512-token blocks).
    :param prefill_mode: ``prefill-first`` or ``chunked``.
    :param token_budget: tokens per chunked iteration (decode tokens + prefill chunk tokens).
    :param check_interval: τ, decode iterations between migration checks (None = no checks).
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
        prefill_mode: str = "prefill-first",
        token_budget: int = 2048,
        check_interval: int | None = None,
    ):
        super().__init__(sim, spec, latency, token_by_token)
        self.block_tokens = block_tokens
        self.prefix_cache_blocks = prefix_cache_blocks
        self.prefix_cache: OrderedDict[int, None] = OrderedDict()
        self.prefill_mode = prefill_mode
        self.chunked = prefill_mode == "chunked" and not latency.model.encoder_only
        self.token_budget = token_budget
        self.check_interval = check_interval
        self.seg_chunks: list[tuple[Call, int]] = []  # (call, prompt tokens) of a mixed iteration

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
        index = self.sim.prefix_index
        for h in hashes:
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
                index.setdefault(h, set()).add(self.index)
        while len(cache) > self.prefix_cache_blocks:
            h, _ = cache.popitem(last=False)
            holders = index[h]
            holders.discard(self.index)
            if not holders:
                del index[h]

    def enqueue(self, call: Call) -> None:
        call.prefill_instance = self.index
        super().enqueue(call)

    def _can_admit(self, call: Call) -> bool:
        if not self._fits(call):
            return False
        # In chunked mode a prompt is admitted only if the decodes leave budget for a chunk.
        return not self.chunked or call.resident or self.seg_b < self.token_budget

    def _on_admit(self, call: Call) -> None:
        if call.resident:  # KV-migrated: its KV is here, it decodes at once
            call.resident = False
            call.stage = DECODE
            return
        now = self.sim.now
        call.stage = PREFILL
        if call.prefill_start < 0:
            call.prefill_start = now
        call.prefill_began = now
        call.cached_tokens = self.prefix_hit_tokens(call)
        self._touch_prefix(call)
        call.prefill_left = call.input_tokens + call.generated - call.cached_tokens

    def _prefill_finished(self, call: Call, now: float) -> None:
        call.prefill_left = 0
        call.stage = DECODE
        if call.prefill_end < 0:  # records keep the first prefill (time to first token)
            call.prefill_end = now
            call.transfer_end = now
            call.decode_start = now
        listeners = self.sim.listeners["on_prefill_done"]
        if listeners:
            tokens = call.input_tokens + call.generated - call.cached_tokens
            for f in listeners:
                f(call, self, now, tokens, now - call.prefill_began)

    def _next_segment(self) -> None:
        if self.chunked:
            self._next_chunked_iteration()
            return
        admitted = self._admit()
        prefill = [c for c in admitted if c.stage == PREFILL]
        if prefill:
            self._start_prefill_pass(prefill)
        else:
            self._start_decode_segment([c for c in self.running if c.stage == DECODE])

    # -- prefill-first -----------------------------------------------------------------------
    def _start_prefill_pass(self, calls: list[Call]) -> None:
        new_tokens = sum(c.prefill_left for c in calls)
        context = sum(c.input_tokens + c.generated - c.prefill_left for c in calls)
        dt = self.latency.prefill_time(new_tokens, num_seqs=len(calls), context_tokens=context)
        self.seg_start = self.sim.now
        self.seg_prefill = True
        self.seg_calls = []
        self.sim.schedule(dt, lambda _e: self._prefill_done(calls))
        self._schedule_boundary(dt, 0)

    def _prefill_done(self, calls: list[Call]) -> None:
        now = self.sim.now
        for c in calls:
            self._prefill_finished(c, now)
        # Encoder-only calls (embeddings, rerankers) and zero-output calls end with the prefill.
        for c in [c for c in calls if c.output_tokens == 0]:
            self._finish_call(c, now)

    # -- chunked prefill ---------------------------------------------------------------------
    def _next_chunked_iteration(self) -> None:
        decodes = [c for c in self.running if c.stage == DECODE]
        budget = self.token_budget - len(decodes)
        chunks: list[tuple[Call, int]] = []
        if budget > 0:
            for c in self.running:
                if c.stage == PREFILL:
                    k = min(c.prefill_left, budget)
                    chunks.append((c, k))
                    budget -= k
                    if budget <= 0:
                        break
        if self.waiting:
            waiting = self.waiting
            self._sort_waiting()
            while waiting and self._fits(waiting[0]) and (budget > 0 or waiting[0].resident):
                c = waiting.pop(0)
                self._take(c)
                if c.stage == DECODE:
                    decodes.append(c)
                    budget -= 1
                else:
                    k = min(c.prefill_left, budget)
                    chunks.append((c, k))
                    budget -= k
            if self.reserved > self.peak_reserved:
                self.peak_reserved = self.reserved
        if not chunks:
            self._start_decode_segment(decodes)
            return
        decode_context = sum(c.input_tokens + c.generated for c in decodes)
        prefill_tokens = 0
        prefill_context = 0
        for c, k in chunks:
            prefill_tokens += k
            prefill_context += c.input_tokens + c.generated - c.prefill_left
        dt = self.latency.mixed_iteration_time(
            len(decodes), decode_context, prefill_tokens, len(chunks), prefill_context
        )
        self.seg_start = self.sim.now
        self.seg_prefill = True
        self.seg_calls = decodes
        self.seg_chunks = chunks
        self._schedule_boundary(dt, 0)

    def _end_iteration(self, now: float) -> None:
        decodes, chunks = self.seg_calls, self.seg_chunks
        finished = []
        for c in decodes:
            c.generated += 1
            if c.generated >= c.output_tokens:
                finished.append(c)
        if decodes:
            self._count_decode_iterations(1)
            for f in self.sim.listeners["on_decode_progress"]:
                f(self, 1, now - self.seg_start, len(decodes))
        self.seg_calls = []
        self.seg_chunks = []
        for c, k in chunks:
            c.prefill_left -= k
            if c.prefill_left == 0:
                self._prefill_finished(c, now)
                if c.output_tokens == 0:
                    finished.append(c)
        for c in finished:
            self._finish_call(c, now)


__all__ = [
    "DecodeInstance",
    "MonolithicInstance",
    "PrefillInstance",
]
