"""servegym traces: the record schema, validated JSONL I/O, public-trace sources and statistics.

Light to import: only :mod:`traces.schema` is loaded eagerly; the I/O and validation functions
are loaded on first use (so ``python -m traces.validate`` runs without a double import).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from traces.checks import TraceValidationError, validate_records
    from traces.io import iter_trace, read_trace, record_from_dict, record_to_dict, write_trace

_LAZY = {
    "iter_trace": "traces.io",
    "read_trace": "traces.io",
    "record_from_dict": "traces.io",
    "record_to_dict": "traces.io",
    "write_trace": "traces.io",
    "TraceValidationError": "traces.checks",
    "validate_records": "traces.checks",
}

__all__ = [
    "REQUEST_SCHEMA",
    "WORKFLOW_SCHEMA",
    "LLMNode",
    "Node",
    "Record",
    "Request",
    "ToolNode",
    "Workflow",
    "iter_trace",
    "read_trace",
    "record_from_dict",
    "record_to_dict",
    "write_trace",
    "TraceValidationError",
    "validate_records",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'traces' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
