"""Roofline latency model of one serving instance (GPU type, TP degree, GPU fraction, model).

Every iteration of the engine (one prefill batch, or one decode step of a batch) is priced as
the sum of five parts, each per tensor-parallel shard (HexAgent §4.2 uses a roofline model; the
efficiency constants are fitted in ``envs/configs/latency_calibration.yaml`` by
``envs/sim/calibration/calibrate.py``; the opt-in per-op calibration variant ``"smooth-roofline"``,
ours, in ``latency_calibration_smooth_roofline.yaml``, see :mod:`envs.sim.latency.efficiency`):

1. **Linear layers (GEMMs)**: the roofline ``max(C, R)`` of the compute bound
   ``C = FLOPs / (eff_gemm_compute · peak · f)`` and the weight-read bound ``R = weight bytes /
   (eff_gemm_memory · bandwidth · f)`` (the default calibration), or, where the family has a
   ``gemm_roofline_exponent`` ``p`` (the ``"smooth-roofline"`` variant), the smooth roofline
   ``(C^p + R^p)^(1/p)``. FLOPs = 2 · tokens · params touched per token (+ the
   LM head for one token per sequence); bytes = the weights the batch touches. A MoE layer reads
   only the experts the batch activates: of E experts with k per token, a batch of B tokens
   touches ``E · (1 − (1 − k/E)^B)`` in expectation. Calibrations with ``moe_kernels`` (the
   ``"smooth-roofline"`` variant) price those routed experts apart, from the MoE kernel's own
   fitted efficiencies plus its dispatch / combine traffic and floor (:mod:`envs.sim.latency.moe`);
   the ``"roofline"`` variant keeps them in the dense roofline. The smooth form is ours (HexAgent
   §4.2 says "roofline" and gives no formula): kernel tables show GEMMs near the ridge point,
   where neither tensor cores nor HBM are saturated, running 4–18 % slower than ``max(C, R)``
   (``python -m envs.sim.calibration.calibrate --prefill-report --ablation``); the hard ``max`` is
   ``p`` → ∞.
2. **Attention**: ``max(attention FLOPs / (eff_attn_compute · peak · f),
   KV bytes / (eff_attn_memory · bandwidth · f))``; prefill FLOPs are causal (half the square)
   for decoders and full for encoders; decode reads the whole KV context.
3. **Tensor-parallel all-reduce**: 2 per layer of ``tokens · hidden · dtype`` bytes, ring cost
   ``latency + 2 (tp − 1) / tp · bytes / (eff_link · link bandwidth)`` over NVLink, or PCIe when
   the GPU has none. The link is not scaled by the GPU fraction (it is not time-sliced with
   the SMs).
4. **Elementwise ops** (RMSNorm with the residual add, rotary embedding, the gated
   activation): memory-bound, ``tokens · elementwise bytes per token / (eff_elementwise ·
   bandwidth · f)`` (see :func:`elementwise_bytes_per_token`); absent (0) when the family has
   no ``elementwise_memory`` constant.

(In 1, 2 and 4 the ``f`` multiplying the bandwidth is ``bandwidth_share``; see below.)
5. **Fixed overheads**: a per-layer kernel floor (launch latency and tail of the layer's GEMM,
   attention and elementwise kernels: ``gemms_per_layer · gemm_floor_seconds +
   attention_floor_seconds + elementwise_kernels_per_layer · elementwise_floor_seconds``, the
   last 0 in the default calibration) and a
   per-iteration framework overhead (scheduler, sampling, Python; plus a term per extra TP
   worker), seconds.

``f`` is the GPU fraction. It is an MPS-style partition (Scepsy §6 enforces fractions with NVIDIA
MPS "with static limits on SMs and memory"): it caps compute at ``f · peak`` and memory at
``f · capacity``, strictly. HBM bandwidth (and L2, folded into it) is *not* partitioned by MPS, so
the bandwidth an instance gets is ``bandwidth_share · bandwidth`` with ``bandwidth_share``
decided by what its co-located neighbours are doing (:func:`contended_bandwidth_shares`); it
defaults to ``f``, the fully-packed-and-busy case and the model of a whole GPU. Fixed
per-iteration overheads are not scaled.

**Numeric precision** (``precision`` for weights, ``kv_precision`` for the KV cache; one of
``PRECISIONS``; ``kv_precision=None`` follows ``precision``):

- ``bf16`` (default): 2-byte weights, KV and activations (``ModelSpec.dtype_bytes``) at the bf16
  tensor-core peak; exactly the model above.
- ``fp8`` weights: linear-layer weights (attention projections, dense FFN, MoE experts and the
  router) take 1 byte per parameter; the input embedding and LM head stay bf16, as in the common
  FP8 checkpoints (nvidia/Llama-3.1-8B-Instruct-FP8, Qwen/Qwen3-235B-A22B-FP8 keep ``lm_head``
  unquantised). Real checkpoints (MiniMax-M2.5's, llm-compressor's MoE recipes) also keep the
  MoE router in bf16; it is at most ~0.5% of the weights a token touches and is priced as fp8
  here. Weight memory and the memory-bound weight reads shrink accordingly; compute-bound
  linear layers run at ``GPUSpec.peak_flops_fp8`` times the family's ``gemm_compute_fp8`` and
  weight reads at ``gemm_memory_fp8`` (families without an FP8 fit use their bf16 values;
  every GEMM kernel keeps the family's ``gemm_floor_seconds``).
  The LM head GEMM stays at the bf16 rates.
- ``fp8`` KV cache: 1 byte per K/V element, so ``kv_bytes_per_token`` halves, KV capacity grows
  and decode-attention KV reads halve. Attention compute stays at the bf16 peak (FlashAttention
  computes in bf16).
- Tensor-parallel all-reduces always move bf16 activations.

A GPU without FP8 tensor cores (Ampere, Volta: ``GPUSpec.supports("fp8")`` is False) asked for
fp8 weights or KV raises :class:`UnsupportedPrecisionError`.

A decode step's time is therefore ``K(B) + max(a₁·x, a₂·x + b₂)`` with ``x`` the total context
tokens of the batch, so the time of n steps (x grows by B per step) has a closed form
(``decode_steps_time``), which the simulator uses to jump over unchanged decode batches.

Encoder-only models (embedding models, cross-encoder rerankers) have no decode and keep no KV
cache: ``kv_bytes_per_token`` and ``kv_capacity_tokens`` are 0 and ``max_batch_tokens`` is the
number of tokens whose activations fit beside the weights.

Command line::

    python -m envs.sim.latency.model --gpu a100-80g --model llama3.1-70b --tp 4 \\
        --prefill 2048 --decode-batch 32 --context 65536
    python -m envs.sim.latency.model --gpu h100-sxm --model qwen3-32b --precision fp8 --prefill 8192
"""

