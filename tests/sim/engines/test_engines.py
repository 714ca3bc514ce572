"""Specifications of the serving-engine presets: scheduling modes, token budgets, paged KV with
recompute preemption, first token at the end of the prefill, TTFT/TPOT records, closed_loop."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.sim import Assignment, Simulation
from envs.sim.calibration.benchmark_client import ServingConfigError, closed_loop
from envs.sim.core.protocol import SCHEDULING_MODES
from envs.sim.engines.presets import engine_names, get_engine
from envs.sim.hardware.catalog import get_gpu
from envs.sim.hardware.cluster import cluster_from_dict
from traces.schema import Request

MODEL = "llama3.1-8b"


def mono(gpu: str = "h100-sxm", fraction: float = 1.0, max_batch: int | None = None):
    entry: dict = {"gpu": gpu, "fraction": fraction}
    if max_batch:
        entry["max_batch_size"] = max_batch
    return cluster_from_dict(
        {
            "name": "engine-test",
            "architecture": "monolithic",
            "default_model": MODEL,
            "tensor_parallel": {MODEL: {gpu: 1}},
            "instances": [entry],
        }
    )


def requests(specs: list[tuple[float, int, int]]) -> list[Request]:
    t, out = 0.0, []
    for i, (gap, n_in, n_out) in enumerate(specs):
        t += gap
        out.append(Request(f"r{i}", t, MODEL, n_in, n_out))
    return out


class Pin:
    def plan(self, sim, inv):
        return [Assignment(c, c.revealed_at, 0) for c in inv.new_calls]


class IterationLog:
    """Wraps an instance's latency model and records every iteration it prices."""

    def __init__(self, latency):
        self._lat = latency
        self.mixed: list[tuple[int, int, int, int, int]] = []
        self.prefill: list[tuple[int, int, int]] = []

    def __getattr__(self, name):
        return getattr(self._lat, name)

    def mixed_iteration_time(self, b, ctx, p, seqs, pctx):
        self.mixed.append((b, ctx, p, seqs, pctx))
        return self._lat.mixed_iteration_time(b, ctx, p, seqs, pctx)

    def prefill_time(self, n, num_seqs=1, context_tokens=0):
        self.prefill.append((n, num_seqs, context_tokens))
        return self._lat.prefill_time(n, num_seqs, context_tokens)


def drive(sim: Simulation, check=None):
    """Run ``sim`` event by event, calling ``check(sim)`` after each event."""
    router = Pin()
    while True:
        if sim.pending:
            sim.apply(router.plan(sim, sim.pending[0]))
            continue
        if sim.done or sim.env.peek() == math.inf:
            break
        sim.env.step()
        if check is not None:
            check(sim)
    return sim.result()


def kv_invariant(sim: Simulation) -> None:
    for inst in sim.monolithic:
        held = sum(c.kv_held for c in inst.running)
        assert inst.reserved == held, (inst.reserved, held)
        assert 0 <= inst.reserved <= inst.capacity


# -- presets -----------------------------------------------------------------------------------
def test_presets_load_and_pick_budgets_by_gpu_memory():
    assert set(engine_names()) == {"vllm", "sglang", "trtllm"}
    vllm, sglang, trt = get_engine("vllm"), get_engine("sglang"), get_engine("trtllm")
    assert vllm.token_budget_for(get_gpu("h100-sxm")) == 8192
    assert vllm.token_budget_for(get_gpu("a100-80g")) == 2048  # vLLM keeps A100 on the small tier
    assert vllm.max_batch_for(get_gpu("h200")) == 1024
    assert sglang.token_budget_for(get_gpu("h200")) == 8192  # below 160 GiB
    assert sglang.token_budget_for(get_gpu("h100-sxm")) == 8192
    assert trt.kv_policy == "reserve" and vllm.kv_policy == sglang.kv_policy == "paged"
    with pytest.raises(KeyError, match="known engines"):
        get_engine("tgi")


