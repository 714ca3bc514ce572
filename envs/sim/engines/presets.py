"""Serving-engine presets for monolithic instances: ``vllm``, ``sglang``, ``trtllm``.

A preset is a documented set of scheduling behaviours of one engine in its default
configuration (``envs/configs/engines.yaml`` cites where each comes from) plus the system-level
constants fitted for it on measured deployments (``python -m
envs.sim.calibration.calibrate_serving``):

- ``scheduling``: how prompts and decodes share iterations (see
  :class:`envs.sim.engines.instances.MonolithicInstance`);
- ``token_budget`` and ``max_batch``: tokens per iteration and running requests, possibly by
  GPU memory (the engines pick larger defaults on larger GPUs);
- ``kv_policy``: ``reserve`` (final footprint reserved at admission) or ``paged`` (on-demand KV,
  recompute preemption);
- ``memory_utilization``: share of GPU memory the engine manages;
- ``prefix_caching``: whether the engine reuses the KV of a prompt prefix it has already
  computed, by default (vLLM V1's automatic prefix caching, SGLang's radix cache, TensorRT-LLM's
  KV block reuse); read by :func:`envs.sim.calibration.benchmark_client.closed_loop`;
- ``overlap_scheduling``: the engine prepares iteration n+1 on the CPU while the GPU runs
  iteration n (TensorRT-LLM's overlap scheduler, SGLang's overlap ("zero-overhead") scheduler,
  both on by default); the latency model's per-iteration CPU framework overheads
  (``iteration_overhead_seconds`` and its per-TP-worker and per-sequence terms, all fitted on
  vLLM V0, which did not overlap) are then hidden behind the GPU's work and priced at 0 (see
  :meth:`EnginePreset.calibration`);
- ``custom_allreduce``: the engine all-reduces tensor-parallel activations with its custom
  one-stage / two-stage NVLink kernel (vLLM's ``custom_all_reduce.cuh``, which SGLang reuses;
  TensorRT-LLM's ONESHOT / TWOSHOT kernels) rather than a ring: sets
  ``Calibration.custom_allreduce`` (:meth:`envs.sim.latency.model.LatencyModel.allreduce_time`);
- ``calibrated``: overrides of :class:`envs.sim.latency.model.Calibration` fields (per-iteration
  framework overhead, its growth with the TP degree and batch, MoE kernel efficiency), plus
  ``frontend_seconds``: the API server's per-request path (HTTP, tokenisation, hand-off to the
  engine loop) that a client sees in its TTFT, used by
  :func:`envs.sim.calibration.benchmark_client.closed_loop`.

Example::

    from envs.sim.engines.presets import get_engine
    vllm = get_engine("vllm")
    vllm.token_budget_for(get_gpu("h100-sxm"))   # 8192
    Simulation(cluster, workload, engine="vllm")
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from envs.sim.core.protocol import DEFAULT_TOKEN_BUDGET, KV_POLICIES, SCHEDULING_MODES
from envs.sim.hardware.catalog import CONFIG_DIR, GPUSpec, UnknownNameError
from envs.sim.latency.efficiency import Calibration

ENGINES_YAML = CONFIG_DIR / "engines.yaml"
#: Fitted constants of a preset that are not latency-model (Calibration) fields.
ENGINE_CONSTANTS = ("frontend_seconds",)
_GIB = 2**30
#: Calibration fields that price the engine's per-iteration CPU work (scheduling, input
#: preparation, sampling bookkeeping, driver-to-worker broadcast), hidden by overlap scheduling.
CPU_OVERHEAD_FIELDS = (
    "iteration_overhead_seconds",
    "iteration_overhead_per_extra_gpu_seconds",
    "iteration_overhead_per_seq_seconds",
)


def _tiers(value: Any, field: str, where: str) -> tuple[tuple[float, int], ...]:
    """``8192`` or ``[[0, 2048], [70, 8192]]`` -> ((0.0, 2048), (70.0, 8192))."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: {field}={value!r}; expected a positive integer or tiers")
    tiers: tuple[tuple[float, int], ...]
    if isinstance(value, int):
        tiers = ((0.0, value),)
    elif isinstance(value, list) and value:
        try:
            tiers = tuple((float(gib), int(n)) for gib, n in value)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{where}: {field}={value!r}; expected a list of [min GPU memory GiB, value] pairs"
            ) from exc
    else:
        raise ValueError(f"{where}: {field}={value!r}; expected a positive integer or tiers")
    if tiers[0][0] != 0 or any(b[0] <= a[0] for a, b in zip(tiers, tiers[1:], strict=False)):
        raise ValueError(
            f"{where}: {field} tiers {value!r} must start at 0 GiB and increase strictly"
        )
    if any(n < 1 for _, n in tiers):
        raise ValueError(f"{where}: {field} values must be >= 1, got {value!r}")
    return tiers


