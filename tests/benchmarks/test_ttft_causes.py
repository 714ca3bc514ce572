"""The TTFT-causes benchmark's error summary and its prompt-reuse row selector."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks import ttft_causes as tc


def _row(model: str, backend: str, precision: str, ttft: float = 1.0, tpot: float = 0.01):
    return SimpleNamespace(
        model=model, backend=backend, precision=precision, ttft_s=ttft, tpot_s=tpot
    )


def test_rows_off_by_more_than_2x_count_both_directions_but_not_the_boundary():
    pairs = [
        (_row("m", "vllm", "bf16"), {"ttft_s": 2.5, "tpot_s": 0.01}),  # 2.5x: off
        (_row("m", "vllm", "bf16"), {"ttft_s": 0.4, "tpot_s": 0.01}),  # 0.4x: off
        (_row("m", "vllm", "bf16"), {"ttft_s": 2.0, "tpot_s": 0.01}),  # exactly 2x: not off
        (_row("m", "vllm", "bf16"), {"ttft_s": 1.1, "tpot_s": 0.012}),
    ]
    e = tc._errors(pairs)
    assert e["rows"] == 4 and e["off_2x"] == 2
    assert e["ttft_worst"] == pytest.approx(1.5)
    assert e["ttft_median"] == pytest.approx((0.6 + 1.0) / 2)
    assert e["tpot_median"] == pytest.approx(0.0)


def test_prompt_reuse_rows_are_the_dense_fp8_rows_of_vllm_and_sglang():
    assert tc.reuses_prompts(_row("llama3.1-8b", "sglang", "fp8"))
    assert tc.reuses_prompts(_row("qwen3-32b", "vllm", "fp8"))
    assert not tc.reuses_prompts(_row("qwen3-32b", "trtllm", "fp8"))
    assert not tc.reuses_prompts(_row("qwen3-32b", "vllm", "bf16"))
    assert not tc.reuses_prompts(_row("qwen3-235b-a22b", "vllm", "fp8"))