def test_engine_preset_configures_the_instances():
    sim = Simulation(mono("h100-sxm"), requests([(0, 10, 5)]), engine="sglang")
    inst = sim.monolithic[0]
    assert inst.prefill_mode == "chunked-prefill-first"
    assert inst.token_budget == 8192 and inst.paged
    sim2 = Simulation(mono("h100-sxm"), requests([(0, 10, 5)]), engine="vllm", token_budget=512)
    assert sim2.monolithic[0].token_budget == 512  # explicit values override the preset


# -- first token and TTFT/TPOT -----------------------------------------------------------------
def test_ttft_and_tpot_of_two_simultaneous_requests_by_hand():
    isl, osl = 300, 9
    sim = Simulation(
        mono("h100-sxm"),
        requests([(0, isl, osl), (0, isl, osl)]),
        engine="vllm",
        compute_horizons=False,
    )
    lat = sim.monolithic[0].latency
    res = drive(sim)
    # one mixed iteration prefills both prompts and emits both first tokens ...
    t1 = lat.mixed_iteration_time(0, 0, 2 * isl, 2, 0)
    # ... then osl - 1 decode steps of the pair, contexts growing from isl + 1 each
    steps = [lat.decode_iteration_time(2, 2 * (isl + 1) + 2 * i) for i in range(osl - 1)]
    for rec in res.calls:
        assert rec.ttft == pytest.approx(t1, rel=1e-12)
        assert rec.tpot == pytest.approx(sum(steps) / (osl - 1), rel=1e-9)
        assert rec.latency == pytest.approx(t1 + sum(steps), rel=1e-9)


def test_ttft_of_a_request_arriving_during_anothers_decode():
    isl, osl = 400, 50
    sim = Simulation(
        mono("h100-sxm"),
        requests([(0, isl, osl), (0.0, isl, osl)]),
        engine="trtllm",
        compute_horizons=False,
    )
    res = drive(sim)
    a, b = res.calls
    assert a.ttft == b.ttft  # same iteration (whole prompts fit the 8192 budget)
    sim = Simulation(
        mono("h100-sxm"),
        requests([(0, isl, osl), (0.05, isl, osl)]),
        engine="trtllm",
        compute_horizons=False,
    )
    lat = sim.monolithic[0].latency
    res = drive(sim)
    a, b = res.calls
    # b waits for the end of a's decode iteration in progress, then prefills mixed with a's decode
    assert b.ttft > lat.mixed_iteration_time(1, isl + 1, isl, 1, 0) * 0.999
    assert b.ttft < lat.mixed_iteration_time(1, isl + 1, isl, 1, 0) + lat.decode_iteration_time(
        1, isl + osl
    )


def test_one_token_requests_end_with_their_prefill():
    sim = Simulation(mono(), requests([(0, 100, 1), (0, 50, 1)]), engine="vllm")
    res = drive(sim)
    for rec in res.calls:
        assert rec.decode_end == rec.prefill_end
        assert math.isnan(rec.tpot)


# -- token budget and iteration accounting -----------------------------------------------------
@pytest.mark.parametrize("mode", SCHEDULING_MODES[1:])
def test_iterations_never_exceed_the_budget_and_account_every_token(mode):
    budget = 700
    specs = [(0.01 * (i % 3), 200 + 137 * i, 5 + 3 * i) for i in range(12)]
    sim = Simulation(
        mono("h100-sxm"),
        requests(specs),
        prefill_mode=mode,
        token_budget=budget,
        compute_horizons=False,
    )
    inst = sim.monolithic[0]
    log = IterationLog(inst.latency)
    inst.latency = log
    res = drive(sim)
    assert all(c.decode_end > 0 for c in res.calls)
    prefill_total = 0
    for b, _ctx, p, seqs, _pctx in log.mixed:
        if mode == "mixed-whole" and seqs == 1 and p > budget:
            assert b + p > budget  # a prompt larger than the budget runs alone (with decodes)
        else:
            assert b + p <= budget, (mode, b, p)
        if mode == "chunked-prefill-first" and p:
            assert b == 0  # SGLang: prefill iterations carry no decodes
        prefill_total += p
    assert prefill_total == sum(n for _, n, _ in specs)  # every prompt token computed once


