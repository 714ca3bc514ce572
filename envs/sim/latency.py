"""Roofline latency model of one serving instance (GPU type, TP degree, GPU fraction, model).

Every iteration of the engine (one prefill batch, or one decode step of a batch) is priced as
the sum of five parts, each per tensor-parallel shard (HexAgent §4.2 uses a roofline model; the
efficiency constants are fitted in ``envs/configs/latency_calibration.yaml`` by
``envs/sim/calibrate.py``):

1. **Linear layers (GEMMs)**: ``max(FLOPs / (eff_gemm_compute · peak · f),
   weight bytes / (eff_gemm_memory · bandwidth · f))``. FLOPs = 2 · tokens · params touched per
   token (+ the LM head for one token per sequence); bytes = the weights the batch touches. A MoE
   layer reads only the experts the batch activates: of E experts with k per token, a batch of B
   tokens touches ``E · (1 − (1 − k/E)^B)`` in expectation.
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
5. **Fixed overheads**: a per-layer kernel floor (launch latency of the layer's kernels) and a
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

    python -m envs.sim.latency --gpu a100-80g --model llama3.1-70b --tp 4 \\
        --prefill 2048 --decode-batch 32 --context 65536
    python -m envs.sim.latency --gpu h100-sxm --model qwen3-32b --precision fp8 --prefill 8192
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.sim.catalog import (
    CONFIG_DIR,
    PRECISIONS,
    GPUSpec,
    ModelSpec,
    get_gpu,
    get_model,
    load_gpus,
)

CALIBRATION_YAML = CONFIG_DIR / "latency_calibration.yaml"


class InsufficientMemoryError(ValueError):
    """The model's weights do not fit in the instance's usable memory."""


class UnsupportedPrecisionError(ValueError):
    """A precision the GPU's tensor cores do not run (fp8 on Ampere or Volta)."""


@dataclass(frozen=True)
class FamilyEfficiency:
    """Fitted efficiencies of one GPU family (fractions of the datasheet peak).

    :param gemm_compute: achieved / peak FLOP/s of compute-bound linear layers.
    :param gemm_memory: achieved / peak bytes/s of weight-read-bound linear layers.
    :param attention_compute: achieved / peak FLOP/s of prefill (flash) attention on long
        sequences (the asymptote; see ``attention_half_tokens``).
    :param attention_memory: achieved / peak bytes/s of decode attention (KV reads).
    :param gemm_floor_seconds: fixed time of one GEMM kernel (launch + tail), seconds.
    :param attention_floor_seconds: fixed time of one attention kernel, seconds.
    :param attention_half_tokens: sequence length at which prefill attention reaches half its
        asymptotic efficiency: a prefill of s new tokens runs at ``attention_compute · s / (s +
        attention_half_tokens)``, i.e. its time is the causal pairs plus
        ``attention_half_tokens / 2`` pairs per new token at the asymptotic rate (FlashAttention
        kernels are far from peak on short sequences). 0: a constant efficiency.
    :param gemm_compute_fp8: achieved / FP8 peak FLOP/s of compute-bound fp8-weight linear
        layers; ``None`` to use ``gemm_compute``.
    :param gemm_memory_fp8: achieved / peak bytes/s of weight-read-bound fp8 linear layers;
        ``None`` to use ``gemm_memory``. (fp8 GEMM kernels share ``gemm_floor_seconds``.)
    :param elementwise_memory: achieved / peak bytes/s of the per-token elementwise kernels
        (norms, residual add, rotary embedding, activation; :func:`elementwise_bytes_per_token`);
        ``None``: those kernels are not priced.
    """

    gemm_compute: float
    gemm_memory: float
    attention_compute: float
    attention_memory: float
    gemm_floor_seconds: float = 0.0
    attention_floor_seconds: float = 0.0
    attention_half_tokens: float = 0.0
    gemm_compute_fp8: float | None = None
    gemm_memory_fp8: float | None = None
    elementwise_memory: float | None = None

    def gemm_efficiency(self, precision: str) -> tuple[float, float]:
        """Linear-layer efficiencies for weights stored in ``precision``.

        :param precision: one of ``PRECISIONS``.
        :return: (compute efficiency, memory efficiency); the fp8 values fall back to the bf16
            ones where the family has no FP8 fit.
        """
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
        if precision == "bf16":
            return self.gemm_compute, self.gemm_memory
        compute, memory = self.gemm_compute_fp8, self.gemm_memory_fp8
        return (
            self.gemm_compute if compute is None else compute,
            self.gemm_memory if memory is None else memory,
        )