from __future__ import annotations

import argparse
import math

from envs.sim.engines.contention import BANDWIDTH_SATURATION_SHARE, contended_bandwidth_shares
from envs.sim.hardware.catalog import (
    PRECISIONS,
    GPUSpec,
    ModelSpec,
    get_gpu,
    get_model,
    load_gpus,
)
from envs.sim.latency.efficiency import (
    CALIBRATION_YAML,
    Calibration,
    FamilyEfficiency,
    LinkEfficiency,
    element_bytes,
    elementwise_bytes_per_token,
    load_calibration,
)
from envs.sim.latency.iteration import IterationTimeMixin
from envs.sim.latency.moe import MoELayerCost, kernel_efficiency


class InsufficientMemoryError(ValueError):
    """The model's weights do not fit in the instance's usable memory."""


class UnsupportedPrecisionError(ValueError):
    """A precision the GPU's tensor cores do not run (fp8 on Ampere or Volta)."""


def checked_arguments(
    gpu: GPUSpec,
    model: ModelSpec,
    tp: int,
    fraction: float,
    memory_utilization: float,
    precision: str,
    kv_precision: str | None,
    bandwidth_share: float | None,
) -> tuple[str, float]:
    """Check :class:`LatencyModel`'s arguments (a bad one raises, naming it and its value);
    return the KV precision and the HBM bandwidth share they resolve to."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp={tp!r}; expected a positive integer")
    if model.num_heads % tp:
        raise ValueError(
            f"tp={tp} does not divide num_heads={model.num_heads} of "
            f"{model.name}; expected a divisor of {model.num_heads}"
        )
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise ValueError(
            f"tp={tp} neither divides nor is a multiple of num_kv_heads="
            f"{model.num_kv_heads} of {model.name}"
        )
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction={fraction!r}; expected a GPU share in (0, 1]")
    if bandwidth_share is None:
        bandwidth_share = fraction
    if not 0 < bandwidth_share <= 1:
        raise ValueError(f"bandwidth_share={bandwidth_share!r}; expected a share of HBM in (0, 1]")
    if not 0 < memory_utilization <= 1:
        raise ValueError(f"memory_utilization={memory_utilization!r}; expected (0, 1]")
    if kv_precision is None:
        kv_precision = precision
    for what, value in (("precision", precision), ("kv_precision", kv_precision)):
        if value not in PRECISIONS:
            raise ValueError(f"{what}={value!r}; expected one of {PRECISIONS}")
        if not gpu.supports(value):
            able = sorted(name for name, g in load_gpus().items() if g.supports(value))
            raise UnsupportedPrecisionError(
                f"{what}={value!r} is not supported on {gpu.name}: it has no {value} tensor "
                f"cores (no peak_flops_{value} in the GPU catalog); GPUs that support "
                f"{value}: {', '.join(able)}; or use {what}='bf16'"
            )
    return kv_precision, bandwidth_share


class LatencyModel(IterationTimeMixin):
    """Iteration latencies, weight and KV sizes of one serving instance.

    :param gpu: GPU type of every shard.
    :param model: model architecture.
    :param tp: tensor-parallel degree (GPUs per instance); must divide ``num_heads``, and divide
        or be a multiple of ``num_kv_heads`` (KV heads are replicated when ``tp > num_kv_heads``).
    :param fraction: share of each GPU in (0, 1]; caps compute (SMs) and memory.
    :param calibration: fitted constants; ``None`` for the packaged fit.
    :param memory_utilization: share of the (fractional) memory the engine may use, in (0, 1]
        (vLLM's ``gpu_memory_utilization``).
    :param precision: weight precision, one of ``PRECISIONS`` (see the module docstring).
    :param kv_precision: KV-cache precision, one of ``PRECISIONS``; ``None`` = ``precision``.
    :param bandwidth_share: share of each GPU's HBM bandwidth the instance gets, in (0, 1];
        ``None`` = ``fraction`` (see :func:`contended_bandwidth_shares` for co-located shares).
    :raises InsufficientMemoryError: if the weights exceed the usable memory.
    :raises UnsupportedPrecisionError: if the GPU has no fp8 tensor cores and fp8 is asked for.
    :raises ValueError: on a nonsensical tp, fraction, memory_utilization or precision.
    """

    def __init__(
        self,
        gpu: GPUSpec,
        model: ModelSpec,
        tp: int,
        fraction: float,
        calibration: Calibration | None = None,
        memory_utilization: float = 0.9,
        *,
        precision: str = "bf16",
        kv_precision: str | None = None,
        bandwidth_share: float | None = None,
    ) -> None:
        kv_precision, bandwidth_share = checked_arguments(
            gpu, model, tp, fraction, memory_utilization, precision, kv_precision, bandwidth_share
        )
        self.precision = precision
        self.kv_precision = kv_precision
        self.gpu = gpu
        self.model = model
        self.tp = tp
        self.fraction = float(fraction)
        self.bandwidth_share = float(bandwidth_share)
        self.memory_utilization = float(memory_utilization)
        self.calibration = calibration if calibration is not None else load_calibration()
        cal = self.calibration
        eff = cal.family(gpu.family)
        m = model
        dtype = m.dtype_bytes  # bf16 baseline: activations, embedding, LM head
        weight_elem = element_bytes(precision, dtype)  # linear-layer weights
        kv_elem = element_bytes(kv_precision, dtype)
        layers = m.num_layers

        # --- memory -------------------------------------------------------------------
        linear_params = max(0.0, m.total_params - m.embedding_params)
        self.weight_bytes: float = m.total_params * dtype - linear_params * (dtype - weight_elem)
        self.usable_memory_bytes: float = (
            tp * self.fraction * gpu.memory_bytes * self.memory_utilization
        )
        config = (
            f"{m.name} on {tp}x {gpu.name} (fraction {self.fraction:g}, memory "
            f"utilization {self.memory_utilization:g}, precision {precision}, "
            f"kv_precision {kv_precision})"
        )
        if self.weight_bytes > self.usable_memory_bytes:
            raise InsufficientMemoryError(
                f"{config}: weights need {self.weight_bytes:.4g} bytes but only "
                f"{self.usable_memory_bytes:.4g} bytes of memory are usable; use a larger tp, "
                "a larger fraction, a GPU with more memory or fp8 weights"
            )
        free = self.usable_memory_bytes - self.weight_bytes
        # Replicated KV heads (tp > num_kv_heads) are stored once per shard.
        kv_heads_total = max(m.num_kv_heads, tp)
        kv_heads_shard = kv_heads_total // tp
        if m.encoder_only:
            self.kv_bytes_per_token: int = 0
            self.kv_capacity_tokens: int = 0
            # Live activations of one layer per token: residual, QKV, attention out, FFN hidden.
            act_bytes_per_token = dtype * (4 * m.hidden_size + m.intermediate_size)
            self.max_batch_tokens: int = int(free // act_bytes_per_token)
        else:
            self.kv_bytes_per_token = 2 * layers * kv_heads_total * m.head_dim * kv_elem
            self.kv_capacity_tokens = int(free // self.kv_bytes_per_token)
            self.max_batch_tokens = self.kv_capacity_tokens
        kv_bytes_per_token_shard = 2 * layers * kv_heads_shard * m.head_dim * kv_elem

        # --- per-shard rates (FLOP/s, bytes/s) ------------------------------------------
        flops = gpu.peak_flops * self.fraction
        bandwidth = gpu.hbm_bandwidth * self.bandwidth_share  # not partitioned by MPS
        # bf16 GEMMs (the LM head; every linear layer when precision is bf16)
        gemm_flop_rate = eff.gemm_compute * flops
        gemm_byte_rate = eff.gemm_memory * bandwidth
        # linear layers with weights in `precision`
        linear_compute, linear_memory = eff.gemm_efficiency(precision)
        linear_peak = gpu.peak_flops if precision == "bf16" else gpu.peak_flops_fp8
        linear_flop_rate = linear_compute * (linear_peak * self.fraction)
        linear_byte_rate = linear_memory * bandwidth
        attn_flop_rate = eff.attention_compute * flops
        attn_byte_rate = eff.attention_memory * bandwidth

        # smooth-roofline exponent of the linear layers (None: the hard max)
        p = eff.gemm_roofline_exponent
        self._gemm_p: float | None = None if p is None or math.isinf(p) else float(p)
        self._gemm_inv_p = 0.0 if self._gemm_p is None else 1.0 / self._gemm_p

        # --- routed experts priced from their physics (calibrations with moe_kernels) ------
        self._moe: MoELayerCost | None = None
        moe_kernel = (
            kernel_efficiency(cal.moe_kernels, gpu.family, precision)
            if m.is_moe and cal.moe_kernels
            else None
        )
        if moe_kernel is not None:
            self._moe = MoELayerCost(
                num_layers=layers,
                hidden_size=m.hidden_size,
                expert_ffn=m.expert_intermediate_size,
                num_experts=m.num_experts,
                top_k=m.experts_per_token,
                weight_bytes=weight_elem,
                activation_bytes=dtype,
                peak_flops=linear_peak * self.fraction,
                hbm_bandwidth=bandwidth,
                efficiency=moe_kernel,
                # experts sharded over the TP group (expert parallelism over the same GPUs
                # reads the same bytes per GPU; its load imbalance is not modelled)
                tp=tp,
                ep=1,
                roofline_exponent=self._gemm_p,
            )

        # --- linear layers --------------------------------------------------------------
        # seconds per token of compute-bound GEMM work on one shard
        dense_params_layer = m.attention_params_per_layer + m.dense_ffn_params_per_layer
        routed_params_token = 0 if self._moe else m.experts_per_token * m.expert_params
        moe_eff = cal.moe_kernel_efficiency
        self._gemm_s_per_token = (
            2.0 * layers * (dense_params_layer + routed_params_token / moe_eff) / tp
        ) / linear_flop_rate
        # Decoders compute logits for the last token of each sequence; encoders pool instead.
        lm_head_params = 0 if m.encoder_only else m.vocab_size * m.hidden_size
        self._lm_head_s_per_seq = 2.0 * lm_head_params / tp / gemm_flop_rate
        # seconds to read the always-touched weights (attention, dense FFN/router, LM head),
        # counted in bf16-read equivalents: a linear weight costs (weight_elem / dtype) of a bf16
        # weight at its own read rate. In bf16 both ratios are exactly 1.0, leaving the sum as is.
        linear_read_scale = (weight_elem / dtype) * (gemm_byte_rate / linear_byte_rate)
        self._dense_weight_read_s = (
            (layers * dense_params_layer * linear_read_scale + lm_head_params)
            * dtype
            / tp
            / gemm_byte_rate
        )
        self._expert_read_s = (
            layers * m.expert_params * weight_elem / tp / linear_byte_rate / moe_eff
        )
        # experts read inside the dense roofline (0: none, or priced by self._moe)
        self._num_experts = 0 if self._moe else m.num_experts
        self._expert_miss = 1.0 - m.experts_per_token / m.num_experts if m.is_moe else 1.0

        # --- attention ------------------------------------------------------------------
        heads_shard = m.num_heads // tp
        attn_flop_per_pair = 4.0 * layers * heads_shard * m.head_dim  # QK^T and AV per (q, k)
        self._attn_flop_s_per_pair = attn_flop_per_pair / attn_flop_rate
        self._attn_pairs_per_token = eff.attention_half_tokens / 2.0  # short-sequence penalty
        self._kv_read_s_per_token = kv_bytes_per_token_shard / attn_byte_rate
        self._causal = not m.encoder_only

        # --- elementwise ops -------------------------------------------------------------
        if eff.elementwise_memory is None:
            self._elementwise_s_per_token = 0.0
        else:
            # FFN width a token passes through: its routed experts' for MoE (none when the
            # MoE kernel is priced whole: its measured time includes the activation)
            if self._moe:
                ffn = 0
            elif m.is_moe:
                ffn = m.experts_per_token * m.expert_intermediate_size
            else:
                ffn = m.intermediate_size
            per_layer = elementwise_bytes_per_token(
                m.hidden_size,
                heads_shard,
                kv_heads_shard,
                m.head_dim,
                ffn / tp,
                m.gated_mlp,
                not m.encoder_only,
                dtype,
            )
            self._elementwise_s_per_token = (
                layers * per_layer / (eff.elementwise_memory * bandwidth)
            )

        self._set_allreduce(cal, gpu, m, tp, layers, dtype)

        # --- fixed overheads ------------------------------------------------------------
        # a MoE layer priced whole runs the router GEMM in place of the FFN's two GEMMs; the
        # expert kernels' floor is part of self._moe
        self._gemms_per_layer = cal.gemms_per_layer - 1 if self._moe else cal.gemms_per_layer
        self._fixed_s = (
            layers
            * (
                self._gemms_per_layer * eff.gemm_floor_seconds
                + eff.attention_floor_seconds
                + cal.elementwise_kernels_per_layer * eff.elementwise_floor_seconds
            )
            + cal.iteration_overhead_seconds
            + (tp - 1) * cal.iteration_overhead_per_extra_gpu_seconds
            + self._allreduce_fixed_s
        )
        self._seq_s = cal.iteration_overhead_per_seq_seconds  # per sequence per iteration

        # Decode step = K(B) + max(a1·x, a2·x + b2·B), x = total context tokens.
        self._dec_a1 = self._attn_flop_s_per_pair  # attention compute per context token
        self._dec_a2 = self._kv_read_s_per_token  # KV read per context token
        self._dec_b2 = self._kv_read_s_per_token  # KV write of the B new tokens

        # Memos of the hot queries (the simulator asks the same ones again and again: every
        # scheduler invocation prices each waiting prompt on each instance). The formulas are
        # pure, so a memo returns the very float the formula would.
        self._prefill_one: dict[int, float] = {}  # num_tokens -> prefill_time(num_tokens)
        self._fixed_by_batch: dict[int, float] = {}  # batch size -> _decode_fixed(batch size)
        self._steps_memo: dict[tuple[int, int, int], float] = {}  # decode_steps_time

    def _set_allreduce(
        self, cal: Calibration, gpu: GPUSpec, m: ModelSpec, tp: int, layers: int, dtype: int
    ) -> None:
        """The tensor-parallel all-reduce constants (the ring; or the custom all-reduce, priced
        per iteration by ``allreduce_time``)."""
        # custom all-reduce (opt-in): priced per iteration by allreduce_time; else the ring
        self._custom_ar = bool(cal.custom_allreduce) and tp > 1 and gpu.has_nvlink
        self._ar_bytes_per_token = m.hidden_size * dtype
        self._ar_layers = layers
        if tp > 1:
            link = cal.links["nvlink" if gpu.has_nvlink else "pcie"]
            self._ar_latency_s = link.latency_seconds
            self._ar_s_per_byte = 1.0 / (link.efficiency * gpu.interconnect_bandwidth)
            ring_bytes_per_token = 2.0 * (tp - 1) / tp * m.hidden_size * dtype
            self._allreduce_fixed_s = 2 * layers * link.latency_seconds
            self._allreduce_s_per_token = (
                2 * layers * ring_bytes_per_token / (link.efficiency * gpu.interconnect_bandwidth)
            )
            if self._custom_ar:
                self._allreduce_fixed_s = 0.0
                self._allreduce_s_per_token = 0.0
        else:
            self._allreduce_fixed_s = 0.0
            self._allreduce_s_per_token = 0.0

    # ------------------------------------------------------------------------------------
    @classmethod
    def from_names(
        cls,
        gpu: str,
        model: str,
        tp: int = 1,
        fraction: float = 1.0,
        calibration: Calibration | None = None,
        memory_utilization: float = 0.9,
        *,
        precision: str = "bf16",
        kv_precision: str | None = None,
        bandwidth_share: float | None = None,
    ) -> LatencyModel:
        """Build from catalog names (see ``envs.sim.hardware.catalog``).

        :param gpu: GPU catalog name, e.g. ``"a100-80g"``.
        :param model: model catalog name, e.g. ``"llama3.1-70b"``.
        :param tp: tensor-parallel degree.
        :param fraction: GPU share in (0, 1].
        :param calibration: fitted constants; ``None`` for the packaged fit.
        :param memory_utilization: usable share of memory in (0, 1].
        :param precision: weight precision, one of ``PRECISIONS``.
        :param kv_precision: KV-cache precision; ``None`` = ``precision``.
        :param bandwidth_share: share of HBM bandwidth; ``None`` = ``fraction``.
        """
        return cls(
            get_gpu(gpu),
            get_model(model),
            tp,
            fraction,
            calibration,
            memory_utilization,
            precision=precision,
            kv_precision=kv_precision,
            bandwidth_share=bandwidth_share,
        )

    def __repr__(self) -> str:
        extra = ""
        if self.precision != "bf16":
            extra += f", precision={self.precision!r}"
        if self.kv_precision != self.precision:
            extra += f", kv_precision={self.kv_precision!r}"
        if self.bandwidth_share != self.fraction:
            extra += f", bandwidth_share={self.bandwidth_share:g}"
        return (
            f"LatencyModel(gpu={self.gpu.name!r}, model={self.model.name!r}, tp={self.tp}, "
            f"fraction={self.fraction:g}{extra})"
        )


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--memory-utilization", type=float, default=0.9)
    parser.add_argument("--precision", choices=PRECISIONS, default="bf16", help="weights")
    parser.add_argument(
        "--kv-precision", choices=PRECISIONS, help="KV cache (default: same as --precision)"
    )
    parser.add_argument("--prefill", type=int, help="prefill this many tokens (one sequence)")
    parser.add_argument("--decode-batch", type=int, help="decode batch size, sequences")
    parser.add_argument(
        "--context", type=int, default=0, help="total context tokens of the decode batch"
    )
    args = parser.parse_args(argv)
    m = LatencyModel.from_names(
        args.gpu,
        args.model,
        args.tp,
        args.fraction,
        memory_utilization=args.memory_utilization,
        precision=args.precision,
        kv_precision=args.kv_precision,
    )
    print(m)
    print(f"  weights              {m.weight_bytes / 2**30:10.2f} GiB")
    print(f"  usable memory        {m.usable_memory_bytes / 2**30:10.2f} GiB")
    print(f"  KV bytes per token   {m.kv_bytes_per_token:10d} bytes")
    print(f"  KV capacity          {m.kv_capacity_tokens:10d} tokens")
    print(f"  max batch tokens     {m.max_batch_tokens:10d} tokens")
    if args.prefill:
        t = m.prefill_time(args.prefill)
        print(
            f"  prefill {args.prefill} tokens  {t * 1e3:10.3f} ms "
            f"({args.prefill / t:,.0f} tokens/s)"
        )
    if args.decode_batch:
        t = m.decode_iteration_time(args.decode_batch, args.context)
        print(
            f"  decode step B={args.decode_batch} context={args.context}  {t * 1e3:10.3f} ms "
            f"({args.decode_batch / t:,.0f} tokens/s)"
        )


__all__ = [
    "BANDWIDTH_SATURATION_SHARE",
    "CALIBRATION_YAML",
    "Calibration",
    "FamilyEfficiency",
    "InsufficientMemoryError",
    "LatencyModel",
    "LinkEfficiency",
    "UnsupportedPrecisionError",
    "contended_bandwidth_shares",
    "elementwise_bytes_per_token",
    "load_calibration",
]


if __name__ == "__main__":
    _main()
