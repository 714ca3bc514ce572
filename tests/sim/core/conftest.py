"""Fixtures of the simulator-core tests: the tiny heterogeneous P-D cluster and the digest that
pins a simulation's results."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

import pytest

from envs.sim.core.simulation import SimulationResult
from envs.sim.hardware.cluster import cluster_from_dict

MODEL = "llama3.1-70b"


def digest(res: SimulationResult) -> str:
    """SHA-256 over every record field and metric of ``res`` (not its event count or wall time,
    which are how the run was computed, not what it produced)."""
    h = hashlib.sha256()
    for rec in res.calls:
        h.update(repr(dataclasses.astuple(rec)).encode())
    for rec in res.workflows:
        h.update(repr(dataclasses.astuple(rec)).encode())
    h.update(repr(sorted(res.metrics.items())).encode())
    h.update(repr(sorted(res.utilisation.items())).encode())
    h.update(repr(res.end_time).encode())
    h.update(repr(res.invocations).encode())
    return h.hexdigest()


@pytest.fixture(scope="session")
def sim_digest() -> Callable[[SimulationResult], str]:
    """:func:`digest`: equal digests, bit-identical simulation results."""
    return digest


def _tiny_pd_cluster(model: str = MODEL) -> object:
    """1 A100 + 1 H200 prefill, 1 A100 + 1 H200 decode: small but heterogeneous."""
    return cluster_from_dict(
        {
            "name": "tiny-pd",
            "architecture": "pd",
            "default_model": model,
            "tensor_parallel": {model: {"a100-80g": 4, "h200": 4}},
            "prefill": [{"gpu": "a100-80g"}, {"gpu": "h200"}],
            "decode": [{"gpu": "a100-80g"}, {"gpu": "h200"}],
        }
    )


@pytest.fixture(scope="session")
def tiny_pd_cluster() -> Callable[..., object]:
    """Builds a fresh tiny P-D cluster (1 A100 + 1 H200 prefill, 1 A100 + 1 H200 decode, TP 4)
    serving ``model`` (default llama3.1-70b)."""
    return _tiny_pd_cluster