@dataclass(frozen=True)
class LinkEfficiency:
    """Fitted ring all-reduce parameters of one interconnect kind.

    :param efficiency: achieved / datasheet bandwidth of the ring's data movement.
    :param latency_seconds: fixed time of one all-reduce, seconds.
    """

    efficiency: float
    latency_seconds: float


@dataclass(frozen=True)
class Calibration:
    """All fitted constants of the latency model.

    :param families: GPU family -> efficiencies; must contain ``"default"``, used for families
        without measurements.
    :param links: ``"nvlink"`` and ``"pcie"`` -> all-reduce parameters.
    :param iteration_overhead_seconds: framework time per engine iteration, seconds.
    :param iteration_overhead_per_extra_gpu_seconds: added per iteration for each TP shard beyond
        the first (driver-to-worker synchronisation), seconds.
    :param iteration_overhead_per_seq_seconds: added per iteration for each sequence in it
        (scheduling, sampling and detokenisation on the CPU), seconds.
    :param moe_kernel_efficiency: achieved / dense-GEMM efficiency of the grouped MoE expert
        kernels (weight reads and compute of routed experts), in (0, 1.5].
    :param gemms_per_layer: GEMM kernels per transformer layer (QKV, output, gate/up, down).
    :param target_heldout_median_error: the committed accuracy target of the held-out check.
    """

    families: Mapping[str, FamilyEfficiency]
    links: Mapping[str, LinkEfficiency]
    iteration_overhead_seconds: float
    iteration_overhead_per_extra_gpu_seconds: float = 0.0
    iteration_overhead_per_seq_seconds: float = 0.0
    moe_kernel_efficiency: float = 1.0
    gemms_per_layer: int = 4
    target_heldout_median_error: float = 0.15
    source: str = field(default="", compare=False)

    def family(self, name: str) -> FamilyEfficiency:
        """Efficiencies of GPU family ``name``, falling back to ``"default"``.

        :param name: a ``GPUSpec.family``.
        """
        return self.families.get(name, self.families["default"])

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> Calibration:
        """Build from the YAML structure of ``latency_calibration.yaml``.

        :param data: parsed YAML mapping.
        :param source: where it came from, for error messages.
        """
        try:
            families = {
                k: FamilyEfficiency(**{n: float(x) for n, x in v.items()})
                for k, v in data["families"].items()
            }
            links = {
                k: LinkEfficiency(**{n: float(x) for n, x in v.items()})
                for k, v in data["links"].items()
            }
            overhead = float(data["iteration_overhead_seconds"])
        except (KeyError, TypeError) as exc:
            raise ValueError(
                f"{source}: malformed latency calibration ({exc!r}); expected keys "
                "families, links, iteration_overhead_seconds"
            ) from exc
        if "default" not in families:
            raise ValueError(
                f"{source}: calibration families must include 'default', got {sorted(families)}"
            )
        for kind in ("nvlink", "pcie"):
            if kind not in links:
                raise ValueError(
                    f"{source}: calibration links must include {kind!r}, got {sorted(links)}"
                )
        efficiencies = (
            "gemm_compute",
            "gemm_memory",
            "attention_compute",
            "attention_memory",
            "gemm_compute_fp8",
            "gemm_memory_fp8",
            "elementwise_memory",
        )
        for fam, eff in families.items():
            for name in efficiencies:
                value = getattr(eff, name)
                if value is not None and not 0 < value <= 1.5:
                    raise ValueError(
                        f"{source}: family {fam!r} {name}={value}; expected an "
                        "efficiency in (0, 1.5]"
                    )
        per_gpu = float(data.get("iteration_overhead_per_extra_gpu_seconds", 0.0))
        per_seq = float(data.get("iteration_overhead_per_seq_seconds", 0.0))
        moe_eff = float(data.get("moe_kernel_efficiency", 1.0))
        if overhead < 0 or per_gpu < 0 or per_seq < 0:
            raise ValueError(
                f"{source}: overheads must be >= 0 seconds, got "
                f"iteration_overhead_seconds={overhead}, "
                f"iteration_overhead_per_extra_gpu_seconds={per_gpu}, "
                f"iteration_overhead_per_seq_seconds={per_seq}"
            )
        if not 0 < moe_eff <= 1.5:
            raise ValueError(f"{source}: moe_kernel_efficiency={moe_eff}; expected (0, 1.5]")
        return cls(
            families=families,
            links=links,
            iteration_overhead_seconds=overhead,
            iteration_overhead_per_extra_gpu_seconds=per_gpu,
            iteration_overhead_per_seq_seconds=per_seq,
            moe_kernel_efficiency=moe_eff,
            gemms_per_layer=int(data.get("gemms_per_layer", 4)),
            target_heldout_median_error=float(data.get("target_heldout_median_error", 0.15)),
            source=source,
        )


