"""The fidelity benchmark's error breakdown (``--causes``) and its option checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks import serving_fidelity as sf


def _row(backend: str, tp: int, concurrency: int, ttft: float, tpot: float):
    return SimpleNamespace(
        backend=backend,
        model="m",
        precision="bf16",
        gpu="h100-sxm",
        tp=tp,
        isl=1024,
        osl=128,
        concurrency=concurrency,
        ttft_s=ttft,
        tpot_s=tpot,
    )


def test_causes_counts_rows_off_target_per_group_with_signed_medians():
    pairs = [
        # tp1: TTFT +50 % and +10 %, TPOT -20 % and +5 %
        (_row("vllm", 1, 4, 1.0, 0.010), {"ttft_s": 1.5, "tpot_s": 0.008}),
        (_row("vllm", 1, 4, 1.0, 0.010), {"ttft_s": 1.1, "tpot_s": 0.0105}),
        # tp8: TTFT -30 %, TPOT +100 %
        (_row("vllm", 8, 256, 2.0, 0.020), {"ttft_s": 1.4, "tpot_s": 0.040}),
    ]
    text = sf.causes(pairs)
    lines = {ln.split()[3]: ln.split() for ln in text.splitlines() if "h100-sxm tp" in ln}
    tp1, tp8 = lines["tp1"], lines["tp8"]
    # rows, TTFT |e| median, signed median, > 20 %, TPOT |e| median, signed, > 10 %
    assert tp1[4:] == ["2", "30.0%", "+30.0%", "1", "12.5%", "-7.5%", "1"]
    assert tp8[4:] == ["1", "30.0%", "-30.0%", "1", "100.0%", "+100.0%", "1"]
    assert "vllm c<=8" in text and "vllm c>128" in text


@pytest.mark.parametrize(
    "arg", ["iteration_overhead_seconds", "no_such_constant=1", "iteration_overhead_seconds=x"]
)
def test_latency_override_rejects_what_is_not_a_numeric_latency_constant(arg, capsys):
    with pytest.raises(SystemExit) as exc:
        sf.main(["--latency-override", arg])
    assert exc.value.code == 2
    assert "--latency-override" in capsys.readouterr().err


def test_dense_and_moe_rows_are_reported_apart_per_engine():
    def row(model: str, backend: str, ttft: float, tpot: float):
        return SimpleNamespace(backend=backend, model=model, osl=128, ttft_s=ttft, tpot_s=tpot)

    pairs = [
        (row("llama3.1-8b", "vllm", 1.0, 0.01), {"ttft_s": 1.1, "tpot_s": 0.011, "latency_s": 2.5}),
        (
            row("qwen3-235b-a22b", "vllm", 1.0, 0.01),
            {"ttft_s": 2.0, "tpot_s": 0.02, "latency_s": 4.0},
        ),
        (
            row("minimax-m2.5", "trtllm", 1.0, 0.01),
            {"ttft_s": 0.5, "tpot_s": 0.01, "latency_s": 2.27},
        ),
    ]
    kinds = sf.kind_tables(pairs)
    assert set(kinds) == {"dense", "moe"}
    dense = {t["engine"]: t for t in kinds["dense"]}
    moe = {t["engine"]: t for t in kinds["moe"]}
    assert set(dense) == {"vllm", "all"} and dense["all"]["rows"] == 1
    assert dense["all"]["ttft_median"] == pytest.approx(0.1)
    assert moe["vllm"]["ttft_median"] == pytest.approx(1.0)
    assert moe["trtllm"]["tpot_median"] == pytest.approx(0.0)
    assert moe["all"]["rows"] == 2 and moe["all"]["ttft_worst"] == pytest.approx(1.0)
    assert sf.kind_tables(pairs[:1]).keys() == {"dense"}


def test_variants_option_names_an_unknown_variant(capsys):
    with pytest.raises(SystemExit) as exc:
        sf.main(["--variants", "roofline,hard"])
    assert exc.value.code == 2
    assert "'hard'" in capsys.readouterr().err


def test_plot_kinds_writes_one_png_for_every_variant_and_scheme(tmp_path):
    def t(engine: str, e: float):
        return {"engine": engine, "ttft_median": e, "tpot_median": e / 2, "latency_median": e}

    kinds = {"dense": [t("vllm", 0.1), t("all", 0.1)], "moe": [t("vllm", 0.3), t("all", 0.3)]}
    summaries = {
        "roofline": {"model": kinds, "gpu": kinds},
        "smooth-roofline": {"model": kinds, "gpu": kinds},
    }
    path = tmp_path / "kinds.png"
    sf.plot_kinds(summaries, str(path))
    assert path.stat().st_size > 10_000
