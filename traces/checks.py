"""The rules of a valid servegym trace: every bad record is an error naming where it is, never
a fix. (:mod:`traces.validate` is the command line and the public entry point; :mod:`traces.io`
checks every record it reads with these rules.)

A trace is valid when every record is valid on its own (field types and ranges, a well-formed
workflow DAG) and the trace as a whole is consistent (one record kind, unique ids, arrivals
sorted, models known). The rules:

- ``id`` is a non-empty string; record ids are unique in the trace, node ids in their workflow.
- ``arrival`` (seconds) is finite, >= 0 and <= :data:`MAX_SECONDS`, and arrivals never decrease
  along the trace.
- ``input_tokens`` is an ``int`` >= 1 and ``output_tokens`` an ``int`` >= 0, both at most
  :data:`MAX_TOKENS` (``bool`` and ``float`` are rejected, even ``3.0``).
- a tool ``latency`` (seconds) is finite, >= 0 and <= :data:`MAX_SECONDS`; an ``slo`` (seconds),
  when present, is > 0 and <= :data:`MAX_SECONDS`.
- a workflow has at least one node; every parent names another node of the same workflow, no
  node lists itself or the same parent twice, and the parents graph has no cycle.
- ``model`` is in the known set (by default the simulator catalog's models,
  :data:`traces.models.CATALOG_MODELS`).
- a file holds either request records or workflow records, not both, and at least one record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from traces.models import CATALOG_MODELS
from traces.schema import LLMNode, Record, Request, ToolNode, Workflow

_NO_VALUE = object()
_MAX_REPR = 80
#: Largest token count of one call: 2**31 - 1, over 10,000x the longest context in the catalog
#: (196,608 tokens). A larger count is a unit or overflow mistake (bytes, a negative wrapped
#: around), not a prompt.
MAX_TOKENS = 2**31 - 1
#: Largest time in seconds (arrival, tool latency, SLO): 1e9 s, about 31.7 years. Past it a
#: float64 clock loses sub-microsecond resolution, so call durations would vanish into the
#: arrival time and the metrics would be silently wrong (an absolute Unix timestamp is the usual
#: cause: make arrivals relative to the trace start).
MAX_SECONDS = 1e9


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


class TraceValidationError(ValueError):
    """A trace record breaks the schema.

    :param problem: what is wrong, phrased with what was expected.
    :param source: the file (or ``"<memory>"``) the record came from.
    :param line: 1-based line of the record in ``source``, or ``None`` for in-memory records.
    :param record_id: id of the offending record, if it has one.
    :param node_id: id of the offending workflow node, if the problem is inside a node.
    :param field: name of the offending field, if one field is to blame.
    :param value: the offending value; shown (shortened) in the message when given.
    :param index: 0-based position of the record in the trace, if known.
    """

    def __init__(
        self,
        problem: str,
        *,
        source: str = "<memory>",
        line: int | None = None,
        record_id: str | None = None,
        node_id: str | None = None,
        field: str | None = None,
        value: Any = _NO_VALUE,
        index: int | None = None,
    ) -> None:
        self.problem = problem
        self.source = source
        self.line = line
        self.record_id = record_id
        self.node_id = node_id
        self.field = field
        self.value = None if value is _NO_VALUE else value
        self.index = index
        where = f"{source}:{line}" if line is not None else source
        if line is None and index is not None:
            where += f" (record #{index})"
        parts = [where]
        if record_id is not None:
            parts.append(f"record {record_id!r}")
        if node_id is not None:
            parts.append(f"node {node_id!r}")
        if field is not None:
            parts.append(f"field {field!r}")
        message = ", ".join(parts) + f": {problem}"
        if value is not _NO_VALUE:
            message += f" (got {_short_repr(value)})"
        super().__init__(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_seconds(value: Any, *, minimum_open: bool) -> bool:
    """A finite number of seconds in [0, MAX_SECONDS] (or (0, MAX_SECONDS] if ``minimum_open``)."""
    if not _is_real(value) or not math.isfinite(value) or value > MAX_SECONDS:
        return False
    return value > 0 if minimum_open else value >= 0


def _is_text(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Where:
    """Location of the record being checked, to build errors."""

    def __init__(self, source: str, line: int | None, index: int | None, record_id: Any) -> None:
        self.source = source
        self.line = line
        self.index = index
        self.record_id = record_id if isinstance(record_id, str) else None

    def error(
        self, problem: str, *, node_id: Any = None, field: str | None = None, value: Any = _NO_VALUE
    ) -> TraceValidationError:
        return TraceValidationError(
            problem,
            source=self.source,
            line=self.line,
            record_id=self.record_id,
            node_id=node_id if isinstance(node_id, str) else None,
            field=field,
            value=value,
            index=self.index,
        )


def _check_id(where: _Where, value: Any, *, node_id: Any = None) -> None:
    if not isinstance(value, str) or not value:
        raise where.error(
            "expected a non-empty string id", node_id=node_id, field="id", value=value
        )


def _check_text(where: _Where, name: str, value: Any, *, optional: bool, node_id: Any) -> None:
    if value is None and optional:
        return
    if not _is_text(value) or (not optional and not value):
        expected = "a UTF-8 string or null" if optional else "a non-empty UTF-8 string"
        raise where.error(f"expected {expected}", node_id=node_id, field=name, value=value)


def _check_llm_fields(where: _Where, call: Request | LLMNode, node_id: Any) -> None:
    """Fields shared by a request and an LLM node (everything but ids, arrival and parents)."""
    _check_text(where, "model", call.model, optional=False, node_id=node_id)
    for name, low in (("input_tokens", 1), ("output_tokens", 0)):
        value = getattr(call, name)
        if not _is_int(value) or not low <= value <= MAX_TOKENS:
            raise where.error(
                f"expected an integer number of tokens >= {low} and <= {MAX_TOKENS}",
                node_id=node_id,
                field=name,
                value=value,
            )
    _check_text(where, "task", call.task, optional=False, node_id=node_id)
    _check_text(where, "prompt", call.prompt, optional=True, node_id=node_id)
    hashes = call.prefix_hashes
    if hashes is not None and (
        not isinstance(hashes, (tuple, list)) or not all(_is_int(h) for h in hashes)
    ):
        raise where.error(
            "expected a list of integer block hashes or null",
            node_id=node_id,
            field="prefix_hashes",
            value=hashes,
        )


def _check_arrival_and_meta(where: _Where, record: Request | Workflow) -> None:
    arrival = record.arrival
    if not _is_seconds(arrival, minimum_open=False):
        raise where.error(
            f"expected a finite time >= 0 and <= {MAX_SECONDS:g} seconds",
            field="arrival",
            value=arrival,
        )
    if not isinstance(record.meta, dict):
        raise where.error("expected a JSON object (dict)", field="meta", value=record.meta)
    if record.meta:
        try:
            json.dumps(record.meta, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as err:
            raise where.error(
                f"expected JSON-serialisable metadata with finite numbers ({err})", field="meta"
            ) from err


def _find_cycle(parents: dict[str, Sequence[str]]) -> list[str] | None:
    """A cycle of the parents graph as ``[a, b, ..., a]`` (each lists the next as a parent)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in parents:
        if start in state:
            continue
        state[start] = 1
        path = [start]
        stack = [iter(parents[start])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(parents[nxt]))
    return None


