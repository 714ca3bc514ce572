"""Issue 32 (simulator part): the compact record store and the event-loop shortcuts give the same
simulation as before.

* ``Simulation(record_store="compact" | "disk")`` packs a finished workflow's calls into
  fixed-width rows (spilled to a temporary file under ``disk``); its result must equal the
  ``objects`` store's record for record, bit for bit, on P-D and monolithic clusters (migration,
  preemption), also after a pickle round trip mid-run, and ``sim.calls`` must read the same
  record fields back for every call, live or packed.
* A pending invocation lists only calls still waiting (``_drop_started_calls`` now rebuilds a
  list only when a call that started names it): checked at every decision of a run.
* The isolated-time cache is bounded (cleared when full): a tiny bound gives the same records.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import numpy as np
import pytest

from envs.sim import DefaultScheduler, Simulation, load_cluster
from envs.sim.core import estimates as sim_estimates
from envs.sim.core.protocol import Assignment
from envs.sim.core.records import CallStore, CallTable, PackedCall
from envs.sim.core.workflows import DONE, WorkflowRun
from traces.generators import generate


def _pd(record_store: str = "objects", **kw: Any) -> Simulation:
    records = generate("mixed", seed=0, count=25)
    return Simulation(load_cluster("hetero-1"), records, seed=0, record_store=record_store, **kw)


def _mono(record_store: str = "objects") -> Simulation:
    """Overloaded vLLM engines: paged KV with preemption and GoodServe's migration checks."""
    cluster = load_cluster("goodserve-4", model="llama3.1-8b")
    records = generate("goodserve-sessions", seed=0, count=300, model="llama3.1-8b", rate=60.0)
    return Simulation(
        cluster,
        records,
        seed=0,
        engine="vllm",
        check_interval=50,
        compute_horizons=False,
        record_store=record_store,
    )


class _Mover(DefaultScheduler):
    """The default scheduler, except that each migration check moves the first listed call to
    the next instance (so records carry migrations)."""

    def plan(self, sim: Any, inv: Any) -> list[Assignment]:
        if inv.stage != "migrate" or not inv.calls:
            return super().plan(sim, inv)
        target = (inv.instance + 1) % len(sim.monolithic)
        return [Assignment(inv.calls[0], inv.calls[0].decode_priority, target)]


def _small_chunks(sim: Simulation, spill: bool) -> Simulation:
    """Give ``sim`` (before its first event) a store with 7-row chunks, so a short run fills and
    spills many of them."""
    sim._store = CallStore(sim.runs, chunk_rows=7, spill=spill)
    sim.calls = CallTable(sim._store)
    return sim


def _fields(call: Any) -> tuple:
    """A call's record fields as ``sim.calls`` shows them (instances as stored: None or index)."""
    return (
        call.uid,
        call.workflow.id,
        call.node.id,
        call.model,
        call.input_tokens,
        call.output_tokens,
        call.predicted_output_tokens,
        call.revealed_at,
        call.prefill_instance,
        call.decode_instance,
        call.prefill_start,
        call.prefill_end,
        call.transfer_end,
        call.decode_start,
        call.decode_end,
        call.cached_tokens,
        call.migrations,
        call.migration_seconds,
        call.preemptions,
        call.recomputed_tokens,
    )


@pytest.mark.parametrize("make", [_pd, _mono], ids=["pd", "monolithic-migration"])
@pytest.mark.parametrize("store", ["compact", "disk"])
def test_packed_store_reproduces_the_object_records_exactly(
    sim_digest, make: Any, store: str
) -> None:
    ref_sim = make()
    ref = ref_sim.run(_Mover())
    sim = _small_chunks(make(store), spill=store == "disk")
    res = sim.run(_Mover())
    assert sim_digest(res) == sim_digest(ref)
    assert [dataclasses.astuple(r) for r in res.calls] == [
        dataclasses.astuple(r) for r in ref.calls
    ]
    assert res.metrics == ref.metrics
    # every finished workflow's calls were packed and their Call objects let go
    assert len(sim._store) == len(ref.calls) and not sim.calls.live
    assert (sim._store._spilled > 0) == (store == "disk")
    # sim.calls reads the same fields back, by index, slice and iteration
    assert [_fields(c) for c in sim.calls] == [_fields(c) for c in ref_sim.calls]
    assert all(isinstance(c, PackedCall) and c.stage == DONE for c in sim.calls)
    assert _fields(sim.calls[-1]) == _fields(ref_sim.calls[-1])
    assert [_fields(c) for c in sim.calls[3:9]] == [_fields(c) for c in ref_sim.calls[3:9]]
    if make is _mono:
        assert any(c.migrations for c in sim.calls) and any(c.preemptions for c in sim.calls)
    # a finished run kept what the workflow records need and dropped the per-node state
    run = sim.runs[0]
    assert run.finish_time >= 0 and not run.calls and not run.path_end
    assert not run.service_path and not run.children and not run.finished and run.done


