"""GPU fractions as MPS partitions: SMs and memory capped by the share, HBM bandwidth contended
among the busy instances of one GPU (envs/sim/latency/model.py, envs/sim/engines/instances.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from envs.sim.allocation.allocations import Allocation, LLMAllocation
from envs.sim.allocation.placement import place
from envs.sim.core.scheduler import DefaultScheduler
from envs.sim.core.simulation import Simulation
from envs.sim.engines.instances import SharedGPUs
from envs.sim.hardware.catalog import get_gpu
from envs.sim.hardware.cluster import ClusterSpec, InstanceSpec, Topology
from envs.sim.latency.model import (
    BANDWIDTH_SATURATION_SHARE,
    LatencyModel,
    contended_bandwidth_shares,
    load_calibration,
)
from traces.schema import LLMNode, Workflow

GPU = "rtx-a6000"


# -- the contention rule -------------------------------------------------------------------------
def test_rule_alone_packed_and_saturation_one():
    s = BANDWIDTH_SATURATION_SHARE
    assert contended_bandwidth_shares({"a": 1.0}, {"a"}) == {"a": 1.0}
    # alone, a partition pulls more than its SM share, up to the whole GPU
    assert contended_bandwidth_shares({"a": 0.25, "b": 0.75}, {"a"})["a"] == min(1.0, 0.25 / s)
    # fully packed, every share <= saturation, all busy: each gets exactly its share
    quarters = {k: 0.25 for k in "abcd"}
    assert contended_bandwidth_shares(quarters, set("abcd")) == pytest.approx(quarters)
    # saturation 1 is the static partition: bandwidth follows the SM share whoever is busy
    for active in ({"a"}, {"a", "b"}, set("abcd")):
        got = contended_bandwidth_shares(quarters, active, saturation=1.0)
        assert got == {k: 0.25 for k in active}
    with pytest.raises(ValueError, match="sum"):
        contended_bandwidth_shares({"a": 0.6, "b": 0.6}, {"a"})
    with pytest.raises(ValueError, match="not on this GPU"):
        contended_bandwidth_shares({"a": 0.5}, {"z"})


def test_rule_never_hands_out_more_than_the_gpu_and_busier_is_never_faster():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 6))
        raw = rng.random(n) + 0.05
        fr = {i: float(x) for i, x in enumerate(raw / raw.sum() * rng.uniform(0.3, 1.0))}
        for k in range(1, n + 1):
            for active in itertools.combinations(range(n), k):
                got = contended_bandwidth_shares(fr, set(active))
                assert sum(got.values()) <= 1 + 1e-12
                assert all(0 < v <= 1 for v in got.values())
                # adding a busy neighbour never raises anyone's share
                for extra in set(range(n)) - set(active):
                    more = contended_bandwidth_shares(fr, set(active) | {extra})
                    assert all(more[a] <= got[a] + 1e-12 for a in active)


# -- the latency model: compute capped, bandwidth free ---------------------------------------------
def test_bandwidth_share_moves_memory_bound_work_only_and_compute_stays_capped():
    # the hard roofline (``roofline``): memory-bound work does not see the compute cap at all
    # (the smooth roofline of the default charges a little of it, by design)
    hard = load_calibration(variant="roofline")
    base = LatencyModel.from_names(GPU, "llama3-8b", 1, 0.5, calibration=hard)
    free = LatencyModel.from_names(GPU, "llama3-8b", 1, 0.5, bandwidth_share=1.0, calibration=hard)
    whole = LatencyModel.from_names(GPU, "llama3-8b", 1, 1.0, calibration=hard)
    # memory is the share's, whatever the bandwidth
    assert free.usable_memory_bytes == base.usable_memory_bytes
    assert base.usable_memory_bytes <= 0.5 * get_gpu(GPU).memory_bytes
    # decode (weight and KV reads) is memory-bound: more bandwidth, faster, and no faster than
    # a whole GPU (its fixed overheads are the same)
    assert free.decode_iteration_time(8, 8 * 1000) < 0.7 * base.decode_iteration_time(8, 8000)
    assert free.decode_iteration_time(8, 8000) == pytest.approx(
        whole.decode_iteration_time(8, 8000), rel=1e-9
    )
    # a long prefill is compute-bound: the SM cap holds, extra bandwidth buys only its
    # elementwise (memory-bound) part
    assert free._gemm_s_per_token == base._gemm_s_per_token
    assert free._attn_flop_s_per_pair == base._attn_flop_s_per_pair
    long_prefill = free.prefill_time(8192)
    assert long_prefill == pytest.approx(base.prefill_time(8192), rel=0.05)
    assert long_prefill > 1.8 * whole.prefill_time(8192)
    # default = fraction, bit for bit
    same = LatencyModel.from_names(GPU, "llama3-8b", 1, 0.5, bandwidth_share=0.5, calibration=hard)
    assert same.decode_iteration_time(3, 999) == base.decode_iteration_time(3, 999)
    with pytest.raises(ValueError, match="bandwidth_share"):
        LatencyModel.from_names(GPU, "llama3-8b", 1, 0.5, bandwidth_share=1.5)


# -- the simulator -------------------------------------------------------------------------------
def _spec(i, model, fraction, gpu_ids):
    return InstanceSpec(i, f"i{i}", "monolithic", GPU, model, 1, fraction, gpu_ids=gpu_ids)


def _run(specs, neighbour_output, token_by_token=False, watch=None, engine=None):
    """One llama3.2-1b call (100 in, 400 out) at t=0 on instance 0; with ``neighbour_output``,
    a llama3-8b call on instance 1 at t=0. Returns (the 1B call's decode seconds, sim)."""
    wfs = [Workflow("a", 0.0, (LLMNode("x", "llama3.2-1b", 100, 400),))]
    if neighbour_output:
        wfs.append(Workflow("b", 0.0, (LLMNode("y", "llama3-8b", 100, neighbour_output),)))
    sim = Simulation(
        ClusterSpec("t", "monolithic", tuple(specs)),
        wfs,
        compute_horizons=False,
        online_horizons=False,
        token_by_token=token_by_token,
        engine=engine,
    )
    if watch is not None:
        watch(sim)
    sim.run(DefaultScheduler())
    (call,) = [c for c in sim.result().calls if c.model == "llama3.2-1b"]
    return call.decode_end - call.decode_start, sim


@pytest.mark.parametrize("engine", [None, "vllm"])
def test_a_busy_neighbour_slows_a_decode_and_an_idle_or_distant_one_does_not(engine):
    shared = [_spec(0, "llama3.2-1b", 0.5, ((0, 0),)), _spec(1, "llama3-8b", 0.5, ((0, 0),))]
    apart = [_spec(0, "llama3.2-1b", 0.5, ((0, 0),)), _spec(1, "llama3-8b", 0.5, ((0, 1),))]
    static = [_spec(0, "llama3.2-1b", 0.5, ()), _spec(1, "llama3-8b", 0.5, ())]
    idle, sim = _run(shared, 0, engine=engine)
    busy, _ = _run(shared, 2000, engine=engine)  # the 8B decodes all along
    brief, _ = _run(shared, 30, engine=engine)  # the 8B stops early
    distant, _ = _run(apart, 2000, engine=engine)
    old, _ = _run(static, 2000, engine=engine)
    # the engine preset's constants are kept in the bandwidth variants
    assert (
        sim.monolithic[0].latency.calibration
        == sim.latency_cache.get(shared[0], sim.engine).calibration
    )
    assert busy > 1.2 * idle
    assert idle < brief < busy
    assert distant == idle  # a neighbour on another GPU takes nothing
    # alone, the half-GPU partition beats the static half-bandwidth model; contended it is no
    # better than it (two half shares both busy: half the bandwidth each)
    assert idle < 0.8 * old
    assert busy == pytest.approx(old, rel=0.02)


def test_contention_repricing_matches_token_by_token():
    shared = [_spec(0, "llama3.2-1b", 0.5, ((0, 0),)), _spec(1, "llama3-8b", 0.5, ((0, 0),))]
    fast, _ = _run(shared, 150)
    slow, _ = _run(shared, 150, token_by_token=True)
    assert fast == pytest.approx(slow, rel=1e-6)


def test_whole_gpus_are_untouched_by_gpu_ids():
    named = [_spec(0, "llama3.2-1b", 1.0, ((0, 0),)), _spec(1, "llama3-8b", 1.0, ((0, 1),))]
    plain = [_spec(0, "llama3.2-1b", 1.0, ()), _spec(1, "llama3-8b", 1.0, ())]
    a, sim_a = _run(named, 2000)
    b, sim_b = _run(plain, 2000)
    assert a == b
    assert not sim_a.shared_gpus.on_gpu
    ends_a = [(c.prefill_end, c.decode_end) for c in sim_a.result().calls]
    ends_b = [(c.prefill_end, c.decode_end) for c in sim_b.result().calls]
    assert ends_a == ends_b


def test_caps_hold_throughout_a_run_at_ten_units_per_gpu():
    """F = 10 (Scepsy §5): place an allocation, run it, and check at every change of who is
    busy that the live shares of a GPU sum to at most 1, every instance's compute and memory
    are its share's, and the busy instances' bandwidth shares sum to at most 1."""
    F = 10
    alloc = Allocation(
        (
            LLMAllocation("llama3.2-1b", 6, 1, 3),  # 3 x 0.2 GPU
            LLMAllocation("e5-base-v2", 2, 1, 2),  # 2 x 0.1 GPU
            LLMAllocation("bge-reranker-base", 2, 1, 1),  # 1 x 0.2 GPU
        ),
        F,
    )
    topo = Topology(GPU, 1, 1, ((0,),))
    placement = place(alloc, topo)
    assert all(u <= F for u in placement.used_units().values())
    specs = placement.instances()
    assert all(s.gpu_ids == ((0, 0),) and s.fraction < 1 for s in specs)
    checked = []

    def watch(sim):
        shared: SharedGPUs = sim.shared_gpus
        original = shared.set_active

        def checking(inst, busy):
            original(inst, busy)
            for insts in shared.on_gpu.values():
                assert sum(o.spec.fraction for o in insts) <= 1 + 1e-9
                got = [shared.bandwidth_share(o) for o in insts if o.index in shared.active]
                assert sum(got) <= 1 + 1e-9
            for o in sim.monolithic:
                lat = o.latency
                assert lat.fraction == o.spec.fraction  # SM cap
                gpu = get_gpu(GPU)
                assert lat.usable_memory_bytes <= o.spec.fraction * gpu.memory_bytes  # memory
                assert 0 < lat.bandwidth_share <= 1
            checked.append(len(shared.active))

        shared.set_active = checking

    wfs = [
        Workflow(
            f"w{i}",
            0.05 * i,
            (
                LLMNode("e", "e5-base-v2", 300, 0),
                LLMNode("r", "bge-reranker-base", 400, 0, parents=("e",)),
                LLMNode("g", "llama3.2-1b", 400, 80, parents=("r",)),
            ),
        )
        for i in range(30)
    ]
    sim = Simulation(
        ClusterSpec("t", "monolithic", specs),
        wfs,
        compute_horizons=False,
        online_horizons=False,
    )
    watch(sim)
    sim.run(DefaultScheduler())
    assert all(math.isfinite(c.decode_end) for c in sim.result().calls)
    assert max(checked) >= 2  # co-located instances were busy together


def test_oversubscribing_a_gpu_is_refused():
    specs = [_spec(0, "llama3.2-1b", 0.75, ((0, 0),)), _spec(1, "llama3-8b", 0.5, ((0, 0),))]
    with pytest.raises(ValueError, match="exceeds the GPU"):
        Simulation(
            ClusterSpec("t", "monolithic", tuple(specs)),
            [Workflow("a", 0.0, (LLMNode("x", "llama3.2-1b", 10, 10),))],
            compute_horizons=False,
            online_horizons=False,
        )


def test_allocation_env_runs_at_ten_units_per_gpu():
    """F = 10 end to end: a tenth-granular allocation is placed, co-located and served."""
    from envs.allocation import AllocationEnv
    from heuristics.allocation import FixedAllocation

    env = AllocationEnv(units_per_gpu=10, periods=1, period_seconds=10.0, workflow_rate=1.0)
    alloc = Allocation(
        (
            LLMAllocation("llama3-8b", 15, 1, 3),  # 3 x 0.5
            LLMAllocation("bge-reranker-base", 3, 1, 1),  # 0.3
            LLMAllocation("e5-base-v2", 2, 1, 1),  # 0.2
        ),
        10,
    )
    pol = FixedAllocation(alloc)
    obs, info = env.reset(seed=0)
    pol.reset()
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(pol.act(obs, info))
        done = term or trunc
    sim = env.sim
    assert sorted(i.spec.fraction for i in sim.monolithic) == [0.2, 0.3, 0.5, 0.5, 0.5]
    assert all(i.shared is sim.shared_gpus for i in sim.monolithic)
    assert all(u == 10 for u in env.placement.used_units().values())  # two GPUs, packed
    assert len(sim.shared_gpus.on_gpu) == 2
    assert info["metrics"]["goodput"] > 0


# -- co-located pair profiles (envs/sim/allocation/scepsy/sweep.py) -----------------------------
def _decode_heavy(n: int = 30) -> list[Workflow]:
    rng = np.random.default_rng(0)
    return [
        Workflow(f"r{i}", 0.0, (LLMNode("c", "llama3.2-1b", int(rng.integers(100, 300)), 120),))
        for i in range(n)
    ]


def test_a_share_is_profiled_next_to_a_busy_partition(monkeypatch):
    from envs.sim.allocation.scepsy.profiles import profile_key
    from envs.sim.allocation.scepsy.replay import NEIGHBOURS, replica_cluster
    from envs.sim.allocation.scepsy.sweep import ReplayConfig, profile_llm
    from envs.sim.allocation.scepsy.tracing import trace_workflows

    fast = ReplayConfig(min_calls=300, max_calls=500, min_workflows=10, refine=1, confirm=0)
    # the pair: the replica's quarter GPU and a busy three-quarter partition on the same GPU
    seen = []
    original = SharedGPUs.fill_with_busy_neighbours

    def spy(self):
        original(self)
        seen.append((dict(self.background), [self.bandwidth_share(o) for o in self.on_gpu[(0, 0)]]))

    monkeypatch.setattr(SharedGPUs, "fill_with_busy_neighbours", spy)
    busy = profile_llm("llama3.2-1b", 1, 0.25, _decode_heavy(), config=fast)
    assert seen and all(bg == {(0, 0): 0.75} for bg, _ in seen)
    s = BANDWIDTH_SATURATION_SHARE
    want = (0.25 / s) / (0.25 / s + min(1.0, 0.75 / s))  # the rule with both busy
    assert all(got == [pytest.approx(want)] for _, got in seen)
    n_busy = len(seen)
    idle = profile_llm("llama3.2-1b", 1, 0.25, _decode_heavy(), config=fast, neighbour="idle")
    static = profile_llm("llama3.2-1b", 1, 0.25, _decode_heavy(), config=fast, neighbour="static")
    assert len(seen) == n_busy  # only the busy mode adds a neighbour
    # more bandwidth, faster decode: alone > next to a busy partition > static quarter
    assert idle.unloaded_p50 < busy.unloaded_p50 < static.unloaded_p50
    assert idle.max_throughput >= busy.max_throughput
    # whole GPUs: one cluster, one cache key whatever the mode
    for mode in ("busy", "idle", "static"):
        c = replica_cluster("llama3.2-1b", 2, 1.0, GPU, mode)
        assert c.instances[0].gpu_ids == () and c.description == ""
    tr = trace_workflows(_decode_heavy(5), name="t")
    key = {m: profile_key("llama3.2-1b", 1, 0.25, GPU, "vllm", [tr], fast, m) for m in NEIGHBOURS}
    assert len(set(key.values())) == 3
    whole = {profile_key("llama3.2-1b", 1, 1.0, GPU, "vllm", [tr], fast, m) for m in NEIGHBOURS}
    assert len(whole) == 1
    with pytest.raises(ValueError, match="neighbour"):
        replica_cluster("llama3.2-1b", 1, 0.5, GPU, "loud")