def _check_workflow(where: _Where, wf: Workflow) -> None:
    nodes = wf.nodes
    if not isinstance(nodes, (tuple, list)):
        raise where.error("expected a list of nodes", field="nodes", value=nodes)
    if not nodes:
        raise where.error("expected at least one node, the workflow is empty", field="nodes")
    parents: dict[str, Sequence[str]] = {}
    for node in nodes:
        node_id = getattr(node, "id", None)
        if not isinstance(node, (LLMNode, ToolNode)):
            raise where.error(
                f"expected an LLMNode or ToolNode, got {type(node).__name__}",
                node_id=node_id,
                field="nodes",
            )
        _check_id(where, node_id, node_id=node_id)
        if node_id in parents:
            raise where.error(
                "duplicate node id (expected node ids unique within the workflow)",
                node_id=node_id,
                field="id",
                value=node_id,
            )
        if isinstance(node, LLMNode):
            _check_llm_fields(where, node, node_id)
        else:
            latency = node.latency
            if not _is_seconds(latency, minimum_open=False):
                raise where.error(
                    f"expected a finite tool latency >= 0 and <= {MAX_SECONDS:g} seconds",
                    node_id=node_id,
                    field="latency",
                    value=latency,
                )
            _check_text(where, "name", node.name, optional=True, node_id=node_id)
        node_parents = node.parents
        if not isinstance(node_parents, (tuple, list)) or not all(
            isinstance(p, str) for p in node_parents
        ):
            raise where.error(
                "expected a list of parent node ids (strings)",
                node_id=node_id,
                field="parents",
                value=node_parents,
            )
        parents[str(node_id)] = node_parents
    for node_id, parent_ids in parents.items():
        seen: set[str] = set()
        for parent in parent_ids:
            if parent == node_id:
                raise where.error(
                    "node lists itself as a parent (expected the ids of other nodes)",
                    node_id=node_id,
                    field="parents",
                    value=parent,
                )
            if parent not in parents:
                raise where.error(
                    f"unknown parent {parent!r} (expected the id of a node of this workflow: "
                    f"{_short_repr(list(parents))})",
                    node_id=node_id,
                    field="parents",
                    value=parent,
                )
            if parent in seen:
                raise where.error(
                    "parent listed twice (expected each parent once)",
                    node_id=node_id,
                    field="parents",
                    value=parent,
                )
            seen.add(parent)
    cycle = _find_cycle(parents)
    if cycle is not None:
        raise where.error(
            "the parents graph has a cycle "
            + " -> ".join(cycle)
            + " (each node lists the next as a parent; expected a DAG)",
            node_id=cycle[0],
            field="parents",
        )


