"""Hardware and model catalog: GPU types and transformer architectures for the latency model.

The packaged catalog lives in ``envs/configs/gpus.yaml`` and ``envs/configs/models.yaml``; every
number there cites its datasheet or Hugging Face ``config.json``. Users can add or override
entries with their own YAML files of the same shape (``load_gpus(extra_path)``,
``load_models(extra_path)``, or the ``extra_path`` argument of ``get_gpu`` / ``get_model``).

Example::

    from envs.sim.hardware.catalog import get_gpu, get_model
    get_gpu("h100-sxm").hbm_bandwidth      # 3.35e12 bytes/s
    get_gpu("a100-80g").supports("fp8")    # False: Ampere has no FP8 tensor cores
    get_model("llama3.1-70b").num_kv_heads  # 8
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
GPUS_YAML = CONFIG_DIR / "gpus.yaml"
MODELS_YAML = CONFIG_DIR / "models.yaml"
# Numeric precisions of weights / KV cache that the latency model prices
# (envs/sim/latency/model.py).
PRECISIONS = ("bf16", "fp8")


class UnknownNameError(KeyError, ValueError):
    """A GPU or model name that is not in the catalog; the message lists the known names."""

    def __str__(self) -> str:  # KeyError would repr() the message, with quotes
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class GPUSpec:
    """One GPU type.

    :param name: catalog key, e.g. ``"a100-80g"``.
    :param peak_flops: peak dense bf16/fp16 tensor-core throughput, FLOP/s.
    :param hbm_bandwidth: device-memory bandwidth, bytes/s.
    :param memory_bytes: device memory, bytes.
    :param nvlink_bandwidth: NVLink bandwidth per GPU (datasheet, bidirectional), bytes/s;
        0 if none.
    :param pcie_bandwidth: PCIe bandwidth per GPU (datasheet, bidirectional), bytes/s.
    :param family: architecture group used to look up calibrated efficiencies.
    :param peak_flops_fp8: peak dense FP8 tensor-core throughput, FLOP/s; 0 when the GPU has no
        FP8 tensor cores (Ampere, Volta).
    """

    name: str
    peak_flops: float
    hbm_bandwidth: float
    memory_bytes: float
    nvlink_bandwidth: float
    pcie_bandwidth: float
    family: str = "default"
    peak_flops_fp8: float = 0.0

    def supports(self, precision: str) -> bool:
        """Whether the tensor cores run ``precision`` natively.

        :param precision: one of ``PRECISIONS``.
        :raises ValueError: if ``precision`` is not one of ``PRECISIONS``.
        """
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
        return precision == "bf16" or self.peak_flops_fp8 > 0

    @property
    def has_nvlink(self) -> bool:
        """Whether tensor-parallel collectives can use NVLink instead of PCIe."""
        return self.nvlink_bandwidth > 0

    @property
    def interconnect_bandwidth(self) -> float:
        """Bandwidth (bytes/s) tensor-parallel all-reduces ride on: NVLink if present, else PCIe."""
        return self.nvlink_bandwidth if self.has_nvlink else self.pcie_bandwidth


@dataclass(frozen=True)
class ModelSpec:
    """One transformer architecture.

    :param name: catalog key, e.g. ``"llama3.1-70b"``.
    :param num_layers: transformer blocks.
    :param hidden_size: model width, elements.
    :param num_heads: query heads.
    :param num_kv_heads: key/value heads (GQA); equals ``num_heads`` for MHA.
    :param head_dim: elements per head.
    :param intermediate_size: dense FFN width, elements.
    :param vocab_size: vocabulary entries.
    :param total_params: all parameters (sets weight memory).
    :param active_params: parameters used per token (MoE); equals ``total_params`` when dense.
    :param num_experts: routed experts per MoE layer; 0 for dense models.
    :param experts_per_token: experts each token is routed to; 0 for dense models.
    :param expert_intermediate_size: FFN width of one expert, elements; 0 for dense models.
    :param dtype_bytes: bytes per weight / KV element at the bf16 baseline (2 for bf16/fp16);
        ``LatencyModel``'s ``precision`` / ``kv_precision`` override it for fp8.
    :param encoder_only: prefill only (embedding model, cross-encoder); no decode, no KV cache.
    :param max_context_tokens: longest supported sequence, tokens.
    :param gated_mlp: SwiGLU FFN with three matrices (else GELU with two).
    :param tie_word_embeddings: output head shares the input embedding.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    total_params: float
    active_params: float
    num_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    dtype_bytes: int = 2
    encoder_only: bool = False
    max_context_tokens: int = 4096
    gated_mlp: bool = True
    tie_word_embeddings: bool = False

    @property
    def is_moe(self) -> bool:
        """Whether the FFN is a routed mixture of experts."""
        return self.num_experts > 0

    @property
    def attention_params_per_layer(self) -> int:
        """Q, K, V and output projection weights of one layer (elements)."""
        q_width = self.num_heads * self.head_dim
        kv_width = self.num_kv_heads * self.head_dim
        return self.hidden_size * (2 * q_width + 2 * kv_width)

    @property
    def expert_params(self) -> int:
        """Weights of one routed expert (elements); 0 for dense models."""
        matrices = 3 if self.gated_mlp else 2
        return matrices * self.hidden_size * self.expert_intermediate_size

    @property
    def dense_ffn_params_per_layer(self) -> int:
        """FFN weights of one dense layer (elements); for MoE the router only."""
        if self.is_moe:
            return self.hidden_size * self.num_experts
        matrices = 3 if self.gated_mlp else 2
        return matrices * self.hidden_size * self.intermediate_size

    @property
    def embedding_params(self) -> int:
        """Input embedding plus the separate LM head unless tied (elements).

        These are the weights FP8 checkpoints keep in bf16; the rest of ``total_params`` is (up to
        norms and biases) linear-layer weights.
        """
        matrices = 1 if self.tie_word_embeddings else 2
        return matrices * self.vocab_size * self.hidden_size

    @property
    def architecture_params(self) -> float:
        """Parameter count implied by the architecture fields (to cross-check ``total_params``)."""
        per_layer = self.attention_params_per_layer + self.dense_ffn_params_per_layer
        per_layer += self.num_experts * self.expert_params
        return self.num_layers * per_layer + self.embedding_params


