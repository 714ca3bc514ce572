"""Issue 30 (serving): the engines' overlap scheduling and custom all-reduce, as the presets set
them and as the latency model prices them (per engine; the per-op model's default is unchanged)."""

from __future__ import annotations

import dataclasses

import pytest

from envs.sim.engines.presets import CPU_OVERHEAD_FIELDS, get_engine, load_engines
from envs.sim.hardware.catalog import get_gpu, get_model
from envs.sim.latency.efficiency import load_calibration
from envs.sim.latency.model import LatencyModel

# engine -> (overlap_scheduling, custom_allreduce). TensorRT-LLM: TorchLlmArgs
# .disable_overlap_scheduler False (docs "Overlap Scheduler": enabled by default), custom
# all-reduce (AllReduceStrategy AUTO). SGLang: ServerArgs.disable_overlap_schedule False,
# disable_custom_all_reduce False. vLLM: both exist in the engine but the preset keeps them off
# (Routing-v0 / Allocation-v0 run on it; engines.yaml says why).
PRESET_FLAGS = {"vllm": (False, False), "sglang": (True, True), "trtllm": (True, True)}


@pytest.mark.parametrize("engine", sorted(PRESET_FLAGS))
def test_presets_set_overlap_scheduling_and_custom_allreduce_as_documented(engine):
    preset = get_engine(engine)
    assert (preset.overlap_scheduling, preset.custom_allreduce) == PRESET_FLAGS[engine]
    # the roofline variant: the smooth one also sets per-engine fields (its ``engines`` block)
    base = load_calibration(variant="roofline")
    cal = preset.calibration(base)
    hidden = preset.overlap_scheduling
    for name in CPU_OVERHEAD_FIELDS:
        assert getattr(cal, name) == (0.0 if hidden else getattr(base, name))
    assert cal.custom_allreduce is preset.custom_allreduce
    assert base.iteration_overhead_seconds > 0  # the hidden overhead is not already zero


def test_an_explicit_calibrated_overhead_wins_over_overlap_scheduling():
    preset = dataclasses.replace(
        get_engine("trtllm"), calibrated={"iteration_overhead_seconds": 0.002}
    )
    cal = preset.calibration(load_calibration())
    assert cal.iteration_overhead_seconds == 0.002
    assert cal.iteration_overhead_per_extra_gpu_seconds == 0.0


def test_hidden_cpu_overhead_is_shorter_than_the_gpu_iteration_it_hides_behind():
    """Overlap prices a step at max(GPU, CPU) = GPU only if the GPU part is the longer: check the
    smallest benchmarked iteration (Llama-3.1-8B on 8x H100, one decode) against the CPU cost
    hidden (the base per-iteration overhead; the per-extra-GPU term is vLLM V0's driver
    broadcast, which SPMD engines do not have)."""
    base = load_calibration()
    cal = get_engine("trtllm").calibration(base)
    lm = LatencyModel(get_gpu("h100-sxm"), get_model("llama3.1-8b"), 8, 1.0, cal)
    assert lm.decode_iteration_time(1, 128) > base.iteration_overhead_seconds


def _pair(tp: int, model: str = "llama3.1-8b"):
    base = load_calibration()
    custom = dataclasses.replace(base, custom_allreduce=True)
    gpu, m = get_gpu("h100-sxm"), get_model(model)
    return LatencyModel(gpu, m, tp, 1.0, base), LatencyModel(gpu, m, tp, 1.0, custom), base, m


def test_custom_allreduce_stages_by_hand():
    ring, custom, base, m = _pair(8)
    link = base.links["nvlink"]
    per_byte = 1.0 / (link.efficiency * get_gpu("h100-sxm").interconnect_bandwidth)
    lat, layers, row = link.latency_seconds, m.num_layers, m.hidden_size * m.dtype_bytes
    # 16 tokens = 128 KiB < 256 KiB at 8 GPUs: one stage, each rank reads 7 peers' buffers
    one = lat + 7 * 16 * row * per_byte
    assert custom.allreduce_time(16) == pytest.approx(2 * layers * one, rel=1e-12)
    # 64 tokens = 512 KiB: two stages, two barriers
    two = 2 * lat + 2 * 7 / 8 * 64 * row * per_byte
    assert custom.allreduce_time(64) == pytest.approx(2 * layers * two, rel=1e-12)
    # above the 8 MiB buffer: NCCL, the ring
    big = 2048
    ring_one = lat + 2 * 7 / 8 * big * row * per_byte
    assert custom.allreduce_time(big) == pytest.approx(2 * layers * ring_one, rel=1e-12)
    # the per-op default prices no custom all-reduce (ring terms instead)
    assert ring.allreduce_time(16) == 0.0


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_custom_allreduce_replaces_only_the_ring_terms_of_every_iteration(tp):
    ring, custom, base, m = _pair(tp)
    link = base.links["nvlink"]
    per_byte = 1.0 / (link.efficiency * get_gpu("h100-sxm").interconnect_bandwidth)
    row = m.hidden_size * m.dtype_bytes

    def ring_ar(tokens: int) -> float:
        one = link.latency_seconds + 2 * (tp - 1) / tp * tokens * row * per_byte
        return 2 * m.num_layers * one

    for batch in (1, 16, 64, 256):
        diff = custom.decode_iteration_time(batch, batch * 900) - ring.decode_iteration_time(
            batch, batch * 900
        )
        assert diff == pytest.approx(custom.allreduce_time(batch) - ring_ar(batch), abs=1e-12)
        steps = custom.decode_steps_time(batch, batch * 900, 5)
        assert steps == pytest.approx(
            sum(custom.decode_iteration_time(batch, batch * 900 + i * batch) for i in range(5))
        )
    diff = custom.prefill_time(3000) - ring.prefill_time(3000)
    assert diff == pytest.approx(custom.allreduce_time(3000) - ring_ar(3000), abs=1e-12)
    # a mixed iteration all-reduces its decode and prefill tokens together, once
    d, p = 32, 200
    diff = custom.mixed_iteration_time(d, d * 900, p, 1, 0) - ring.mixed_iteration_time(
        d, d * 900, p, 1, 0
    )
    assert diff == pytest.approx(custom.allreduce_time(d + p) - ring_ar(d + p), abs=1e-12)


def test_custom_allreduce_costs_more_than_the_ring_for_decode_batches_on_eight_gpus():
    """Measured custom all-reduce at 8 GPUs, 256 KiB (aiconfigurator custom_allreduce_perf,
    H100, CUDA graph): 14.7 us, against the ring formula's ~7 us: the stage model must sit
    above the ring there, and equal it on 2 GPUs below the buffer size (one stage = ring)."""
    ring8, custom8, _, m = _pair(8)
    assert custom8.decode_iteration_time(32, 32 * 900) > ring8.decode_iteration_time(32, 32 * 900)
    ring2, custom2, _, _ = _pair(2)
    assert custom2.decode_iteration_time(32, 32 * 900) == pytest.approx(
        ring2.decode_iteration_time(32, 32 * 900), rel=1e-12
    )


def test_engine_flags_must_be_booleans(tmp_path):
    bad = tmp_path / "e.yaml"
    for key in ("overlap_scheduling", "custom_allreduce"):
        bad.write_text(
            "fast:\n  scheduling: chunked\n  token_budget: 8\n  max_batch: 8\n"
            f"  kv_policy: paged\n  {key}: 1\n"
        )
        with pytest.raises(ValueError, match=rf"engine 'fast'.*{key}=1"):
            load_engines(bad)
