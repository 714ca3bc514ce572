"""The routed-expert part of a mixture-of-experts (MoE) layer, priced from its physics.

In one engine iteration of ``T`` tokens, a MoE layer with ``E`` routed experts and top-``k``
routing runs, on every GPU of the instance:

1. **Dispatch**: each token's hidden state is gathered once per chosen expert (``T · k`` rows of
   ``hidden`` elements) and, after the experts, the ``k`` outputs are scattered back and summed
   (``combine``): ``2 · T · k · hidden`` activation elements cross HBM. Under expert parallelism
   with ``ep`` > 1 over data-parallel attention, the same rows also cross the interconnect (an
   all-to-all each way, ``(ep − 1) / ep`` of them leave the GPU); with the experts sharded over
   the tensor-parallel group (attention TP, the deployments this project replays) every rank
   already holds every token and the combine is the layer's all-reduce, priced with attention.
2. **Expert weight reads**: a batch of ``T`` tokens touches, in expectation over uniform
   routing, ``E · (1 − (1 − k/E)^T)`` distinct experts (``k`` at ``T = 1``, all ``E`` as ``T``
   grows); each touched expert's weights (gate, up, down: ``3 · hidden · expert_ffn`` elements)
   are read once. Per GPU the bytes divide by the expert-parallel degree (a GPU holds ``E / ep``
   experts) and by the tensor-parallel degree within an expert (each holds ``1 / tp`` of every
   expert's columns).
3. **Grouped GEMMs**: ``2 · T · k · 3 · hidden · expert_ffn`` FLOPs, divided the same way.

The kernel time is the (smooth) roofline of the compute and byte bounds at **the MoE kernel's
own efficiencies**, plus a fixed time per layer (routing top-k, the token-to-expert alignment
sort, two grouped-GEMM launches, activation, the combine sum)::

    t_layer(T) = floor + (C^p + R^p)^(1/p)       (max(C, R) when p is None)
    C = 2 · T·k/ep · 3·hidden·ffn/tp / (compute · peak)
    R = (touched/ep · 3·hidden·ffn/tp · weight bytes + 2 · T·k/ep · hidden · 2) / (memory · bw)

Grouped MoE GEMMs run well below dense GEMMs: every expert sees only ``T·k/touched`` rows and a
narrow shard (``ffn / tp`` columns), so the tiles are small and the tensor cores idle. On
AIConfigurator's measured vLLM ``fused_moe`` tables (H100/H200) the roofline of the routed part
at the dense GEMM efficiencies is a median 0.67 of the measured kernel (10th-90th percentile
0.30-1.01, lowest at large T where the grouped GEMMs are compute-bound), which is what the
fitted ``compute``, ``memory`` and ``floor_seconds`` of :class:`MoEKernelEfficiency` absorb
(``python -m envs.sim.calibration.moe_kernels``, fitted only on kernel tables and validated
leave one model shape out; ``docs/fidelity/moe.md``).

Sources (read, not copied):

- LLMServingSim (Cho et al., "LLMServingSim: A HW/SW Co-Simulation Infrastructure for LLM
  Inference Serving at Scale", IISWC 2024; its 2.0 profiler): profiles the whole MoE block as a
  function of (tokens, activated experts) rather than as a dense FFN, i.e. the cost depends on
  how many distinct experts a batch touches.
- AIConfigurator (ai-dynamo/aiconfigurator, ``aic-core/src/aiconfigurator_core/systems/data/
  <gpu>/moe/<engine>/<version>/moe_perf.parquet`` and ``aic-core/rust/aiconfigurator-core/src/
  operators/moe.rs``): keeps measured MoE kernel tables over (tokens, hidden, expert FFN, top-k,
  experts, MoE TP, MoE EP, routing distribution) and, where it has none, prices the kernel at an
  achieved fraction of its speed-of-light roofline (``MOE_QUANT_UTIL_LEVEL``: 0.53 for bf16,
  0.40 for fp8 weights and activations). Those levels are not used here: on the ANL end-to-end
  runs of Mixtral-8x7B on A100 (held out of every fit) they price decode 30.6 % too slow
  (median), against 3.6 % with the experts kept in the dense roofline, so a GPU family without
  measured MoE tables keeps its routed experts in the dense roofline (:func:`kernel_efficiency`
  returns None for it).
- BLIS (inference-sim/inference-sim, the MoE-aware roofline of its latency model, pull request
  561 and its discussion #559): touched-expert weight reads, and a roofline MoE term that measured
  kernels run slower than (about 0.6x in its kernel study), matching the tables above.

Not modelled: expert load imbalance (routing is taken as uniform: real routers are skewed, which
touches fewer experts but loads the busiest one more; AIConfigurator's power-law tables measure
5–30 % slower kernels at the same T) and shared experts (none of the catalog's MoE models has
one; a shared expert is a dense FFN and belongs to the dense part).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from envs.sim.hardware.catalog import PRECISIONS


def experts_touched(num_tokens: float, num_experts: int, top_k: int) -> float:
    """Expected distinct experts a batch of ``num_tokens`` tokens routes to, each token picking
    ``top_k`` of ``num_experts`` uniformly: ``E · (1 − (1 − k/E)^T)``.

    :param num_tokens: tokens in the batch (>= 0).
    :param num_experts: routed experts ``E`` of the layer (>= 1).
    :param top_k: experts per token ``k``, in [1, E].
    :return: ``k`` at ``T = 1``, tending to ``E`` as ``T`` grows; 0 for an empty batch.
    """
    if num_tokens < 0:
        raise ValueError(f"num_tokens={num_tokens}; expected >= 0")
    if num_experts < 1 or not 1 <= top_k <= num_experts:
        raise ValueError(
            f"num_experts={num_experts}, top_k={top_k}; expected 1 <= top_k <= num_experts"
        )
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


@dataclass(frozen=True)
class MoEKernelEfficiency:
    """Fitted efficiencies of the routed-expert kernels of one GPU family and weight precision.

    :param compute: achieved / peak FLOP/s of the grouped expert GEMMs (the peak of the weight
        precision: bf16, or fp8 for fp8 weights), in (0, 1.5].
    :param memory: achieved / peak HBM bytes/s of the expert weight reads and the dispatch /
        combine activation traffic, in (0, 1.5].
    :param floor_seconds: fixed time of one MoE layer's routed part (routing, alignment sort,
        kernel launches and tails), seconds, >= 0.
    """

    compute: float
    memory: float
    floor_seconds: float

    def __post_init__(self) -> None:
        for name in ("compute", "memory"):
            value = getattr(self, name)
            if not 0 < value <= 1.5:
                raise ValueError(f"MoE kernel {name}={value}; expected an efficiency in (0, 1.5]")
        if not self.floor_seconds >= 0:
            raise ValueError(f"MoE kernel floor_seconds={self.floor_seconds}; expected >= 0")


def parse_moe_kernels(
    data: Mapping[str, Mapping[str, Mapping[str, float]]], source: str = "<dict>"
) -> dict[str, dict[str, MoEKernelEfficiency]]:
    """Read a calibration YAML's ``moe_kernels`` block: GPU family -> weight precision ->
    ``{compute, memory, floor_seconds}``, for the GPU families that have measured MoE kernel
    tables (the others keep their routed experts in the dense roofline).

    :param data: the parsed block.
    :param source: where it came from, for error messages.
    """
    out: dict[str, dict[str, MoEKernelEfficiency]] = {}
    try:
        for family, by_precision in data.items():
            out[family] = {}
            for precision, values in by_precision.items():
                if precision not in PRECISIONS:
                    raise ValueError(
                        f"{source}: moe_kernels.{family}.{precision}: unknown precision; "
                        f"expected one of {PRECISIONS}"
                    )
                out[family][precision] = MoEKernelEfficiency(
                    **{k: float(v) for k, v in values.items()}
                )
    except (TypeError, AttributeError) as exc:
        raise ValueError(
            f"{source}: malformed moe_kernels ({exc!r}); expected family -> precision -> "
            "{compute, memory, floor_seconds}"
        ) from exc
    return out


def kernel_efficiency(
    kernels: Mapping[str, Mapping[str, MoEKernelEfficiency]], family: str, precision: str
) -> MoEKernelEfficiency | None:
    """The MoE kernel efficiencies of ``family`` at weight ``precision``; None where ``family``
    has no measured MoE tables (its routed experts stay in the dense roofline).

    :param kernels: :func:`parse_moe_kernels` output.
    :param family: a ``GPUSpec.family``.
    :param precision: weight precision, one of ``PRECISIONS``.
    """
    return kernels.get(family, {}).get(precision)


class MoELayerCost:
    """Seconds of the routed-expert part of every MoE layer of a model for an iteration of
    ``num_tokens`` tokens on one GPU of an instance (see the module docstring).

    :param num_layers: MoE layers.
    :param hidden_size: model width, elements.
    :param expert_ffn: FFN width of one expert, elements.
    :param num_experts: routed experts per layer ``E``.
    :param top_k: experts per token ``k``.
    :param weight_bytes: bytes per expert weight element (2 bf16, 1 fp8).
    :param activation_bytes: bytes per activation element (2: bf16).
    :param peak_flops: the GPU's (share of) peak FLOP/s at the weight precision.
    :param hbm_bandwidth: the GPU's (share of) HBM bytes/s.
    :param efficiency: the kernel's fitted efficiencies.
    :param tp: tensor-parallel degree within an expert (its columns split ``tp`` ways).
    :param ep: expert-parallel degree (each GPU holds ``E / ep`` experts).
    :param roofline_exponent: ``p`` of the smooth roofline; ``None``: ``max(C, R)``.
    :param link_bandwidth: bytes/s of the interconnect for the dispatch / combine all-to-all
        when ``ep`` > 1 over data-parallel attention; ``None``: tokens are replicated over the
        expert-parallel group (attention TP) and nothing crosses it here.
    """

    def __init__(
        self,
        *,
        num_layers: int,
        hidden_size: int,
        expert_ffn: int,
        num_experts: int,
        top_k: int,
        weight_bytes: float,
        activation_bytes: float,
        peak_flops: float,
        hbm_bandwidth: float,
        efficiency: MoEKernelEfficiency,
        tp: int = 1,
        ep: int = 1,
        roofline_exponent: float | None = None,
        link_bandwidth: float | None = None,
    ) -> None:
        if not 1 <= top_k <= num_experts:
            raise ValueError(
                f"num_experts={num_experts}, top_k={top_k}; expected 1 <= top_k <= num_experts"
            )
        for name, value in (("tp", tp), ("ep", ep), ("num_layers", num_layers)):
            if value < 1:
                raise ValueError(f"{name}={value}; expected >= 1")
        if num_experts % ep:
            raise ValueError(f"ep={ep} does not divide num_experts={num_experts}")
        if roofline_exponent is not None and not roofline_exponent >= 1:
            raise ValueError(f"roofline_exponent={roofline_exponent}; expected >= 1 or None")
        self.num_experts = num_experts
        self.top_k = top_k
        self.tp = tp
        self.ep = ep
        self.efficiency = efficiency
        expert_elems = 3.0 * hidden_size * expert_ffn / tp  # gate, up, down on one GPU
        flop_rate = efficiency.compute * peak_flops
        byte_rate = efficiency.memory * hbm_bandwidth
        # per token-expert assignment on this GPU: GEMM FLOPs, dispatch + combine bytes
        self._flop_s_per_assignment = num_layers * 2.0 * expert_elems / flop_rate
        self._act_s_per_assignment = num_layers * 2.0 * hidden_size * activation_bytes / byte_rate
        self._read_s_per_expert = num_layers * expert_elems * weight_bytes / byte_rate
        self._floor_s = num_layers * efficiency.floor_seconds
        self._a2a_s_per_token = 0.0
        if link_bandwidth is not None and ep > 1:
            # dispatch + combine: each of T·k rows leaves the GPU with probability (ep-1)/ep
            self._a2a_s_per_token = (
                num_layers
                * 2.0
                * top_k
                * hidden_size
                * activation_bytes
                * (ep - 1)
                / ep
                / ep
                / link_bandwidth
            )
        self._p = roofline_exponent
        self._miss = 1.0 - top_k / num_experts

    def experts_touched(self, num_tokens: float) -> float:
        """Expected distinct experts (of all ``E``) the batch touches per layer."""
        return self.num_experts * (1.0 - self._miss**num_tokens)

    def weight_read_seconds(self, num_tokens: float) -> float:
        """Seconds of this GPU's expert weight reads over all layers (the byte bound without
        the dispatch / combine traffic)."""
        return self.experts_touched(num_tokens) / self.ep * self._read_s_per_expert

    def bounds(self, num_tokens: float, touched: float | None = None) -> tuple[float, float]:
        """The roofline bounds of the routed experts over all layers, seconds: (compute, bytes),
        each at the kernel's efficiencies, without the floor and the all-to-all.

        :param num_tokens: tokens in the iteration (>= 0).
        :param touched: distinct experts the batch touches per layer (of all ``E``); ``None``:
            the expectation under uniform routing (:meth:`experts_touched`). The kernel fit
            passes the count of the measured routing.
        """
        if touched is None:
            touched = self.experts_touched(num_tokens)
        assignments = num_tokens * self.top_k / self.ep
        compute = assignments * self._flop_s_per_assignment
        read = (
            touched / self.ep * self._read_s_per_expert + assignments * self._act_s_per_assignment
        )
        return compute, read

    def time(self, num_tokens: float) -> float:
        """Seconds of the routed experts of every MoE layer for ``num_tokens`` tokens; 0 for
        none.

        :param num_tokens: tokens in the iteration (all sequences together, >= 0).
        """
        if num_tokens <= 0:
            if num_tokens < 0:
                raise ValueError(f"num_tokens={num_tokens}; expected >= 0")
            return 0.0
        assignments = num_tokens * self.top_k / self.ep
        compute = assignments * self._flop_s_per_assignment
        read = (
            self.num_experts * (1.0 - self._miss**num_tokens) / self.ep * self._read_s_per_expert
            + assignments * self._act_s_per_assignment
        )
        p = self._p
        kernel = (
            (compute if compute > read else read)
            if p is None
            else ((compute**p + read**p) ** (1.0 / p))
        )
        return self._floor_s + kernel + num_tokens * self._a2a_s_per_token
