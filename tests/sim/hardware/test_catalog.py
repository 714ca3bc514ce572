"""Specification of the GPU / model catalog (envs/sim/hardware/catalog.py)."""

import pytest

from envs.sim.hardware.catalog import (
    UnknownNameError,
    get_gpu,
    get_model,
    gpu_names,
    load_models,
    model_names,
)

REQUIRED_GPUS = [
    "a100-80g",
    "a800",
    "h100-sxm",
    "h800",
    "h200",
    "a40",
    "v100-32g",
    "rtx-a6000",
    "l40s",
]
REQUIRED_MODELS = [
    "llama2-7b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3.1-8b",
    "llama3.1-70b",
    "llama3.2-1b",
    "llama3.1-8b-prm",
    "qwen2.5-14b",
    "qwen3-235b-a22b",
    "qwen3-32b",
    "minimax-m2.5",
    "e5-base-v2",
    "bge-reranker-base",
]


def test_catalog_contains_every_required_gpu_and_model():
    assert set(REQUIRED_GPUS) <= set(gpu_names())
    assert set(REQUIRED_MODELS) <= set(model_names())


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_gpu_numbers_are_positive_floats(name):
    g = get_gpu(name)
    for value in (g.peak_flops, g.hbm_bandwidth, g.memory_bytes, g.pcie_bandwidth):
        assert isinstance(value, float) and value > 0
    assert g.nvlink_bandwidth >= 0


def test_hopper_has_more_flops_and_bandwidth_than_ampere():
    assert get_gpu("h100-sxm").peak_flops > 3 * get_gpu("a100-80g").peak_flops
    assert get_gpu("h200").hbm_bandwidth > get_gpu("h100-sxm").hbm_bandwidth


def test_l40s_has_no_nvlink_so_tp_uses_pcie():
    g = get_gpu("l40s")
    assert not g.has_nvlink
    assert g.interconnect_bandwidth == g.pcie_bandwidth


@pytest.mark.parametrize("name", model_names())
def test_total_params_agree_with_architecture_within_two_percent(name):
    m = get_model(name)
    assert m.architecture_params == pytest.approx(m.total_params, rel=0.02)


def test_qwen3_moe_active_params_agree_with_architecture():
    m = get_model("qwen3-235b-a22b")
    assert m.is_moe and m.num_experts == 128 and m.experts_per_token == 8
    per_layer = m.attention_params_per_layer + m.dense_ffn_params_per_layer
    active = (
        m.num_layers * (per_layer + m.experts_per_token * m.expert_params)
        + 2 * m.vocab_size * m.hidden_size
    )
    assert active == pytest.approx(m.active_params, rel=0.02)


def test_dense_models_are_not_moe_and_encoders_are_flagged():
    assert not get_model("llama3.1-70b").is_moe
    assert get_model("e5-base-v2").encoder_only
    assert get_model("bge-reranker-base").encoder_only
    assert not get_model("llama3.1-8b-prm").encoder_only


def test_unknown_name_error_lists_known_names_and_is_a_key_and_value_error():
    with pytest.raises(UnknownNameError) as info:
        get_gpu("b200-typo")
    msg = str(info.value)
    assert "b200-typo" in msg and "h100-sxm" in msg
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
    with pytest.raises(KeyError, match="llama3.1-70b"):
        get_model("llama9")


def test_user_yaml_extends_the_catalog(tmp_path):
    extra = tmp_path / "more.yaml"
    extra.write_text(
        "tiny:\n  num_layers: 2\n  hidden_size: 64\n  num_heads: 4\n  num_kv_heads: 2\n"
        "  head_dim: 16\n  intermediate_size: 128\n  vocab_size: 100\n  total_params: 1.0e5\n"
    )
    models = load_models(extra)
    assert "tiny" in models and "llama3.1-8b" in models
    assert get_model("tiny", extra_path=extra).num_kv_heads == 2


def test_malformed_user_entry_names_the_field(tmp_path):
    extra = tmp_path / "bad.yaml"
    extra.write_text("bad:\n  num_layers: 2\n")
    with pytest.raises(ValueError, match="hidden_size"):
        load_models(extra)