def elementwise_bytes_per_token(
    hidden: float,
    heads_shard: float,
    kv_heads_shard: float,
    head_dim: float,
    ffn_shard: float,
    gated: bool,
    rotary: bool,
    dtype_bytes: int,
) -> float:
    """Bytes one token moves through one layer's elementwise kernels on one TP shard, as vLLM
    runs a Llama-style layer: two fused residual-add + RMSNorm kernels (each reads the hidden
    state and the residual and writes both: 4 · hidden), rotary embedding in place on the
    shard's q and k (read and write), and the activation (SiLU-and-mul reads gate and up and
    writes one: 3 · ffn; GELU reads and writes one: 2 · ffn).

    :param hidden: model width, elements (norms and residual are not sharded).
    :param heads_shard: query heads on the shard.
    :param kv_heads_shard: KV heads on the shard.
    :param head_dim: elements per head.
    :param ffn_shard: FFN width the token passes through on the shard, elements (for MoE the
        routed experts' widths summed).
    :param gated: SwiGLU-style FFN (else GELU).
    :param rotary: rotary position embedding applied to q and k.
    :param dtype_bytes: bytes per activation element.
    """
    elements = 8.0 * hidden + (3.0 if gated else 2.0) * ffn_shard
    if rotary:
        elements += 2.0 * (heads_shard + kv_heads_shard) * head_dim
    return elements * dtype_bytes


def _element_bytes(precision: str, bf16_bytes: int) -> int:
    """Bytes per weight or KV element: the model's bf16 baseline, or 1 for fp8."""
    return bf16_bytes if precision == "bf16" else 1


@functools.lru_cache(maxsize=4)
def _load_calibration(path: str) -> Calibration:
    with open(path) as fh:
        return Calibration.from_dict(yaml.safe_load(fh), source=path)


def load_calibration(path: str | Path | None = None) -> Calibration:
    """Read a calibration YAML (the packaged fitted one by default).

    :param path: YAML file; ``None`` for ``envs/configs/latency_calibration.yaml``.
    """
    return _load_calibration(str(CALIBRATION_YAML if path is None else path))


#: Share of a GPU's SMs whose memory traffic alone saturates its HBM bandwidth (see
#: :func:`contended_bandwidth_shares`). 1.0 would make bandwidth proportional to SMs (no gain from
#: idle neighbours, no contention: the model before MPS partitions).
BANDWIDTH_SATURATION_SHARE = 0.5


def contended_bandwidth_shares(
    fractions: Mapping[Any, float],
    active: set[Any] | frozenset[Any],
    saturation: float = BANDWIDTH_SATURATION_SHARE,
    *,
    check_sum: bool = True,
) -> dict[Any, float]:
    """HBM bandwidth shares of the busy MPS partitions of one GPU.

    NVIDIA MPS limits a client's SMs (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, the share of
    threads/SMs it may use) and its device memory (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``); nothing
    partitions DRAM bandwidth or the L2 cache, which all clients of the GPU use concurrently
    (NVIDIA, *Multi-Process Service*, "Appendix: Environment Variables"; NVIDIA's developer
    forum threads "MPS interference problem" and "Interference between MPS Client Process"
    report 50%/50% clients slowing 10–40% when both run, and a 10% client slowing ~1.5× next to a
    busy 90% client while running ~4x, not 9x, slower than the 90% one alone). Scepsy §6 uses
    MPS "with static limits on SMs and memory". The rule here:

    * an instance's SMs can pull at most ``min(1, f / saturation)`` of the GPU's bandwidth: a
      partition with ``f ≥ saturation`` can saturate HBM alone (memory-bound kernels reach the
      HBM peak well before every SM is busy), a smaller one proportionally less;
    * the busy (``active``) instances' demands are served in full when they sum to at most the
      GPU's bandwidth, and scaled down in proportion otherwise (the memory system arbitrates
      among the outstanding requests, which scale with the issuing SMs);
    * an idle instance takes nothing. L2 contention is folded into this DRAM-bandwidth share.

    Consequences: a whole GPU (f = 1) alone gets exactly 1; an instance next to idle neighbours
    gets more than its f; when a GPU is fully packed (Σ f = 1) with every share ≤ saturation and
    all are busy, each gets exactly its f (the static-partition model). ``saturation = 1``
    reproduces that static model in every case.

    :param fractions: SM share of every instance on the GPU (key → f in (0, 1]; Σ f ≤ 1).
    :param active: keys of the instances running an iteration now.
    :param saturation: share of SMs that saturates HBM alone, in (0, 1].
    :param check_sum: raise when the shares sum above 1 (off for a GPU whose retired instance
        still drains next to its successor).
    :return: key → bandwidth share in (0, 1] for every active key.
    :raises ValueError: on shares outside (0, 1], a sum above 1 or an unknown active key.
    """
    if not 0 < saturation <= 1:
        raise ValueError(f"saturation={saturation!r}; expected (0, 1]")
    total_f = 0.0
    for key, f in fractions.items():
        if not 0 < f <= 1:
            raise ValueError(f"{key!r}: share {f!r} outside (0, 1]")
        total_f += f
    if check_sum and total_f > 1 + 1e-9:
        raise ValueError(f"GPU shares sum to {total_f:g} > 1 (an MPS GPU cannot be oversubscribed)")
    unknown = set(active) - set(fractions)
    if unknown:
        raise ValueError(f"active instances {sorted(map(repr, unknown))} are not on this GPU")
    demand = {k: min(1.0, fractions[k] / saturation) for k in active}
    total = sum(demand.values())
    if total <= 1.0:
        return demand
    return {k: d / total for k, d in demand.items()}


