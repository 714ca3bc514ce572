"""Cluster specifications: which instances exist, on which GPUs, and how KV moves between them.

A cluster preset is a YAML file in ``envs/configs/clusters/`` (or any path). Three architectures:

``pd``
    Prefill–decode disaggregated (HexAgent §4.2): a pool of prefill instances and a pool of
    decode instances; KV moves from the prefill to the decode instance over a transfer network.
``monolithic``
    vLLM-style instances that run prefill and decode on one engine (GoodServe §4).
``pool``
    A GPU topology with no instances yet (Scepsy §7.1): an allocation policy creates them.

Tensor-parallel degrees are given per model and GPU type, because the papers change TP with the
model (HexAgent §7.1: Llama-3.1-70B TP4 everywhere; Qwen3-235B-A22B TP8 on A100/H100, TP4 on H200).

A pool entry may set ``precision:`` (weights) and ``kv_precision:`` (KV cache), each ``bf16``
(default) or ``fp8``, e.g. ``{gpu: h100-sxm, count: 2, precision: fp8}``; whether the GPU runs
fp8 is checked when the cluster is loaded.

Loading validates the whole file before anything runs: unknown keys (a misspelt
``kv_transfers`` or ``max_batch_sise`` is an error, not ignored), types (``count: 2.5`` is not
truncated to 2), ranges (finite positive bandwidths, GPU shares in (0, 1], at most
:data:`MAX_INSTANCES` instances), catalog names of GPUs and models, and that every instance's
model fits its GPUs with room for KV cache (:class:`envs.sim.latency.model.LatencyModel` at its
default memory utilisation). Errors are :class:`ClusterConfigError` naming the file, the entry
(``prefill[1]``) and the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.sim.hardware.catalog import PRECISIONS, UnknownNameError, get_gpu, get_model

CLUSTER_DIR = Path(__file__).resolve().parents[2] / "configs" / "clusters"
ARCHITECTURES = ("pd", "monolithic", "pool")
ROLES = ("prefill", "decode", "monolithic")
#: Most instances (or pool GPUs) a cluster may have: 20x GoodServe's largest scale experiment
#: (512 instances, §4.3). The simulator builds a latency model and event state per instance, so a
#: typo such as ``count: 1000000000`` would otherwise hang the load.
MAX_INSTANCES = 10_000
_TOP_KEYS = (
    "name",
    "architecture",
    "source",
    "description",
    "default_model",
    "tensor_parallel",
    "prefill",
    "decode",
    "instances",
    "kv_transfer",
    "topology",
)
_ENTRY_KEYS = (
    "gpu", "count", "tp", "model", "fraction", "max_batch_size", "precision", "kv_precision",
)  # fmt: skip
_KV_KEYS = ("latency_s", "same_class_bandwidth", "cross_class_bandwidth", "pairs")
_PAIR_KEYS = ("a", "b", "bandwidth")
_TOPOLOGY_KEYS = ("gpu", "num_nodes", "gpus_per_node", "nvlink_groups")


class ClusterConfigError(ValueError):
    """A cluster preset or override is malformed or names something unknown."""


@dataclass(frozen=True)
class InstanceSpec:
    """One model instance: a model served on ``tp`` GPUs of one type (or a fraction of one GPU).

    :param index: position in the cluster's instance list (stable id used in plans).
    :param name: readable id, e.g. ``prefill-3-h100-sxm``.
    :param role: ``prefill``, ``decode`` or ``monolithic``.
    :param gpu: catalog GPU type.
    :param model: catalog model name.
    :param tp: tensor-parallel degree (GPUs per instance).
    :param fraction: share of each GPU (1.0 = whole GPUs; Scepsy §5 fractional GPUs).
    :param max_batch_size: cap on concurrently decoding sequences (None = KV capacity only).
    :param precision: weight precision, one of ``PRECISIONS`` (``bf16`` or ``fp8``; see
        ``envs.sim.latency.model``).
    :param kv_precision: KV-cache precision, one of ``PRECISIONS``; None = same as ``precision``.
    :param gpu_ids: the physical GPUs, ``(node, gpu)`` each, its ``tp`` shares sit on (a placed
        allocation fills it); instances naming the same GPU are co-located MPS partitions that
        contend for its HBM bandwidth (:func:`envs.sim.latency.model.contended_bandwidth_shares`).
        Empty (the default): its GPUs are its own, bandwidth scales with ``fraction``.
    """

    index: int
    name: str
    role: str
    gpu: str
    model: str
    tp: int
    fraction: float = 1.0
    max_batch_size: int | None = None
    precision: str = "bf16"
    kv_precision: str | None = None
    gpu_ids: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class KVTransferSpec:
    """The KV transfer network between prefill and decode instances (HexAgent §4.2).

    Transfer time = ``latency_s`` + KV bytes / bandwidth of the (GPU class, GPU class) pair.
    Transfers do not contend with each other (each instance pair has its own link).

    :param latency_s: fixed per-transfer latency in seconds (connection set-up, bootstrap).
    :param same_class_bandwidth: bytes/s between two instances of the same GPU type.
    :param cross_class_bandwidth: bytes/s between instances of different GPU types.
    :param pairs: overrides, ``((gpu_a, gpu_b, bytes/s), ...)``, symmetric.
    """

    latency_s: float = 0.002
    same_class_bandwidth: float = 50e9
    cross_class_bandwidth: float = 12.5e9
    pairs: tuple[tuple[str, str, float], ...] = ()

    def bandwidth(self, gpu_a: str, gpu_b: str) -> float:
        """Effective bytes/s from an instance on ``gpu_a`` to one on ``gpu_b``."""
        for a, b, bw in self.pairs:
            if (a, b) == (gpu_a, gpu_b) or (b, a) == (gpu_a, gpu_b):
                return bw
        return self.same_class_bandwidth if gpu_a == gpu_b else self.cross_class_bandwidth

    def transfer_time(self, num_bytes: float, gpu_a: str, gpu_b: str) -> float:
        """Seconds to move ``num_bytes`` of KV from ``gpu_a`` to ``gpu_b``."""
        return self.latency_s + num_bytes / self.bandwidth(gpu_a, gpu_b)


@dataclass(frozen=True)
class Topology:
    """A GPU pool for allocation (Scepsy §7.1): nodes of GPUs, NVLink groups inside a node.

    :param gpu: catalog GPU type of every GPU.
    :param num_nodes: number of nodes.
    :param gpus_per_node: GPUs in each node.
    :param nvlink_groups: GPU indices (within a node) joined by NVLink, e.g. ``((0, 1), (2, 3))``.
    """

    gpu: str
    num_nodes: int
    gpus_per_node: int
    nvlink_groups: tuple[tuple[int, ...], ...] = ()

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True)
class ClusterSpec:
    """A whole cluster: its instances (or GPU pool), transfer network and provenance.

    :param name: preset name.
    :param architecture: ``pd``, ``monolithic`` or ``pool``.
    :param instances: the instances, indexed by ``InstanceSpec.index``.
    :param kv_transfer: the KV transfer network (used by ``pd``; migration for ``monolithic``).
    :param topology: the GPU pool of a ``pool`` cluster.
    :param source: where the preset comes from (paper section).
    """

    name: str
    architecture: str
    instances: tuple[InstanceSpec, ...]
    kv_transfer: KVTransferSpec = field(default_factory=KVTransferSpec)
    topology: Topology | None = None
    source: str = ""
    description: str = ""

    def by_role(self, role: str) -> tuple[InstanceSpec, ...]:
        """Instances of one role, in index order."""
        return tuple(i for i in self.instances if i.role == role)

    @property
    def models(self) -> tuple[str, ...]:
        """Distinct models served, in first-seen order."""
        return tuple(dict.fromkeys(i.model for i in self.instances))


def cluster_names() -> list[str]:
    """Names of the packaged cluster presets."""
    return sorted(p.stem for p in CLUSTER_DIR.glob("*.yaml"))


def load_cluster(name_or_path: str | Path, model: str | None = None) -> ClusterSpec:
    """Load a cluster preset by name (``hetero-1``) or from a YAML path.

    :param name_or_path: a packaged preset name or a path to a YAML file.
    :param model: model to serve; must be one the preset gives TP degrees for. None = the preset's
        ``default_model``.
    :raises ClusterConfigError: unknown preset, unknown model for the preset, malformed YAML.
    """
    path = Path(name_or_path)
    if not path.suffix:
        path = CLUSTER_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise ClusterConfigError(
                f"unknown cluster preset {str(name_or_path)!r}; known presets: {cluster_names()}"
            )
    elif not path.exists():
        raise ClusterConfigError(f"cluster file {str(path)!r} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterConfigError(f"{path}: cannot read the cluster file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ClusterConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ClusterConfigError(f"{path}: expected a mapping at the top level, got {data!r}")
    return cluster_from_dict(data, model=model, source_path=str(path))


def _require(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise ClusterConfigError(f"{where}: missing required key {key!r}")
    return data[key]


def _mapping(value: Any, where: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ClusterConfigError(f"{where}: expected {what} (a mapping), got {value!r}")
    return value


def _list(value: Any, where: str, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ClusterConfigError(f"{where}: expected {what} (a list), got {value!r}")
    return value


def _known_keys(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise ClusterConfigError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"expected only {list(allowed)}"
        )


def _int(value: Any, where: str, key: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` if it is an integer in range (``bool`` and ``2.5`` are rejected, not cast)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ClusterConfigError(f"{where}: {key} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ClusterConfigError(f"{where}: {key} must be at most {maximum}, got {value!r}")
    return value


def _real(
    value: Any, where: str, key: str, *, positive: bool, at_most: float | None = None
) -> float:
    """``value`` as a float if it is a finite number > 0 (``positive``) or >= 0."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > 0 if positive else value >= 0)
    if ok and at_most is not None:
        ok = value <= at_most
    if not ok:
        bound = "> 0" if positive else ">= 0"
        bound += f" and <= {at_most:g}" if at_most is not None else ""
        raise ClusterConfigError(f"{where}: {key} must be a finite number {bound}, got {value!r}")
    return float(value)


