"""MoE layers priced from their physics (:mod:`envs.sim.latency.moe`): the limits of the
touched-expert count, how parallelism divides the bytes, monotonicity, and that it is switched on by
the calibration (``moe_kernels``) and leaves dense models and the ``roofline`` variant alone."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.sim.calibration.calibrate import _to_dict
from envs.sim.latency.efficiency import CALIBRATION_VARIANTS, Calibration, load_calibration
from envs.sim.latency.model import LatencyModel
from envs.sim.latency.moe import (
    MoEKernelEfficiency,
    MoELayerCost,
    experts_touched,
    kernel_efficiency,
    parse_moe_kernels,
)

EFF = MoEKernelEfficiency(compute=0.3, memory=0.8, floor_seconds=20e-6)


def _layer(tp: int = 1, ep: int = 1, p: float | None = None, **kw) -> MoELayerCost:
    args = dict(
        num_layers=1,
        hidden_size=4096,
        expert_ffn=1536,
        num_experts=128,
        top_k=8,
        weight_bytes=1,
        activation_bytes=2,
        peak_flops=1.979e15,
        hbm_bandwidth=3.35e12,
        efficiency=EFF,
        tp=tp,
        ep=ep,
        roofline_exponent=p,
    )
    args.update(kw)
    return MoELayerCost(**args)


def test_one_token_touches_exactly_top_k_experts():
    assert experts_touched(1, 128, 8) == pytest.approx(8.0)
    assert experts_touched(1, 8, 2) == pytest.approx(2.0)
    assert experts_touched(0, 128, 8) == 0.0


def test_a_large_batch_touches_every_expert():
    assert experts_touched(4096, 128, 8) == pytest.approx(128.0)
    assert experts_touched(10_000, 256, 8) == pytest.approx(256.0)
    # and never more than E, never fewer than k for T >= 1
    assert 8 < experts_touched(16, 128, 8) < 128


@given(
    e=st.integers(1, 512),
    k_frac=st.floats(0.001, 1.0),
    t=st.integers(1, 20_000),
)
def test_touched_experts_lie_between_k_and_e_and_grow_with_tokens(e, k_frac, t):
    k = max(1, min(e, round(k_frac * e)))
    touched = experts_touched(t, e, k)
    assert k - 1e-9 <= touched <= e + 1e-9
    assert experts_touched(t + 1, e, k) >= touched - 1e-12


def test_touched_experts_reject_bad_shapes():
    with pytest.raises(ValueError, match="top_k=9"):
        experts_touched(1, 8, 9)
    with pytest.raises(ValueError, match="num_tokens=-1"):
        experts_touched(-1, 8, 2)


@pytest.mark.parametrize("degree", [2, 4, 8])
def test_tensor_and_expert_parallelism_divide_the_weight_bytes(degree):
    one = _layer()
    for t in (1, 8, 64, 4096):
        assert _layer(tp=degree).weight_read_seconds(t) == pytest.approx(
            one.weight_read_seconds(t) / degree
        )
        assert _layer(ep=degree).weight_read_seconds(t) == pytest.approx(
            one.weight_read_seconds(t) / degree
        )
        c1, r1 = one.bounds(t)
        for layer in (_layer(tp=degree), _layer(ep=degree)):
            c, r = layer.bounds(t)
            assert c == pytest.approx(c1 / degree)
            assert r < r1


def test_the_expert_parallel_all_to_all_crosses_the_link_only_when_asked():
    local = _layer(ep=8)
    a2a = _layer(ep=8, link_bandwidth=450e9)
    assert a2a.time(256) > local.time(256)
    # per GPU: 2 directions x T/ep tokens x k rows x hidden x 2 bytes x (ep-1)/ep remote
    expected = 2 * 256 / 8 * 8 * 4096 * 2 * 7 / 8 / 450e9
    assert a2a.time(256) - local.time(256) == pytest.approx(expected)
    assert _layer(ep=1, link_bandwidth=450e9).time(256) == _layer().time(256)


@pytest.mark.parametrize("p", [None, 3.0])
@given(t=st.integers(0, 50_000))
@settings(max_examples=60)
def test_layer_time_is_monotone_in_tokens(p, t):
    layer = _layer(tp=4, p=p)
    assert layer.time(t + 1) >= layer.time(t)


def test_layer_time_is_the_floor_plus_the_roofline_of_its_bounds():
    layer = _layer(p=3.0)
    c, r = layer.bounds(32)
    assert layer.time(32) == pytest.approx(EFF.floor_seconds + (c**3 + r**3) ** (1 / 3))
    hard = _layer()
    c, r = hard.bounds(32)
    assert hard.time(32) == pytest.approx(EFF.floor_seconds + max(c, r))
    assert hard.time(0) == 0.0
    # decode of one token reads k experts: the weight bound dominates
    c, r = hard.bounds(1)
    assert r > 100 * c
    assert hard.weight_read_seconds(1) == pytest.approx(
        8 * 3 * 4096 * 1536 * 1 / (EFF.memory * 3.35e12)
    )


def test_kernel_efficiencies_are_validated_and_exist_only_for_measured_families():
    with pytest.raises(ValueError, match="compute=0"):
        MoEKernelEfficiency(0.0, 0.5, 0.0)
    with pytest.raises(ValueError, match="floor_seconds=-1"):
        MoEKernelEfficiency(0.5, 0.5, -1.0)
    with pytest.raises(ValueError, match="fp4"):
        parse_moe_kernels({"default": {"fp4": {"compute": 1, "memory": 1, "floor_seconds": 0}}})
    kernels = load_calibration(variant="smooth-roofline").moe_kernels
    assert kernels is not None
    # no measured MoE tables on Ampere: its routed experts stay in the dense roofline
    assert kernel_efficiency(kernels, "ampere-hbm", "bf16") is None
    assert kernel_efficiency(kernels, "hopper", "fp8") is kernels["hopper"]["fp8"]


def test_the_roofline_variant_has_no_moe_physics_and_the_smooth_one_has():
    assert load_calibration(variant="roofline").moe_kernels is None
    assert load_calibration(variant="smooth-roofline").moe_kernels
    raw = yaml.safe_load(CALIBRATION_VARIANTS["smooth-roofline"].read_text())
    assert _to_dict(load_calibration(variant="smooth-roofline")) == raw


def _models(model: str, gpu: str = "h100-sxm", tp: int = 8, precision: str = "fp8"):
    smooth = load_calibration(variant="smooth-roofline")
    without = dataclasses.replace(smooth, moe_kernels=None)
    kw = dict(tp=tp, precision=precision)
    return (
        LatencyModel.from_names(gpu, model, calibration=smooth, **kw),
        LatencyModel.from_names(gpu, model, calibration=without, **kw),
    )


def test_a_dense_model_is_unaffected_by_the_moe_physics():
    on, off = _models("llama3.1-70b", tp=4)
    assert on._moe is None
    for b in (1, 32, 256):
        assert on.decode_iteration_time(b, b * 2000) == off.decode_iteration_time(b, b * 2000)
    assert on.prefill_time(3000) == off.prefill_time(3000)
    assert on.mixed_iteration_time(16, 16_000, 512, 1, 0) == off.mixed_iteration_time(
        16, 16_000, 512, 1, 0
    )


def test_moe_decode_and_prefill_use_the_layer_cost():
    on, off = _models("qwen3-235b-a22b")
    assert on._moe is not None and off._moe is None
    # the routed experts' share of a decode step: the fused MoE kernel runs well below the
    # dense GEMM efficiencies, so the step is slower than the dense-roofline pricing
    for b in (1, 16, 128):
        assert on.decode_iteration_time(b, b * 1000) > off.decode_iteration_time(b, b * 1000)
    assert on.prefill_time(4096) > off.prefill_time(4096)
    parts = on.prefill_components(2048)
    assert sum(parts.values()) == pytest.approx(on.prefill_time(2048))
    assert parts["gemm"] > on._moe.time(2048)
    assert on.experts_touched(1) == pytest.approx(8.0) == off.experts_touched(1)


def test_the_calibration_without_moe_kernels_keeps_the_dense_roofline_pricing():
    base = load_calibration(variant="roofline")
    assert isinstance(base, Calibration)
    m = LatencyModel.from_names("h100-sxm", "qwen3-235b-a22b", 8, calibration=base)
    assert m._moe is None and m._num_experts == 128
    assert math.isclose(m.experts_touched(10_000), 128.0)


def test_engine_presets_take_their_variant_fields_and_roofline_has_none():
    from envs.sim.engines.presets import get_engine

    smooth = load_calibration(variant="smooth-roofline")
    roofline = load_calibration(variant="roofline")
    assert roofline.engines is None
    assert get_engine("vllm").calibration(roofline) is roofline
    vllm = get_engine("vllm").calibration(smooth)
    assert vllm.custom_allreduce and vllm.iteration_overhead_per_extra_gpu_seconds == 0.0
    trtllm = get_engine("trtllm").calibration(smooth)
    assert trtllm.moe_kernels is smooth.engines["trtllm"]["moe_kernels"]
    assert get_engine("sglang").calibration(smooth).moe_kernels is smooth.moe_kernels
    # a preset's fitted block still wins over the variant's fields
    preset = dataclasses.replace(
        get_engine("vllm"), calibrated={"iteration_overhead_per_extra_gpu_seconds": 1e-3}
    )
    assert preset.calibration(smooth).iteration_overhead_per_extra_gpu_seconds == 1e-3


def test_a_variants_engine_block_names_what_is_wrong():
    raw = yaml.safe_load(CALIBRATION_VARIANTS["smooth-roofline"].read_text())
    bad = dict(raw, engines={"vllm": {"gemm_compute": 0.5}})
    with pytest.raises(ValueError, match=r"engines.vllm: unknown fields \['gemm_compute'\]"):
        Calibration.from_dict(bad, "x.yaml")
    bad = dict(raw, engines={"vllm": {"custom_allreduce": 1}})
    with pytest.raises(ValueError, match="custom_allreduce=1; expected true or false"):
        Calibration.from_dict(bad, "x.yaml")


def test_a_refit_of_the_rest_keeps_the_moe_and_engine_blocks(tmp_path):
    from envs.sim.calibration.calibrate import write_yaml

    path = tmp_path / "smooth.yaml"
    path.write_text(CALIBRATION_VARIANTS["smooth-roofline"].read_text())
    smooth = load_calibration(variant="smooth-roofline")
    refit = dataclasses.replace(smooth, moe_kernels=None, engines=None)
    write_yaml(refit, path, variant="smooth-roofline")
    again = Calibration.from_dict(yaml.safe_load(path.read_text()), str(path))
    assert again.moe_kernels == smooth.moe_kernels
    assert again.engines == smooth.engines
