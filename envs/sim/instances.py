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

KV accounting (``kv_policy``): under ``reserve`` (the default; TensorRT-LLM's
GUARANTEED_NO_EVICT) a decode or monolithic engine reserves a call's final footprint
``input_tokens + output_tokens`` when it admits the call, and admits in strict priority order: the
first waiting call that does not fit blocks the ones behind it (no preemption, no overtaking).
Under ``paged`` (monolithic engines; vLLM, SGLang) a call holds its prompt + generated tokens and
grows by one token per decode iteration; admission needs room for the prompt after this
iteration's decode tokens; when the running decodes would overflow the cache, the running call
with the lowest priority (latest admitted among equals) is preempted: its KV is freed and it
rejoins the waiting queue at its original position, to recompute prompt + generated tokens when
re-admitted. Either way ``reserved`` (the sum of the running calls' ``kv_held``) never exceeds
``kv_capacity_tokens``. A migrating call (GoodServe §3.4) leaves the source's batch at once; by
token IDs it frees its KV at once, by KV transfer only when its KV has arrived at the target.

Monolithic engines schedule prefill-first or chunked (see :class:`MonolithicInstance`). With a
check interval τ they count decode iterations, cut jumps so that a boundary falls on every
multiple of τ, and pause there while the simulation asks for a migration plan.

**Co-located GPU fractions** (:class:`SharedGPUs`): monolithic instances on a share ``f < 1`` of
GPUs named in their spec's ``gpu_ids`` are MPS partitions. Their SMs and memory are capped at
``f`` (the latency model's ``fraction``); the HBM bandwidth is shared with the other partitions
of the same GPU that are busy (:func:`envs.sim.latency.contended_bandwidth_shares`). Each
segment (a prefill pass, a mixed iteration, a decode jump) is priced with the bandwidth share
given by which neighbours are busy when it starts; when a neighbour starts or stops working, a
decode jump in progress is cut at the end of its current iteration and re-priced (the cut of
``_wake``), so a decode batch runs slower exactly while its neighbour is busy. A prefill pass or
mixed iteration is one iteration and keeps the price it started with. An instance is *busy* from
the start of a segment with work until it finds none. Whole-GPU instances and instances without
``gpu_ids`` take no part: their model is unchanged.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Any

from envs.sim.cluster import InstanceSpec
from envs.sim.events import callback
from envs.sim.latency import BANDWIDTH_SATURATION_SHARE, contended_bandwidth_shares
from envs.sim.protocol import DEFAULT_TOKEN_BUDGET, KV_POLICIES, SCHEDULING_MODES, InstanceHost
from envs.sim.workload import DECODE, DONE, PREFILL, WAIT_PREFILL, Call

_NO_BATCH_CAP = 1 << 30


def _decode_key(call: Call) -> tuple[float, int]:
    return (call.decode_priority, call.enqueue_seq)


class PrefixCache:
    """An LRU prefix cache over block hashes, shared by the engines that prefill (monolithic and
    P-D prefill instances; vLLM's automatic prefix caching, SGLang's RadixAttention at block
    granularity, Preble-style prefix reuse).

    A call's prompt is a sequence of fixed-size token blocks identified by
    ``call.node.prefix_hashes`` (block k's hash covers every token up to the block's end, so
    equal hashes mean equal prefixes). A hit is the run of leading blocks present in the cache;
    prefilling a call inserts (or refreshes) all its blocks and evicts the least recently used
    ones beyond ``prefix_cache_blocks``. The simulation's ``prefix_index`` (hash -> instances
    caching it) is kept up to date so schedulers find hits without scanning every cache.
    """

    sim: InstanceHost
    index: int

    def _init_prefix_cache(self, prefix_cache_blocks: int, block_tokens: int) -> None:
        """:param prefix_cache_blocks: LRU capacity in blocks (0 disables the cache).
        :param block_tokens: tokens per prefix block."""
        if isinstance(prefix_cache_blocks, bool) or prefix_cache_blocks < 0:
            raise ValueError(
                f"prefix_cache_blocks must be an integer >= 0 blocks, got {prefix_cache_blocks!r}"
            )
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
        """Insert or refresh ``call``'s prompt blocks (most recently used) and evict the least
        recently used blocks beyond the capacity."""
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


class PrefillInstance(PrefixCache):
    """A prefill server: one call at a time from a local priority queue (HexAgent §4.2).

    With a prefix cache (SGLang, HexAgent's substrate, keeps one: RadixAttention) a call whose
    leading prompt blocks are cached here computes only the rest: its prefill is priced as
    ``prefill_time(uncached, 1, context_tokens=cached)`` and ``call.cached_tokens`` records the
    hit. The whole prompt's KV (cached and computed) is then shipped to the decode instance.

    :param sim: the simulation that owns the instance.
    :param spec: the instance's specification.
    :param latency: its :class:`envs.sim.latency.LatencyModel`.
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
        now = self.sim.now
        work = max(0.0, self.busy_until - now) if self.current is not None else 0.0
        return work + max(0.0, self.queued_seconds)

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


class _BatchEngine:
    """Continuous batching under a KV-token capacity with the closed-form fast-forward.

    The engine runs *segments* back to back. A decode segment advances ``seg_calls`` by
    ``seg_n`` iterations; any other segment (a prefill pass, a chunked mixed iteration) has
    ``seg_prefill`` set and cannot be cut short. At each segment end (``_boundary``) the engine
    finishes calls, raises a migration check when one is due (then it stays ``paused`` until the
    plan is applied), admits waiting calls and starts the next segment.
    """

    role = "decode"

    def __init__(
        self,
        sim: InstanceHost,
        spec: InstanceSpec,
        latency: Any,
        token_by_token: bool,
        kv_policy: str = "reserve",
        max_batch: int | None = None,
    ):
        self.sim = sim
        self.spec = spec
        self.index = spec.index
        self.gpu = spec.gpu
        self.latency = latency
        # Encoder-only models keep no KV cache: a batch is bounded by the activation memory,
        # ``max_batch_tokens`` prompt tokens in flight (held during the prefill only).
        self.capacity = int(
            latency.max_batch_tokens if latency.model.encoder_only else latency.kv_capacity_tokens
        )
        caps = [b for b in (spec.max_batch_size, max_batch) if b]
        self.max_batch = min(caps) if caps else _NO_BATCH_CAP
        if kv_policy not in KV_POLICIES:
            raise ValueError(f"kv_policy must be one of {KV_POLICIES}, got {kv_policy!r}")
        self.kv_policy = kv_policy
        self.paged = kv_policy == "paged"
        self.token_by_token = token_by_token
        self.waiting: list[Call] = []
        self._sorted = True  # ``waiting`` is in (priority, enqueue order)
        # Predicted KV tokens (prompt + predicted output) of the waiting calls, kept as calls
        # enter ``waiting`` (enqueue, preemption) and leave it (``_take``, ``remove_waiting``).
        self.waiting_predicted_kv = 0
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
        # Reconfiguration (servegym/Allocation-v0): an instance added mid-run serves from
        # ``ready_at`` (model load); a retired one takes no new calls and drains its queue.
        self.ready_at = 0.0
        self.retired = False
        # Co-located MPS partitions (see the module docstring); None: the GPUs are its own.
        self.shared: SharedGPUs | None = None

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
        self.waiting_predicted_kv += call.predicted_kv_tokens
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
            # An idle engine starts after every event of this instant, so requests that
            # arrive together are scheduled together (a real engine's loop picks up its whole
            # queue at each step).
            self._schedule_boundary(0.0, 0, late=True)
            return
        if self.seg_prefill or self.token_by_token or self.seg_n <= 1:
            return  # the segment already ends at the next iteration boundary
        self._sort_waiting()
        head = self.waiting[0]
        if not self._can_admit(head):
            return
        self._cut_segment()

    def _cut_segment(self) -> None:
        """End the current decode jump at the end of the iteration in progress."""
        elapsed = self.sim.now - self.seg_start
        done = self.latency.decode_steps_within(self.seg_b, self.seg_c, elapsed)
        new_n = done + 1
        if new_n >= self.seg_n:
            return
        end = self.seg_start + self.latency.decode_steps_time(self.seg_b, self.seg_c, new_n)
        self._schedule_boundary(max(0.0, end - self.sim.now), new_n)

    def _need(self, call: Call) -> int:
        """KV tokens ``call`` takes at admission: its final footprint when reserving; when
        paging, its prompt plus generated tokens plus the slot of the token its prefill emits."""
        if self.paged:
            return min(call.input_tokens + call.generated + 1, call.kv_tokens)
        return call.kv_tokens

    def _fits(self, call: Call, growth: int = 0) -> bool:
        """Room for ``call`` in the batch and the KV cache, after ``growth`` tokens the running
        decodes add in this iteration (paging)."""
        return (
            len(self.running) < self.max_batch
            and self.reserved + growth + self._need(call) <= self.capacity
        )

    def release(self, call: Call) -> None:
        """Free the KV ``call`` holds here (it finished, left by migration or was preempted)."""
        self.reserved -= call.kv_held
        call.kv_held = 0

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
    def _schedule_boundary(self, delay: float, n: int, late: bool = False) -> None:
        self._version += 1
        self._scheduled = True
        self.seg_n = n
        self.seg_end = self.sim.now + delay
        version = self._version
        if late:
            self.sim.schedule_late(callback(self._boundary, version))
        else:
            self.sim.schedule(delay, callback(self._boundary, version))

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
            if calls and self.sim.check_queued:  # GoodServe §3.4: pending requests too
                calls += [c for c in self.waiting if c.stage == WAIT_PREFILL and not c.resident]
            if calls:
                # The plan is applied at this instant; Simulation.apply calls resume().
                self.paused = True
                self.sim.raise_check(self, calls)
                return
        self._run_next()

    def _run_next(self) -> None:
        """Start the next segment; a co-located partition prices it with the bandwidth its busy
        neighbours leave and tells them whether it is busy now."""
        shared = self.shared
        if shared is None:
            self._next_segment()
            return
        self.latency = shared.latency_for(self)
        self._next_segment()
        shared.set_active(self, self._scheduled)

    def bandwidth_changed(self) -> None:
        """A co-located neighbour started or stopped working: re-price a decode jump in progress
        from the end of its current iteration."""
        if (
            not self._scheduled
            or self.seg_prefill
            or self.token_by_token
            or self.seg_n <= 1
            or not self.seg_calls
        ):
            return
        self._cut_segment()

    def resume(self) -> None:
        """Continue after the pending migration check's plan was applied (zero-delay event, so
        every invocation pending at this instant is answered first)."""
        self.sim.schedule(0.0, self._resume)

    def _resume(self, _event: Any) -> None:
        self.paused = False
        self._run_next()

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
        if self.paged:  # paged KV grows one token per decoded token
            for c in calls:
                c.generated += n
                c.kv_held += n
                if c.generated >= c.output_tokens:
                    finished.append(c)
            self.reserved += n * len(calls)
        else:
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
        self.release(call)
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

    def remove_waiting(self, call: Call) -> None:
        """Take a waiting ``call`` out of the queue (a plan moves it elsewhere)."""
        self.waiting.remove(call)
        self.waiting_predicted_kv -= call.predicted_kv_tokens

    def _take(self, call: Call) -> None:
        """Admit ``call``, just popped from ``waiting``."""
        self.waiting_predicted_kv -= call.predicted_kv_tokens
        self.running.append(call)
        need = self._need(call)
        call.kv_held = need
        self.reserved += need
        self.sim.on_started(call)
        self._on_admit(call)
        for f in self.sim.listeners["on_admit"]:
            f(call, self, self.sim.now)

    def _on_admit(self, call: Call) -> None:
        call.stage = DECODE
        call.decode_start = self.sim.now

    def _preempt(self, keep: list[Call] | None = None) -> None:
        """Preempt the running call with the lowest priority (latest admitted among equals):
        free its KV and put it back in the waiting queue at its original position; it recomputes
        its prompt and generated tokens when re-admitted (vLLM's recompute preemption)."""
        victim = max(self.running, key=_decode_key)
        self.running.remove(victim)
        if keep is not None and victim in keep:
            keep.remove(victim)
        # KV actually computed and now lost (a prompt in prefill loses its chunks so far)
        context = victim.input_tokens + victim.generated
        victim.evicted_tokens += (
            context - victim.prefill_left if victim.stage == PREFILL else context
        )
        victim.preemptions += 1
        self.release(victim)
        victim.stage = WAIT_PREFILL
        victim.prefill_left = 0
        victim.enqueued_at = self.sim.now  # back in the queue
        waiting = self.waiting
        waiting.append(victim)  # keeps its enqueue_seq: it sorts back to where it was
        self.waiting_predicted_kv += victim.predicted_kv_tokens
        if len(waiting) > 1:
            self._sorted = False
        for f in self.sim.listeners["on_preempted"]:
            f(victim, self, self.sim.now)

    def _make_room(self, decodes: list[Call]) -> None:
        """Paging: preempt until the KV cache has a token for each of ``decodes`` (which loses
        the preempted calls)."""
        while decodes and self.reserved + len(decodes) > self.capacity:
            self._preempt(decodes)

    def _start_decode_segment(self, calls: list[Call]) -> None:
        """Jump over the iterations of ``calls`` to the next completion (or check boundary)."""
        if self.paged and calls:
            self._make_room(calls)
        self.seg_start = self.sim.now
        self.seg_calls = calls
        if not calls:
            return
        b = len(calls)
        c_total = sum([c.input_tokens + c.generated for c in calls])
        n = min(min([c.output_tokens - c.generated for c in calls]), _NO_BATCH_CAP)
        self.seg_b = b
        self.seg_c = c_total
        if self.token_by_token:
            n = min(n, 1)
        if self.check_interval:
            n = min(n, self.check_interval - self.decode_iterations % self.check_interval)
        if self.paged:  # stop where the cache is full (the next boundary preempts)
            n = min(n, (self.capacity - self.reserved) // b)
        if n <= 0:
            self._schedule_boundary(0.0, 0)
            return
        self._schedule_boundary(self.latency.decode_steps_time(b, c_total, n), n)


class DecodeInstance(_BatchEngine):
    """A decode engine of a P-D cluster: continuous batching, KV capacity, priority admission.

    Calls arrive after their KV transfer, locked to this instance (HexAgent §5.4).
    """

    role = "decode"


class MonolithicInstance(PrefixCache, _BatchEngine):
    """A vLLM-style engine: prefill and decode on one GPU set, batch cap, KV capacity, LRU prefix
    cache over block hashes (GoodServe §3; Preble-style prefix reuse).

    ``prefill-first``: at an iteration boundary the engine admits waiting requests in priority
    order; if any were admitted it runs one prefill pass over their uncached tokens (running
    decodes wait, as in vLLM without chunked prefill), then decodes the whole batch.

    ``chunked`` (vLLM's default): every iteration has a budget of ``token_budget`` tokens. Each
    decoding request takes one (decodes always run, even beyond the budget); the rest goes to
    prefill chunks, first to requests whose prefill is partly done (in admission order), then to
    newly admitted requests in priority order, each taking min(its uncached prompt tokens left,
    budget left). An iteration with chunks is one event priced by ``mixed_iteration_time``; a
    pure decode batch keeps the closed-form jump. Encoder-only models (embeddings, rerankers)
    always prefill whole prompts (vLLM runs pooling models without chunked prefill).

    ``chunked-prefill-first`` (SGLang's default): chunks are formed the same way but with the
    whole budget, and an iteration with chunks carries no decodes: decodes run only when no
    prompt is pending.

    ``mixed-whole`` (TensorRT-LLM's in-flight batching without chunked context): decodes and
    whole prompts share an iteration; a prompt joins only if all its uncached tokens fit the
    budget left (a prompt larger than the whole budget runs alone); the first that does not fit
    blocks the queue.

    In every mode the iteration that computes a prompt's last token emits the first output
    token, so a request decodes ``output_tokens - 1`` iterations (a one-token request ends with
    its prefill).

    Requests that arrive by migration re-prefill their prompt and generated tokens (token-ID
    migration) or, when ``resident`` (KV migration), join the decode batch at admission.

    :param prefix_cache_blocks: LRU capacity in blocks (0 disables the prefix cache).
    :param block_tokens: tokens per prefix block (Mooncake hashes 512-token blocks).
    :param prefill_mode: one of ``SCHEDULING_MODES``.
    :param token_budget: tokens per iteration (decode tokens + prefill tokens) of the chunked
        and mixed modes.
    :param check_interval: τ, decode iterations between migration checks (None = no checks).
    :param kv_policy: ``reserve`` or ``paged`` (see the module docstring).
    :param max_batch: cap on running requests (None: the spec's ``max_batch_size`` only).
    """

    role = "monolithic"

    def __init__(
        self,
        sim: InstanceHost,
        spec: InstanceSpec,
        latency: Any,
        token_by_token: bool,
        prefix_cache_blocks: int = 0,
        block_tokens: int = 512,
        prefill_mode: str = "prefill-first",
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        check_interval: int | None = None,
        kv_policy: str = "reserve",
        max_batch: int | None = None,
    ):
        super().__init__(sim, spec, latency, token_by_token, kv_policy, max_batch)
        if prefill_mode not in SCHEDULING_MODES:
            raise ValueError(
                f"prefill_mode must be one of {SCHEDULING_MODES}, got {prefill_mode!r}"
            )
        self._init_prefix_cache(prefix_cache_blocks, block_tokens)
        self.prefill_mode = prefill_mode
        self.chunked = prefill_mode != "prefill-first" and not latency.model.encoder_only
        # chunked-prefill-first: iterations with prompt tokens carry no decodes
        self.mix_decodes = prefill_mode != "chunked-prefill-first"
        # mixed-whole: prompts are never split across iterations
        self.whole_prompts = prefill_mode == "mixed-whole"
        self.token_budget = token_budget
        self.check_interval = check_interval
        self.seg_chunks: list[tuple[Call, int]] = []  # (call, prompt tokens) of a mixed iteration

    def enqueue(self, call: Call) -> None:
        call.prefill_instance = self.index
        super().enqueue(call)

    def _can_admit(self, call: Call) -> bool:
        if not self._fits(call, self.seg_b if self.paged and self.mix_decodes else 0):
            return False
        # In chunked mode a prompt is admitted only if the decodes leave budget for a chunk.
        if not self.chunked or call.resident or not self.mix_decodes:
            return True
        left = self.token_budget - self.seg_b
        return left >= call.input_tokens + call.generated if self.whole_prompts else left > 0

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
        if call.preemptions:  # the re-prefill recomputes everything evicted so far
            call.recomputed_tokens = call.evicted_tokens

    def _prefill_finished(self, call: Call, now: float) -> None:
        """The last prompt chunk of ``call`` ran: it emits its next output token (the first one,
        unless this was a recompute or a migration's re-prefill)."""
        call.prefill_left = 0
        call.stage = DECODE
        tokens = call.input_tokens + call.generated - call.cached_tokens  # computed here
        if call.generated < call.output_tokens:
            call.generated += 1  # its KV slot was taken at admission (see _need)
        if call.prefill_end < 0:  # records keep the first prefill (time to first token)
            call.prefill_end = now
            call.transfer_end = now
            call.decode_start = now
        listeners = self.sim.listeners["on_prefill_done"]
        if listeners:
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
        self.sim.schedule(dt, callback(self._prefill_done, calls))
        self._schedule_boundary(dt, 0)

    def _prefill_done(self, calls: list[Call]) -> None:
        now = self.sim.now
        for c in calls:
            self._prefill_finished(c, now)
        # Encoder-only calls (embeddings, rerankers) and one- or zero-token outputs end with the
        # prefill.
        for c in [c for c in calls if c.generated >= c.output_tokens]:
            self._finish_call(c, now)

    # -- chunked prefill ---------------------------------------------------------------------
    def _next_chunked_iteration(self) -> None:
        mix = self.mix_decodes
        decodes = [c for c in self.running if c.stage == DECODE]
        if mix and self.paged and decodes:
            self._make_room(decodes)  # running decodes get their KV slots first (vLLM)
        budget = self.token_budget - (len(decodes) if mix else 0)
        growth = len(decodes) if mix and self.paged else 0
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
            whole = self.whole_prompts
            while waiting:
                c = waiting[0]
                if not self._fits(c, growth):
                    break
                if c.resident:
                    waiting.pop(0)
                    self._take(c)
                    decodes.append(c)
                    budget -= 1
                    growth += 1 if self.paged else 0
                    continue
                if whole:
                    uncached = c.input_tokens + c.generated - self.prefix_hit_tokens(c)
                    alone = not chunks and uncached > self.token_budget
                    if uncached > budget and not alone:
                        break
                elif budget <= 0:
                    break
                waiting.pop(0)
                self._take(c)
                k = c.prefill_left if whole else min(c.prefill_left, budget)
                chunks.append((c, k))
                budget -= k
            if self.reserved > self.peak_reserved:
                self.peak_reserved = self.reserved
        if not chunks:
            self._start_decode_segment(decodes)
            return
        if not mix:
            decodes = []  # prefill-only iteration: the decodes wait
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
        grow = 1 if self.paged else 0
        for c in decodes:
            c.generated += 1
            c.kv_held += grow
            if c.generated >= c.output_tokens:
                finished.append(c)
        self.reserved += grow * len(decodes)
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
                if c.generated >= c.output_tokens:
                    finished.append(c)
        for c in finished:
            self._finish_call(c, now)


class SharedGPUs:
    """The MPS partitions of a simulation's GPUs: which instances share each physical GPU, which
    of them are busy, and the latency model each gets for the bandwidth left to it.

    :param variant: ``variant(instance, bandwidth_share)`` → the instance's latency model with
        that share of HBM bandwidth (same SM and memory cap).
    :param saturation: share of SMs that saturates HBM alone (see
        :func:`envs.sim.latency.contended_bandwidth_shares`).
    """

    def __init__(self, variant: Any, saturation: float = BANDWIDTH_SATURATION_SHARE) -> None:
        if not 0 < saturation <= 1:
            raise ValueError(f"saturation={saturation!r}; expected (0, 1]")
        self.variant = variant
        self.saturation = saturation
        self.on_gpu: dict[tuple[int, int], list[Any]] = {}
        self.active: set[int] = set()  # indices of the busy instances
        # GPU -> SM share of a neighbour outside the simulation that is always busy (profiling a
        # share next to a busy co-located partition; empty in deployment simulations)
        self.background: dict[tuple[int, int], float] = {}

    def fill_with_busy_neighbours(self) -> None:
        """Give every registered GPU's untaken share to an always-busy neighbour (a co-located
        pair profile: the replica next to a partition that keeps HBM busy)."""
        for g, insts in self.on_gpu.items():
            rest = 1.0 - sum(o.spec.fraction for o in insts)
            if rest > 1e-9:
                self.background[g] = rest
        for insts in self.on_gpu.values():
            for o in insts:
                o.latency = self.latency_for(o)

    def add(self, inst: Any) -> None:
        """Register ``inst`` (its spec names its GPUs) and give it the latency model of a
        partition whose neighbours are idle.

        :raises ValueError: if its share would take a GPU's live (not retired) shares above 1,
            or it names a GPU twice or not ``tp`` GPUs.
        """
        spec = inst.spec
        gpus = spec.gpu_ids
        if len(gpus) != spec.tp or len(set(gpus)) != len(gpus):
            raise ValueError(f"{spec.name}: gpu_ids {gpus} must name {spec.tp} distinct GPUs")
        for g in gpus:
            live = sum(o.spec.fraction for o in self.on_gpu.get(g, ()) if not o.retired)
            live += self.background.get(g, 0.0)
            if live + spec.fraction > 1 + 1e-9:
                raise ValueError(
                    f"{spec.name}: a {spec.fraction:g} share on GPU {g} next to {live:g} taken "
                    "exceeds the GPU"
                )
        for g in gpus:
            self.on_gpu.setdefault(g, []).append(inst)
        inst.shared = self
        inst.latency = self.latency_for(inst)

    def bandwidth_share(self, inst: Any) -> float:
        """Share of HBM bandwidth ``inst`` gets if it runs now: the smallest over its GPUs (the
        slowest shard paces a tensor-parallel iteration), counting it as busy."""
        share = 1.0
        for g in inst.spec.gpu_ids:
            busy: dict[Any, float] = {
                o.index: o.spec.fraction for o in self.on_gpu[g] if o.index in self.active
            }
            busy[inst.index] = inst.spec.fraction
            if g in self.background:
                busy["background"] = self.background[g]
            got = contended_bandwidth_shares(busy, set(busy), self.saturation, check_sum=False)
            share = min(share, got[inst.index])
        return share

    def latency_for(self, inst: Any) -> Any:
        """The latency model ``inst`` runs its next segment with."""
        return self.variant(inst, self.bandwidth_share(inst))

    def neighbours(self, inst: Any) -> list[Any]:
        """The other instances on any of ``inst``'s GPUs."""
        seen: dict[int, Any] = {}
        for g in inst.spec.gpu_ids:
            for o in self.on_gpu[g]:
                if o is not inst:
                    seen[o.index] = o
        return list(seen.values())

    def set_active(self, inst: Any, busy: bool) -> None:
        """Record whether ``inst`` is working; busy neighbours whose bandwidth share changes
        re-price their decode jump."""
        if busy == (inst.index in self.active):
            return
        others = [o for o in self.neighbours(inst) if o.index in self.active]
        before = [self.bandwidth_share(o) for o in others]
        if busy:
            self.active.add(inst.index)
        else:
            self.active.discard(inst.index)
        for o, b in zip(others, before, strict=True):
            if self.bandwidth_share(o) != b:
                o.bandwidth_changed()


__all__ = [
    "DecodeInstance",
    "MonolithicInstance",
    "PrefillInstance",
    "PrefixCache",
    "SharedGPUs",
]