#: Entries of :meth:`LatencyModel.decode_steps_time`'s memo before it is cleared (~20 MB).
_STEPS_MEMO_SIZE = 1 << 17


class LatencyModel:
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
            raise ValueError(
                f"bandwidth_share={bandwidth_share!r}; expected a share of HBM in (0, 1]"
            )
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
        weight_elem = _element_bytes(precision, dtype)  # linear-layer weights
        kv_elem = _element_bytes(kv_precision, dtype)
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

        # --- linear layers --------------------------------------------------------------
        # seconds per token of compute-bound GEMM work on one shard
        dense_params_layer = m.attention_params_per_layer + m.dense_ffn_params_per_layer
        routed_params_token = m.experts_per_token * m.expert_params
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
        self._num_experts = m.num_experts
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
            # FFN width a token passes through: its routed experts' for MoE
            ffn = (
                m.experts_per_token * m.expert_intermediate_size
                if m.is_moe
                else m.intermediate_size
            )
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

        # --- all-reduce -----------------------------------------------------------------
        if tp > 1:
            link = cal.links["nvlink" if gpu.has_nvlink else "pcie"]
            ring_bytes_per_token = 2.0 * (tp - 1) / tp * m.hidden_size * dtype
            self._allreduce_fixed_s = 2 * layers * link.latency_seconds
            self._allreduce_s_per_token = (
                2 * layers * ring_bytes_per_token / (link.efficiency * gpu.interconnect_bandwidth)
            )
        else:
            self._allreduce_fixed_s = 0.0
            self._allreduce_s_per_token = 0.0

        # --- fixed overheads ------------------------------------------------------------
        self._fixed_s = (
            layers * (cal.gemms_per_layer * eff.gemm_floor_seconds + eff.attention_floor_seconds)
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
        """Build from catalog names (see ``envs.sim.catalog``).

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

    # ------------------------------------------------------------------------------------
    def _gemm_time(self, num_tokens: int, num_seqs: int) -> float:
        """Seconds of the linear layers for ``num_tokens`` tokens, logits for ``num_seqs``."""
        compute = num_tokens * self._gemm_s_per_token + num_seqs * self._lm_head_s_per_seq
        read = self._dense_weight_read_s
        if self._num_experts:
            touched = self._num_experts * (1.0 - self._expert_miss**num_tokens)
            read += touched * self._expert_read_s
        return compute if compute > read else read

    def experts_touched(self, num_tokens: int) -> float:
        """Expected distinct experts per MoE layer touched by a batch of ``num_tokens`` tokens.

        :param num_tokens: tokens in the batch.
        :return: ``E · (1 − (1 − k/E)^num_tokens)``; 0 for dense models.
        """
        if not self._num_experts:
            return 0.0
        return self._num_experts * (1.0 - self._expert_miss**num_tokens)

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
        )

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
        return prefill + decode - self._fixed_s - separate_gemms + joint_gemm

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


if __name__ == "__main__":
    _main()