def _catalog_name(value: Any, where: str, key: str, lookup: Any, what: str) -> str:
    """``value`` if it names an entry of the catalog that ``lookup`` reads (``get_gpu``,
    ``get_model``); else a :class:`ClusterConfigError` naming ``where`` and ``key``."""
    if not isinstance(value, str):
        raise ClusterConfigError(f"{where}: {key} must be a {what} catalog name, got {value!r}")
    try:
        lookup(value)
    except UnknownNameError as exc:
        raise ClusterConfigError(f"{where}: {exc}") from exc
    return value


def _gpu_name(value: Any, where: str) -> str:
    return _catalog_name(value, where, "gpu", get_gpu, "GPU")


def _model_name(value: Any, where: str) -> str:
    return _catalog_name(value, where, "model", get_model, "model")


def _check_fits(spec: InstanceSpec, where: str) -> None:
    """The instance's model fits its GPUs with room for KV cache, at the default memory
    utilisation (an engine preset may use less; the simulator checks again with it)."""
    from envs.sim.latency.model import (
        LatencyModel,  # latency builds on the catalog, not on clusters
    )

    try:
        lat = LatencyModel(
            get_gpu(spec.gpu),
            get_model(spec.model),
            spec.tp,
            spec.fraction,
            precision=spec.precision,
            kv_precision=spec.kv_precision,
        )
    except ValueError as exc:
        raise ClusterConfigError(f"{where}: {exc}") from exc
    if not lat.model.encoder_only and lat.kv_capacity_tokens < 1:
        raise ClusterConfigError(
            f"{where}: {spec.model} on {spec.tp}x {spec.gpu} (fraction {spec.fraction:g}) leaves "
            "no memory for KV cache (0 tokens); use a larger tp, fraction or GPU"
        )


