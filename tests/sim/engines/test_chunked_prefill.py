"""Specifications of chunked prefill on monolithic instances (vLLM's default scheduling)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.sim import Assignment, DefaultScheduler, Simulation
from envs.sim.hardware.cluster import cluster_from_dict
from envs.sim.latency.model import LatencyModel
from traces.schema import Request

MODEL = "llama3.1-8b"
MODES = ("prefill-first", "chunked")


def mono(*gpus: str, max_batch: int = 16, fraction: float = 1.0) -> object:
    return cluster_from_dict(
        {
            "name": "mono-test",
            "architecture": "monolithic",
            "default_model": MODEL,
            "tensor_parallel": {MODEL: {"a40": 1, "h800": 1, "a800": 1}},
            "instances": [
                {"gpu": g, "max_batch_size": max_batch, "fraction": fraction} for g in gpus
            ],
        }
    )


def requests(specs: list[tuple[float, int, int]]) -> list[Request]:
    t = 0.0
    out = []
    for i, (gap, n_in, n_out) in enumerate(specs):
        t += gap
        out.append(Request(f"r{i}", t, MODEL, n_in, n_out))
    return out


class Pin:
    """Routes every request to one instance (FCFS)."""

    def __init__(self, index: int = 0) -> None:
        self.index = index

    def plan(self, sim, inv):
        return [Assignment(c, c.revealed_at, self.index) for c in inv.new_calls]


class CallAudit:
    """Listener: counts completions and checks KV reservations at every admission."""

    def __init__(self) -> None:
        self.done: Counter = Counter()
        self.over_capacity = 0

    def on_call_done(self, call, inst, now):
        self.done[call.uid] += 1

    def on_admit(self, call, inst, now):
        self.over_capacity += inst.reserved > inst.capacity


class BudgetRecorder:
    """Wraps a LatencyModel and records every mixed iteration the engine prices."""

    def __init__(self, latency: LatencyModel) -> None:
        self._latency = latency
        self.iterations: list[tuple[int, int, int, int, int]] = []

    def __getattr__(self, name):
        return getattr(self._latency, name)

    def mixed_iteration_time(self, *args):
        self.iterations.append(args)
        return self._latency.mixed_iteration_time(*args)


@pytest.mark.parametrize(
    "gpu, model, tp",
    [("h800", MODEL, 1), ("v100-32g", MODEL, 2), ("h200", "qwen3-235b-a22b", 4)],
)
def test_mixed_iteration_time_reduces_to_decode_and_prefill_times(gpu, model, tp):
    lat = LatencyModel.from_names(gpu, model, tp)
    for b, ctx in [(1, 100), (7, 9000), (64, 200_000)]:
        assert lat.mixed_iteration_time(b, ctx, 0, 0, 0) == pytest.approx(
            lat.decode_iteration_time(b, ctx), rel=1e-12
        )
    for n, s, ctx in [(1, 1, 0), (2048, 1, 0), (1500, 3, 4096), (32768, 2, 100_000)]:
        assert lat.mixed_iteration_time(0, 0, n, s, ctx) == pytest.approx(
            lat.prefill_time(n, s, ctx), rel=1e-12
        )
    assert lat.mixed_iteration_time(0, 0, 0, 0, 0) == 0.0
    # Fusing saves a weight read and a fixed overhead but never beats either part alone.
    mixed = lat.mixed_iteration_time(16, 20_000, 2000, 2, 6000)
    dec, pre = lat.decode_iteration_time(16, 20_000), lat.prefill_time(2000, 2, 6000)
    assert max(dec, pre) < mixed < dec + pre


def test_chunked_prefill_of_a_lone_request_takes_budget_sized_chunks():
    # 5000 prompt tokens, budget 2048: chunks 2048, 2048, 904; decoding starts after the last.
    cl = mono("h800")
    sim = Simulation(
        cl, requests([(0.0, 5000, 30)]), compute_horizons=False, prefill_mode="chunked"
    )
    rec = sim.run(Pin()).calls[0]
    lat = sim.monolithic[0].latency
    chunks = lat.prefill_time(2048) + lat.prefill_time(2048, 1, 2048)
    chunks += lat.prefill_time(904, 1, 4096)
    assert rec.prefill_start == 0.0
    assert rec.prefill_end == pytest.approx(chunks, rel=1e-12)
    assert rec.decode_start == rec.prefill_end
    # the last chunk emits the first token; 29 decode iterations follow
    assert rec.decode_end == pytest.approx(chunks + lat.decode_steps_time(1, 5001, 29), rel=1e-12)


def test_chunked_prefill_never_exceeds_token_budget():
    budget = 512
    reqs = requests([(0.002 * (i % 3), 300 + 97 * (i % 11), 5 + 13 * (i % 7)) for i in range(60)])
    sim = Simulation(
        mono("a40"), reqs, compute_horizons=False, prefill_mode="chunked", token_budget=budget
    )
    recorders = []
    for inst in sim.monolithic:
        inst.latency = BudgetRecorder(inst.latency)
        recorders.append(inst.latency)
    sim.run(Pin())
    its = [it for r in recorders for it in r.iterations]
    assert any(b > 0 and n > 0 for b, _, n, _, _ in its)  # decodes and chunks did share
    for decode_batch, _, prefill_tokens, prefill_seqs, _ in its:
        assert prefill_tokens > 0 and prefill_seqs >= 1
        assert decode_batch + prefill_tokens <= budget


@pytest.mark.parametrize("mode", MODES)
def test_every_request_completes_exactly_once_in_both_modes(mode):
    specs = [
        (0.01 * (i % 4), 50 + 311 * (i % 13), (0 if i % 9 == 0 else 3 + 17 * (i % 5)))
        for i in range(80)
    ]
    reqs = requests(specs)
    audit = CallAudit()
    sim = Simulation(
        mono("a40", "h800"), reqs, compute_horizons=False, prefill_mode=mode, token_budget=1024
    )
    sim.add_listener(audit)
    res = sim.run(DefaultScheduler())
    assert sorted(audit.done.values()) == [1] * len(reqs)
    assert all(c.generated == c.output_tokens for c in sim.calls)
    for r in res.calls:
        assert r.revealed_at <= r.prefill_start < r.prefill_end <= r.decode_start <= r.decode_end
        if r.output_tokens == 0:  # zero-output calls end with their prefill
            assert r.decode_end == r.prefill_end
    assert all(not m.running and not m.waiting and m.reserved == 0 for m in sim.monolithic)


@pytest.mark.parametrize("mode", MODES)
def test_kv_capacity_is_never_exceeded_in_both_modes(mode):
    # A 40 % slice of an A40 holds ~19k KV tokens; 60 requests need ~6x that.
    cl = mono("a40", max_batch=64, fraction=0.4)
    reqs = requests([(0.001, 1500 + 10 * i, 300) for i in range(60)])
    audit = CallAudit()
    sim = Simulation(cl, reqs, compute_horizons=False, prefill_mode=mode, token_budget=256)
    sim.add_listener(audit)
    sim.run(Pin())
    inst = sim.monolithic[0]
    assert sum(r.input_tokens + r.output_tokens for r in reqs) > 5 * inst.capacity
    assert audit.over_capacity == 0
    assert inst.capacity - 2000 < inst.peak_reserved <= inst.capacity
    assert sorted(audit.done.values()) == [1] * len(reqs)


class DecodeGaps:
    """Listener: end times of the decode iterations of one instance (token-by-token runs)."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_decode_progress(self, inst, iterations, seconds, batch):
        assert iterations == 1
        self.ends.append(inst.sim.now)