def test_mixed_whole_never_splits_a_prompt():
    specs = [(0, 600, 20), (0, 600, 20), (0, 600, 20)]
    sim = Simulation(mono(), requests(specs), prefill_mode="mixed-whole", token_budget=1000)
    inst = sim.monolithic[0]
    log = IterationLog(inst.latency)
    inst.latency = log
    drive(sim)
    assert all(p % 600 == 0 for _, _, p, _, _ in log.mixed if p)


# -- paged KV and preemption -------------------------------------------------------------------
def tiny_cluster():
    # A fraction of a GPU leaves a KV cache of a few thousand tokens for an 8B model.
    return mono("h100-sxm", fraction=0.25)


def test_paged_engine_preempts_recomputes_exactly_and_never_loses_a_request():
    cap = Simulation(tiny_cluster(), [], engine="vllm").monolithic[0].capacity
    assert 3000 < cap < 200_000
    n_in, n_out = cap // 6, cap // 6  # each needs a third of the cache at the end
    specs = [(0, n_in, n_out)] * 8
    sim = Simulation(tiny_cluster(), requests(specs), engine="vllm", compute_horizons=False)
    inst = sim.monolithic[0]
    log = IterationLog(inst.latency)
    inst.latency = log
    res = drive(sim, kv_invariant)
    assert sum(r.preemptions for r in res.calls) > 0
    done = Counter(r.workflow_id for r in res.calls if r.decode_end > 0)
    assert len(done) == len(specs)
    for c in sim.calls:
        assert c.generated == c.output_tokens
        assert c.recomputed_tokens == c.evicted_tokens
    # the engine computed every prompt once plus exactly the evicted KV once more
    computed = sum(p for _, _, p, _, _ in log.mixed)
    assert computed == sum(n for _, n, _ in specs) + sum(c.evicted_tokens for c in sim.calls)
    assert inst.reserved == 0


def test_reserve_policy_never_preempts_and_queues_instead():
    cap = Simulation(tiny_cluster(), [], engine="trtllm").monolithic[0].capacity
    specs = [(0, cap // 6, cap // 6)] * 8
    sim = Simulation(tiny_cluster(), requests(specs), engine="trtllm", compute_horizons=False)
    res = drive(sim, kv_invariant)
    assert all(r.preemptions == 0 for r in res.calls)
    assert sim.monolithic[0].peak_reserved <= sim.monolithic[0].capacity


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(st.floats(0, 0.2), st.integers(1, 1500), st.integers(1, 400)),
        min_size=1,
        max_size=14,
    ),
    engine=st.sampled_from(["vllm", "sglang", "trtllm"]),
    budget=st.integers(16, 3000),
)
def test_random_workloads_complete_exactly_once_within_kv(specs, engine, budget):
    sim = Simulation(
        tiny_cluster(),
        requests(specs),
        engine=engine,
        token_budget=budget,
        compute_horizons=False,
    )
    res = drive(sim, kv_invariant)
    assert all(r.decode_end >= r.prefill_end >= 0 for r in res.calls)
    for c in sim.calls:
        assert c.generated == c.output_tokens
        assert c.stage == "done"