def _tp_tables(value: Any, where: str) -> dict[str, dict[str, int]]:
    """``tensor_parallel``: model -> {gpu: tp}, every name in the catalog."""
    where = f"{where}: tensor_parallel"
    tables: dict[str, dict[str, int]] = {}
    for model, table in _mapping(value or {}, where, "model -> {gpu: tp}").items():
        at = f"{where}[{model!r}]"
        _model_name(model, at)
        tables[model] = {
            _gpu_name(gpu, at): _int(tp, f"{at}[{gpu!r}]", "tp")
            for gpu, tp in _mapping(table, at, "gpu -> tp").items()
        }
    return tables


def _pool_instances(
    entries: Any,
    role: str,
    model: str,
    tp_table: dict[str, int],
    start: int,
    where: str,
) -> list[InstanceSpec]:
    out: list[InstanceSpec] = []
    for k, entry in enumerate(_list(entries, where, "a list of {gpu: ..., count: ...} entries")):
        at = f"{where}[{k}]"
        entry = _mapping(entry, at, "an instance entry {gpu: ..., count: ...}")
        _known_keys(entry, _ENTRY_KEYS, at)
        gpu = _gpu_name(_require(entry, "gpu", at), at)
        count = _int(entry.get("count", 1), at, "count", maximum=MAX_INSTANCES)
        if start + len(out) + count > MAX_INSTANCES:
            raise ClusterConfigError(
                f"{at}: count {count} makes more than {MAX_INSTANCES} instances in the cluster"
            )
        entry_model = _model_name(entry.get("model", model), at)
        tp = entry.get("tp", tp_table.get(gpu))
        if tp is None:
            raise ClusterConfigError(
                f"{at}: no tensor-parallel degree for model {model!r} on GPU {gpu!r}; "
                f"give 'tp' or add it to tensor_parallel[{model!r}] (has {sorted(tp_table)})"
            )
        tp = _int(tp, at, "tp")
        fraction = _real(entry.get("fraction", 1.0), at, "fraction", positive=True, at_most=1.0)
        max_batch = entry.get("max_batch_size")
        if max_batch is not None:
            max_batch = _int(max_batch, at, "max_batch_size")
        precision = entry.get("precision", "bf16")
        kv_precision = entry.get("kv_precision")  # None: same as precision
        for key, value, allowed in (
            ("precision", precision, PRECISIONS),
            ("kv_precision", kv_precision, (*PRECISIONS, None)),
        ):
            if value not in allowed:
                raise ClusterConfigError(f"{at}: {key} {value!r} is not one of {PRECISIONS}")
        for _ in range(count):
            idx = start + len(out)
            out.append(
                InstanceSpec(
                    index=idx,
                    name=f"{role}-{idx}-{gpu}",
                    role=role,
                    gpu=gpu,
                    model=entry_model,
                    tp=tp,
                    fraction=fraction,
                    max_batch_size=max_batch,
                    precision=precision,
                    kv_precision=kv_precision,
                )
            )
        _check_fits(out[-1], at)
    return out