@dataclass(frozen=True)
class EnginePreset:
    """One serving engine's scheduling behaviour and fitted constants.

    :param name: catalog key (``vllm``, ``sglang``, ``trtllm``).
    :param description: what the preset models and where each default comes from.
    :param scheduling: one of ``SCHEDULING_MODES``.
    :param token_budget: (min GPU memory GiB, tokens per iteration) tiers.
    :param max_batch: (min GPU memory GiB, running requests) tiers.
    :param kv_policy: ``reserve`` or ``paged``.
    :param memory_utilization: share of GPU memory the engine manages, in (0, 1].
    :param small_tier_families: GPU families that always take the first tier.
    :param calibrated: :class:`Calibration` fields this engine overrides.
    :param prefix_caching: the engine reuses cached prompt prefixes by default.
    :param overlap_scheduling: the engine overlaps its CPU scheduling work with the GPU's
        (:data:`CPU_OVERHEAD_FIELDS` are priced at 0).
    :param custom_allreduce: the engine's TP all-reduce is its custom one/two-stage kernel.
    """

    name: str
    description: str
    scheduling: str
    token_budget: tuple[tuple[float, int], ...]
    max_batch: tuple[tuple[float, int], ...]
    kv_policy: str
    memory_utilization: float
    small_tier_families: tuple[str, ...] = ()
    calibrated: Mapping[str, float] = dataclasses.field(default_factory=dict)
    prefix_caching: bool = False
    overlap_scheduling: bool = False
    custom_allreduce: bool = False

    def _tier(self, tiers: tuple[tuple[float, int], ...], gpu: GPUSpec) -> int:
        if gpu.family in self.small_tier_families:
            return tiers[0][1]
        gib = gpu.memory_bytes / _GIB
        return [n for floor, n in tiers if gib >= floor][-1]

    def token_budget_for(self, gpu: GPUSpec) -> int:
        """Tokens per iteration on ``gpu`` (the engine's default for its memory)."""
        return self._tier(self.token_budget, gpu)

    def max_batch_for(self, gpu: GPUSpec) -> int:
        """Running-request cap on ``gpu``."""
        return self._tier(self.max_batch, gpu)

    def calibration(self, base: Calibration) -> Calibration:
        """``base`` with this engine's fitted latency constants substituted; with
        ``overlap_scheduling``, :data:`CPU_OVERHEAD_FIELDS` set to 0 (the CPU prepares the next
        iteration while the GPU runs this one, so a step costs max(GPU, CPU) time; the GPU part
        of every benchmarked deployment's iterations is longer than these ~1.3 ms, so the max is
        the GPU time the latency model gives without them). A value in ``calibrated`` wins.
        Fields the calibration variant sets for this engine (``base.engines``, e.g. its own
        MoE kernel efficiencies) come first; the preset's settings and fitted block win."""
        fields: dict[str, Any] = {
            k: v for k, v in self.calibrated.items() if k not in ENGINE_CONSTANTS
        }
        variant_fields = (base.engines or {}).get(self.name, {})
        if self.overlap_scheduling:
            fields = {**dict.fromkeys(CPU_OVERHEAD_FIELDS, 0.0), **fields}
        if self.custom_allreduce:
            fields = {"custom_allreduce": True, **fields}
        fields = {**variant_fields, **fields}
        return dataclasses.replace(base, **fields) if fields else base

    @property
    def frontend_seconds(self) -> float:
        """Fitted client-to-engine seconds per request (0 when not fitted)."""
        return float(self.calibrated.get("frontend_seconds", 0.0))


def resolve_token_budget(
    engine: EnginePreset | None, gpu: GPUSpec, override: int | None = None
) -> int:
    """Tokens per iteration of an instance on ``gpu``: ``override`` if given, else the engine's
    default for the GPU, else :data:`DEFAULT_TOKEN_BUDGET`."""
    if override is not None:
        return override
    return DEFAULT_TOKEN_BUDGET if engine is None else engine.token_budget_for(gpu)


