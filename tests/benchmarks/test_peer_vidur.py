"""The Vidur cross-check's parts that run without Vidur: the shared request list, the servegym
side, Vidur's KV sizing and the parser of Vidur's outputs."""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import numpy as np
import pytest

from benchmarks import peer_vidur as pv

SETUP = pv.EngineSetup()


def test_same_seed_gives_the_same_request_list_and_another_seed_another():
    a = pv.poisson_requests(50, 10.0, SETUP, seed=3)
    b = pv.poisson_requests(50, 10.0, SETUP, seed=3)
    c = pv.poisson_requests(50, 10.0, SETUP, seed=4)
    assert a == b
    assert [r.arrival for r in a] != [r.arrival for r in c]
    assert all(r.input_tokens == 512 and r.output_tokens == 128 for r in a)
    arrivals = [r.arrival for r in a]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0


def test_the_trace_both_sides_read_holds_exactly_the_generated_requests(tmp_path):
    requests = pv.poisson_requests(200, 7.3, SETUP, seed=0)
    path = tmp_path / "trace.csv"
    pv.write_trace(requests, path)
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == pv.TRACE_COLUMNS  # Vidur's trace-replay columns
    assert {r[0] for r in rows[1:]} == {pv.TRACE_DATE}
    back = pv.read_trace(path, SETUP.model)
    assert [(r.arrival, r.input_tokens, r.output_tokens) for r in back] == [
        (r.arrival, r.input_tokens, r.output_tokens) for r in requests
    ]


def test_vidur_kv_capacity_follows_its_memory_planner():
    # Llama-3-8B: per layer 4096*128*(2*32 + 2*8) attention + 3*4096*14336 MLP = 218,103,808
    # parameters, x32 layers; (80 GiB * 0.9 - 2 bytes * params) // (4 * 128 * 8 * 32 bytes)
    # = 483,328 tokens; whole 768-token request slots: 629 * 768 = 483,072.
    assert SETUP.max_tokens == 768
    assert pv.vidur_kv_capacity_tokens(SETUP) == 483_072
    wider = dataclasses.replace(SETUP, memory_margin=0.2)
    assert pv.vidur_kv_capacity_tokens(wider) < 483_072


def test_servegym_side_times_isolated_requests_alike_and_queues_a_burst():
    kv = pv.vidur_kv_capacity_tokens(SETUP)
    apart = [
        dataclasses.replace(r, arrival=10.0 * (i + 1))
        for i, r in enumerate(pv.poisson_requests(3, 1.0, SETUP, seed=0))
    ]
    alone = pv.run_servegym(apart, SETUP, kv)
    assert alone.extra["kv_capacity_tokens"] == kv
    assert alone.extra["token_budget"] == 512 and alone.extra["max_batch"] == 128
    assert len(alone.ttft) == 3 and alone.run_s > 0
    assert np.ptp(alone.ttft) < 1e-12 and np.ptp(alone.tpot) < 1e-12
    assert 0 < alone.ttft[0] < alone.latency[0]
    np.testing.assert_allclose(alone.latency, alone.ttft + 127 * alone.tpot, rtol=1e-9)
    burst = [dataclasses.replace(r, arrival=1.0) for r in apart]
    together = pv.run_servegym(burst, SETUP, kv)
    # three 512-token prompts share a 512-token budget: the later ones wait for theirs
    assert together.ttft.max() > 2 * alone.ttft[0]


