"""Specification of the roofline latency model (envs/sim/latency/model.py) and its calibration."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.sim.calibration import data, e2e
from envs.sim.hardware.catalog import get_gpu, get_model, gpu_names, model_names
from envs.sim.latency.model import InsufficientMemoryError, LatencyModel, load_calibration

DECODERS = [n for n in model_names() if not get_model(n).encoder_only]


def smallest_fitting(gpu: str, model: str) -> LatencyModel | None:
    for tp in (1, 2, 4, 8):
        try:
            return LatencyModel.from_names(gpu, model, tp=tp)
        except (InsufficientMemoryError, ValueError):
            continue
    return None


@pytest.mark.parametrize("gpu", gpu_names())
@pytest.mark.parametrize("model", DECODERS)
def test_every_pair_works_at_smallest_fitting_tp(gpu, model):
    m = smallest_fitting(gpu, model)
    if m is None:  # only the >200B MoE models (Qwen3-235B, MiniMax-M2.5) miss 8 GPUs < 80 GB
        assert get_model(model).total_params * 2 > 8 * 0.9 * get_gpu(gpu).memory_bytes
        return
    assert m.kv_capacity_tokens > 0
    assert 0 < m.prefill_time(512) < 60
    assert 0 < m.decode_iteration_time(8, 8 * 1024) < 5
    assert m.decode_steps_time(8, 8 * 1024, 10) > 0


def test_llama70b_on_one_a40_raises_with_both_sizes():
    with pytest.raises(InsufficientMemoryError) as info:
        LatencyModel.from_names("a40", "llama3.1-70b", tp=1)
    msg = str(info.value)
    assert f"{70.55e9 * 2:.4g}" in msg  # weight bytes
    assert f"{0.9 * get_gpu('a40').memory_bytes:.4g}" in msg  # usable bytes
    assert "a40" in msg and "llama3.1-70b" in msg


def test_tp_that_divides_neither_heads_nor_kv_heads_is_rejected():
    with pytest.raises(ValueError, match="tp=3"):
        LatencyModel.from_names("h100-sxm", "llama3.1-8b", tp=3)


def test_kv_bytes_per_token_of_llama70b():
    m = LatencyModel.from_names("a100-80g", "llama3.1-70b", tp=4)
    assert m.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327680


def test_kv_capacity_follows_formula():
    m = LatencyModel.from_names("h200", "llama3.1-70b", tp=4)
    usable = 4 * get_gpu("h200").memory_bytes * 0.9
    assert m.kv_capacity_tokens == int((usable - m.weight_bytes) // m.kv_bytes_per_token)


@given(n=st.integers(1, 16384), extra=st.integers(1, 4096), ctx=st.integers(0, 100_000))
@settings(max_examples=100, deadline=None)
def test_more_prefill_tokens_is_never_faster(n, extra, ctx):
    m = LatencyModel.from_names("a100-80g", "llama3.1-70b", tp=4)
    assert m.prefill_time(n + extra, 1, ctx) >= m.prefill_time(n, 1, ctx)
    assert m.prefill_time(n, 1, ctx + extra) >= m.prefill_time(n, 1, ctx)


@given(b=st.integers(1, 512), extra=st.integers(1, 64), per_seq=st.integers(1, 8192))
@settings(max_examples=100, deadline=None)
def test_larger_decode_batch_is_never_faster_per_step(b, extra, per_seq):
    m = LatencyModel.from_names("h100-sxm", "qwen3-235b-a22b", tp=8)
    assert m.decode_iteration_time(b + extra, (b + extra) * per_seq) >= m.decode_iteration_time(
        b, b * per_seq
    )


MODELS_FOR_SUMS = [
    ("a100-80g", "llama3.1-70b", 4),
    ("h200", "qwen3-235b-a22b", 4),
    ("l40s", "llama3.2-1b", 1),
    ("v100-32g", "llama3.1-8b", 2),
]


@pytest.mark.parametrize("gpu,model,tp", MODELS_FOR_SUMS)
@given(b=st.integers(1, 256), ctx=st.integers(0, 200_000), n=st.integers(0, 300))
@settings(max_examples=60, deadline=None)
def test_decode_steps_time_equals_the_loop(gpu, model, tp, b, ctx, n):
    m = LatencyModel.from_names(gpu, model, tp=tp)
    loop = sum(m.decode_iteration_time(b, ctx + i * b) for i in range(n))
    assert m.decode_steps_time(b, ctx, n) == pytest.approx(loop, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("gpu,model,tp", MODELS_FOR_SUMS)
@given(b=st.integers(1, 256), ctx=st.integers(0, 200_000), budget=st.floats(0.0, 30.0))
@settings(max_examples=60, deadline=None)
def test_decode_steps_within_is_the_inverse(gpu, model, tp, b, ctx, budget):
    m = LatencyModel.from_names(gpu, model, tp=tp)
    n = m.decode_steps_within(b, ctx, budget)
    assert n >= 0
    assert m.decode_steps_time(b, ctx, n) <= budget
    assert m.decode_steps_time(b, ctx, n + 1) > budget


def test_half_a_gpu_is_slower_and_holds_less_kv():
    full = LatencyModel.from_names("h100-sxm", "llama3.1-8b", tp=1, fraction=1.0)
    half = LatencyModel.from_names("h100-sxm", "llama3.1-8b", tp=1, fraction=0.5)
    assert half.prefill_time(2048) >= full.prefill_time(2048)
    assert half.decode_iteration_time(16, 16_000) >= full.decode_iteration_time(16, 16_000)
    assert half.kv_capacity_tokens < full.kv_capacity_tokens


def test_moe_decode_of_one_token_reads_fewer_bytes_than_dense_of_same_size():
    # the roofline variant keeps the routed experts in the dense roofline
    # (tests/sim/latency/test_moe.py covers the other variants' MoE cost)
    moe = LatencyModel.from_names(
        "h200", "qwen3-235b-a22b", tp=8, calibration=load_calibration(variant="roofline")
    )
    assert moe.experts_touched(1) == pytest.approx(8)
    assert moe.experts_touched(10_000) == pytest.approx(128, rel=1e-6)
    # a dense model with all 235B parameters must read them all each step: bytes / bandwidth
    eff = moe.calibration.family(moe.gpu.family).gemm_memory
    dense_read_s = moe.weight_bytes / 8 / (eff * moe.gpu.hbm_bandwidth)
    assert moe._gemm_time(1, 1) < 0.2 * dense_read_s


def test_encoder_only_models_prefill_but_refuse_decode():
    m = LatencyModel.from_names("rtx-a6000", "bge-reranker-base", tp=1, fraction=0.25)
    assert m.kv_bytes_per_token == 0 and m.kv_capacity_tokens == 0
    assert m.max_batch_tokens > 100_000
    assert 0 < m.prefill_time(512 * 16, num_seqs=16) < 1.0
    with pytest.raises(ValueError, match="encoder-only"):
        m.decode_iteration_time(1, 10)
    with pytest.raises(ValueError, match="encoder-only"):
        m.decode_steps_time(1, 10, 5)


def test_fraction_outside_unit_interval_is_rejected():
    with pytest.raises(ValueError, match="fraction"):
        LatencyModel.from_names("a100-80g", "llama3.1-8b", tp=1, fraction=1.5)


def test_heldout_end_to_end_median_error_meets_committed_target():
    data_dir = data.find_data_dir()
    if not (data_dir / "llm_inference_bench_anl" / "All_results.csv").exists():
        pytest.skip(f"measured-latency data not found at {data_dir} (set SERVEGYM_LATENCY_DATA)")
    points = e2e.heldout_points(data_dir)
    assert len(points) >= 100
    target = load_calibration().target_heldout_median_error
    assert e2e.median_abs_error(points) <= target
