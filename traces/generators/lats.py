"""LATS tree-search workflows (HexAgent §7.1; LATS, Zhou et al. 2024), fitted to the LATS logs.

A workflow is a sequence of E expansions. In each expansion the generator samples n children
of the selected node as n parallel LLM calls sharing one prompt (a bursty fan-out revealed at
once), then a value-model call scores each child (with the logged probability that a child is
evaluated; duplicates are not re-scored). The next expansion selects a node from the scores, so
it depends on every call of the previous one (fan-in). E is uniform between the expansion
counts of the two logs.

Target statistics (``traces/stats/lats.yaml`` ``targets``, fitted by
:func:`traces.fit.fit_lats`):

* ``mean_fanout`` -- generator samples per expansion (``SAMPLED ACTION`` list sizes).
* ``mean_expansions_per_workflow`` -- sequential expansion depth per workflow.
* ``mean_generator_calls_per_workflow`` -- fan-out x expansions.
* ``mean_sample_output_tokens`` -- chars/4 of one sampled continuation.
* ``mean_value_input_tokens`` -- chars/4 of a ``VALUE PROMPT``.
* ``arrival_rate_per_s`` -- HexAgent §7.1: 100 workflows at 40/s (Poisson).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traces.generators._common import generate_family, sample_hist, sample_tokens
from traces.schema import LLMNode, Workflow


def build_workflow(
    rng: np.random.Generator, wid: str, arrival: float, model: str, stats: dict[str, Any]
) -> Workflow:
    """One LATS-style tree-search workflow.

    :param rng: random generator.
    :param wid: workflow id.
    :param arrival: arrival time in seconds.
    :param model: catalog model name for generator and value calls.
    :param stats: the ``lats`` stats mapping.
    """
    lo, hi = stats["expansions"]["min"], stats["expansions"]["max"]
    expansions = int(rng.integers(lo, hi + 1))
    nodes: list[LLMNode] = []
    frontier: tuple[str, ...] = ()
    for e in range(expansions):
        n = int(sample_hist(rng, stats["fanout"]["histogram"], 1)[0])
        prompt = int(sample_tokens(rng, stats["generator_prompt_tokens"]["quantiles"], 1)[0])
        samples = sample_tokens(rng, stats["sample_tokens"]["quantiles"], n)
        scored = rng.random(n) < stats["value_call_probability"]
        v_in = sample_tokens(rng, stats["value_prompt_tokens"]["quantiles"], n)
        v_out = sample_tokens(rng, stats["value_output_tokens"]["quantiles"], n)
        leaves = []
        for j in range(n):
            gid = f"e{e}g{j}"
            nodes.append(LLMNode(gid, model, prompt, int(samples[j]), frontier, "generate"))
            if scored[j]:
                vid = f"e{e}v{j}"
                nodes.append(LLMNode(vid, model, int(v_in[j]), int(v_out[j]), (gid,), "value"))
                leaves.append(vid)
            else:
                leaves.append(gid)
        frontier = tuple(leaves)
    meta = {"workload": "lats", "expansions": expansions}
    return Workflow(id=wid, arrival=arrival, nodes=tuple(nodes), meta=meta)


def generate_lats(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrival_process: str = "poisson",
) -> list[Workflow]:
    """LATS tree-search workflows.

    :param seed: RNG seed; same seed gives the same trace.
    :param count: number of workflows (default 100, HexAgent §7.1).
    :param rate: mean arrival rate in workflows/s (default 40).
    :param model: catalog model (default ``llama3.1-70b``).
    :param arrival_process: ``"poisson"`` or ``"bursty"``.
    """
    return generate_family(
        "lats", "lats", build_workflow, seed, count, rate, model, arrival_process
    )
