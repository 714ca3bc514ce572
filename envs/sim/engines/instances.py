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
of the same GPU that are busy (:func:`envs.sim.latency.model.contended_bandwidth_shares`). Each
segment (a prefill pass, a mixed iteration, a decode jump) is priced with the bandwidth share
given by which neighbours are busy when it starts; when a neighbour starts or stops working, a
decode jump in progress is cut at the end of its current iteration and re-priced (the cut of
``_wake``), so a decode batch runs slower exactly while its neighbour is busy. A prefill pass or
mixed iteration is one iteration and keeps the price it started with. An instance is *busy* from
the start of a segment with work until it finds none. Whole-GPU instances and instances without
``gpu_ids`` take no part: their model is unchanged.
"""

from __future__ import annotations

from typing import Any

from envs.sim.core.protocol import DEFAULT_TOKEN_BUDGET, SCHEDULING_MODES, InstanceHost
from envs.sim.core.workflows import DECODE, PREFILL, Call
from envs.sim.engines.batching import BatchEngine, DecodeInstance
from envs.sim.engines.prefill import PrefillInstance
from envs.sim.engines.prefix_cache import PrefixCache
from envs.sim.engines.shared_gpus import SharedGPUs
from envs.sim.hardware.cluster import InstanceSpec


class MonolithicInstance(PrefixCache, BatchEngine):
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
        self.sim.call_later(dt, self._prefill_done, calls)
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
            self._admit_chunks(decodes, chunks, budget, growth)
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

    def _admit_chunks(
        self, decodes: list[Call], chunks: list[tuple[Call, int]], budget: int, growth: int
    ) -> None:
        """Admit waiting calls into this iteration in queue order while they fit (KV, with the
        ``growth`` tokens the iteration's decodes add) and the token ``budget`` lasts: a
        KV-resident call joins ``decodes``, any other one takes a prefill chunk (its whole
        prompt under ``whole_prompts``) appended to ``chunks``."""
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


__all__ = [
    "DecodeInstance",
    "MonolithicInstance",
    "PrefillInstance",
    "PrefixCache",
    "SharedGPUs",
]
