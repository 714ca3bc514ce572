"""Reading and writing servegym traces as JSON Lines, one record a line.

Writing is deterministic: equal traces give byte-identical files (fixed key order, compact
separators, UTF-8 with line-separator characters escaped, floats written with Python's
shortest round-trip ``repr``), and reading a written file gives back an equal trace. Optional
fields that are unset (``prompt``, ``prefix_hashes``, ``slo``, tool ``name``, empty ``meta``)
are left out; keys inside ``meta`` are written sorted.

Parsing is strict: an unknown ``schema`` version, a missing required field or an unknown field
is a :class:`~traces.checks.TraceValidationError` naming the file, line, record, node and field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from traces.checks import TraceChecker, TraceValidationError, check_record, validate_records
from traces.schema import (
    REQUEST_SCHEMA,
    WORKFLOW_SCHEMA,
    LLMNode,
    Node,
    Record,
    Request,
    ToolNode,
    Workflow,
)

_REQUEST_KEYS = (
    "schema",
    "id",
    "arrival",
    "model",
    "input_tokens",
    "output_tokens",
    "task",
    "prompt",
    "prefix_hashes",
    "slo",
    "meta",
)
_REQUEST_REQUIRED = frozenset(_REQUEST_KEYS[:6])
_WORKFLOW_KEYS = ("schema", "id", "arrival", "nodes", "meta")
_WORKFLOW_REQUIRED = frozenset(_WORKFLOW_KEYS[:4])
_LLM_KEYS = (
    "id",
    "kind",
    "model",
    "input_tokens",
    "output_tokens",
    "parents",
    "task",
    "prompt",
    "prefix_hashes",
)
_LLM_REQUIRED = frozenset(_LLM_KEYS[:5])
_TOOL_KEYS = ("id", "kind", "latency", "parents", "name")
_TOOL_REQUIRED = frozenset(_TOOL_KEYS[:3])


_LINE_BREAKS = (("\x85", "\\u0085"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def _sorted_json(value: Any) -> Any:
    """``value`` with every dict's keys sorted and tuples as lists (for deterministic ``meta``)."""
    if isinstance(value, dict):
        return {k: _sorted_json(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_sorted_json(v) for v in value]
    return value


def _llm_fields(call: Request | LLMNode) -> dict[str, Any]:
    return {
        "model": call.model,
        "input_tokens": call.input_tokens,
        "output_tokens": call.output_tokens,
    }


def _node_to_dict(node: Node) -> dict[str, Any]:
    if isinstance(node, LLMNode):
        d: dict[str, Any] = {"id": node.id, "kind": "llm", **_llm_fields(node)}
        d["parents"] = list(node.parents)
        d["task"] = node.task
        if node.prompt is not None:
            d["prompt"] = node.prompt
        if node.prefix_hashes is not None:
            d["prefix_hashes"] = list(node.prefix_hashes)
        return d
    d = {"id": node.id, "kind": "tool", "latency": float(node.latency)}
    d["parents"] = list(node.parents)
    if node.name is not None:
        d["name"] = node.name
    return d


def record_to_dict(rec: Record) -> dict[str, Any]:
    """The JSON form of a record, keys in the fixed order of the schema.

    :param rec: a request or workflow.
    :returns: a dict ready for :func:`json.dumps`; unset optional fields are left out.
    :raises TypeError: if ``rec`` is not a :class:`Request` or :class:`Workflow`.
    """
    if isinstance(rec, Request):
        d: dict[str, Any] = {
            "schema": REQUEST_SCHEMA,
            "id": rec.id,
            "arrival": float(rec.arrival),
            **_llm_fields(rec),
            "task": rec.task,
        }
        if rec.prompt is not None:
            d["prompt"] = rec.prompt
        if rec.prefix_hashes is not None:
            d["prefix_hashes"] = list(rec.prefix_hashes)
        if rec.slo is not None:
            d["slo"] = float(rec.slo)
    elif isinstance(rec, Workflow):
        d = {
            "schema": WORKFLOW_SCHEMA,
            "id": rec.id,
            "arrival": float(rec.arrival),
            "nodes": [_node_to_dict(n) for n in rec.nodes],
        }
    else:
        raise TypeError(f"expected a Request or Workflow record, got {type(rec).__name__}")
    if rec.meta:
        d["meta"] = _sorted_json(rec.meta)
    return d


def dumps_record(rec: Record) -> str:
    """One record as its JSON line (without the newline): compact, UTF-8, NaN rejected.

    :param rec: a request or workflow.
    """
    text = json.dumps(
        record_to_dict(rec), ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
    # str.splitlines() also breaks at these; escaped, a line of the file is always one record.
    for char, escape in _LINE_BREAKS:
        text = text.replace(char, escape)
    return text


def _tuple_if_list(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _float_if_int(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _check_keys(
    d: dict[str, Any],
    allowed: tuple[str, ...],
    required: frozenset[str],
    err: Any,
    node_id: Any = None,
) -> None:
    for key in allowed:
        if key in required and key not in d:
            raise err(f"missing required field (expected {sorted(required)})", node_id, key)
    for key in d:
        if key not in allowed:
            raise err(f"unknown field (expected only {list(allowed)})", node_id, key)


def _node_from_dict(d: Any, err: Any, position: int) -> Node:
    if not isinstance(d, dict):
        raise err(f"node #{position} is not a JSON object", None, "nodes", d)
    node_id = d.get("id")
    kind = d.get("kind")
    if kind == "llm":
        _check_keys(d, _LLM_KEYS, _LLM_REQUIRED, err, node_id)
        return LLMNode(
            id=d["id"],
            model=d["model"],
            input_tokens=d["input_tokens"],
            output_tokens=d["output_tokens"],
            parents=_tuple_if_list(d.get("parents", [])),
            task=d.get("task", "chat"),
            prompt=d.get("prompt"),
            prefix_hashes=_tuple_if_list(d.get("prefix_hashes")),
        )
    if kind == "tool":
        _check_keys(d, _TOOL_KEYS, _TOOL_REQUIRED, err, node_id)
        return ToolNode(
            id=d["id"],
            latency=_float_if_int(d["latency"]),
            parents=_tuple_if_list(d.get("parents", [])),
            name=d.get("name"),
        )
    raise err('expected node kind "llm" or "tool"', node_id, "kind", kind)


def record_from_dict(d: Any, *, source: str = "<memory>", line: int | None = None) -> Record:
    """Parse and check one record from its JSON form.

    The record is checked on its own (:func:`traces.checks.check_record`); the trace-level
    rules (sorted arrivals, unique ids, known models) need :func:`traces.checks.validate_records`.

    :param d: the decoded JSON object.
    :param source: file name used in error messages.
    :param line: 1-based line of the record in ``source``, if known.
    :raises TraceValidationError: on an unknown schema version, a missing, unknown or
        ill-typed field, or any other rule of :func:`~traces.checks.check_record`.
    """
    record_id = d.get("id") if isinstance(d, dict) else None

    def err(problem: str, node_id: Any = None, field: str | None = None, *value: Any):
        return TraceValidationError(
            problem,
            source=source,
            line=line,
            record_id=record_id if isinstance(record_id, str) else None,
            node_id=node_id if isinstance(node_id, str) else None,
            field=field,
            **({"value": value[0]} if value else {}),
        )

    if not isinstance(d, dict):
        raise err(f"expected a JSON object, got {type(d).__name__}")
    schema = d.get("schema")
    if schema == REQUEST_SCHEMA:
        _check_keys(d, _REQUEST_KEYS, _REQUEST_REQUIRED, err)
        rec: Record = Request(
            id=d["id"],
            arrival=_float_if_int(d["arrival"]),
            model=d["model"],
            input_tokens=d["input_tokens"],
            output_tokens=d["output_tokens"],
            task=d.get("task", "chat"),
            prompt=d.get("prompt"),
            prefix_hashes=_tuple_if_list(d.get("prefix_hashes")),
            slo=_float_if_int(d.get("slo")),
            meta=d.get("meta", {}),
        )
    elif schema == WORKFLOW_SCHEMA:
        _check_keys(d, _WORKFLOW_KEYS, _WORKFLOW_REQUIRED, err)
        nodes = d["nodes"]
        if not isinstance(nodes, list):
            raise err("expected a list of nodes", None, "nodes", nodes)
        rec = Workflow(
            id=d["id"],
            arrival=_float_if_int(d["arrival"]),
            nodes=tuple(_node_from_dict(n, err, i) for i, n in enumerate(nodes)),
            meta=d.get("meta", {}),
        )
    else:
        raise err(
            f"unknown schema version (expected {REQUEST_SCHEMA!r} or {WORKFLOW_SCHEMA!r})",
            None,
            "schema",
            schema,
        )
    check_record(rec, source=source, line=line)
    return rec


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for key, value in pairs:
        if key in d:
            raise ValueError(f"duplicate key {key!r} in a JSON object")
        d[key] = value
    return d


def _lines(chunks: Iterable[bytes] | bytes) -> Iterator[bytes]:
    """The lines of ``chunks`` split as text mode splits a file (at ``\\n``, ``\\r\\n`` and
    ``\\r``), without their line ends; chunk by chunk, so a trace file streams."""
    if isinstance(chunks, (bytes, bytearray)):
        chunks = (chunks,)
    for chunk in chunks:
        yield from chunk.splitlines()


def iter_trace(
    path: str | Path,
    *,
    validate: bool = True,
    known_models: Iterable[str] | None = None,
    models_from: str | None = None,
) -> Iterator[Record]:
    """Stream the records of a JSONL trace file, checking each as it is read.

    Blank lines are skipped. Every record is checked on its own; with ``validate`` the
    trace-level rules are checked too, up to the record being yielded, and a file without any
    record is an error once it is read to the end.

    :param path: the trace file (UTF-8 JSON Lines).
    :param validate: also check sorted arrivals, unique ids, one record kind, known models and
        that the trace is not empty.
    :param known_models: allowed model names; the simulator catalog when ``None``.
    :param models_from: what ``known_models`` are, for the error message.
    :raises TraceValidationError: at the first bad line, naming file, line, record, node, field;
        a line that is not UTF-8 text or not JSON names the file and line.
    :raises FileNotFoundError: if ``path`` does not exist.
    """
    with open(path, "rb") as f:
        yield from parse_lines(
            f,
            source=str(path),
            validate=validate,
            known_models=known_models,
            models_from=models_from,
        )


def parse_lines(
    chunks: Iterable[bytes] | bytes,
    *,
    source: str = "<memory>",
    validate: bool = True,
    known_models: Iterable[str] | None = None,
    models_from: str | None = None,
) -> Iterator[Record]:
    """The records of JSONL bytes, as :func:`iter_trace` reads a file (the same checks).

    :param chunks: the bytes, in pieces that end at line ends (a binary file object) or whole.
    :param source: name used in error messages.
    :raises TraceValidationError: at the first bad line, naming source, line, record, node, field.
    """
    checker = TraceChecker(known_models, source, models_from) if validate else None
    for line_no, raw in enumerate(_lines(chunks), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceValidationError(
                f"not UTF-8 text: byte {raw[e.start]:#04x} at column {e.start + 1} "
                "(expected a UTF-8 JSON Lines file)",
                source=source,
                line=line_no,
            ) from e
        if not text.strip():
            continue
        try:
            d = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
        except ValueError as e:
            raise TraceValidationError(f"invalid JSON: {e}", source=source, line=line_no) from e
        except RecursionError as e:
            raise TraceValidationError(
                "invalid JSON: nested too deeply (expected one flat record object)",
                source=source,
                line=line_no,
            ) from e
        rec = record_from_dict(d, source=source, line=line_no)
        if checker is not None:
            checker.check(rec, line=line_no, record_checked=True)
        yield rec
    if checker is not None:
        checker.finish()


def read_trace(
    path: str | Path,
    *,
    validate: bool = True,
    known_models: Iterable[str] | None = None,
    models_from: str | None = None,
) -> list[Record]:
    """Read a whole JSONL trace file.

    :param path: the trace file.
    :param validate: also check the trace-level rules (sorted arrivals, unique ids, one record
        kind, known models, at least one record); each record is checked on its own either way.
    :param known_models: allowed model names; the simulator catalog when ``None``.
    :param models_from: what ``known_models`` are, for the error message (e.g. ``"the models
        cluster 'hetero-1' serves"``).
    :raises TraceValidationError: at the first bad line, naming file, line, record, node, field.
    """
    return list(
        iter_trace(path, validate=validate, known_models=known_models, models_from=models_from)
    )


def write_trace(
    records: Iterable[Record],
    path: str | Path,
    *,
    validate: bool = True,
    known_models: Iterable[str] | None = None,
) -> Path:
    """Write a trace as JSON Lines, deterministically (equal traces give identical bytes).

    The file is written to a temporary name and renamed, so a failed write leaves no partial
    trace behind.

    :param records: the records in trace order.
    :param path: the output file.
    :param validate: check the trace first (:func:`~traces.checks.validate_records`).
    :param known_models: allowed model names; the simulator catalog when ``None``.
    :returns: the path written.
    :raises TraceValidationError: if ``validate`` and a record is bad; nothing is written.
    """
    records = list(records)
    path = Path(path)
    if validate:
        validate_records(records, known_models=known_models, source=str(path))
    data = "".join(dumps_record(r) + "\n" for r in records).encode("utf-8")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
