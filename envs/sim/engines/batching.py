"""Continuous batching under a KV-token capacity with the closed-form fast-forward (the
``decode`` paragraphs of :mod:`envs.sim.engines.instances`): admission under ``reserve`` or
``paged`` KV accounting, preemption, decode segments between boundaries, bandwidth changes of
co-located partitions; :class:`DecodeInstance` is this engine on a P-D decode server.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Any

from envs.sim.core.protocol import KV_POLICIES, InstanceHost
from envs.sim.core.workflows import DECODE, DONE, PREFILL, WAIT_PREFILL, Call
from envs.sim.engines.shared_gpus import SharedGPUs
from envs.sim.hardware.cluster import InstanceSpec

_NO_BATCH_CAP = 1 << 30


def _decode_key(call: Call) -> tuple[float, int]:
    return (call.decode_priority, call.enqueue_seq)


class BatchEngine:
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
            self.sim.schedule_late(self._boundary, version)
        else:
            self.sim.call_later(delay, self._boundary, version)

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

    def _clamp_segment(self, n: int, b: int, c_total: int) -> int:
        """Record the segment's batch (``b`` calls, ``c_total`` context tokens) and clamp its
        length ``n`` (decode steps) to one step in token-by-token mode and to the next
        migration check."""
        self.seg_b = b
        self.seg_c = c_total
        if self.token_by_token:
            n = min(n, 1)
        if self.check_interval:
            n = min(n, self.check_interval - self.decode_iterations % self.check_interval)
        return n

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
        n = self._clamp_segment(n, b, c_total)
        if self.paged:  # stop where the cache is full (the next boundary preempts)
            n = min(n, (self.capacity - self.reserved) // b)
        if n <= 0:
            self._schedule_boundary(0.0, 0)
            return
        self._schedule_boundary(self.latency.decode_steps_time(b, c_total, n), n)


class DecodeInstance(BatchEngine):
    """A decode engine of a P-D cluster: continuous batching, KV capacity, priority admission.

    Calls arrive after their KV transfer, locked to this instance (HexAgent §5.4).

    Under ``reserve`` KV (what the simulator builds) every running call decodes in every
    segment, so a segment's context sum and length are kept incrementally rather than summed
    over the batch at each start: ``_ctx_sum`` is the running calls' ``input_tokens +
    generated`` (integers, so exact), and ``_ends`` is a heap of ``(decode iteration at which
    the call has generated its output, admission number, call)``: its top gives the segment
    length (the fewest tokens any running call has left) and the calls that finish at a
    boundary, in admission order (the order of ``running``). ``generated`` is still updated
    for every running call at each segment end (schedulers and envs read it). ``paged`` falls
    back to the general engine (preemption reorders the batch).
    """

    role = "decode"

    def __init__(self, *args: Any, **kwargs: Any):
        """The base engine's parameters, unchanged."""
        super().__init__(*args, **kwargs)
        self._ctx_sum = 0  # sum of input_tokens + generated over ``running`` (not paged)
        self._ends: list[tuple[int, int, Call]] = []  # see the class docstring
        self._admissions = 0

    def _take(self, call: Call) -> None:
        super()._take(call)
        if not self.paged:
            self._ctx_sum += call.input_tokens + call.generated
            self._admissions += 1
            end = self.decode_iterations + call.output_tokens - call.generated
            heappush(self._ends, (end, self._admissions, call))

    def _finish_call(self, call: Call, now: float) -> None:
        if not self.paged:
            self._ctx_sum -= call.input_tokens + call.generated
        super()._finish_call(call, now)

    def _next_segment(self) -> None:
        if self.paged:
            super()._next_segment()
            return
        self._admit()
        running = self.running
        self.seg_start = self.sim.now
        if not running:
            self.seg_calls = []
            return
        self.seg_calls = list(running)
        # as _start_decode_segment, with the sum and the minimum kept incrementally
        b = len(running)
        c_total = self._ctx_sum
        n = self._ends[0][0] - self.decode_iterations
        if n > _NO_BATCH_CAP:
            n = _NO_BATCH_CAP
        n = self._clamp_segment(n, b, c_total)
        if n <= 0:
            self._schedule_boundary(0.0, 0)
            return
        # the formula without its memo: a segment's (batch, context, steps) rarely recurs in an
        # episode (1.6 % of segment starts, ``mixed`` x 1,000 on ``hetero-1``), so the memo's
        # lookup and insert cost more than they save (same value: the memo is a pure cache)
        self._schedule_boundary(self.latency._decode_steps_time(b, c_total, n), n)

    def _end_decode_segment(self, now: float) -> None:
        if self.paged:
            super()._end_decode_segment(now)
            return
        n = self.seg_n
        calls = self.seg_calls
        if n <= 0 or not calls:
            self.seg_calls = []
            return
        for c in calls:
            c.generated += n
        self._ctx_sum += n * len(calls)
        self._count_decode_iterations(n)
        for f in self.sim.listeners["on_decode_progress"]:
            f(self, n, now - self.seg_start, len(calls))  # seg_calls still names the batch
        self.seg_calls = []
        ends = self._ends
        done = self.decode_iterations
        if ends[0][0] <= done:
            # every finishing call reaches its end at this boundary (a segment never runs past
            # the fewest tokens left), so they pop in admission order: ``running``'s order
            finished = [heappop(ends)[2]]
            while ends and ends[0][0] <= done:
                finished.append(heappop(ends)[2])
            for c in finished:
                self._finish_call(c, now)