# -- closed_loop -------------------------------------------------------------------------------
def test_closed_loop_reports_client_metrics():
    r = closed_loop(
        gpu="h100-sxm",
        model=MODEL,
        tp=1,
        engine="vllm",
        isl=512,
        osl=64,
        concurrency=4,
        requests_per_client=3,
    )
    assert r["requests"] == 12
    assert 0 < r["ttft_p50_s"] <= r["ttft_p99_s"]
    assert r["latency_mean_s"] == pytest.approx(r["ttft_mean_s"] + 63 * r["tpot_mean_s"], rel=1e-9)
    assert r["token_budget"] == 8192


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gpu": "a100-80g", "precision": "fp8"}, "fp8"),
        ({"engine": "tgi"}, "tgi"),
        ({"model": "e5-base-v2"}, "encoder-only"),
        ({"isl": 10_000_000}, "KV tokens"),
        ({"tp": 3}, "tp=3"),
        ({"concurrency": 0}, "concurrency"),
    ],
)
def test_closed_loop_rejects_what_it_cannot_represent(kwargs, match):
    base = {"gpu": "h100-sxm", "model": MODEL, "isl": 128, "osl": 16, "concurrency": 2}
    base.update(kwargs)
    with pytest.raises(ServingConfigError, match=match):
        closed_loop(**base)


# -- system-level calibration data mapping -----------------------------------------------------
def silicon_row(**kw) -> dict[str, str]:
    row = {
        "id": "x",
        "model_path": "Qwen/Qwen3-32B",
        "backend": "vllm",
        "backend_version": "0.12.0",
        "system": "h100_sxm",
        "precision": "fp8",
        "mode": "agg",
        "isl": "1024",
        "osl": "128",
        "batch_size": "16",
        "tp_size": "2",
        "pp_size": "1",
        "attention_dp_size": "",
        "moe_tp_size": "1",
        "moe_ep_size": "1",
        "silicon_ttft_ms": "120.5",
        "silicon_tpot_ms": "9.5",
    }
    row.update(kw)
    return row


def test_silicon_rows_map_to_closed_loop_deployments():
    from envs.sim.calibration.calibrate_serving import classify

    row, reason = classify(silicon_row())
    assert reason == "" and row is not None
    kw = row.closed_loop_kwargs()
    assert kw["gpu"] == "h100-sxm" and kw["model"] == "qwen3-32b" and kw["tp"] == 2
    assert kw["precision"] == "fp8" and kw["kv_precision"] == "bf16"  # vLLM: kv dtype auto
    assert kw["concurrency"] == 16 and kw["requests_per_client"] == 20
    assert row.ttft_s == pytest.approx(0.1205) and row.tpot_s == pytest.approx(0.0095)
    trt, _ = classify(silicon_row(backend="trtllm"))
    assert trt.kv_precision == "fp8"  # TensorRT-LLM FP8 checkpoints quantise the KV cache
    bf16, _ = classify(silicon_row(precision=""))
    assert bf16.precision == "bf16"


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"mode": "disagg"}, "disagg"),
        ({"model_path": "deepseek-ai/DeepSeek-V3"}, "MLA"),
        ({"precision": "fp4"}, "fp4"),
        ({"pp_size": "2"}, "pipeline"),
        ({"attention_dp_size": "4"}, "attention data parallelism"),
        ({"model_path": "Qwen/Qwen3-235B-A22B-FP8", "moe_tp_size": "4"}, "MoE layers"),
        ({"silicon_ttft_ms": ""}, "missing"),
    ],
)
def test_silicon_rows_the_simulator_cannot_represent_are_named(kw, reason):
    from envs.sim.calibration.calibrate_serving import classify

    row, why = classify(silicon_row(**kw))
    assert row is None and reason in why


def test_fitted_constants_are_written_into_the_engine_file(tmp_path):
    from envs.sim.calibration.calibrate_serving import write_engine_constants
    from envs.sim.engines.presets import ENGINES_YAML, load_engines

    path = tmp_path / "engines.yaml"
    path.write_text(ENGINES_YAML.read_text())
    fitted = {
        "vllm": {"iteration_overhead_seconds": 0.0021},
        "trtllm": {"moe_kernel_efficiency": 0.5},
    }
    write_engine_constants(fitted, path)
    write_engine_constants(fitted, path)  # idempotent
    presets = load_engines(path)
    assert presets["vllm"].calibrated == {"iteration_overhead_seconds": 0.0021}
    assert presets["trtllm"].calibrated == {"moe_kernel_efficiency": 0.5}
    assert presets["sglang"].calibrated == load_engines()["sglang"].calibrated
    text = path.read_text()
    for engine in presets:  # one block per engine, comments kept
        start = text.index(f"\n{engine}:\n")
        end = text.find("\n\n", start + 1)
        assert text[start : end if end > 0 else len(text)].count("calibrated:") <= 1
    assert text.startswith("# Serving-engine presets")