def check_record(
    record: Any, *, source: str = "<memory>", line: int | None = None, index: int | None = None
) -> None:
    """Check one record on its own: field types and ranges and, for a workflow, its DAG.

    Trace-level rules (unique record ids, sorted arrivals, one record kind) and the model
    check are left to :func:`validate_records`.

    :param record: a :class:`~traces.schema.Request` or :class:`~traces.schema.Workflow`.
    :param source: file name used in error messages.
    :param line: 1-based line of the record in ``source``, if known.
    :param index: 0-based position of the record in its trace, if known.
    :raises TraceValidationError: naming the record, node and field at fault.
    """
    where = _Where(source, line, index, getattr(record, "id", None))
    if not isinstance(record, (Request, Workflow)):
        raise where.error(f"expected a Request or Workflow record, got {type(record).__name__}")
    _check_id(where, record.id)
    _check_arrival_and_meta(where, record)
    if isinstance(record, Request):
        _check_llm_fields(where, record, None)
        slo = record.slo
        if slo is not None and not _is_seconds(slo, minimum_open=True):
            raise where.error(
                f"expected a finite SLO > 0 and <= {MAX_SECONDS:g} seconds, or null",
                field="slo",
                value=slo,
            )
    else:
        _check_workflow(where, record)


class TraceChecker:
    """Streaming validator: feed records in trace order; raises at the first bad one.

    :param known_models: allowed model names; the simulator catalog's
        (:data:`traces.models.CATALOG_MODELS`) when ``None``.
    :param source: file name used in error messages.
    :param models_from: what ``known_models`` are, for the error message (e.g. ``"the models
        cluster 'hetero-1' serves"``); the simulator catalog when ``None``.
    """

    def __init__(
        self,
        known_models: Iterable[str] | None = None,
        source: str = "<memory>",
        models_from: str | None = None,
    ) -> None:
        self.source = source
        self._known = frozenset(known_models) if known_models is not None else CATALOG_MODELS
        if models_from is None:
            models_from = "the known models" if known_models is not None else "the catalog models"
        self.models_from = models_from
        self._first: tuple[str, str] | None = None  # (kind, id) of the first record
        self._last: tuple[float, str] | None = None  # (arrival, id) of the previous record
        self._seen: dict[str, str] = {}  # record id -> where it was first seen
        self.count = 0

    def check(self, record: Any, *, line: int | None = None, record_checked: bool = False) -> None:
        """Check the next record of the trace.

        :param record: the record.
        :param line: its 1-based line in the source file, if known.
        :param record_checked: the record already passed :func:`check_record` (skip it).
        :raises TraceValidationError: naming the record, node and field at fault.
        """
        index = self.count
        if not record_checked:
            check_record(record, source=self.source, line=line, index=index)
        where = _Where(self.source, line, index, record.id)
        kind = "request" if isinstance(record, Request) else "workflow"
        if self._first is None:
            self._first = (kind, record.id)
        elif kind != self._first[0]:
            raise where.error(
                f"trace mixes record kinds: this record is a {kind} but the first record "
                f"{self._first[1]!r} is a {self._first[0]} (expected one kind per trace)",
                field="schema",
            )
        if record.id in self._seen:
            raise where.error(
                f"duplicate record id (first used by the record at {self._seen[record.id]}; "
                "expected unique ids)",
                field="id",
                value=record.id,
            )
        if self._last is not None and record.arrival < self._last[0]:
            raise where.error(
                f"arrival is earlier than {self._last[0]!r} s of the previous record "
                f"{self._last[1]!r} (expected arrivals sorted non-decreasing)",
                field="arrival",
                value=record.arrival,
            )
        calls = (record,) if isinstance(record, Request) else record.nodes
        for call in calls:
            if isinstance(call, (Request, LLMNode)) and call.model not in self._known:
                node_id = call.id if isinstance(call, LLMNode) else None
                raise where.error(
                    f"unknown model (expected one of {self.models_from}: {sorted(self._known)})",
                    node_id=node_id,
                    field="model",
                    value=call.model,
                )
        self._seen[record.id] = f"line {line}" if line is not None else f"#{index}"
        self._last = (record.arrival, record.id)
        self.count += 1

    def finish(self) -> None:
        """Check the trace as a whole once every record was fed: it has at least one record.

        :raises TraceValidationError: for an empty trace (an empty workload has no metrics).
        """
        if self.count == 0:
            raise TraceValidationError(
                "the trace has no records (expected at least one request or workflow record)",
                source=self.source,
            )


def validate_records(
    records: Iterable[Record],
    *,
    known_models: Iterable[str] | None = None,
    source: str = "<memory>",
    lines: Sequence[int] | None = None,
) -> None:
    """Check a whole trace; see the module docstring for the rules.

    :param records: the records in trace order.
    :param known_models: allowed model names; the simulator catalog's
        (:data:`traces.models.CATALOG_MODELS`) when ``None``.
    :param source: file name used in error messages.
    :param lines: 1-based line of each record in ``source``, aligned with ``records``.
    :raises TraceValidationError: at the first bad record, naming file, line, record id, node id
        and field, with the offending value.
    """
    checker = TraceChecker(known_models, source)
    for i, record in enumerate(records):
        checker.check(record, line=lines[i] if lines is not None else None)
    checker.finish()
