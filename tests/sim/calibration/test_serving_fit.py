"""Specifications of the engine-constant fit and the held-out checks
(envs.sim.calibration.serving_fit): the frontend fit recovers a known offset, and a held-out group
is predicted without its rows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from envs.sim.calibration.serving_fit import (
    fit_frontend,
    fit_frontends,
    leave_one_group_out,
    with_frontend,
)


def _rows(offsets: dict[str, float], seed: int = 0):
    """Synthetic rows whose measured TTFT is the engine-only prediction plus the engine's
    offset (and 3 % noise), over two models and two GPUs."""
    rng = np.random.default_rng(seed)
    rows, preds = [], []
    for engine, off in offsets.items():
        for model in ("m1", "m2"):
            for gpu in ("g1", "g2"):
                for _ in range(5):
                    sim = float(rng.uniform(0.05, 2.0))
                    meas = (sim + off) * float(rng.uniform(0.97, 1.03))
                    rows.append(
                        SimpleNamespace(
                            backend=engine, model=model, gpu=gpu, ttft_s=meas, tpot_s=0.01, osl=8
                        )
                    )
                    preds.append({"ttft_s": sim, "tpot_s": 0.01, "latency_s": sim + 0.07})
    return rows, preds


def test_frontend_fit_recovers_a_known_client_offset():
    rows, preds = _rows({"vllm": 0.05, "trtllm": 0.15})
    f = fit_frontends(rows, preds)
    assert f["vllm"] == pytest.approx(0.05, rel=0.15)
    assert f["trtllm"] == pytest.approx(0.15, rel=0.15)
    assert f["vllm"] < f["*"] < f["trtllm"]  # the pooled value lies between
    assert with_frontend(preds[0], 0.1)["ttft_s"] == pytest.approx(preds[0]["ttft_s"] + 0.1)
    assert with_frontend(preds[0], 0.1)["tpot_s"] == preds[0]["tpot_s"]
    with pytest.raises(ValueError, match="no rows"):
        fit_frontend([], [])


@pytest.mark.parametrize("key", ["model", "engine", "gpu"])
def test_a_held_out_group_is_predicted_without_its_own_rows(key):
    rows, preds = _rows({"vllm": 0.05, "trtllm": 0.15, "sglang": 0.1})
    held, fitted = leave_one_group_out(rows, preds, key)
    assert len(held) == len(rows)
    attr = {"model": "model", "engine": "backend", "gpu": "gpu"}[key]
    group = getattr(rows[0], attr)
    # corrupt the held-out group's measurements: its own predictions must not move
    bad = [
        SimpleNamespace(**{**vars(r), "ttft_s": r.ttft_s * 50}) if getattr(r, attr) == group else r
        for r in rows
    ]
    held_bad, _ = leave_one_group_out(bad, preds, key)
    before = [p["ttft_s"] for r, p in held if getattr(r, attr) == group]
    after = [p["ttft_s"] for r, p in held_bad if getattr(r, attr) == group]
    assert before == after
    others = [p["ttft_s"] for r, p in held_bad if getattr(r, attr) != group]
    assert others != [p["ttft_s"] for r, p in held if getattr(r, attr) != group]
    if key == "engine":  # the held-out engine takes the other engines' pooled frontend
        assert "vllm" not in fitted["vllm"] and "*" in fitted["vllm"]