def _kv_transfer(value: Any, where: str) -> KVTransferSpec:
    where = f"{where}: kv_transfer"
    kv = _mapping(value or {}, where, "the KV transfer network")
    _known_keys(kv, _KV_KEYS, where)
    pairs = []
    for k, pair in enumerate(_list(kv.get("pairs") or [], f"{where}: pairs", "{a, b, bandwidth}")):
        at = f"{where}: pairs[{k}]"
        pair = _mapping(pair, at, "{a: gpu, b: gpu, bandwidth: bytes/s}")
        _known_keys(pair, _PAIR_KEYS, at)
        pairs.append(
            (
                _gpu_name(_require(pair, "a", at), at),
                _gpu_name(_require(pair, "b", at), at),
                _real(_require(pair, "bandwidth", at), at, "bandwidth", positive=True),
            )
        )
    default = KVTransferSpec()
    return KVTransferSpec(
        latency_s=_real(kv.get("latency_s", default.latency_s), where, "latency_s", positive=False),
        same_class_bandwidth=_real(
            kv.get("same_class_bandwidth", default.same_class_bandwidth),
            where,
            "same_class_bandwidth",
            positive=True,
        ),
        cross_class_bandwidth=_real(
            kv.get("cross_class_bandwidth", default.cross_class_bandwidth),
            where,
            "cross_class_bandwidth",
            positive=True,
        ),
        pairs=tuple(pairs),
    )


def _topology(value: Any, where: str) -> Topology:
    where = f"{where}: topology"
    t = _mapping(value, where, "{gpu, num_nodes, gpus_per_node, nvlink_groups}")
    _known_keys(t, _TOPOLOGY_KEYS, where)
    per_node = _int(_require(t, "gpus_per_node", where), where, "gpus_per_node")
    nodes = _int(_require(t, "num_nodes", where), where, "num_nodes")
    if nodes * per_node > MAX_INSTANCES:
        raise ClusterConfigError(
            f"{where}: {nodes} x {per_node} GPUs is more than {MAX_INSTANCES} GPUs"
        )
    groups: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for k, group in enumerate(_list(t.get("nvlink_groups") or [], where, "nvlink_groups")):
        at = f"{where}: nvlink_groups[{k}]"
        members = tuple(
            _int(g, at, "GPU index", minimum=0, maximum=per_node - 1)
            for g in _list(group, at, "a list of GPU indices within a node")
        )
        if seen & set(members) or len(set(members)) != len(members):
            raise ClusterConfigError(f"{at}: a GPU is listed in more than one place: {members}")
        seen.update(members)
        groups.append(members)
    return Topology(
        gpu=_gpu_name(_require(t, "gpu", where), where),
        num_nodes=nodes,
        gpus_per_node=per_node,
        nvlink_groups=tuple(groups),
    )


