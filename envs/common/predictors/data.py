"""The fixed training / test split of GoodServe requests for the learned predictors.

Requests come from the ``goodserve`` generator (:mod:`traces.generators.goodserve`, GoodServe's
§5 BIRD / SWE-bench / LiveCodeBench mix, Routing-v0's default workload) in chunks of
:data:`CHUNK` requests: the training set is chunks with generator seeds ``TRAIN_SEED_BASE + i``,
the test set chunks with seeds ``TEST_SEED_BASE + i``, i = 0, 1, ... until the count is reached.
The two seed ranges are disjoint. Envs draw episode workloads from their reset seed (training
episodes in [0, 1_000_000), evaluation episodes from 1_000_000), so neither split ever equals an
evaluation episode's workload.
"""

from __future__ import annotations

from dataclasses import dataclass

from traces.generators import generate
from traces.schema import Request

TRAIN_SEED_BASE = 900_000
TEST_SEED_BASE = 950_000
CHUNK = 1000  # requests per generator seed


def goodserve_requests(split: str, count: int, model: str = "llama3.1-8b") -> list[Request]:
    """``count`` requests of the ``train`` or ``test`` split (see the module docstring).

    :raises ValueError: on an unknown split or a count < 1.
    """
    bases = {"train": TRAIN_SEED_BASE, "test": TEST_SEED_BASE}
    if split not in bases:
        raise ValueError(f"unknown split {split!r}; expected 'train' or 'test'")
    if count < 1:
        raise ValueError(f"{split} split needs count >= 1 request, got {count}")
    out: list[Request] = []
    i = 0
    while len(out) < count:
        n = min(CHUNK, count - len(out))
        recs = generate("goodserve", seed=bases[split] + i, count=n, model=model)
        out.extend(r for r in recs if isinstance(r, Request))
        i += 1
    return out[:count]


@dataclass
class _Node:
    task: str
    prompt: str | None


@dataclass
class Probe:
    """A request viewed the way predictors see a simulator :class:`~envs.sim.core.workflows.Call`
    (``node.task``, ``node.prompt``, ``input_tokens``, ``output_tokens``, ``generated``, ``uid``),
    for training, reports and tests without running the simulator."""

    uid: int
    node: _Node
    input_tokens: int
    output_tokens: int
    generated: int = 0


def probes(requests: list[Request]) -> list[Probe]:
    """Call-like views of ``requests`` (uids 0, 1, ...)."""
    return [
        Probe(i, _Node(r.task, r.prompt), r.input_tokens, r.output_tokens)
        for i, r in enumerate(requests)
    ]
