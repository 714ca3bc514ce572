"""Per-op calibration variants: the default is the smooth-roofline fit; ``roofline`` (the
hard roofline, bit for bit its fit) is selected by name, argument or
``$SERVEGYM_LATENCY_CALIBRATION``, and every ``-v0`` env pins it."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from envs.sim.calibration.calibrate import _to_dict
from envs.sim.core.records import LatencyCache
from envs.sim.hardware.cluster import InstanceSpec
from envs.sim.latency import efficiency
from envs.sim.latency.efficiency import (
    CALIBRATION_VARIANT_ENV,
    CALIBRATION_VARIANTS,
    load_calibration,
    resolve_calibration_variant,
)
from envs.sim.latency.model import LatencyModel


def test_the_default_variant_is_the_smooth_roofline_and_roofline_the_hard_one(monkeypatch):
    monkeypatch.delenv(CALIBRATION_VARIANT_ENV, raising=False)
    assert resolve_calibration_variant() == "smooth-roofline"
    smooth = load_calibration()
    assert smooth is load_calibration(variant="smooth-roofline")
    assert all(f.gemm_roofline_exponent for f in smooth.families.values())
    assert all(f.elementwise_floor_seconds > 0 for f in smooth.families.values())
    cal = load_calibration(variant="roofline")
    assert cal is load_calibration(efficiency.CALIBRATION_YAML)
    for name, fam in cal.families.items():
        assert fam.gemm_roofline_exponent is None, name
        assert fam.elementwise_floor_seconds == 0.0, name


def test_the_roofline_yaml_round_trips_without_the_smooth_keys():
    raw = yaml.safe_load(CALIBRATION_VARIANTS["roofline"].read_text())
    assert "elementwise_kernels_per_layer" not in raw
    assert not any(
        {"gemm_roofline_exponent", "elementwise_floor_seconds"} & set(v)
        for v in raw["families"].values()
    )
    assert _to_dict(load_calibration(variant="roofline")) == raw


def test_the_environment_variable_selects_the_variant_and_names_a_bad_one(monkeypatch):
    monkeypatch.setenv(CALIBRATION_VARIANT_ENV, "roofline")
    assert load_calibration() is load_calibration(variant="roofline")
    assert load_calibration(variant="smooth-roofline") is not load_calibration()
    monkeypatch.setenv(CALIBRATION_VARIANT_ENV, "smooth")
    with pytest.raises(ValueError, match=r"\$SERVEGYM_LATENCY_CALIBRATION='smooth'"):
        load_calibration()
    with pytest.raises(ValueError, match="calibration variant='hard'"):
        load_calibration(variant="hard")
    with pytest.raises(ValueError, match="not both"):
        load_calibration(efficiency.CALIBRATION_YAML, variant="roofline")


def test_latency_cache_builds_its_models_from_its_variant(monkeypatch):
    monkeypatch.delenv(CALIBRATION_VARIANT_ENV, raising=False)
    spec = InstanceSpec(0, "m", "monolithic", "h100-sxm", "llama3.1-8b", 1)
    default = LatencyCache().get(spec)
    hard = LatencyCache(calibration_variant="roofline").get(spec)
    assert default.calibration is load_calibration(variant="smooth-roofline")
    assert hard.calibration is load_calibration(variant="roofline")
    plain = LatencyModel.from_names("h100-sxm", "llama3.1-8b")
    assert default.prefill_time(256) == plain.prefill_time(256)
    # near the GEMM ridge point the smooth roofline and the kernel floors cost more
    assert default.prefill_time(256) > hard.prefill_time(256)
    monkeypatch.setenv(CALIBRATION_VARIANT_ENV, "roofline")
    assert LatencyCache().calibration_variant == "roofline"


def test_without_the_smooth_constants_the_model_is_the_hard_roofline_exactly():
    """The smooth variant's code path with p = None and no floor is today's model, bit for
    bit: a calibration stripped of the two constants prices every iteration identically."""
    smooth = load_calibration(variant="smooth-roofline")
    stripped = dataclasses.replace(
        smooth,
        families={
            k: dataclasses.replace(v, gemm_roofline_exponent=None, elementwise_floor_seconds=0.0)
            for k, v in smooth.families.items()
        },
    )
    hard = LatencyModel.from_names("a100-80g", "llama3.1-70b", 4, calibration=stripped)
    by_hand = max(300 * hard._gemm_s_per_token + hard._lm_head_s_per_seq, hard._dense_weight_read_s)
    assert hard._gemm_time(300, 1) == by_hand


@pytest.mark.parametrize(
    "make",
    [
        "envs.pd_cluster.env:PDClusterEnv",
        "envs.routing.env:RoutingEnv",
        "envs.allocation.env:AllocationEnv",
    ],
)
def test_every_v0_env_pins_the_roofline_whatever_the_default_or_the_environment(make, monkeypatch):
    import importlib

    module, name = make.split(":")
    cls = getattr(importlib.import_module(module), name)
    monkeypatch.setenv(CALIBRATION_VARIANT_ENV, "smooth-roofline")
    env = cls()
    assert env._latency_cache.calibration_variant == "roofline"
    follows = cls(latency_calibration=None)
    assert follows._latency_cache.calibration_variant == "smooth-roofline"
    with pytest.raises(ValueError, match="latency_calibration must be one of .* got 'hard'"):
        cls(latency_calibration="hard")
