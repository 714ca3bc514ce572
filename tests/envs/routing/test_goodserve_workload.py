"""Specification of Routing-v0's default workload: GoodServe §5's BIRD / SWE-bench /
LiveCodeBench single-shot mix, submitted at the Mooncake trace's timestamps
(traces/generators/goodserve.py), and the env's one arrival-rate constant."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the environments)
from envs.routing import DEFAULT_LOAD_SCALE, PAPER_RATES
from traces.generators import generate
from traces.generators._common import load_stats
from traces.generators.goodserve import TASKS, mooncake_tick_stats, paper_rate
from traces.validate import validate_records

DATA = Path(
    os.environ.get("SERVEGYM_DATA", Path(__file__).resolve().parents[4] / "shared" / "traces-raw")
)


def test_default_mix_is_three_single_shot_benchmarks_in_equal_shares():
    recs = generate("goodserve", seed=0, count=3000)
    validate_records(recs)
    shares = Counter(r.task for r in recs)
    assert set(shares) == set(TASKS) == {"sql", "code", "swe"}
    for task in TASKS:
        assert abs(shares[task] / 3000 - 1 / 3) < 0.04, shares
    # single shot: no sessions, no steps; only BIRD questions share a (schema) prefix
    assert not any("session" in r.meta or "step" in r.meta for r in recs)
    assert not any(r.prefix_hashes for r in recs if r.task != "sql")
    schemas = {r.meta["database"]: len(r.prefix_hashes) for r in recs if r.task == "sql"}
    assert len(schemas) == 11 and sum(n > 0 for n in schemas.values()) >= 6
    stats = load_stats("goodserve_paper")["tasks"]
    for task in TASKS:
        sel = [r for r in recs if r.task == task]
        out = np.median([r.output_tokens for r in sel])
        assert out == pytest.approx(stats[task]["output_tokens"]["median"], rel=0.1), task
    swe = [r.input_tokens for r in recs if r.task == "swe"]
    assert max(swe) <= 13_000 and np.median(swe) == pytest.approx(12_000, rel=0.03)
    code = np.median([r.input_tokens for r in recs if r.task == "code"])
    sql = np.median([r.input_tokens for r in recs if r.task == "sql"])
    assert code < sql < np.median(swe)  # LiveCodeBench statements < BIRD schemas < SWE-bench


def test_bird_questions_on_one_database_share_its_schema_prefix():
    recs = [r for r in generate("goodserve", seed=1, count=600) if r.task == "sql"]
    by_db: dict[int, set] = {}
    for r in recs:
        by_db.setdefault(r.meta["database"], set()).add(r.prefix_hashes)
    assert len(by_db) == 11
    assert all(len(h) == 1 for h in by_db.values())  # one schema per database
    assert len({next(iter(h)) for h in by_db.values() if next(iter(h))}) == len(
        [h for h in by_db.values() if next(iter(h))]
    )  # and no two databases share one


def test_arrivals_come_in_mooncake_ticks_at_the_requested_rate_not_poisson():
    recs = generate("goodserve", seed=2, count=5000, rate=1.7)
    t = np.array([r.arrival for r in recs])
    assert t[0] == 0.0 and np.all(np.diff(t) >= 0)
    ticks, sizes = np.unique(t, return_counts=True)
    moon = load_stats("goodserve_paper")["mooncake"]
    hist = np.asarray(moon["batch_size_counts"], dtype=float)
    mean_batch = (np.arange(len(hist)) * hist).sum() / hist.sum()
    # batches of requests share one timestamp, ticks evenly spaced (3 s scaled to the rate)
    assert sizes[:-1].mean() == pytest.approx(mean_batch, rel=0.05)
    assert sizes.max() <= len(hist) - 1 and sizes[:-1].min() >= 2
    gap = mean_batch / 1.7  # seconds between ticks at 1.7 requests/s
    assert np.allclose(np.diff(ticks), gap, rtol=1e-4)
    assert (len(t) - 1) / t[-1] == pytest.approx(1.7, rel=0.05)
    # Poisson would give a gap CV of 1; the tick process is far burstier
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() > 2.5
    poisson = np.diff(
        [r.arrival for r in generate("goodserve", seed=2, count=5000, rate=1.7, arrivals="poisson")]
    )
    assert poisson.std() / poisson.mean() == pytest.approx(1.0, abs=0.1)


@pytest.mark.skipif(not (DATA / "mooncake").is_dir(), reason="raw traces not present")
def test_committed_mooncake_statistics_are_derived_from_the_trace():
    derived = mooncake_tick_stats(DATA)
    moon = load_stats("goodserve_paper")["mooncake"]
    assert derived == {k: moon[k] for k in derived}


def test_env_default_is_the_paper_workload_at_one_rate_constant(monkeypatch):
    monkeypatch.delenv("SERVEGYM_DATA", raising=False)  # the default needs no data dir
    env = gym.make("servegym/Routing-v0").unwrapped
    assert env._source.workload == "goodserve"
    assert (
        PAPER_RATES["goodserve"]
        == paper_rate()
        == load_stats("goodserve_paper")["mooncake"]["rate_per_s"]
    )
    assert PAPER_RATES["goodserve-sessions"] == load_stats("goodserve")["defaults"]["rate_per_s"]
    assert env._source.scaled_rate() == pytest.approx(paper_rate() * DEFAULT_LOAD_SCALE)
    env.reset(seed=0)
    tasks = Counter(run.workflow.nodes[0].task for run in env.sim.runs)
    assert set(tasks) == {"sql", "code", "swe"} and env.sim.runs[0].arrival == 0.0


def test_bad_generator_arguments_name_the_culprit():
    with pytest.raises(ValueError, match="unknown arrivals 'bursty'"):
        generate("goodserve", seed=0, count=10, arrivals="bursty")
    with pytest.raises(ValueError, match="rate must be > 0"):
        generate("goodserve", seed=0, count=10, rate=0.0)
    with pytest.raises(ValueError, match="model 'gpt-9'"):
        generate("goodserve", seed=0, count=10, model="gpt-9")
