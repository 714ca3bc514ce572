"""The simulator's results are pinned: a speed change must not change what a run produces.

Each test runs a small fixed-seed simulation and compares a SHA-256 digest of its per-call and
per-workflow records (every field, floats by ``repr``, so bit-exact) and its metrics with a digest
first taken on commit ea20b1c, before the event-loop work of issue 14, and re-pinned once since:
issue 10 §5 added the element-wise kernels to the latency model and refitted the engines'
``frontend_seconds`` (with the previous constants the asynchronous-planning, prefill prefix-cache
and tool-estimate changes of the same issue reproduced the old digests); issue 30's overlap
scheduling in the SGLang preset (its per-iteration CPU overheads hidden behind the GPU) re-pinned
``monolithic_sglang_prefix`` alone. Every case pins the ``roofline`` per-op calibration (the
one the ``-v0`` envs pin), not the simulator's default. A failing digest means the
simulation now produces different numbers: if that is intended (a fidelity fix, not a speed-up),
say why in the commit and re-pin with ``python tests/sim/core/test_sim_digest.py``.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from envs.sim import DefaultScheduler, Simulation, load_cluster
from envs.sim.core.scheduler import EarliestFinishScheduler
from envs.sim.core.simulation import LatencyCache, SimulationResult
from traces.generators import generate


def _roofline() -> LatencyCache:
    """Latency models of the ``roofline`` per-op calibration, which every digest pins."""
    return LatencyCache(calibration_variant="roofline")


def _pd_default() -> SimulationResult:
    """P-D cluster, FCFS + least-loaded, H_w horizons and online H_w(t) on."""
    records = generate("mixed", seed=0, count=120)
    sim = Simulation(load_cluster("hetero-1"), records, seed=0, latency_cache=_roofline())
    return sim.run(DefaultScheduler())


def _pd_errors_earliest_finish() -> SimulationResult:
    """P-D cluster, earliest-finish placement, ±20 % estimate errors (the rng path)."""
    records = generate("bfcl", seed=1, count=40)
    sim = Simulation(
        load_cluster("hetero-2"), records, seed=3, estimate_error=0.2, latency_cache=_roofline()
    )
    return sim.run(EarliestFinishScheduler())


def _monolithic_vllm_migration() -> SimulationResult:
    """Monolithic vLLM engines (chunked prefill, paged KV) overloaded so that calls are preempted
    and recomputed, with GoodServe's periodic migration checks (τ = 50)."""
    cluster = load_cluster("goodserve-4", model="llama3.1-8b")
    records = generate("goodserve-sessions", seed=0, count=400, model="llama3.1-8b", rate=60.0)
    sim = Simulation(
        cluster,
        records,
        seed=0,
        engine="vllm",
        check_interval=50,
        compute_horizons=False,
        latency_cache=_roofline(),
    )
    return sim.run(DefaultScheduler())


def _monolithic_sglang_prefix() -> SimulationResult:
    """Monolithic SGLang engines with the prefix cache, token-by-token decode off."""
    cluster = load_cluster("goodserve-4", model="llama3.1-8b")
    records = generate("goodserve-sessions", seed=2, count=200, model="llama3.1-8b")
    sim = Simulation(
        cluster,
        records,
        seed=2,
        engine="sglang",
        prefix_cache_blocks="kv",
        compute_horizons=False,
        latency_cache=_roofline(),
    )
    return sim.run(DefaultScheduler())


CASES = {
    "pd_default": (
        _pd_default,
        "7da663b1db6cc8e1d98bbb5331dfe542ac8e69d7245ed4b2c7f872469d3658f7",
    ),
    "pd_errors_earliest_finish": (
        _pd_errors_earliest_finish,
        "216a83248fc4ffcc5cd1f7c036bc9f530c6cab5cdb727e293c78df3d2788fd46",
    ),
    "monolithic_vllm_migration": (
        _monolithic_vllm_migration,
        "bd1591a148881b8baa8c588e3cbe04708fbe83e8455cfab7d23e7fcfcdd443fd",
    ),
    "monolithic_sglang_prefix": (
        _monolithic_sglang_prefix,
        "a9195f14cafb49cfba23d0780b9c540b6ca5f5d4eb18adf923f3a41bebc3440e",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_simulation_records_match_pinned_digest(sim_digest: Any, name: str) -> None:
    run, pinned = CASES[name]
    assert sim_digest(run()) == pinned, (
        f"{name}: the simulation's records changed; if intended, re-pin with "
        "`python tests/sim/core/test_sim_digest.py` and say why in the commit"
    )


if __name__ == "__main__":
    from conftest import digest  # this folder's conftest.py (the script's directory)

    for key, (fn, _) in sorted(CASES.items()):
        print(f"{key}: {digest(fn())}", file=sys.stdout)
