"""What a simulation reports: per-call (:class:`CallRecord`) and per-workflow
(:class:`WorkflowRecord`) records, the :class:`SimulationResult`, asynchronous planning's
:class:`PlanningStats`, and the :class:`LatencyCache` that lets simulations share latency models.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.sim.core.workflows import CallNames
from envs.sim.engines.presets import EnginePreset
from envs.sim.hardware.cluster import InstanceSpec
from envs.sim.latency.efficiency import resolve_calibration_variant
from envs.sim.latency.model import LatencyModel, load_calibration


@dataclass
class CallRecord:
    """What happened to one LLM call (times in seconds; -1 where a stage did not apply).

    A migrated call keeps the prefill times of its first prefill (``prefill_end`` is its first
    token); ``prefill_instance`` is the instance that finished it. ``preemptions`` counts the
    times a paging engine evicted it; ``recomputed_tokens`` the tokens it prefilled again.

    Client-side latencies (what a benchmark client measures): :attr:`ttft` and :attr:`tpot`.
    """

    workflow_id: str
    node_id: str
    model: str
    task: str
    input_tokens: int
    output_tokens: int
    predicted_output_tokens: int
    revealed_at: float
    prefill_instance: int
    decode_instance: int
    prefill_start: float
    prefill_end: float
    transfer_end: float
    decode_start: float
    decode_end: float
    cached_tokens: int
    migrations: int = 0
    migration_seconds: float = 0.0
    preemptions: int = 0
    recomputed_tokens: int = 0

    @property
    def ttft(self) -> float:
        """Time to first token, seconds: from the call's reveal (its arrival at the serving
        system) to the end of its first prefill, queueing included; NaN if it never got there."""
        if self.prefill_end < 0:
            return math.nan
        return self.prefill_end - self.revealed_at

    @property
    def tpot(self) -> float:
        """Time per output token after the first, seconds: ``(end − first token) /
        (output_tokens − 1)``, stalls, transfers and migrations included; NaN for calls with
        fewer than two output tokens or unfinished ones."""
        if self.output_tokens < 2 or self.decode_end < 0 or self.prefill_end < 0:
            return math.nan
        return (self.decode_end - self.prefill_end) / (self.output_tokens - 1)

    @property
    def latency(self) -> float:
        """End-to-end seconds from reveal to the last token (NaN if unfinished)."""
        if self.decode_end < 0:
            return math.nan
        return self.decode_end - self.revealed_at


@dataclass
class WorkflowRecord:
    """What happened to one workflow.

    :param completion_time: C_w, seconds from arrival to the last node's end (inf if unfinished).
    :param horizon: H_w, its standalone completion time on the same cluster (HexAgent §7.3).
    """

    id: str
    arrival: float
    finish: float
    completion_time: float
    horizon: float
    num_llm_calls: int
    num_tools: int


@dataclass
class SimulationResult:
    """Records and metrics of a finished (or truncated) simulation. ``extra["planning"]`` is
    :meth:`PlanningStats.as_dict` (asynchronous planning; all zeros for a blocking run)."""

    calls: list[CallRecord]
    workflows: list[WorkflowRecord]
    metrics: dict[str, float]
    utilisation: dict[str, float]
    end_time: float
    events: int
    invocations: int
    wall_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PlanningStats:
    """What asynchronous planning did in a run (HexAgent §4.3, §5.2; ``Simulation.apply``'s
    ``delay``). Per-stage counters are dicts keyed ``prefill`` and ``decode``.

    :param plans: plans applied with a delay > 0.
    :param delay_total: their summed delay, seconds of simulated time.
    :param delay_max: the largest delay, seconds.
    :param absorbed: invocations never handed to the scheduler because their stage had a plan
        in flight (Algorithm 1 lines 5–7). Those raised in the same event as the invocation whose
        plan went in flight were already counted in ``SimulationResult.invocations``; later ones
        are not.
    :param replans: fresh invocations raised when a plan landed on a dirty stage.
    :param fallback_calls: calls that entered the stage while its plan was being computed or in
        flight, and so waited under the fallback plan (prefill: the fallback's placement; decode:
        the priority the call carried from prefill).
    :param started_on_fallback: of those, calls that started service at the stage before any
        plan reached them (they ran under the fallback plan because a plan was late).
    :param skipped: plan assignments dropped on landing because the call had started service.
    """

    plans: int = 0
    delay_total: float = 0.0
    delay_max: float = 0.0
    absorbed: int = 0
    replans: int = 0
    fallback_calls: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})
    started_on_fallback: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})
    skipped: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})

    def as_dict(self) -> dict[str, Any]:
        """The counters, plus ``delay_mean`` (seconds; 0 without delayed plans)."""
        out = dataclasses.asdict(self)
        out["delay_mean"] = self.delay_total / self.plans if self.plans else 0.0
        return out


class LatencyCache:
    """One :class:`LatencyModel` per distinct (GPU, model, TP, fraction, precision, engine);
    shared by simulations.

    :param calibration_variant: per-op calibration variant of every model (one of
        ``envs.sim.latency.efficiency.CALIBRATION_VARIANTS``); ``None``: the one in force
        (``$SERVEGYM_LATENCY_CALIBRATION``, else the default
        ``envs.sim.latency.efficiency.DEFAULT_CALIBRATION_VARIANT``).
    """

    def __init__(self, calibration_variant: str | None = None) -> None:
        self._models: dict[tuple, LatencyModel] = {}
        self.calibration_variant = resolve_calibration_variant(calibration_variant)

    def get(
        self,
        spec: InstanceSpec,
        engine: EnginePreset | None = None,
        bandwidth_share: float | None = None,
    ) -> LatencyModel:
        """The latency model of ``spec``'s instances, with ``engine``'s fitted constants and
        memory share when given (monolithic instances only), and ``bandwidth_share`` of the HBM
        bandwidth (``None`` or ``spec.fraction``: bandwidth scales with the fraction)."""
        if bandwidth_share == spec.fraction:
            bandwidth_share = None
        key: tuple = (
            spec.gpu,
            spec.model,
            spec.tp,
            spec.fraction,
            spec.precision,
            spec.kv_precision,
            None if engine is None else engine.name,
        )
        if bandwidth_share is not None:
            key += (bandwidth_share,)
        m = self._models.get(key)
        if m is None:
            base = load_calibration(variant=self.calibration_variant)
            extra: dict[str, Any] = {"calibration": base}
            if engine is not None:
                extra = {
                    "calibration": engine.calibration(base),
                    "memory_utilization": engine.memory_utilization,
                }
            if bandwidth_share is not None:
                extra["bandwidth_share"] = bandwidth_share
            m = LatencyModel.from_names(
                gpu=spec.gpu,
                model=spec.model,
                tp=spec.tp,
                fraction=spec.fraction,
                precision=spec.precision,
                kv_precision=spec.kv_precision,
                **extra,
            )
            self._models[key] = m
        return m


# -- compact records of finished workflows (Simulation(compact_records=True)) ------------------

#: The fields of a packed call, in :class:`CallRecord` order where they are record fields: the
#: call's uid, its workflow's index in the workload and its node's position in the workflow (the
#: strings ``workflow_id``, ``node_id``, ``model`` and ``task`` are read back from the workload),
#: then every numeric field of :class:`CallRecord`. Floats are stored as float64 and ints as int64,
#: so every value reads back bit-identical (a Python float is a float64).
PACKED_DTYPE = np.dtype(
    [
        ("uid", np.int64),
        ("run", np.int64),
        ("node", np.int64),
        ("input_tokens", np.int64),
        ("output_tokens", np.int64),
        ("predicted_output_tokens", np.int64),
        ("revealed_at", np.float64),
        ("prefill_instance", np.int64),
        ("decode_instance", np.int64),
        ("prefill_start", np.float64),
        ("prefill_end", np.float64),
        ("transfer_end", np.float64),
        ("decode_start", np.float64),
        ("decode_end", np.float64),
        ("cached_tokens", np.int64),
        ("migrations", np.int64),
        ("migration_seconds", np.float64),
        ("preemptions", np.int64),
        ("recomputed_tokens", np.int64),
    ]
)
_NUMERIC: tuple[str, ...] = tuple(PACKED_DTYPE.names or ())[3:]
_INT_FIELDS = frozenset(n for n in _NUMERIC if PACKED_DTYPE[n].kind == "i")
_INSTANCE_FIELDS = ("prefill_instance", "decode_instance")


class PackedCall(CallNames):
    """A finished call read back from a :class:`CallStore`: its :class:`CallRecord` fields under
    :class:`envs.sim.core.workflows.Call`'s attribute names (``uid``, ``workflow``, ``node``,
    ``stage`` = ``"done"``, ``prefill_instance`` / ``decode_instance`` None where the call had
    none), and ``id`` / ``model``. The engine bookkeeping of a live call (``generated``,
    ``kv_held``, priorities, ...) is not kept."""

    __slots__ = ("uid", "workflow", "node", "stage", *_NUMERIC)
    uid: int
    workflow: Any
    node: Any
    stage: str
    prefill_instance: int | None
    decode_instance: int | None

    def __repr__(self) -> str:
        return f"PackedCall({self.id}, stage={self.stage}, in={self.input_tokens})"


class CallStore:
    """The records of finished calls, packed: fixed-width rows (:data:`PACKED_DTYPE`, 152 bytes a
    call) in chunks of ``chunk_rows``; with ``spill`` a full chunk is appended to an anonymous
    temporary file (deleted when closed) instead of kept, so the memory the store holds is one
    chunk plus a uid -> row index (8 bytes a call).

    :param runs: the simulation's workflow runs (``Simulation.runs``), to name a row's workflow
        and node.
    """

    def __init__(self, runs: list[Any], chunk_rows: int = 8192, spill: bool = False):
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.runs = runs
        self.chunk_rows = chunk_rows
        self.spill = spill
        self._chunks: list[np.ndarray] = []  # full chunks kept in memory (spill off)
        self._chunk = np.zeros(chunk_rows, dtype=PACKED_DTYPE)  # the chunk being filled
        self._fill = 0
        self._spilled = 0  # rows in the file
        self._file: Any = None
        self._row_of = array("q")  # uid -> row (-1: not packed)
        self._node_pos: dict[int, dict[str, int]] = {}  # run index -> node id -> position

    def __len__(self) -> int:
        return self._spilled + len(self._chunks) * self.chunk_rows + self._fill

    def __contains__(self, uid: int) -> bool:
        return 0 <= uid < len(self._row_of) and self._row_of[uid] >= 0

    def add(self, call: Any) -> None:
        """Pack finished ``call`` (a :class:`envs.sim.core.workflows.Call`)."""
        run = call.workflow
        pos = self._node_pos.get(run.index)
        if pos is None:
            pos = {n.id: i for i, n in enumerate(run.workflow.nodes)}
            self._node_pos[run.index] = pos  # dropped in forget_run
        values = [call.uid, run.index, pos[call.node.id]]
        for name in _NUMERIC:
            value = getattr(call, name)
            if name in _INSTANCE_FIELDS and value is None:
                value = -1
            if type(value) is not (int if name in _INT_FIELDS else float):
                raise TypeError(
                    f"call {call.id}: {name} is {value!r} ({type(value).__name__}); the compact "
                    "store keeps Python ints and floats only (it would not read back identical)"
                )
            values.append(value)
        self._chunk[self._fill] = tuple(values)
        missing = call.uid + 1 - len(self._row_of)
        if missing > 0:
            self._row_of.extend([-1] * missing)
        self._row_of[call.uid] = len(self)
        self._fill += 1
        if self._fill == self.chunk_rows:
            self._flush()

    def forget_run(self, run_index: int) -> None:
        """Every call of workflow ``run_index`` was packed: drop its node-position map."""
        self._node_pos.pop(run_index, None)

    def _flush(self) -> None:
        if self.spill:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="servegym-calls-")
            self._file.seek(0, 2)
            self._file.write(self._chunk.tobytes())
            self._spilled += self.chunk_rows
            self._chunk = np.zeros(self.chunk_rows, dtype=PACKED_DTYPE)
        else:
            self._chunks.append(self._chunk)
            self._chunk = np.zeros(self.chunk_rows, dtype=PACKED_DTYPE)
        self._fill = 0

    def rows(self) -> np.ndarray:
        """Every packed row, in packing order (a new array)."""
        parts = []
        if self._spilled:
            self._file.seek(0)
            parts.append(np.frombuffer(self._file.read(), dtype=PACKED_DTYPE).copy())
        parts.extend(self._chunks)
        parts.append(self._chunk[: self._fill])
        return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()

    def _row(self, row: int) -> np.void:
        if row < self._spilled:
            self._file.seek(row * PACKED_DTYPE.itemsize)
            return np.frombuffer(self._file.read(PACKED_DTYPE.itemsize), dtype=PACKED_DTYPE)[0]
        row -= self._spilled
        k, i = divmod(row, self.chunk_rows)
        return self._chunks[k][i] if k < len(self._chunks) else self._chunk[i]

    def call(self, uid: int) -> PackedCall:
        """The packed call ``uid``."""
        if uid not in self:
            raise KeyError(f"call {uid} is not packed")
        return self._unpack(self._row(self._row_of[uid]).tolist())

    def _unpack(self, values: Any) -> PackedCall:
        p = PackedCall()
        uid, run_index, node_pos, *numeric = values
        run = self.runs[run_index]
        p.uid = uid
        p.workflow = run
        p.node = run.workflow.nodes[node_pos]
        p.stage = "done"
        for name, value in zip(_NUMERIC, numeric, strict=True):
            setattr(p, name, value)
        if p.prefill_instance is not None and p.prefill_instance < 0:  # -1 packs "none"
            p.prefill_instance = None
        if p.decode_instance is not None and p.decode_instance < 0:
            p.decode_instance = None
        return p

    def records(self) -> dict[int, CallRecord]:
        """uid -> :class:`CallRecord` of every packed call."""
        out = {}
        for values in self.rows().tolist():
            uid, run_index, node_pos, *numeric = values
            run = self.runs[run_index]
            node = run.workflow.nodes[node_pos]
            out[uid] = CallRecord(run.id, node.id, node.model, node.task, *numeric)
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Pickles with every row in memory (a temporary file does not pickle)."""
        state = dict(self.__dict__)
        rows = self.rows()
        state.update(_file=None, _spilled=0, _chunks=[], _fill=0)
        n = len(rows)
        full, rest = divmod(n, self.chunk_rows)
        state["_chunks"] = [
            rows[k * self.chunk_rows : (k + 1) * self.chunk_rows].copy() for k in range(full)
        ]
        chunk = np.zeros(self.chunk_rows, dtype=PACKED_DTYPE)
        chunk[:rest] = rows[full * self.chunk_rows :]
        state["_chunk"] = chunk
        state["_fill"] = rest
        # row indices are positions in packing order, unchanged by the move into memory
        return state

    def close(self) -> None:
        """Delete the spill file (the packed rows in it are lost)."""
        if self._file is not None:
            self._file.close()
            self._file = None


class CallTable(Sequence):
    """``Simulation.calls`` under ``compact_records``: every call by uid, the live ones as their
    :class:`envs.sim.core.workflows.Call` objects and the packed ones read back from the
    :class:`CallStore` as :class:`PackedCall` (a new object on each access)."""

    def __init__(self, store: CallStore):
        self.store = store
        self.live: dict[int, Any] = {}  # uid -> Call, calls not packed yet
        self._n = 0

    def append(self, call: Any) -> None:
        if call.uid != self._n:
            raise ValueError(f"call uid {call.uid} appended as call {self._n}")
        self.live[call.uid] = call
        self._n += 1

    def pack(self, call: Any) -> None:
        """Move finished ``call`` into the store."""
        self.store.add(call)
        del self.live[call.uid]

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        i = index + self._n if index < 0 else index
        if not 0 <= i < self._n:
            raise IndexError(f"call index {index} out of range ({self._n} calls)")
        call = self.live.get(i)
        return call if call is not None else self.store.call(i)

    def __iter__(self) -> Iterator[Any]:
        for i in range(self._n):
            call = self.live.get(i)
            yield call if call is not None else self.store.call(i)