def test_engine_file_errors_name_the_engine_and_field(tmp_path):
    from envs.sim.engines.presets import load_engines

    bad = tmp_path / "e.yaml"
    bad.write_text(
        "fast:\n  scheduling: magic\n  token_budget: 8\n  max_batch: 8\n  kv_policy: paged\n"
    )
    with pytest.raises(ValueError, match=r"engine 'fast'.*scheduling='magic'"):
        load_engines(bad)
    bad.write_text(
        "fast:\n  scheduling: chunked\n  token_budget: [[10, 8]]\n  max_batch: 8\n"
        "  kv_policy: paged\n"
    )
    with pytest.raises(ValueError, match="start at 0 GiB"):
        load_engines(bad)
    bad.write_text(
        "fast:\n  scheduling: chunked\n  token_budget: 8\n  max_batch: 8\n  kv_policy: paged\n"
        "  calibrated: {warp_factor: 9}\n"
    )
    with pytest.raises(ValueError, match="warp_factor"):
        load_engines(bad)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_closed_loop_runs_every_engine_and_precision(engine, precision):
    r = closed_loop(
        gpu="h200",
        model=MODEL,
        precision=precision,
        engine=engine,
        isl=256,
        osl=16,
        concurrency=4,
        requests_per_client=2,
    )
    assert r["requests"] == 8 and r["engine"] == engine and r["precision"] == precision
    assert 0 < r["ttft_mean_s"] < r["latency_mean_s"] and r["tpot_mean_s"] > 0


def test_closed_loop_issue_example_and_fp8_kv_doubles_capacity():
    r = closed_loop(
        gpu="h200",
        model="llama3.1-70b",
        tp=4,
        precision="fp8",
        engine="vllm",
        isl=1024,
        osl=1024,
        concurrency=32,
        requests_per_client=20,
        seed=0,
    )
    assert r["requests"] == 640 and r["ttft_mean_s"] > 0 and r["tpot_mean_s"] > 0
    bf16_kv = closed_loop(
        gpu="h200", model="llama3.1-70b", tp=4, precision="fp8", kv_precision="bf16",
        engine="vllm", isl=64, osl=4, concurrency=1, requests_per_client=1,
    )  # fmt: skip
    fp8_kv = closed_loop(
        gpu="h200", model="llama3.1-70b", tp=4, precision="fp8", kv_precision="fp8",
        engine="vllm", isl=64, osl=4, concurrency=1, requests_per_client=1,
    )  # fmt: skip
    assert fp8_kv["kv_capacity_tokens"] == pytest.approx(2 * bf16_kv["kv_capacity_tokens"], abs=1)


def test_frontend_seconds_add_to_the_clients_ttft_only():
    import dataclasses

    base = get_engine("vllm")
    plain = dataclasses.replace(base, calibrated={})
    slow = dataclasses.replace(base, calibrated={"frontend_seconds": 0.05})
    kw = {"gpu": "h100-sxm", "model": MODEL, "isl": 256, "osl": 32, "concurrency": 1}
    a, b = closed_loop(engine=plain, **kw), closed_loop(engine=slow, **kw)
    assert b["ttft_mean_s"] == pytest.approx(a["ttft_mean_s"] + 0.05, rel=1e-9)
    assert b["tpot_mean_s"] == pytest.approx(a["tpot_mean_s"], rel=1e-9)