def _preset_from_entry(name: str, entry: Mapping[str, Any], source: str) -> EnginePreset:
    where = f"{source}: engine {name!r}"
    known = {
        "description",
        "scheduling",
        "token_budget",
        "max_batch",
        "kv_policy",
        "memory_utilization",
        "small_tier_families",
        "calibrated",
        "prefix_caching",
        "overlap_scheduling",
        "custom_allreduce",
    }
    unknown = set(entry) - known
    if unknown:
        raise ValueError(f"{where} has unknown fields {sorted(unknown)}; expected {sorted(known)}")
    for key in ("scheduling", "token_budget", "max_batch", "kv_policy"):
        if key not in entry:
            raise ValueError(f"{where} is missing required field {key!r}")
    if entry["scheduling"] not in SCHEDULING_MODES:
        raise ValueError(
            f"{where}: scheduling={entry['scheduling']!r}; expected one of {SCHEDULING_MODES}"
        )
    if entry["kv_policy"] not in KV_POLICIES:
        raise ValueError(
            f"{where}: kv_policy={entry['kv_policy']!r}; expected one of {KV_POLICIES}"
        )
    mem = float(entry.get("memory_utilization", 0.9))
    if not 0 < mem <= 1:
        raise ValueError(f"{where}: memory_utilization={mem}; expected a share in (0, 1]")
    prefix_caching = entry.get("prefix_caching", False)
    if not isinstance(prefix_caching, bool):
        raise ValueError(f"{where}: prefix_caching={prefix_caching!r}; expected true or false")
    overlap = entry.get("overlap_scheduling", False)
    custom_ar = entry.get("custom_allreduce", False)
    for key, flag in (("overlap_scheduling", overlap), ("custom_allreduce", custom_ar)):
        if not isinstance(flag, bool):
            raise ValueError(f"{where}: {key}={flag!r}; expected true or false")
    calibrated = dict(entry.get("calibrated") or {})
    fields = {f.name for f in dataclasses.fields(Calibration)} | set(ENGINE_CONSTANTS)
    bad = set(calibrated) - fields
    if bad:
        raise ValueError(
            f"{where}: calibrated has unknown constants {sorted(bad)}; expected Calibration "
            f"fields {sorted(fields - {'families', 'links', 'source'})}"
        )
    for key, value in calibrated.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{where}: calibrated.{key}={value!r}; expected a number >= 0")
    return EnginePreset(
        name=name,
        description=" ".join(str(entry.get("description", "")).split()),
        scheduling=entry["scheduling"],
        token_budget=_tiers(entry["token_budget"], "token_budget", where),
        max_batch=_tiers(entry["max_batch"], "max_batch", where),
        kv_policy=entry["kv_policy"],
        memory_utilization=mem,
        small_tier_families=tuple(entry.get("small_tier_families") or ()),
        calibrated={k: float(v) for k, v in calibrated.items()},
        prefix_caching=prefix_caching,
        overlap_scheduling=overlap,
        custom_allreduce=custom_ar,
    )


@functools.lru_cache(maxsize=4)
def _load(path: str) -> dict[str, EnginePreset]:
    with open(path) as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of engine name -> fields")
    return {name: _preset_from_entry(name, entry, path) for name, entry in data.items()}


def load_engines(path: str | Path | None = None) -> dict[str, EnginePreset]:
    """All engine presets of ``path`` (the packaged ``engines.yaml`` by default)."""
    return dict(_load(str(ENGINES_YAML if path is None else path)))


def engine_names() -> list[str]:
    """Sorted names of the packaged engine presets."""
    return sorted(_load(str(ENGINES_YAML)))


def get_engine(engine: str | EnginePreset) -> EnginePreset:
    """Look up an engine preset by name (a preset passes through).

    :raises UnknownNameError: naming the known engines.
    """
    if isinstance(engine, EnginePreset):
        return engine
    presets = _load(str(ENGINES_YAML))
    if engine not in presets:
        raise UnknownNameError(
            f"unknown engine {engine!r}; known engines: {', '.join(sorted(presets))}"
        )
    return presets[engine]


__all__ = [
    "ENGINES_YAML",
    "CPU_OVERHEAD_FIELDS",
    "EnginePreset",
    "engine_names",
    "get_engine",
    "load_engines",
    "resolve_token_budget",
]
