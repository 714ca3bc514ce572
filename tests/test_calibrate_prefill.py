"""The whole-prefill check of envs/sim/calibrate.py and the elementwise-kernel constant."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest

from envs.sim import calibrate
from envs.sim.calibration import data, kernels, prefill
from envs.sim.calibration.prefill import PrefillPoint
from envs.sim.catalog import get_gpu, get_model
from envs.sim.latency import (
    Calibration,
    LatencyModel,
    elementwise_bytes_per_token,
    load_calibration,
)


def _point(gpu: str, tokens: int, rel_err: float, source: str = "s") -> PrefillPoint:
    return PrefillPoint(source, f"{gpu} {tokens}", 1.0 + rel_err, 1.0, gpu, tokens, source)


def test_prefill_summary_groups_by_generation_and_token_band_with_signed_median_and_worst():
    points = [
        _point("a100-80g", 128, -0.10),
        _point("a100-40g", 511, -0.30),
        _point("a100-80g", 300, +0.20),
        _point("h100-sxm", 2048, -0.40),
        _point("h200", 8191, +0.10),
        _point("h100-sxm", 16384, -0.05),
    ]
    summary = prefill.summarize_prefill(points)
    assert list(summary) == [
        ("Ampere", "1-511"),
        ("Hopper", "2048-8191"),
        ("Hopper", ">=8192"),
    ]
    ampere = summary[("Ampere", "1-511")]
    assert ampere.points == 3
    assert ampere.median == pytest.approx(-0.10)
    assert ampere.worst == pytest.approx(-0.30)  # largest magnitude, sign kept
    hopper = summary[("Hopper", "2048-8191")]
    assert hopper.points == 2
    assert hopper.median == pytest.approx(-0.15)
    assert hopper.worst == pytest.approx(-0.40)
    by_source = prefill.summarize_prefill(
        [_point("h100-sxm", 64, 0.1, "x"), _point("h100-sxm", 9000, 0.3, "x")], by_source=True
    )
    assert list(by_source) == [("Hopper", "x")]
    assert by_source[("Hopper", "x")].median == pytest.approx(0.2)


def test_prefill_point_rejects_a_token_count_outside_every_band():
    with pytest.raises(ValueError, match="tokens=0"):
        _ = _point("h100-sxm", 0, 0.0).band


def test_anl_prefill_points_take_batch_ttft_rows_as_one_prefill_of_the_whole_batch(
    tmp_path: Path,
):
    base = tmp_path / "llm_inference_bench_anl"
    base.mkdir()
    (base / "All_results.csv").write_text(
        "Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,"
        "Throughput\n"
        "Nvidia H100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,128,4,1.5,100\n"
    )
    (base / "all_results_TTFT.csv").write_text(
        "Hardware,Num of Hardware,Framework,Model,Input Length,Output Length,Batch Size,Latency\n"
        "Nvidia H100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,1024,1,16,0.5\n"
        "Nvidia A100 GPU,1,vLLM,mistralai/Mistral-7B-v0.1,1024,1,16,1.0\n"
        "Nvidia H100 GPU,1,TensorRT-LLM,meta-llama/Llama-2-7b-hf,1024,1,16,0.3\n"
        "AMD MI250 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,1024,1,16,2.0\n"
    )
    cal = load_calibration()
    points = prefill.anl_prefill_points(tmp_path, cal)
    assert [(p.gpu, p.tokens, p.measured_s) for p in points] == [
        ("h100-sxm", 16384, 0.5),
        ("a100-40g", 16384, 1.0),
    ]
    m = LatencyModel.from_names("h100-sxm", "llama2-7b", calibration=cal)
    assert points[0].predicted_s == m.prefill_time(16 * 1024, 16, 0)
    assert [p.generation for p in points] == ["Hopper", "Ampere"]
    out = io.StringIO()
    prefill.print_prefill_report(points, out)
    assert "Hopper      >=8192" in out.getvalue()


def _with_elementwise(cal: Calibration, family: str, value: float | None) -> Calibration:
    families = dict(cal.families)
    families[family] = dataclasses.replace(families[family], elementwise_memory=value)
    return dataclasses.replace(cal, families=families)


def test_elementwise_memory_prices_every_token_of_prefill_and_decode():
    cal = load_calibration()
    without = _with_elementwise(cal, "hopper", None)
    with_eff = _with_elementwise(cal, "hopper", 0.5)
    gpu, model, tp = get_gpu("h100-sxm"), get_model("llama3.1-70b"), 4
    plain = LatencyModel(gpu, model, tp, 1.0, without)
    priced = LatencyModel(gpu, model, tp, 1.0, with_eff)
    per_layer = elementwise_bytes_per_token(
        model.hidden_size,
        model.num_heads / tp,
        model.num_kv_heads / tp,
        model.head_dim,
        model.intermediate_size / tp,
        True,
        True,
        2,
    )
    per_token_s = model.num_layers * per_layer / (0.5 * gpu.hbm_bandwidth)
    assert priced.prefill_time(4096) - plain.prefill_time(4096) == pytest.approx(4096 * per_token_s)
    assert priced.decode_iteration_time(32, 32_000) - plain.decode_iteration_time(
        32, 32_000
    ) == pytest.approx(32 * per_token_s)
    # the closed-form multi-step decode stays the sum of its steps
    steps = sum(priced.decode_iteration_time(8, 8000 + 8 * i) for i in range(5))
    assert priced.decode_steps_time(8, 8000, 5) == pytest.approx(steps)


def test_elementwise_bytes_follow_the_kernels_vllm_runs():
    # 2 fused add+RMSNorm (4·h each) + SiLU-and-mul (3·ffn) + rotary on q and k (2·(q+k) heads)
    assert elementwise_bytes_per_token(10, 2, 1, 4, 20, True, True, 2) == 2 * (80 + 60 + 2 * 3 * 4)
    assert elementwise_bytes_per_token(10, 2, 1, 4, 20, False, False, 1) == 80 + 40


def test_calibration_rejects_an_elementwise_efficiency_outside_the_unit_range():
    data = calibrate._to_dict(load_calibration())
    data["families"]["hopper"]["elementwise_memory"] = 2.0
    with pytest.raises(ValueError, match="'hopper' elementwise_memory=2.0"):
        Calibration.from_dict(data)


def test_elementwise_fit_recovers_the_efficiency_of_synthetic_measurements():
    ideal = np.array([1e-4, 3e-4, 1e-3, 2e-3])
    assert kernels.fit_elementwise(ideal, ideal / 0.63) == pytest.approx(0.63)


def test_packaged_calibration_prices_elementwise_kernels_on_every_family():
    cal = load_calibration()
    for name, family in cal.families.items():
        assert family.elementwise_memory is not None, name
        assert 0 < family.elementwise_memory <= 1.0


def test_prefill_check_covers_both_generations_when_the_measured_data_is_present():
    data_dir = data.find_data_dir()
    if not (data_dir / "SOURCES.md").exists():
        pytest.skip(f"measured-latency data not found at {data_dir} (set SERVEGYM_LATENCY_DATA)")
    points = prefill.prefill_points(data_dir, load_calibration())
    generations = {p.generation for p in points}
    assert {"Ampere", "Hopper"} <= generations
    assert all(p.measured_s > 0 and p.predicted_s > 0 for p in points)
    assert {p.source for p in points if p.generation == "Hopper"} >= {
        "anl all_results_TTFT (vLLM e2e)",
        "vidur h100 layers + aic attention",
        "llmservingsim H100 layers",
    }