def cluster_from_dict(
    data: Mapping[str, Any], model: str | None = None, source_path: str = "<dict>"
) -> ClusterSpec:
    """Build a :class:`ClusterSpec` from a parsed preset (see ``envs/configs/clusters/``).

    :param data: the parsed preset.
    :param model: model to serve (None: the preset's ``default_model``).
    :param source_path: file name used in error messages.
    :raises ClusterConfigError: naming the file, entry and key at fault (see the module docstring).
    """
    where = source_path
    data = _mapping(data, where, "a cluster preset")
    _known_keys(data, _TOP_KEYS, where)
    name = _require(data, "name", where)
    if not isinstance(name, str) or not name:
        raise ClusterConfigError(f"{where}: name must be a non-empty string, got {name!r}")
    arch = _require(data, "architecture", where)
    if arch not in ARCHITECTURES:
        raise ClusterConfigError(f"{where}: architecture {arch!r} not one of {ARCHITECTURES}")
    kv_spec = _kv_transfer(data.get("kv_transfer"), where)
    topology = _topology(data["topology"], where) if "topology" in data else None
    instances: list[InstanceSpec] = []
    if arch != "pool":
        tp_tables = _tp_tables(data.get("tensor_parallel"), where)
        if model is not None:
            _model_name(model, f"{where}: model to serve (--model)")
        else:
            model = data.get("default_model")
            if model is None:
                raise ClusterConfigError(f"{where}: no model given and no default_model in preset")
            _model_name(model, f"{where}: default_model")
        if tp_tables and model not in tp_tables:
            raise ClusterConfigError(
                f"{where}: cluster {name!r} has no tensor-parallel table for model {model!r}; "
                f"it supports {sorted(tp_tables)}"
            )
        tp_table = tp_tables.get(model, {})
        roles = ("prefill", "decode") if arch == "pd" else ("instances",)
        for role_key in roles:
            entries = _require(data, role_key, where)
            role = "monolithic" if role_key == "instances" else role_key
            instances += _pool_instances(
                entries, role, model, tp_table, len(instances), f"{where}: {role_key}"
            )
        if arch == "pd" and not (
            any(i.role == "prefill" for i in instances)
            and any(i.role == "decode" for i in instances)
        ):
            raise ClusterConfigError(
                f"{where}: a pd cluster needs prefill and decode instances (zero capacity)"
            )
        if not instances:
            raise ClusterConfigError(f"{where}: the cluster has no instances (zero capacity)")
    elif topology is None:
        raise ClusterConfigError(f"{where}: a pool cluster needs a 'topology' section")
    return ClusterSpec(
        name=name,
        architecture=arch,
        instances=tuple(instances),
        kv_transfer=kv_spec,
        topology=topology,
        source=str(data.get("source", "")),
        description=str(data.get("description", "")),
    )


def scaled_cluster(base: ClusterSpec, instances: int) -> ClusterSpec:
    """``base`` grown (or cut) to ``instances`` instances, cycling through its GPU types in order
    (the scale experiments of GoodServe §4.3: 8 to 512 instances mixing the preset's GPUs).

    :raises ClusterConfigError: if ``instances`` is not an integer in [1, ``MAX_INSTANCES``].
    """
    _int(instances, f"scaling cluster {base.name!r}", "instances", maximum=MAX_INSTANCES)
    specs = []
    for i in range(instances):
        s = base.instances[i % len(base.instances)]
        specs.append(
            InstanceSpec(
                index=i,
                name=f"monolithic-{i}-{s.gpu}",
                role=s.role,
                gpu=s.gpu,
                model=s.model,
                tp=s.tp,
                fraction=s.fraction,
                max_batch_size=s.max_batch_size,
                precision=s.precision,
                kv_precision=s.kv_precision,
            )
        )
    return ClusterSpec(
        name=f"{base.name}x{instances}",
        architecture=base.architecture,
        instances=tuple(specs),
        kv_transfer=base.kv_transfer,
        source=base.source,
        description=f"{base.description}; cycled to {instances} instances",
    )
