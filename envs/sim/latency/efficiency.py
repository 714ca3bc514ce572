"""The latency model's calibrated constants (:class:`Calibration`): per GPU family the GEMM
efficiencies and floor (bf16, FP8), elementwise and attention efficiencies, per link the
all-reduce efficiency and latency, the framework overhead; read from
``envs/configs/latency_calibration.yaml`` (written by ``python -m envs.sim.calibration.calibrate``).

**Per-op calibration variants** (:data:`CALIBRATION_VARIANTS`): ``"roofline"`` (HexAgent
§4.2's roofline: linear layers at the hard ``max(compute, read)``, no elementwise kernel floor;
``latency_calibration.yaml``) and ``"smooth-roofline"`` (ours: the smooth GEMM roofline
``(C^p + R^p)^(1/p)`` and a per-kernel elementwise floor, every constant refitted by the same
code; MoE layers priced from their physics by :mod:`envs.sim.latency.moe` (``moe_kernels``);
per-engine fields (``engines``); ``latency_calibration_smooth_roofline.yaml``). **The default is
``"smooth-roofline"``**, the variant with the better held-out errors (``docs/fidelity/serving.md``).
:func:`load_calibration` picks the variant named by its argument, else by the environment variable
:data:`CALIBRATION_VARIANT_ENV` (``SERVEGYM_LATENCY_CALIBRATION``), else the default; every
latency model built without explicit constants (the deployment replay, the fidelity
benchmark's workers, a ``LatencyCache()``) follows it. Every ``-v0`` env names
:data:`ROOFLINE_CALIBRATION_VARIANT` explicitly (its ``latency_calibration`` argument), so its
pinned results do not move with the default or the environment variable.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.sim.hardware.catalog import (
    CONFIG_DIR,
    PRECISIONS,
)
from envs.sim.latency.moe import MoEKernelEfficiency, parse_moe_kernels

CALIBRATION_YAML = CONFIG_DIR / "latency_calibration.yaml"
#: HexAgent §4.2's roofline, the calibration every ``-v0`` env pins.
ROOFLINE_CALIBRATION_VARIANT = "roofline"
#: The per-op calibration variant used when nobody names one (the best held-out errors).
DEFAULT_CALIBRATION_VARIANT = "smooth-roofline"
#: Per-op calibration variant -> its fitted constants (see the module docstring).
CALIBRATION_VARIANTS = {
    ROOFLINE_CALIBRATION_VARIANT: CALIBRATION_YAML,
    "smooth-roofline": CONFIG_DIR / "latency_calibration_smooth_roofline.yaml",
}
#: Environment variable naming the process-wide calibration variant (unset: the default).
CALIBRATION_VARIANT_ENV = "SERVEGYM_LATENCY_CALIBRATION"


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
    :param gemm_roofline_exponent: ``p`` of the smooth roofline of linear layers: their time is
        ``(compute^p + read^p)^(1/p)`` with ``compute`` and ``read`` the two roofline bounds
        (plus ``gemm_floor_seconds`` per kernel). A GEMM near the ridge point (arithmetic
        intensity ≈ peak FLOP/s / bandwidth, m ≈ 150–300 tokens on A100/H100) saturates neither
        the tensor cores nor HBM and runs up to ``2^(1/p)`` times slower than the larger bound;
        far from the ridge the formula tends to the hard ``max``. ``None``: the hard roofline
        ``max(compute, read)`` (``p`` → ∞). Must be >= 1 (``p = 1``: no overlap at all).
    :param elementwise_floor_seconds: fixed time of one elementwise kernel (launch and tail),
        seconds; charged ``Calibration.elementwise_kernels_per_layer`` times per layer.
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
    gemm_roofline_exponent: float | None = None
    elementwise_floor_seconds: float = 0.0

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
        kernels (weight reads and compute of routed experts), in (0, 1.5]; unused when
        ``moe_kernels`` is set.
    :param gemms_per_layer: GEMM kernels per transformer layer (QKV, output, gate/up, down).
    :param elementwise_kernels_per_layer: elementwise kernels per transformer layer as vLLM runs
        a Llama-style layer (two fused residual-add + RMSNorm, rotary embedding, SiLU-and-mul),
        each charged the family's ``elementwise_floor_seconds``.
    :param custom_allreduce: price a tensor-parallel all-reduce as the engines' custom
        all-reduce kernel picks it by size (one-stage or two-stage, see
        :meth:`envs.sim.latency.model.LatencyModel.allreduce_time`) instead of the ring formula; off
        by default (the per-op model of PDCluster keeps the ring). An engine preset turns it on.
    :param moe_kernels: GPU family -> weight precision -> the routed-expert kernel's fitted
        efficiencies (:class:`envs.sim.latency.moe.MoEKernelEfficiency`; a ``default`` family for
        the others). Set: MoE layers are priced from their physics by
        :class:`envs.sim.latency.moe.MoELayerCost` (touched experts' weights at the MoE kernel's own
        efficiencies, dispatch / combine traffic, a per-layer floor). ``None``: the routed experts
        join the dense linear layers' roofline at ``moe_kernel_efficiency`` (the ``roofline``
        variant). These are the kernels of vLLM (and SGLang, which runs the same Triton
        ``fused_moe``).
    :param engines: engine preset name -> the fields of this calibration that the variant sets
        for that engine (:data:`ENGINE_FIELDS`: e.g. the engine's own ``moe_kernels``, or the
        per-worker overhead and custom all-reduce of vLLM V1), substituted by
        :meth:`envs.sim.engines.presets.EnginePreset.calibration` before the preset's own settings.
    :param target_heldout_median_error: the committed accuracy target of the held-out check.
    """

    families: Mapping[str, FamilyEfficiency]
    links: Mapping[str, LinkEfficiency]
    iteration_overhead_seconds: float
    iteration_overhead_per_extra_gpu_seconds: float = 0.0
    iteration_overhead_per_seq_seconds: float = 0.0
    moe_kernel_efficiency: float = 1.0
    gemms_per_layer: int = 4
    elementwise_kernels_per_layer: int = 4
    custom_allreduce: bool = False
    moe_kernels: Mapping[str, Mapping[str, MoEKernelEfficiency]] | None = None
    engines: Mapping[str, Mapping[str, Any]] | None = None
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
        for fam, eff in families.items():
            p = eff.gemm_roofline_exponent
            if p is not None and not p >= 1:
                raise ValueError(
                    f"{source}: family {fam!r} gemm_roofline_exponent={p}; expected >= 1 "
                    "(or leave it out for the hard roofline max(compute, read))"
                )
            if not eff.elementwise_floor_seconds >= 0:
                raise ValueError(
                    f"{source}: family {fam!r} elementwise_floor_seconds="
                    f"{eff.elementwise_floor_seconds}; expected >= 0 seconds"
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
        moe_kernels = data.get("moe_kernels")
        if moe_kernels is not None:
            moe_kernels = parse_moe_kernels(moe_kernels, source)
        engines = data.get("engines")
        if engines is not None:
            engines = {
                name: _engine_fields(fields, f"{source} engines.{name}")
                for name, fields in engines.items()
            }
        return cls(
            families=families,
            links=links,
            iteration_overhead_seconds=overhead,
            iteration_overhead_per_extra_gpu_seconds=per_gpu,
            iteration_overhead_per_seq_seconds=per_seq,
            moe_kernel_efficiency=moe_eff,
            moe_kernels=moe_kernels,
            engines=engines,
            gemms_per_layer=int(data.get("gemms_per_layer", 4)),
            elementwise_kernels_per_layer=int(data.get("elementwise_kernels_per_layer", 4)),
            target_heldout_median_error=float(data.get("target_heldout_median_error", 0.15)),
            source=source,
        )


#: Calibration fields a variant may set per engine preset (its ``engines`` block) and their
#: types.
ENGINE_FIELDS = {
    "iteration_overhead_seconds": float,
    "iteration_overhead_per_extra_gpu_seconds": float,
    "iteration_overhead_per_seq_seconds": float,
    "custom_allreduce": bool,
    "moe_kernels": dict,
}


def _engine_fields(fields: Mapping[str, Any], source: str) -> dict[str, Any]:
    """One engine's entry of a calibration's ``engines`` block, parsed and checked."""
    unknown = sorted(set(fields) - set(ENGINE_FIELDS))
    if unknown:
        raise ValueError(
            f"{source}: unknown fields {unknown}; expected some of {list(ENGINE_FIELDS)}"
        )
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if name == "moe_kernels":
            out[name] = parse_moe_kernels(value, f"{source}.moe_kernels")
        elif ENGINE_FIELDS[name] is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{source}: {name}={value!r}; expected true or false")
            out[name] = value
        else:
            out[name] = float(value)
            if out[name] < 0:
                raise ValueError(f"{source}: {name}={value!r}; expected >= 0 seconds")
    return out


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


def element_bytes(precision: str, bf16_bytes: int) -> int:
    """Bytes per weight or KV element: the model's bf16 baseline, or 1 for fp8."""
    return bf16_bytes if precision == "bf16" else 1


@functools.lru_cache(maxsize=4)
def _load_calibration(path: str) -> Calibration:
    with open(path) as fh:
        return Calibration.from_dict(yaml.safe_load(fh), source=path)


def resolve_calibration_variant(variant: str | None = None) -> str:
    """The per-op calibration variant in force: ``variant`` if given, else
    ``$SERVEGYM_LATENCY_CALIBRATION`` if set and non-empty, else
    :data:`DEFAULT_CALIBRATION_VARIANT`.

    :param variant: one of :data:`CALIBRATION_VARIANTS`, or ``None``.
    :raises ValueError: naming the culprit (argument or environment variable) if unknown.
    """
    where = "calibration variant"
    if variant is None:
        variant = os.environ.get(CALIBRATION_VARIANT_ENV) or DEFAULT_CALIBRATION_VARIANT
        where = f"${CALIBRATION_VARIANT_ENV}"
    if variant not in CALIBRATION_VARIANTS:
        raise ValueError(
            f"{where}={variant!r}: unknown per-op calibration variant; expected one of "
            f"{sorted(CALIBRATION_VARIANTS)}"
        )
    return variant


def load_calibration(path: str | Path | None = None, variant: str | None = None) -> Calibration:
    """Read a calibration YAML: ``path``, else the fitted constants of the per-op calibration
    variant (:func:`resolve_calibration_variant`; ``"roofline"``'s is
    ``envs/configs/latency_calibration.yaml``).

    :param path: YAML file; ``None`` for the variant's.
    :param variant: one of :data:`CALIBRATION_VARIANTS`; ``None`` for the one in force.
    :raises ValueError: if both are given, or the variant is unknown.
    """
    if path is not None:
        if variant is not None:
            raise ValueError(
                f"load_calibration: pass path={path!r} or variant={variant!r}, not both"
            )
        return _load_calibration(str(path))
    return _load_calibration(str(CALIBRATION_VARIANTS[resolve_calibration_variant(variant)]))