def test_packed_store_survives_a_pickle_mid_run() -> None:
    ref = _pd().run(DefaultScheduler())
    sim = _small_chunks(_pd("disk", compute_horizons=False), spill=True)
    scheduler = DefaultScheduler()
    while sim.finished_runs < 10:
        sim.apply(scheduler.plan(sim, sim.advance()))
    assert sim._store._spilled > 0 and sim.calls.live  # rows on disk and calls in flight
    copy = pickle.loads(pickle.dumps(sim))
    for s in (sim, copy):
        while (inv := s.advance()) is not None:
            s.apply(scheduler.plan(s, inv))
    a, b = sim.result(), copy.result()
    assert [dataclasses.astuple(r) for r in a.calls] == [dataclasses.astuple(r) for r in b.calls]
    assert [dataclasses.astuple(r) for r in a.calls] == [dataclasses.astuple(r) for r in ref.calls]


def test_live_and_packed_calls_mix_in_uid_order() -> None:
    """Mid-run, ``sim.calls`` holds live Call objects and packed ones, each at its uid."""
    sim = _small_chunks(_pd("compact"), spill=False)
    scheduler = DefaultScheduler()
    while sim.finished_runs < 5:
        sim.apply(scheduler.plan(sim, sim.advance()))
    kinds = {type(c).__name__ for c in sim.calls}
    assert kinds == {"Call", "PackedCall"}
    assert [c.uid for c in sim.calls] == list(range(len(sim.calls)))
    res = sim.result()  # a mid-run result mixes packed and live records in uid order
    assert [(r.workflow_id, r.node_id) for r in res.calls] == [
        (c.workflow.id, c.node.id) for c in sim.calls
    ]


def test_record_store_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="record_store.*'bogus'"):
        _pd("bogus")
    sim = _pd("compact")
    with pytest.raises(IndexError, match="call index 0 out of range"):
        sim.calls[0]
    with pytest.raises(ValueError, match="chunk_rows"):
        CallStore([], chunk_rows=0)


def test_store_refuses_values_it_could_not_read_back_identical() -> None:
    sim = _pd("compact")
    scheduler = DefaultScheduler()
    while not sim.calls.live:
        sim.apply(scheduler.plan(sim, sim.advance()))
    call = next(iter(sim.calls.live.values()))
    call.prefill_start = np.float64(1.5)  # a numpy float would repr differently
    with pytest.raises(TypeError, match="prefill_start"):
        sim._store.add(call)


def test_pending_invocations_list_only_waiting_calls() -> None:
    """At every decision of a P-D run with estimate errors (many invocations raised in the same
    event as an engine start), every call an invocation lists is still waiting at its stage."""
    records = generate("mixed", seed=3, count=25)
    sim = Simulation(load_cluster("hetero-1"), records, seed=3, compute_horizons=False)
    scheduler = DefaultScheduler()
    checked = 0
    while (inv := sim.advance()) is not None:
        for pending in sim.pending:
            if pending.stage == "migrate":
                continue
            waiting = sim.waiting_decode if pending.stage == "decode" else sim.waiting_prefill
            assert all(c.uid in waiting for c in pending.calls), pending
            assert all(c.uid in waiting for c in pending.new_calls), pending
            checked += 1
        sim.apply(scheduler.plan(sim, inv))
    assert checked > 100


def test_isolated_time_cache_bound_changes_nothing(
    sim_digest, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = _pd().run(DefaultScheduler())
    monkeypatch.setattr(sim_estimates, "ISOLATED_CACHE_ENTRIES", 3)
    sim = _pd()
    res = sim.run(DefaultScheduler())
    assert len(sim.estimates._isolated_cache) <= 3
    assert sim_digest(res) == sim_digest(ref)


def test_incremental_path_end_max_equals_a_rescan() -> None:
    """``WorkflowRun.max_path_end`` (kept as ends are set) equals ``max(path_end.values())``
    after every update of random ends, up and down, ties included."""
    run = WorkflowRun(generate("mixed", seed=0, count=1)[0], 0)
    rng = np.random.default_rng(0)
    ids = list(run.nodes)
    assert len(ids) > 3
    for _ in range(3000):
        node = ids[int(rng.integers(len(ids)))]
        end = float(rng.integers(0, 20)) / 4.0  # coarse values: many ties
        run.set_path_end(node, end)
        assert run.max_path_end() == max(run.path_end.values())
    run.clear_path_ends()
    run.set_path_end(ids[0], 0.5)
    assert run.max_path_end() == 0.5
