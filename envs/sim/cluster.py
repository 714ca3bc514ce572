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
fp8 is checked when the instance's latency model is built (``envs.sim.latency``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.sim.catalog import PRECISIONS

CLUSTER_DIR = Path(__file__).resolve().parent.parent / "configs" / "clusters"
ARCHITECTURES = ("pd", "monolithic", "pool")
ROLES = ("prefill", "decode", "monolithic")


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
        ``envs.sim.latency``).
    :param kv_precision: KV-cache precision, one of ``PRECISIONS``; None = same as ``precision``.
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
    with open(path) as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise ClusterConfigError(f"{path}: expected a mapping at the top level, got {data!r}")
    return cluster_from_dict(data, model=model, source_path=str(path))


def _require(data: dict[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise ClusterConfigError(f"{where}: missing required key {key!r}")
    return data[key]


def _pool_instances(
    entries: list[dict[str, Any]],
    role: str,
    model: str,
    tp_table: dict[str, int],
    start: int,
    where: str,
) -> list[InstanceSpec]:
    out: list[InstanceSpec] = []
    for k, entry in enumerate(entries):
        gpu = _require(entry, "gpu", f"{where}[{k}]")
        count = int(entry.get("count", 1))
        if count < 1:
            raise ClusterConfigError(f"{where}[{k}]: count must be >= 1, got {count}")
        tp = entry.get("tp", tp_table.get(gpu))
        if tp is None:
            raise ClusterConfigError(
                f"{where}[{k}]: no tensor-parallel degree for model {model!r} on GPU {gpu!r}; "
                f"give 'tp' or add it to tensor_parallel[{model!r}] (has {sorted(tp_table)})"
            )
        precision = entry.get("precision", "bf16")
        kv_precision = entry.get("kv_precision")  # None: same as precision
        for key, value, allowed in (
            ("precision", precision, PRECISIONS),
            ("kv_precision", kv_precision, (*PRECISIONS, None)),
        ):
            if value not in allowed:
                raise ClusterConfigError(
                    f"{where}[{k}]: {key} {value!r} is not one of {PRECISIONS}"
                )
        for _ in range(count):
            idx = start + len(out)
            out.append(
                InstanceSpec(
                    index=idx,
                    name=f"{role}-{idx}-{gpu}",
                    role=role,
                    gpu=gpu,
                    model=entry.get("model", model),
                    tp=int(tp),
                    fraction=float(entry.get("fraction", 1.0)),
                    max_batch_size=entry.get("max_batch_size"),
                    precision=precision,
                    kv_precision=kv_precision,
                )
            )
    return out


def cluster_from_dict(
    data: dict[str, Any], model: str | None = None, source_path: str = "<dict>"
) -> ClusterSpec:
    """Build a :class:`ClusterSpec` from a parsed preset (see ``envs/configs/clusters/``)."""
    where = source_path
    name = str(_require(data, "name", where))
    arch = _require(data, "architecture", where)
    if arch not in ARCHITECTURES:
        raise ClusterConfigError(f"{where}: architecture {arch!r} not one of {ARCHITECTURES}")
    kv = data.get("kv_transfer", {}) or {}
    pairs = tuple(
        (str(p["a"]), str(p["b"]), float(p["bandwidth"])) for p in kv.get("pairs", []) or []
    )
    kv_spec = KVTransferSpec(
        latency_s=float(kv.get("latency_s", KVTransferSpec.latency_s)),
        same_class_bandwidth=float(
            kv.get("same_class_bandwidth", KVTransferSpec.same_class_bandwidth)
        ),
        cross_class_bandwidth=float(
            kv.get("cross_class_bandwidth", KVTransferSpec.cross_class_bandwidth)
        ),
        pairs=pairs,
    )
    topology = None
    if "topology" in data:
        t = data["topology"]
        topology = Topology(
            gpu=str(_require(t, "gpu", f"{where}: topology")),
            num_nodes=int(_require(t, "num_nodes", f"{where}: topology")),
            gpus_per_node=int(_require(t, "gpus_per_node", f"{where}: topology")),
            nvlink_groups=tuple(tuple(int(g) for g in grp) for grp in t.get("nvlink_groups", [])),
        )
    instances: list[InstanceSpec] = []
    if arch != "pool":
        tp_tables: dict[str, dict[str, int]] = data.get("tensor_parallel", {}) or {}
        model = model or data.get("default_model")
        if model is None:
            raise ClusterConfigError(f"{where}: no model given and no default_model in preset")
        if tp_tables and model not in tp_tables:
            raise ClusterConfigError(
                f"cluster {name!r} has no tensor-parallel table for model {model!r}; "
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
            raise ClusterConfigError(f"{where}: a pd cluster needs prefill and decode instances")
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

    :raises ValueError: if ``instances`` < 1.
    """
    if instances < 1:
        raise ValueError(f"instances must be >= 1, got {instances}")
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
