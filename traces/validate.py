"""Validate a servegym trace: ``python -m traces.validate FILE [--known-models a,b]`` prints a
one-line summary and exits 0 when the trace is valid, else prints the error and exits 1.

The rules live in :mod:`traces.checks` (field types and ranges, a well-formed workflow DAG, one
record kind, unique ids, sorted arrivals, model names known to the simulator catalog);
this module is their public entry point and re-exports them, so ``from traces.validate import
validate_records, TraceValidationError`` keeps working. Files are read by :mod:`traces.io`,
which checks every record with the same rules.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from traces.checks import (
    MAX_SECONDS,
    MAX_TOKENS,
    TraceChecker,
    TraceValidationError,
    check_record,
    validate_records,
)
from traces.io import read_trace
from traces.schema import LLMNode, Record, Request, ToolNode

__all__ = [
    "MAX_SECONDS",
    "MAX_TOKENS",
    "TraceChecker",
    "TraceValidationError",
    "check_record",
    "main",
    "summarize",
    "validate_records",
]


def summarize(records: Sequence[Record]) -> str:
    """One line describing a trace: record count and kind, arrival span, LLM calls, tool nodes.

    :param records: a validated trace.
    """
    if not records:
        return "0 records"
    span = f"arrivals {records[0].arrival:g}-{records[-1].arrival:g} s"
    if isinstance(records[0], Request):
        return f"{len(records)} request records, {span}"
    llm = sum(isinstance(n, LLMNode) for r in records for n in r.nodes)  # type: ignore[union-attr]
    tools = sum(isinstance(n, ToolNode) for r in records for n in r.nodes)  # type: ignore[union-attr]
    return f"{len(records)} workflow records, {span}, {llm} LLM calls, {tools} tool nodes"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m traces.validate FILE [--known-models a,b]``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m traces.validate", description="Validate a servegym JSONL trace."
    )
    parser.add_argument("file", help="trace file (JSON Lines)")
    parser.add_argument(
        "--known-models",
        help="comma-separated allowed model names (default: the simulator catalog)",
    )
    args = parser.parse_args(argv)
    known = None
    if args.known_models is not None:
        known = [m.strip() for m in args.known_models.split(",") if m.strip()]
    try:
        records = read_trace(args.file, validate=True, known_models=known)
    except (TraceValidationError, OSError, RuntimeError) as err:
        print(f"invalid trace: {err}", file=sys.stderr)
        return 1
    print(f"{args.file}: valid, {summarize(records)}")
    return 0


if __name__ == "__main__":
    from traces.validate import main as _main

    sys.exit(_main())