def _require(entry: Mapping[str, Any], key: str, name: str, source: str) -> Any:
    if key not in entry:
        raise ValueError(f"{source}: entry {name!r} is missing required field {key!r}")
    return entry[key]


def _gpu_from_entry(name: str, entry: Mapping[str, Any], source: str) -> GPUSpec:
    known = {f.name for f in fields(GPUSpec)}
    unknown = set(entry) - known
    if unknown:
        raise ValueError(
            f"{source}: GPU {name!r} has unknown fields {sorted(unknown)}; "
            f"expected a subset of {sorted(known - {'name'})}"
        )
    nvlink = entry.get("nvlink_bandwidth") or 0.0
    spec = GPUSpec(
        name=name,
        # float() because YAML 1.1 reads exponent literals without a sign ("312.0e12") as strings
        peak_flops=float(_require(entry, "peak_flops", name, source)),
        hbm_bandwidth=float(_require(entry, "hbm_bandwidth", name, source)),
        memory_bytes=float(_require(entry, "memory_bytes", name, source)),
        nvlink_bandwidth=float(nvlink),
        pcie_bandwidth=float(_require(entry, "pcie_bandwidth", name, source)),
        family=str(entry.get("family", "default")),
        peak_flops_fp8=float(entry.get("peak_flops_fp8", 0.0)),
    )
    for field in ("peak_flops", "hbm_bandwidth", "memory_bytes", "pcie_bandwidth"):
        if getattr(spec, field) <= 0:
            raise ValueError(
                f"{source}: GPU {name!r} has {field}={getattr(spec, field)!r}; "
                "expected a positive number"
            )
    if "peak_flops_fp8" in entry and spec.peak_flops_fp8 <= 0:
        raise ValueError(
            f"{source}: GPU {name!r} has peak_flops_fp8={spec.peak_flops_fp8!r}; expected a "
            "positive FLOP/s figure, or no peak_flops_fp8 field for a GPU without FP8 tensor cores"
        )
    return spec


