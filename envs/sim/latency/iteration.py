"""The iteration-time formulas of :class:`envs.sim.latency.model.LatencyModel` (the roofline of the
:mod:`envs.sim.latency.model` docstring): GEMM time, prefill time (with context), the decode
iteration at a batch, a mixed chunked-prefill iteration, and the closed-form time of many decode
steps (memoised) with its inverse.
"""

from __future__ import annotations

import math

from envs.sim.hardware.catalog import GPUSpec, ModelSpec
from envs.sim.latency.efficiency import Calibration
from envs.sim.latency.moe import MoELayerCost, experts_touched

#: Entries of :meth:`LatencyModel.decode_steps_time`'s memo before it is cleared (~0.6 MB).
#: In a fresh episode its hits are the key a ``decode_steps_within`` bisection just
#: evaluated (15.2 % of calls with this bound, 15.8 % with 2^17 entries; ``mixed`` x 1,000 on
#: ``hetero-1``; ``python -m benchmarks.sim_speed --memo-stats``); only re-running the identical
#: workload hits more, and 2^17 entries per model made a 10,000-workflow soak at a load the
#: cluster sustains climb by 2.5 KB per workflow (README "Soak").
_STEPS_MEMO_SIZE = 1 << 12


class IterationTimeMixin:
    """The iteration-time methods of :class:`envs.sim.latency.model.LatencyModel`, and the
    constants they read, which ``LatencyModel.__init__`` sets (seconds unless named otherwise)."""

    model: ModelSpec
    gpu: GPUSpec
    calibration: Calibration
    tp: int
    #: The linear layers' roofline exponent (None: the hard ``max``) and its inverse.
    _gemm_p: float | None
    _gemm_inv_p: float
    _gemm_s_per_token: float
    _lm_head_s_per_seq: float
    _dense_weight_read_s: float
    _num_experts: int
    #: The routed experts' own cost (:mod:`envs.sim.latency.moe`; None: priced in the dense
    #: roofline) and the linear layers per transformer layer that the dense floor counts.
    _moe: MoELayerCost | None
    _gemms_per_layer: int
    _expert_miss: float
    _expert_read_s: float
    _causal: bool
    _attn_flop_s_per_pair: float
    _attn_pairs_per_token: float
    _kv_read_s_per_token: float
    _elementwise_s_per_token: float
    _seq_s: float
    _fixed_s: float
    #: Custom (one-shot / two-shot) all-reduce instead of the ring.
    _custom_ar: bool
    _ar_layers: int
    _ar_bytes_per_token: float
    _ar_latency_s: float
    _ar_s_per_byte: float
    _allreduce_fixed_s: float
    _allreduce_s_per_token: float
    #: The decode closed form's coefficients: attention compute and KV read per context token,
    #: KV write per new token.
    _dec_a1: float
    _dec_a2: float
    _dec_b2: float
    #: Memos: batch size -> fixed decode seconds; tokens -> prefill seconds; decode steps.
    _fixed_by_batch: dict[int, float]
    _prefill_one: dict[int, float]
    _steps_memo: dict[tuple[int, int, int], float]

    # ------------------------------------------------------------------------------------
    def _gemm_time(self, num_tokens: int, num_seqs: int) -> float:
        """Seconds of the linear layers for ``num_tokens`` tokens, logits for ``num_seqs``."""
        compute = num_tokens * self._gemm_s_per_token + num_seqs * self._lm_head_s_per_seq
        read = self._dense_weight_read_s
        if self._num_experts:
            touched = self._num_experts * (1.0 - self._expert_miss**num_tokens)
            read += touched * self._expert_read_s
        p = self._gemm_p
        if p is None:  # hard roofline
            dense = compute if compute > read else read
        else:
            dense = (compute**p + read**p) ** self._gemm_inv_p
        moe = self._moe
        return dense if moe is None else dense + moe.time(num_tokens)

    def allreduce_time(self, num_tokens: int) -> float:
        """Seconds of one iteration's tensor-parallel all-reduces (2 per layer) under the
        engines' custom all-reduce (``Calibration.custom_allreduce``; 0.0 when it is off, the
        ring formula then being part of the per-token and fixed terms).

        vLLM's kernel (``csrc/custom_all_reduce.cuh``, ``CustomAllreduce::allreduce``; SGLang
        ships the same one) runs one stage - every rank reads each peer's whole buffer:
        ``latency + (tp - 1) · bytes / link`` - on 2 GPUs, or below 512 KiB on up to 4 GPUs and
        256 KiB on up to 8; else two stages (reduce-scatter then all-gather, each behind a
        barrier): ``2 · latency + 2 (tp - 1) / tp · bytes / link``. Above its 8 MiB buffer the
        engines fall back to NCCL (the ring). ``latency`` and ``link`` are the fitted NVLink
        constants. At 8 GPUs and 64-256 KiB (decode batches) this is 1.2-1.8x the ring.

        :param num_tokens: tokens in the iteration (activations of ``hidden`` bf16 each).
        """
        if not self._custom_ar or num_tokens <= 0:
            return 0.0
        tp = self.tp
        nbytes = num_tokens * self._ar_bytes_per_token
        lat, per_byte = self._ar_latency_s, self._ar_s_per_byte
        if nbytes > 8 * 2**20:
            one = lat + 2.0 * (tp - 1) / tp * nbytes * per_byte
        elif tp == 2 or (tp <= 4 and nbytes < 512 * 2**10) or (tp <= 8 and nbytes < 256 * 2**10):
            one = lat + (tp - 1) * nbytes * per_byte
        else:
            one = 2.0 * lat + 2.0 * (tp - 1) / tp * nbytes * per_byte
        return 2 * self._ar_layers * one

    def experts_touched(self, num_tokens: int) -> float:
        """Expected distinct experts per MoE layer touched by a batch of ``num_tokens`` tokens.

        :param num_tokens: tokens in the batch.
        :return: ``E · (1 − (1 − k/E)^num_tokens)``; 0 for dense models.
        """
        m = self.model
        if not m.is_moe:
            return 0.0
        return experts_touched(num_tokens, m.num_experts, m.experts_per_token)

    def prefill_time(self, num_tokens: int, num_seqs: int = 1, context_tokens: int = 0) -> float:
        """Seconds for one prefill iteration.

        :param num_tokens: new tokens in the batch (all sequences together).
        :param num_seqs: sequences the new tokens belong to (split evenly for attention).
        :param context_tokens: tokens already in the KV cache, all sequences together (prefix
            cache hits, earlier chunks); they are attended to but not recomputed.
        :return: seconds; 0.0 when ``num_tokens`` is 0.
        """
        if num_seqs == 1 and context_tokens == 0:
            t = self._prefill_one.get(num_tokens)
            if t is None:
                t = self._prefill_one[num_tokens] = self._prefill_time(num_tokens, 1, 0)
            return t
        return self._prefill_time(num_tokens, num_seqs, context_tokens)

    def _prefill_time(self, num_tokens: int, num_seqs: int, context_tokens: int) -> float:
        if num_tokens <= 0:
            if num_tokens < 0:
                raise ValueError(f"num_tokens={num_tokens}; expected >= 0")
            return 0.0
        if num_seqs < 1 or context_tokens < 0:
            raise ValueError(
                f"num_seqs={num_seqs}, context_tokens={context_tokens}; expected "
                "num_seqs >= 1 and context_tokens >= 0"
            )
        # query-key pairs: each new token sees the cached context plus the new tokens before
        # it (causal) or all new tokens of its sequence (encoder)
        pairs = num_tokens * context_tokens / num_seqs
        square = num_tokens * num_tokens / num_seqs
        pairs += 0.5 * square if self._causal else square
        pairs += self._attn_pairs_per_token * num_tokens
        attn_compute = pairs * self._attn_flop_s_per_pair
        attn_read = (context_tokens + num_tokens) * self._kv_read_s_per_token
        attn = attn_compute if attn_compute > attn_read else attn_read
        return (
            self._gemm_time(num_tokens, num_seqs)
            + attn
            + num_tokens * (self._allreduce_s_per_token + self._elementwise_s_per_token)
            + self._fixed_s
            + num_seqs * self._seq_s
            + (self.allreduce_time(num_tokens) if self._custom_ar else 0.0)
        )

    def prefill_components(self, num_tokens: int) -> dict[str, float]:
        """The parts of :meth:`prefill_time` for one sequence of ``num_tokens`` new tokens,
        seconds: ``gemm`` (linear layers with their kernel floors), ``attention`` (with its
        floor), ``allreduce`` (with its latency), ``elementwise`` (with its kernel floors) and
        ``framework`` (per-iteration and per-sequence overheads). They sum to
        ``prefill_time(num_tokens)``.

        :param num_tokens: new tokens (>= 1).
        """
        if num_tokens < 1:
            raise ValueError(f"num_tokens={num_tokens}; expected >= 1")
        eff = self.calibration.family(self.gpu.family)
        cal = self.calibration
        layers = self.model.num_layers
        pairs = (0.5 if self._causal else 1.0) * num_tokens * num_tokens
        pairs += self._attn_pairs_per_token * num_tokens
        attn_compute = pairs * self._attn_flop_s_per_pair
        attn_read = num_tokens * self._kv_read_s_per_token
        gemm_floor = layers * self._gemms_per_layer * eff.gemm_floor_seconds
        attn_floor = layers * eff.attention_floor_seconds
        elem_floor = layers * cal.elementwise_kernels_per_layer * eff.elementwise_floor_seconds
        parts = {
            "gemm": self._gemm_time(num_tokens, 1) + gemm_floor,
            "attention": max(attn_compute, attn_read) + attn_floor,
            "allreduce": num_tokens * self._allreduce_s_per_token
            + self._allreduce_fixed_s
            + (self.allreduce_time(num_tokens) if self._custom_ar else 0.0),
            "elementwise": num_tokens * self._elementwise_s_per_token + elem_floor,
        }
        parts["framework"] = (
            self._fixed_s - gemm_floor - attn_floor - elem_floor - self._allreduce_fixed_s
        ) + self._seq_s
        return parts

    def _decode_fixed(self, batch_size: int) -> float:
        t = self._fixed_by_batch.get(batch_size)
        if t is None:
            t = self._fixed_by_batch[batch_size] = self._decode_fixed_formula(batch_size)
        return t

    def _decode_fixed_formula(self, batch_size: int) -> float:
        if self.model.encoder_only:
            raise ValueError(
                f"{self.model.name} is encoder-only (embedding/reranker): it has "
                "no decode phase; use prefill_time"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}; expected >= 1")
        return (
            self._gemm_time(batch_size, batch_size)
            + batch_size * (self._allreduce_s_per_token + self._elementwise_s_per_token)
            + self._fixed_s
            + batch_size * self._seq_s
            + (self.allreduce_time(batch_size) if self._custom_ar else 0.0)
        )

    def decode_iteration_time(self, batch_size: int, total_context_tokens: int) -> float:
        """Seconds for one decode step of ``batch_size`` sequences.

        :param batch_size: sequences decoding one token each.
        :param total_context_tokens: KV tokens the batch attends to, all sequences together.
        :raises ValueError: for encoder-only models or batch_size < 1.
        """
        x = total_context_tokens
        a = self._dec_a1 * x
        b = self._dec_a2 * x + self._dec_b2 * batch_size
        return self._decode_fixed(batch_size) + (a if a > b else b)

    def mixed_iteration_time(
        self,
        decode_batch: int,
        decode_context_tokens: int,
        prefill_tokens: int,
        prefill_seqs: int,
        prefill_context_tokens: int,
    ) -> float:
        """Seconds for one chunked-prefill iteration (vLLM's default scheduling): ``decode_batch``
        sequences decode one token each while ``prefill_tokens`` prompt tokens of
        ``prefill_seqs`` sequences are computed in the same forward pass.

        The linear layers run once over all ``decode_batch + prefill_tokens`` tokens (one weight
        read, logits for every sequence); attention is priced per part (prefill attention as in
        :meth:`prefill_time`, decode attention as in :meth:`decode_iteration_time`); the
        all-reduce and the elementwise kernels move every token's activations; the fixed
        overhead is paid once. So it is
        ``prefill_time + decode_iteration_time`` minus one fixed overhead, with the two separate
        GEMM passes replaced by the joint one. It equals ``decode_iteration_time(decode_batch,
        decode_context_tokens)`` when ``prefill_tokens`` is 0 and ``prefill_time(prefill_tokens,
        prefill_seqs, prefill_context_tokens)`` when ``decode_batch`` is 0.

        :param decode_batch: sequences decoding one token each (>= 0).
        :param decode_context_tokens: KV tokens the decoding sequences attend to, all together.
        :param prefill_tokens: new prompt tokens in the iteration, all chunks together (>= 0).
        :param prefill_seqs: sequences the chunks belong to (>= 1 when ``prefill_tokens`` > 0).
        :param prefill_context_tokens: tokens of those sequences already in the KV cache (prefix
            hits and earlier chunks), all together.
        :return: seconds; 0.0 for an empty iteration.
        """
        if decode_batch < 0 or prefill_tokens < 0:
            raise ValueError(
                f"decode_batch={decode_batch}, prefill_tokens={prefill_tokens}; expected >= 0"
            )
        if prefill_tokens == 0:
            if decode_batch == 0:
                return 0.0
            return self.decode_iteration_time(decode_batch, decode_context_tokens)
        prefill = self.prefill_time(prefill_tokens, prefill_seqs, prefill_context_tokens)
        if decode_batch == 0:
            return prefill
        decode = self.decode_iteration_time(decode_batch, decode_context_tokens)
        separate_gemms = self._gemm_time(prefill_tokens, prefill_seqs) + self._gemm_time(
            decode_batch, decode_batch
        )
        joint_gemm = self._gemm_time(decode_batch + prefill_tokens, decode_batch + prefill_seqs)
        mixed = prefill + decode - self._fixed_s - separate_gemms + joint_gemm
        if self._custom_ar:  # one all-reduce over every token, not one per part
            mixed += (
                self.allreduce_time(decode_batch + prefill_tokens)
                - self.allreduce_time(prefill_tokens)
                - self.allreduce_time(decode_batch)
            )
        return mixed

    def decode_steps_time(
        self, batch_size: int, total_context_tokens: int, num_steps: int
    ) -> float:
        """Seconds for ``num_steps`` decode steps of an unchanged batch, in O(1).

        Equals ``sum(decode_iteration_time(batch_size, total_context_tokens + i * batch_size)
        for i in range(num_steps))``: each term is ``K + max(a1·x, a2·x + b2·B)``, so the sum
        is two arithmetic series split at the crossover of the two affine terms.

        :param batch_size: sequences in the batch.
        :param total_context_tokens: total context at the first step, tokens.
        :param num_steps: decode steps (>= 0).
        """
        key = (batch_size, total_context_tokens, num_steps)
        t = self._steps_memo.get(key)
        if t is None:
            memo = self._steps_memo
            if len(memo) >= _STEPS_MEMO_SIZE:
                memo.clear()  # bounded: a long run's contexts rarely repeat after a while
            t = memo[key] = self._decode_steps_time(batch_size, total_context_tokens, num_steps)
        return t

    def _decode_steps_time(
        self, batch_size: int, total_context_tokens: int, num_steps: int
    ) -> float:
        if num_steps <= 0:
            if num_steps < 0:
                raise ValueError(f"num_steps={num_steps}; expected >= 0")
            return 0.0
        fixed = self._decode_fixed(batch_size)
        a1, a2, c2 = self._dec_a1, self._dec_a2, self._dec_b2 * batch_size
        x0, step = float(total_context_tokens), float(batch_size)

        # max(a1·x, a2·x + c2) over x_i = x0 + i·step: a1·x wins for i >= split when a1 > a2
        # (and for i < split when a1 < a2); find split from the crossover, then fix rounding.
        # "a1·x wins at step i" is ``a1 * x > a2 * x + c2`` with x = x0 + i·step.
        if a1 == a2:
            split = num_steps if c2 < 0 else 0  # c2 >= 0: the second term always wins
            lo_first = False
        else:
            root = (c2 / (a1 - a2) - x0) / step  # index where the two terms are equal
            split = math.ceil(root)
            split = 0 if split < 0 else (num_steps if split > num_steps else split)
            lo_first = a1 < a2  # below the root the term with the smaller slope is larger
            while split > 0:
                x = x0 + (split - 1) * step
                if (a1 * x > a2 * x + c2) == lo_first:
                    break
                split -= 1
            while split < num_steps:
                x = x0 + split * step
                if (a1 * x > a2 * x + c2) != lo_first:
                    break
                split += 1

        # Arithmetic series of slope·x_i + offset over i in [i0, i1), lo part then hi part.
        if lo_first:
            lo_slope, lo_offset, hi_slope, hi_offset = a1, 0.0, a2, c2
        else:
            lo_slope, lo_offset, hi_slope, hi_offset = a2, c2, a1, 0.0
        total = num_steps * fixed
        if split > 0:
            total += (
                split * (lo_slope * x0 + lo_offset) + lo_slope * step * (split - 1) * split / 2.0
            )
        else:
            total += 0.0
        count = num_steps - split
        if count > 0:
            total += (
                count * (hi_slope * x0 + hi_offset)
                + hi_slope * step * (split + num_steps - 1) * count / 2.0
            )
        else:
            total += 0.0
        return total

    def decode_steps_within(
        self, batch_size: int, total_context_tokens: int, budget_seconds: float
    ) -> int:
        """Largest n >= 0 with ``decode_steps_time(batch_size, total_context_tokens, n) <=
        budget_seconds``, by doubling + bisection (O(log n) closed-form evaluations).

        :param batch_size: sequences in the batch.
        :param total_context_tokens: total context at the first step, tokens.
        :param budget_seconds: time available, seconds (finite).
        """
        if not math.isfinite(budget_seconds):
            raise ValueError(f"budget_seconds={budget_seconds}; expected a finite number")
        if budget_seconds <= 0:
            return 0
        first = self.decode_iteration_time(batch_size, total_context_tokens)
        # every step costs at least the first one (context only grows)
        hi = int(budget_seconds / first) + 1
        lo = 0
        while lo < hi:  # invariant: answer in [lo, hi]
            mid = (lo + hi + 1) // 2
            if self.decode_steps_time(batch_size, total_context_tokens, mid) <= budget_seconds:
                lo = mid
            else:
                hi = mid - 1
        return lo