def test_chunked_prefill_bounds_a_running_decodes_stall_under_a_long_prompt():
    budget, long_prompt = 2048, 32768
    short_in, short_out = 1000, 3000
    reqs = [
        Request("short", 0.0, MODEL, short_in, short_out),
        Request("long", 0.5, MODEL, long_prompt, 8),
    ]
    cl = mono("h800")
    lat = LatencyModel.from_names("h800", MODEL)
    gaps = {}
    for mode in MODES:
        listener = DecodeGaps()
        sim = Simulation(
            cl,
            reqs,
            compute_horizons=False,
            token_by_token=True,
            prefill_mode=mode,
            token_budget=budget,
        )
        sim.add_listener(listener)
        res = sim.run(Pin())
        short, long = res.calls
        assert short.decode_start < long.prefill_start and long.prefill_end < short.decode_end
        gaps[mode] = max(b - a for a, b in zip(listener.ends, listener.ends[1:], strict=False))
    # Worst mixed iteration: both decodes at full context, a chunk filling the rest of the
    # budget and attending to the whole long prompt.
    mixed_bound = lat.mixed_iteration_time(
        2, short_in + short_out + long_prompt + 8, budget - 1, 1, long_prompt
    )
    assert gaps["chunked"] <= mixed_bound
    assert gaps["prefill-first"] >= lat.prefill_time(long_prompt)
    assert gaps["chunked"] < lat.prefill_time(long_prompt) / 5


workloads = st.lists(
    st.tuples(st.floats(0.0, 0.3), st.integers(1, 6000), st.integers(0, 300)),
    min_size=1,
    max_size=14,
)


def timeline(result) -> list[tuple]:
    return [
        (c.workflow_id, c.prefill_instance, c.prefill_start, c.prefill_end, c.decode_end)
        for c in result.calls
    ]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads, st.sampled_from([256, 1000, 2048]))
def test_chunked_fast_forward_matches_token_by_token(specs, budget):
    reqs = requests(specs)
    cl = mono("a40", "h800", max_batch=6)
    runs = [
        Simulation(
            cl,
            reqs,
            compute_horizons=False,
            prefill_mode="chunked",
            token_budget=budget,
            token_by_token=slow,
        ).run(DefaultScheduler())
        for slow in (False, True)
    ]
    fast, slow = (timeline(r) for r in runs)
    for a, b in zip(fast, slow, strict=True):
        assert a[:2] == b[:2]
        assert a[2:] == pytest.approx(b[2:], rel=1e-9, abs=1e-9)
    assert runs[0].events <= runs[1].events


def test_invalid_prefill_mode_and_token_budget_are_rejected():
    reqs = requests([(0.0, 10, 10)])
    with pytest.raises(ValueError, match=r"prefill_mode .*'vllm'"):
        Simulation(mono("a40"), reqs, prefill_mode="vllm")
    with pytest.raises(ValueError, match=r"token_budget .*got 0"):
        Simulation(mono("a40"), reqs, prefill_mode="chunked", token_budget=0)