def _model_from_entry(name: str, entry: Mapping[str, Any], source: str) -> ModelSpec:
    known = {f.name for f in fields(ModelSpec)}
    unknown = set(entry) - known
    if unknown:
        raise ValueError(
            f"{source}: model {name!r} has unknown fields {sorted(unknown)}; "
            f"expected a subset of {sorted(known - {'name'})}"
        )
    ints = (
        "num_layers",
        "hidden_size",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "intermediate_size",
        "vocab_size",
    )
    values: dict[str, Any] = {k: int(_require(entry, k, name, source)) for k in ints}
    total = float(_require(entry, "total_params", name, source))
    spec = ModelSpec(
        name=name,
        total_params=total,
        active_params=float(entry.get("active_params", total)),
        num_experts=int(entry.get("num_experts", 0)),
        experts_per_token=int(entry.get("experts_per_token", 0)),
        expert_intermediate_size=int(entry.get("expert_intermediate_size", 0)),
        dtype_bytes=int(entry.get("dtype_bytes", 2)),
        encoder_only=bool(entry.get("encoder_only", False)),
        max_context_tokens=int(entry.get("max_context_tokens", 4096)),
        gated_mlp=bool(entry.get("gated_mlp", True)),
        tie_word_embeddings=bool(entry.get("tie_word_embeddings", False)),
        **values,
    )
    for k in (*ints, "dtype_bytes", "max_context_tokens"):
        if getattr(spec, k) <= 0:
            raise ValueError(
                f"{source}: model {name!r} has {k}={getattr(spec, k)!r}; "
                "expected a positive integer"
            )
    if spec.num_heads % spec.num_kv_heads:
        raise ValueError(
            f"{source}: model {name!r} has num_heads={spec.num_heads} not a "
            f"multiple of num_kv_heads={spec.num_kv_heads}"
        )
    if spec.is_moe and not (
        0 < spec.experts_per_token <= spec.num_experts and spec.expert_intermediate_size > 0
    ):
        raise ValueError(
            f"{source}: MoE model {name!r} needs 0 < experts_per_token "
            f"({spec.experts_per_token}) <= num_experts ({spec.num_experts}) and "
            f"expert_intermediate_size > 0 ({spec.expert_intermediate_size})"
        )
    if not 0 < spec.active_params <= spec.total_params:
        raise ValueError(
            f"{source}: model {name!r} has active_params={spec.active_params} "
            f"outside (0, total_params={spec.total_params}]"
        )
    return spec


def _read_yaml(path: Path) -> dict[str, Any]:
    with open(path) as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of name -> fields, got {type(data).__name__}")
    return data


@functools.lru_cache(maxsize=8)
def _load_gpus(extra_path: str | None) -> dict[str, GPUSpec]:
    entries = {name: (entry, str(GPUS_YAML)) for name, entry in _read_yaml(GPUS_YAML).items()}
    if extra_path is not None:
        entries.update({n: (e, extra_path) for n, e in _read_yaml(Path(extra_path)).items()})
    return {name: _gpu_from_entry(name, e, src) for name, (e, src) in entries.items()}


@functools.lru_cache(maxsize=8)
def _load_models(extra_path: str | None) -> dict[str, ModelSpec]:
    entries = {name: (entry, str(MODELS_YAML)) for name, entry in _read_yaml(MODELS_YAML).items()}
    if extra_path is not None:
        entries.update({n: (e, extra_path) for n, e in _read_yaml(Path(extra_path)).items()})
    return {name: _model_from_entry(name, e, src) for name, (e, src) in entries.items()}


def load_gpus(extra_path: str | Path | None = None) -> dict[str, GPUSpec]:
    """All GPU types: the packaged catalog, plus/overridden by ``extra_path`` (same YAML shape).

    :param extra_path: optional user YAML file of GPU entries.
    :return: a fresh dict name -> GPUSpec.
    """
    return dict(_load_gpus(None if extra_path is None else str(extra_path)))


def load_models(extra_path: str | Path | None = None) -> dict[str, ModelSpec]:
    """All models: the packaged catalog, plus/overridden by ``extra_path`` (same YAML shape).

    :param extra_path: optional user YAML file of model entries.
    :return: a fresh dict name -> ModelSpec.
    """
    return dict(_load_models(None if extra_path is None else str(extra_path)))


def get_gpu(name: str, extra_path: str | Path | None = None) -> GPUSpec:
    """Look up a GPU type by catalog name.

    :param name: e.g. ``"h100-sxm"``.
    :param extra_path: optional user YAML file extending the catalog.
    :raises UnknownNameError: if ``name`` is not in the catalog (the message lists known names).
    """
    gpus = _load_gpus(None if extra_path is None else str(extra_path))
    if name not in gpus:
        raise UnknownNameError(f"unknown GPU {name!r}; known GPUs: {', '.join(sorted(gpus))}")
    return gpus[name]


def get_model(name: str, extra_path: str | Path | None = None) -> ModelSpec:
    """Look up a model architecture by catalog name.

    :param name: e.g. ``"llama3.1-70b"``.
    :param extra_path: optional user YAML file extending the catalog.
    :raises UnknownNameError: if ``name`` is not in the catalog (the message lists known names).
    """
    models = _load_models(None if extra_path is None else str(extra_path))
    if name not in models:
        raise UnknownNameError(f"unknown model {name!r}; known models: {', '.join(sorted(models))}")
    return models[name]


def gpu_names(extra_path: str | Path | None = None) -> list[str]:
    """Sorted GPU catalog names.

    :param extra_path: optional user YAML file extending the catalog.
    """
    return sorted(_load_gpus(None if extra_path is None else str(extra_path)))


def model_names(extra_path: str | Path | None = None) -> list[str]:
    """Sorted model catalog names.

    :param extra_path: optional user YAML file extending the catalog.
    """
    return sorted(_load_models(None if extra_path is None else str(extra_path)))
