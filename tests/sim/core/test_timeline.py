"""Timelines open in Perfetto / chrome://tracing: the exported JSON follows the trace-event format
(required fields per phase, microsecond timestamps that never go back on a track, slices on one
thread that never overlap) and carries every call, instance and workflow of the run."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the servegym ids)
from envs.sim import DefaultScheduler, Simulation, load_cluster
from envs.sim.core.timeline import write_timeline
from traces.generators import generate

REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "C": {"name", "ph", "ts", "pid", "args"},
    "b": {"name", "ph", "ts", "pid", "id", "cat"},
    "e": {"name", "ph", "ts", "pid", "id", "cat"},
    "M": {"name", "ph", "pid", "args"},
}


def check_trace_event_format(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Assert ``doc`` is a valid trace-event JSON object; return its events."""
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    last_ts: dict[tuple, float] = {}
    open_until: dict[tuple, float] = defaultdict(lambda: -np.inf)
    for e in events:
        assert e["ph"] in REQUIRED, e
        missing = REQUIRED[e["ph"]] - set(e)
        assert not missing, f"{e} lacks {missing}"
        if e["ph"] == "M":
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        track = (e["pid"], e.get("tid"), e["name"] if e["ph"] == "C" else None)
        assert e["ts"] >= last_ts.get(track, -np.inf), f"time goes back on track {track}"
        last_ts[track] = e["ts"]
        if e["ph"] == "X":
            assert e["dur"] >= 0
            thread = (e["pid"], e["tid"])
            assert e["ts"] >= open_until[thread] - 1e-6, f"overlapping slices on {thread}"
            open_until[thread] = e["ts"] + e["dur"]
        if e["ph"] == "C":
            assert all(v >= 0 for v in e["args"].values())
    return events


def test_pd_run_timeline_is_valid_and_has_every_stage_of_every_call(tmp_path: Path) -> None:
    cluster = load_cluster("hetero-1")
    sim = Simulation(cluster, generate("bfcl", seed=0, count=15), seed=0)
    res = sim.run(DefaultScheduler())
    path = write_timeline(res, sim.cluster, tmp_path / "run.json")
    events = check_trace_event_format(json.loads(path.read_text()))
    by_cat: dict[str, list] = defaultdict(list)
    for e in events:
        by_cat[e.get("cat", "")].append(e)
    decoding = [c for c in res.calls if c.output_tokens > 0]
    assert len(by_cat["prefill"]) == len(res.calls)
    assert len(by_cat["kv transfer"]) == len(decoding) == len(by_cat["decode"])
    assert len(by_cat["workflow"]) == 2 * len(res.workflows)
    spans = [e for e in by_cat["workflow"] if e["ph"] == "b"]
    assert all(e["args"]["C_w/H_w"] >= 1.0 - 1e-9 for e in spans)  # C_w >= H_w alone
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {s.name for s in cluster.instances} <= names
    # a decode slice lasts as long as the call's record says, in microseconds
    c = decoding[0]
    [d] = [e for e in by_cat["decode"] if e["name"] == f"{c.workflow_id}/{c.node_id}"]
    assert d["dur"] == pytest.approx((c.decode_end - c.decode_start) * 1e6, abs=1e-2)


def test_envs_export_their_episode_and_refuse_before_reset(tmp_path: Path) -> None:
    env = gym.make("servegym/Routing-v0", workload_count=30)
    with pytest.raises(RuntimeError, match="call reset"):
        env.unwrapped.export_timeline(tmp_path / "early.json")
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        action = int(np.flatnonzero(info["action_mask"])[0])
        obs, _, term, trunc, info = env.step(action)
        done = term or trunc
    doc = json.loads(env.unwrapped.export_timeline(tmp_path / "routing.json").read_text())
    events = check_trace_event_format(doc)
    assert sum(e.get("cat") == "decode" for e in events) == 30
    assert not any(e.get("cat") == "kv transfer" for e in events)  # monolithic: no transfers
    assert not list(tmp_path.glob("*.part"))


def test_evaluate_writes_one_valid_timeline_per_run(tmp_path: Path) -> None:
    import evaluation

    config = evaluation.EvalConfig(
        workloads=("bfcl",),
        policies=("per-call-fcfs", "hexagent"),
        seeds=(0,),
        count=5,
        timeline=str(tmp_path / "tl"),
        quiet=True,
    )
    rows = evaluation.evaluate(config)
    paths = sorted((tmp_path / "tl").glob("*.json"))
    assert [p.name for p in paths] == [
        "bfcl_hexagent_seed0.json",
        "bfcl_per-call-fcfs_seed0.json",
    ]
    for path, row in zip(paths, sorted(rows, key=lambda r: r["policy"]), strict=True):
        doc = json.loads(path.read_text())
        check_trace_event_format(doc)
        assert doc["otherData"]["metrics"]["req99"] == pytest.approx(row["metrics"]["req99"])
