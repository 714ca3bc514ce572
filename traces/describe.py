"""Summary statistics of a trace: size, arrival rate, token lengths, DAG shape, model and task mix.

Usage::

    python -m traces.describe FILE_OR_NAME [--seed S] [--count N] [--data-dir D] [--json]

``FILE_OR_NAME`` is tried in order as a JSONL trace file, a generator name
(:data:`traces.generators.GENERATORS`, called with ``--seed`` and ``--count``) and a loader name
(:data:`traces.loaders.LOADERS`, reading the public trace from the data directory; ``--count``
becomes its ``limit``). Write ``loader:NAME`` for a loader that shares its name with a generator
(``bfcl``, ``lats``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from traces.schema import LLMNode, Record, Request, ToolNode, Workflow


def _dist(values: Sequence[float]) -> dict[str, float] | None:
    """Mean, median and 99th percentile (linear interpolation), or ``None`` when empty."""
    if not values:
        return None
    arr = np.asarray(values, dtype=float)
    return {
        "mean": float(arr.mean()),
        "median": float(np.median(arr)),
        "p99": float(np.percentile(arr, 99)),
    }


def _mean_max(values: Sequence[int]) -> dict[str, float] | None:
    if not values:
        return None
    return {"mean": float(np.mean(values)), "max": int(max(values))}


def _depth_and_fan_out(wf: Workflow) -> tuple[int, int]:
    """Longest parent chain in nodes (a lone node has depth 1) and the most children of a node."""
    children: dict[str, list[str]] = {n.id: [] for n in wf.nodes}
    pending = {n.id: len(n.parents) for n in wf.nodes}
    for node in wf.nodes:
        for parent in node.parents:
            children[parent].append(node.id)
    depth = {node_id: 1 for node_id, count in pending.items() if count == 0}
    frontier = list(depth)
    while frontier:
        node_id = frontier.pop()
        for child in children[node_id]:
            depth[child] = max(depth.get(child, 0), depth[node_id] + 1)
            pending[child] -= 1
            if pending[child] == 0:
                frontier.append(child)
    return max(depth.values()), max(len(c) for c in children.values())


def describe(records: Sequence[Record]) -> dict[str, Any]:
    """Summary statistics of a trace.

    :param records: a valid trace (all requests or all workflows, sorted by arrival).
    :returns: a JSON-serialisable dict: ``kind`` (``"request"``, ``"workflow"`` or ``"empty"``),
        ``count``, ``duration_s`` (last minus first arrival, seconds), ``arrival_rate_per_s``
        (count / duration; ``None`` when the duration is 0), ``llm_calls``, ``input_tokens`` and
        ``output_tokens`` (mean/median/p99 over all LLM calls, tokens), ``models`` and ``tasks``
        (LLM calls per name, most frequent first) and, for workflows, ``llm_calls_per_workflow``
        and ``tool_nodes_per_workflow`` (mean/max), ``tool_latency_s`` (mean/median/p99, seconds),
        ``max_fan_out`` (most children of one node) and ``dag_depth`` (mean/max, nodes on the
        longest parent chain).
    """
    if not records:
        return {"kind": "empty", "count": 0}
    calls: list[Request | LLMNode] = []
    out: dict[str, Any] = {
        "kind": "request" if isinstance(records[0], Request) else "workflow",
        "count": len(records),
    }
    duration = float(records[-1].arrival - records[0].arrival)
    out["duration_s"] = duration
    out["arrival_rate_per_s"] = len(records) / duration if duration > 0 else None
    llm_per_wf: list[int] = []
    tools_per_wf: list[int] = []
    tool_latency: list[float] = []
    depths: list[int] = []
    max_fan_out = 0
    for rec in records:
        if isinstance(rec, Request):
            calls.append(rec)
            continue
        llm = [n for n in rec.nodes if isinstance(n, LLMNode)]
        tools = [n for n in rec.nodes if isinstance(n, ToolNode)]
        calls.extend(llm)
        llm_per_wf.append(len(llm))
        tools_per_wf.append(len(tools))
        tool_latency.extend(float(t.latency) for t in tools)
        depth, fan_out = _depth_and_fan_out(rec)
        depths.append(depth)
        max_fan_out = max(max_fan_out, fan_out)
    out["llm_calls"] = len(calls)
    out["input_tokens"] = _dist([c.input_tokens for c in calls])
    out["output_tokens"] = _dist([c.output_tokens for c in calls])
    out["models"] = dict(Counter(c.model for c in calls).most_common())
    out["tasks"] = dict(Counter(c.task for c in calls).most_common())
    if out["kind"] == "workflow":
        out["llm_calls_per_workflow"] = _mean_max(llm_per_wf)
        out["tool_nodes_per_workflow"] = _mean_max(tools_per_wf)
        out["tool_latency_s"] = _dist(tool_latency)
        out["max_fan_out"] = max_fan_out
        out["dag_depth"] = _mean_max(depths)
    return out


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 or float(x).is_integer() else f"{x:,.3g}"


def _fmt_dist(d: dict[str, float] | None, unit: str = "") -> str:
    if d is None:
        return "-"
    keys = [k for k in ("mean", "median", "p99", "max") if k in d]
    return "  ".join(f"{k} {_num(d[k])}{unit}" for k in keys)


def _fmt_mix(counts: dict[str, int], total: int) -> str:
    return ", ".join(f"{name} {100 * n / total:.1f}%" for name, n in counts.items()) or "-"


def format_description(d: dict[str, Any]) -> str:
    """Render :func:`describe` output as an aligned, human-readable block of text.

    :param d: the dict returned by :func:`describe`.
    """
    if d["count"] == 0:
        return "empty trace (0 records)"
    rate = d["arrival_rate_per_s"]
    rows = [
        ("records", f"{d['count']:,} {d['kind']}s"),
        (
            "duration",
            f"{_num(d['duration_s'])} s"
            + (f" ({rate:.3g} arrivals/s)" if rate is not None else " (all arrive at once)"),
        ),
        ("LLM calls", f"{d['llm_calls']:,}"),
        ("input tokens", _fmt_dist(d["input_tokens"])),
        ("output tokens", _fmt_dist(d["output_tokens"])),
    ]
    if d["kind"] == "workflow":
        rows += [
            ("LLM calls/workflow", _fmt_dist(d["llm_calls_per_workflow"])),
            ("tool nodes/workflow", _fmt_dist(d["tool_nodes_per_workflow"])),
            ("tool latency", _fmt_dist(d["tool_latency_s"], " s")),
            ("max fan-out", str(d["max_fan_out"])),
            ("DAG depth", _fmt_dist(d["dag_depth"])),
        ]
    rows += [
        ("models", _fmt_mix(d["models"], d["llm_calls"])),
        ("tasks", _fmt_mix(d["tasks"], d["llm_calls"])),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _registry(module: str, attr: str) -> tuple[dict[str, Any], str | None]:
    """A name -> callable registry, imported lazily; ``({}, reason)`` if it cannot be imported."""
    import importlib

    try:
        return dict(getattr(importlib.import_module(module), attr)), None
    except (ImportError, AttributeError) as err:
        return {}, f"{module}.{attr} unavailable: {err}"


_PREFIXES = ("generator:", "loader:")


def load_named(
    name: str,
    *,
    seed: int = 0,
    count: int | None = None,
    data_dir: str | Path | None = None,
    known_models: Sequence[str] | None = None,
) -> list[Record]:
    """Records from a JSONL file, a generator or a loader, tried in that order.

    :param name: a path to a JSONL trace, a generator name or a loader name; a name that is
        both is taken as the generator unless written ``loader:<name>`` (``generator:<name>``
        is accepted too).
    :param seed: generator seed.
    :param count: number of records for a generator; ``limit`` for a loader; ignored for a file.
    :param data_dir: data directory for loaders; ``SERVEGYM_DATA`` when ``None``.
    :param known_models: allowed model names when reading a file; the catalog when ``None``.
    :raises LookupError: when ``name`` is none of the three; the message lists the known names.
    """
    path = Path(name)
    if path.is_file():
        from traces.io import read_trace

        return read_trace(path, known_models=known_models)
    kind, _, bare = name.rpartition(":") if name.startswith(_PREFIXES) else ("", "", name)
    generators, gen_err = _registry("traces.generators", "GENERATORS")
    loaders, load_err = _registry("traces.loaders", "LOADERS")
    if bare in generators and kind in ("", "generator"):
        if kind == "" and bare in loaders:
            print(
                f"note: {bare!r} is both a generator and a loader; using the generator "
                f"(say loader:{bare} for the loader)",
                file=sys.stderr,
            )
        return generators[bare](seed=seed, count=count)
    if bare in loaders and kind in ("", "loader"):
        kwargs: dict[str, Any] = {} if count is None else {"limit": count}
        return loaders[bare](data_dir=data_dir, **kwargs)
    gen_names = gen_err or ", ".join(sorted(generators)) or "none"
    load_names = load_err or ", ".join(sorted(loaders)) or "none"
    raise LookupError(
        f"{name!r} is not a trace file (no file at {str(path.resolve())!r}), nor a generator "
        f"(known: {gen_names}), nor a loader (known: {load_names})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m traces.describe``; returns the exit code."""
    from traces.checks import TraceValidationError
    from traces.data import DataDirNotFoundError

    parser = argparse.ArgumentParser(
        prog="python -m traces.describe",
        description="Summary statistics of a trace file, a generator or a loader.",
    )
    parser.add_argument("source", metavar="FILE_OR_NAME", help="JSONL file, generator or loader")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--count", type=int, help="records to generate, or loader limit")
    parser.add_argument("--data-dir", help="data directory for loaders (default: $SERVEGYM_DATA)")
    parser.add_argument("--known-models", help="comma-separated allowed models for a file")
    parser.add_argument("--json", action="store_true", help="print the statistics as JSON")
    args = parser.parse_args(argv)
    known = None
    if args.known_models is not None:
        known = [m.strip() for m in args.known_models.split(",") if m.strip()]
    try:
        records = load_named(
            args.source,
            seed=args.seed,
            count=args.count,
            data_dir=args.data_dir,
            known_models=known,
        )
    except (LookupError, TraceValidationError, DataDirNotFoundError, OSError, ValueError) as err:
        message = err.args[0] if isinstance(err, LookupError) and err.args else err
        print(f"error: {message}", file=sys.stderr)
        return 1
    stats = describe(records)
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        print(format_description(stats))
    return 0


if __name__ == "__main__":
    from traces.describe import main as _main

    sys.exit(_main())