def _fixture(tmp_path):
    """Vidur's output as its MetricsStore writes it (request_metrics.csv: one column per
    request metric, merged on "Request Id", rows in completion order) plus the driver's file."""
    metrics = tmp_path / "2026-01-01_00-00-00-000000"
    metrics.mkdir()
    columns = [
        "Request Id",
        "request_e2e_time",
        "request_e2e_time_normalized",
        "request_execution_time",
        "request_execution_time_normalized",
        "request_model_execution_time",
        "request_model_execution_time_normalized",
        "request_preemption_time",
        "request_scheduling_delay",
        "request_execution_plus_preemption_time",
        "request_execution_plus_preemption_time_normalized",
        "prefill_e2e_time",
        "prefill_time_execution_plus_preemption",
        "prefill_time_execution_plus_preemption_normalized",
        "decode_time_execution_plus_preemption_normalized",
        "request_inter_arrival_delay",
        "request_num_tokens",
        "request_num_prefill_tokens",
        "request_num_decode_tokens",
        "request_pd_ratio",
        "request_num_restarts",
    ]
    # (id, e2e s, ttft s, decode tokens): request 1 finished first
    rows = [(1, 2.0, 0.5, 4), (0, 3.2, 0.2, 4), (2, 1.0, 1.0, 1)]
    with open(metrics / "request_metrics.csv", "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(columns)
        for rid, e2e, ttft, dec in rows:
            values = dict.fromkeys(columns, 0.0)
            values.update(
                {
                    "Request Id": rid,
                    "request_e2e_time": e2e,
                    "prefill_e2e_time": ttft,
                    "request_num_decode_tokens": dec,
                    "decode_time_execution_plus_preemption_normalized": (e2e - ttft) / dec,
                }
            )
            out.writerow([values[c] for c in columns])
    run = {
        "vidur_version": "0.0.26",
        "metrics_dir": str(metrics),
        "setup_s": 4.5,
        "run_s": 0.25,
        "write_s": 0.1,
        "kv_blocks": 30192,
        "block_size": 16,
        "kv_capacity_tokens": 483072,
        "max_batch_size": 128,
        "attention_source": "fixture",
    }
    (tmp_path / "peer_run.json").write_text(json.dumps(run))


def test_parser_reads_vidur_request_metrics_in_request_order(tmp_path):
    _fixture(tmp_path)
    side = pv.parse_vidur_output(tmp_path)
    np.testing.assert_allclose(side.ttft, [0.2, 0.5, 1.0])
    np.testing.assert_allclose(side.latency, [3.2, 2.0, 1.0])
    # TPOT as servegym defines it: (latency - TTFT) / (decode tokens - 1)
    np.testing.assert_allclose(side.tpot[:2], [1.0, 0.5])
    assert math.isnan(side.tpot[2])  # one decode token: no TPOT
    assert side.run_s == 0.25 and side.setup_s == 4.5
    assert side.requests_per_wall_s == pytest.approx(12.0)
    assert side.extra["kv_capacity_tokens"] == 483072
    table = pv.format_table(side, side)
    assert "+0.0%" in table and "1.0x" in table


def test_parser_names_a_metrics_file_without_vidurs_columns(tmp_path):
    _fixture(tmp_path)
    run = json.loads((tmp_path / "peer_run.json").read_text())
    run["metrics_dir"] = str(tmp_path)
    (tmp_path / "request_metrics.csv").write_text("Request Id,latency\n0,1.0\n")
    (tmp_path / "peer_run.json").write_text(json.dumps(run))
    with pytest.raises(pv.PeerConfigError, match="prefill_e2e_time"):
        pv.parse_vidur_output(tmp_path)


def test_without_vidur_only_servegym_runs_and_the_install_steps_are_printed(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("SERVEGYM_VIDUR_PYTHON", raising=False)
    monkeypatch.setattr(pv.importlib.util, "find_spec", lambda name: None)
    code = pv.main(["--count", "20", "--rate", "5", "--work-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "Vidur is not available" in out and "pip install vidur==0.0.26" in out
    assert "20 requests" in out and "TTFT ms median" in out
    assert (tmp_path / "trace-20.csv").is_file()


def test_require_vidur_without_vidur_is_an_error_naming_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SERVEGYM_VIDUR_PYTHON", raising=False)
    monkeypatch.setattr(pv.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit) as exc:
        pv.main(["--count", "5", "--rate", "5", "--require-vidur", "--work-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert "--require-vidur" in capsys.readouterr().err
    assert not (tmp_path / "trace-5.csv").exists()


def test_bad_options_are_errors_that_name_them(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SERVEGYM_VIDUR_PYTHON", raising=False)
    monkeypatch.setattr(pv.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit) as exc:
        pv.main(["--vidur-python", str(tmp_path / "no-python"), "--count", "5"])
    assert exc.value.code == 2
    assert "--vidur-python" in capsys.readouterr().err
    with pytest.raises(pv.PeerConfigError, match="osl=1"):
        pv.EngineSetup(osl=1)
    with pytest.raises(pv.PeerConfigError, match="--rate"):
        pv.poisson_requests(5, 0.0, SETUP, seed=0)
    with pytest.raises(pv.PeerConfigError, match="less than one request slot"):
        pv.vidur_kv_capacity_tokens(dataclasses.replace(SETUP, memory_margin=0.85))
    for bad in (["--rate", "0"], ["--count", "0"]):
        with pytest.raises(SystemExit) as exc:
            pv.main([*bad, "--work-dir", str(tmp_path)])
        assert exc.value.code == 2
        assert bad[0] in capsys.readouterr().err


def test_overlap_variant_drops_exactly_the_cpu_overhead_from_each_decode_step():
    from envs.sim.latency.model import load_calibration

    kv = pv.vidur_kv_capacity_tokens(SETUP)
    alone = [dataclasses.replace(r, arrival=5.0) for r in pv.poisson_requests(1, 1.0, SETUP, 0)]
    base = pv.run_servegym(alone, SETUP, kv)
    hidden = pv.run_servegym(alone, dataclasses.replace(SETUP, overlap_scheduling=True), kv)
    cal = load_calibration()
    per_step = cal.iteration_overhead_seconds + cal.iteration_overhead_per_seq_seconds
    assert per_step > 0
    assert base.tpot[0] - hidden.tpot[0] == pytest.approx(per_step, rel=1e-9)


def _aiconfigurator_fixture(folder):
    folder.mkdir()
    (folder / "context_attention_perf.csv").write_text(
        "batch_size,isl,num_heads,num_key_value_heads,latency\n"
        "1,512,32,8,0.03\n"
        "2,512,32,8,0.06\n"  # two prompts: not a Vidur prefill row
        "1,512,64,8,0.09\n"  # another model's heads
        "1,1024,32,8,0.1\n"
        "1,512,16,4,0.015\n"  # the same model at TP 2
    )
    (folder / "generation_attention_perf.csv").write_text(
        "batch_size,num_heads,num_key_value_heads,step,latency\n"
        "4,32,8,511,0.02\n"
        "4,16,4,511,0.01\n"  # the same model at TP 2
    )


def test_driver_rewrites_aiconfigurator_attention_into_vidur_profile_rows(tmp_path):
    from benchmarks import vidur_driver as vd

    _aiconfigurator_fixture(tmp_path / "aic")
    rows = vd.attention_from_aiconfigurator(tmp_path / "aic", 4096, 32, 8, 1, 16)
    shard = {"n_embd": 4096, "n_q_head": 32, "n_kv_head": 8, "block_size": 16}
    assert all(r.items() >= {**shard, "num_tensor_parallel_workers": 1}.items() for r in rows)
    prefill = [(r["kv_cache_size"], r["prefill_chunk_size"]) for r in rows if r["batch_size"] == 1]
    assert prefill == [(0, 512), (0, 1024)]
    decode = [r for r in rows if r["prefill_chunk_size"] == 0]
    assert [(r["batch_size"], r["kv_cache_size"]) for r in decode] == [(4, 512)]
    assert decode[0]["time_stats.attn_decode.median"] == 0.02
    tp2 = vd.attention_from_aiconfigurator(tmp_path / "aic", 4096, 32, 8, 2, 16)
    assert [r["time_stats.attn_decode.median"] for r in tp2 if r["batch_size"] == 4] == [0.01]
    with pytest.raises(SystemExit, match="48 query"):
        vd.attention_from_aiconfigurator(tmp_path / "aic", 6144, 48, 8, 1, 16)


def test_driver_keys_vidurs_predictor_cache_by_the_profiles_it_trains_on(tmp_path):
    from benchmarks import vidur_driver as vd

    compute = tmp_path / "vidur" / "compute" / "a100" / "org" / "model"
    compute.mkdir(parents=True)
    (compute / "mlp.csv").write_text("num_tokens\n1\n")
    _aiconfigurator_fixture(tmp_path / "aic")
    spec = {
        "data_dir": str(tmp_path / "vidur"),
        "device": "a100",
        "profile_model": "org/model",
        "attention_from": str(tmp_path / "aic"),
    }
    first = vd.profiles_id(spec)
    assert first.startswith("local/a100/org/model/")
    (compute / "mlp.csv").write_text("num_tokens\n2\n")
    assert vd.profiles_id(spec) != first
