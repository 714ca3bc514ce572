"""A simulation as a timeline for Perfetto (ui.perfetto.dev) or ``chrome://tracing``.

Writes the Chrome trace-event JSON format (the "JSON Object Format": ``{"traceEvents": [...]}``,
timestamps in microseconds of simulated time):

* one process per instance role (``prefill``, ``decode``, ``monolithic``), one thread per
  instance named after it (``prefill-3-h100-sxm``). A batching instance runs many calls at once,
  and slices on one thread must nest, so its calls are spread over *lanes* (extra threads named
  ``<instance> · lane i``) such that calls on a lane never overlap;
* complete (``X``) slices per call: ``prefill`` on the instance that prefilled it, ``kv
  transfer`` (P-D clusters) on its prefill instance's transfer lanes, ``decode`` on the decode
  (or monolithic) instance; each carries the call's id, tokens and times;
* counters (``C``) per instance: calls waiting for it (prefill: from reveal to prefill start, on
  the instance that served the call; decode: from the end of the KV transfer to decode start);
* one async span per workflow (``b``/``e``, process ``workflows``) from arrival to its last
  node, with C_w, H_w and C_w / H_w.

Everything comes from :class:`~envs.sim.core.simulation.SimulationResult` records, so a timeline can
be written for any finished (or truncated: unfinished stages are left out) run::

    from envs.sim.core.timeline import write_timeline
    write_timeline(sim.result(), sim.cluster, "episode.json")
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envs.sim.core.simulation import CallRecord, SimulationResult
from envs.sim.hardware.cluster import ClusterSpec

_US = 1e6  # trace-event timestamps are microseconds
_ROLES = ("prefill", "decode", "monolithic")
_LANE_TID = 1000  # lane i of instance j is thread j * _LANE_TID + i (lane 0 = the instance's)
_TRANSFER_TID = 500  # transfer lanes start at thread j * _LANE_TID + _TRANSFER_TID


def _ts(seconds: float) -> float:
    """Microseconds, rounded to the nanosecond so that a slice ending when the next one on its
    lane starts never overlaps it after conversion."""
    return round(seconds * _US, 3)


def _pid(role: str) -> int:
    return _ROLES.index(role) + 1


_WORKFLOW_PID = len(_ROLES) + 1


class _Lanes:
    """Greedy interval partitioning: each slice takes the lowest-numbered lane that is free."""

    def __init__(self) -> None:
        self.free: list[int] = []  # lanes whose last slice ended, as a heap of lane numbers
        self.busy: list[tuple[float, int]] = []  # (end, lane) of running slices
        self.count = 0

    def take(self, start: float, end: float) -> int:
        while self.busy and self.busy[0][0] <= start:
            heapq.heappush(self.free, heapq.heappop(self.busy)[1])
        if self.free:
            lane = heapq.heappop(self.free)
        else:
            lane, self.count = self.count, self.count + 1
        heapq.heappush(self.busy, (end, lane))
        return lane


def _call_args(c: CallRecord) -> dict[str, Any]:
    return {
        "call": f"{c.workflow_id}/{c.node_id}",
        "task": c.task,
        "input_tokens": c.input_tokens,
        "output_tokens": c.output_tokens,
        "predicted_output_tokens": c.predicted_output_tokens,
        "cached_tokens": c.cached_tokens,
        "revealed_at_s": c.revealed_at,
        "preemptions": c.preemptions,
        "migrations": c.migrations,
    }


def timeline_events(result: SimulationResult, cluster: ClusterSpec) -> list[dict[str, Any]]:
    """The trace events of ``result`` on ``cluster`` (the cluster the run used, including
    instances added during it), sorted by timestamp.

    :raises ValueError: if a record names an instance the cluster does not have.
    """
    specs = {s.index: s for s in cluster.instances}
    slices: list[tuple[str, int, float, float, str, dict[str, Any]]] = []  # kind, inst, ...
    waits: list[tuple[int, float, float]] = []  # (instance, from, to) of queued calls
    for c in result.calls:
        for index in (c.prefill_instance, c.decode_instance):
            if index >= 0 and index not in specs:
                raise ValueError(
                    f"call {c.workflow_id}/{c.node_id} names instance {index}, which cluster "
                    f"{cluster.name!r} does not have"
                )
        args = _call_args(c)
        name = f"{c.workflow_id}/{c.node_id}"
        if c.prefill_start >= 0 and c.prefill_end >= c.prefill_start:
            slices.append(
                ("prefill", c.prefill_instance, c.prefill_start, c.prefill_end, name, args)
            )
            waits.append((c.prefill_instance, c.revealed_at, c.prefill_start))
        pd = c.decode_instance >= 0 and specs[c.decode_instance].role == "decode"
        if pd and c.transfer_end > c.prefill_end >= 0:
            slices.append(
                ("transfer", c.prefill_instance, c.prefill_end, c.transfer_end, name, args)
            )
        if c.decode_start >= 0 and c.decode_end >= c.decode_start and c.output_tokens > 0:
            slices.append(("decode", c.decode_instance, c.decode_start, c.decode_end, name, args))
            if pd and c.transfer_end >= 0:
                waits.append((c.decode_instance, c.transfer_end, c.decode_start))

    events: list[dict[str, Any]] = []
    # every instance gets its track, so an idle one shows as idle
    threads = {(_pid(s.role), s.index * _LANE_TID): s.name for s in cluster.instances}
    lanes: dict[tuple[int, str], _Lanes] = {}
    slices.sort(key=lambda s: (s[2], s[3], s[1]))
    for kind, index, start, end, name, args in slices:
        spec = specs[index]
        group = "transfer" if kind == "transfer" else "serve"
        lane = lanes.setdefault((index, group), _Lanes()).take(start, end)
        base = index * _LANE_TID + (_TRANSFER_TID if kind == "transfer" else 0)
        tid = base + lane
        if (_pid(spec.role), tid) not in threads:
            label = spec.name if kind != "transfer" else f"{spec.name} · kv transfer"
            threads[_pid(spec.role), tid] = label if lane == 0 else f"{label} · lane {lane}"
        ts = _ts(start)
        events.append(
            {
                "name": name,
                "cat": "kv transfer" if kind == "transfer" else kind,
                "ph": "X",
                "ts": ts,
                "dur": _ts(end) - ts,
                "pid": _pid(spec.role),
                "tid": tid,
                "args": {**args, "stage": kind, "instance": spec.name},
            }
        )
    events += _queue_counters(waits, specs)
    events += _workflow_spans(result)
    events.sort(key=lambda e: e["ts"])
    meta: list[dict[str, Any]] = []
    for role in _ROLES:
        if any(s.role == role for s in cluster.instances):
            meta.append(_meta("process_name", _pid(role), 0, f"{role} instances"))
            meta.append(_meta("process_sort_index", _pid(role), 0, _pid(role), key="sort_index"))
    meta.append(_meta("process_name", _WORKFLOW_PID, 0, "workflows"))
    for (pid, tid), label in sorted(threads.items()):
        meta.append(_meta("thread_name", pid, tid, label))
        meta.append(_meta("thread_sort_index", pid, tid, tid, key="sort_index"))
    return meta + events


def _meta(kind: str, pid: int, tid: int, value: Any, key: str = "name") -> dict[str, Any]:
    return {"name": kind, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {key: value}}


def _queue_counters(
    waits: Iterable[tuple[int, float, float]], specs: dict[int, Any]
) -> list[dict[str, Any]]:
    """One counter track per instance: calls waiting for it over time."""
    changes: dict[int, list[tuple[float, int]]] = {}
    for index, start, end in waits:
        if end > start:
            changes.setdefault(index, []).extend([(start, 1), (end, -1)])
    out = []
    for index, steps in sorted(changes.items()):
        spec = specs[index]
        steps.sort()
        level = 0
        i = 0
        while i < len(steps):
            t = steps[i][0]
            while i < len(steps) and steps[i][0] == t:  # one value per instant
                level += steps[i][1]
                i += 1
            out.append(
                {
                    "name": f"{spec.name} waiting",
                    "ph": "C",
                    "ts": _ts(t),
                    "pid": _pid(spec.role),
                    "tid": index * _LANE_TID,
                    "args": {"calls": level},
                }
            )
    return out


def _workflow_spans(result: SimulationResult) -> list[dict[str, Any]]:
    out = []
    for i, w in enumerate(result.workflows):
        if not math.isfinite(w.finish):
            continue  # unfinished: no end to draw
        args: dict[str, Any] = {"C_w_s": w.completion_time}
        if w.horizon > 0 and math.isfinite(w.horizon):  # NaN when horizons were not computed
            args["H_w_s"] = w.horizon
            args["C_w/H_w"] = w.completion_time / w.horizon
        common = {"name": w.id, "cat": "workflow", "id": i, "pid": _WORKFLOW_PID, "tid": 0}
        out.append({**common, "ph": "b", "ts": _ts(w.arrival), "args": args})
        out.append({**common, "ph": "e", "ts": _ts(w.finish)})
    return out


def write_timeline(result: SimulationResult, cluster: ClusterSpec, path: str | Path) -> Path:
    """Write ``result``'s timeline (see the module docstring) to ``path`` (parents created).

    :return: the path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "traceEvents": timeline_events(result, cluster),
        "displayTimeUnit": "ms",
        "otherData": {
            "source": "servegym",
            "cluster": cluster.name,
            "simulated_seconds": result.end_time,
            "metrics": {k: v for k, v in result.metrics.items() if math.isfinite(v)},
        },
    }
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(doc, allow_nan=False))
    tmp.replace(path)  # never a half-written timeline
    return path
