"""Beam-search workflows with a generator and a process-reward verifier (Scepsy §2, §7.1).

Per request, the total number of generator invocations G is drawn from a lognormal that puts
Scepsy's reported extremes (24 and 844 over 500 traced requests) at the 1/501 and 500/501
quantiles, clipped to [24, 844]: median ~142, mean ~172. The search runs D = round(G / W)
steps (data-dependent depth; at least 3). Each step: W = 8 generator calls (``llama3.2-1b``,
4 kept beams x 2 continuations each), each candidate scored by one verifier call
(``llama3.1-8b-prm``, 1 output token: the step score), then a ``select_top_k`` tool node
(1 ms of non-LLM code) keeps the top 4 beams and gates the next step (fan-in). Generator input
= problem + the beam's steps so far; verifier input = that + the candidate step.

Target statistics (``traces/stats/beam_search.yaml`` ``targets``, from
:func:`traces.fit.fit_beam_search`; paper-derived, there is no raw beam-search trace):

* ``mean_generator_invocations``, ``median_generator_invocations`` -- per request.
* ``mean_depth`` -- search steps per request.
* ``arrival_rate_per_s`` -- 1 req/s (Scepsy sweeps beam-search rates; ours is a default).

Every call carries ``prefix_hashes`` over 16-token blocks (:data:`PREFIX_BLOCK_TOKENS`): the
candidates of one beam share its prompt, and a verifier call shares its generator call's prompt
plus the new step — the "high prefix cache hit rates in the multi-turn beam search workflow"
Scepsy §4 reports. Read them with ``Simulation(prefix_cache_blocks="kv",
prefix_block_tokens=16)`` (``servegym/Allocation-v0`` does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traces.generators._common import generate_family
from traces.schema import LLMNode, Node, ToolNode, Workflow

SELECT_LATENCY_S = 0.001
#: Tokens per prefix-cache block of the ``prefix_hashes`` this generator writes: vLLM's default
#: KV block size (16), so a simulation must use ``prefix_block_tokens=16`` to read them.
PREFIX_BLOCK_TOKENS = 16


def prefix_hashes(
    seed: int, segments: list[tuple[int, int]], total: int, block: int = PREFIX_BLOCK_TOKENS
) -> tuple[int, ...]:
    """Hashes of the full ``block``-token blocks of a prompt made of ``segments`` (``(segment
    id, tokens)`` in prompt order) and ``total`` tokens long. Block k's hash chains block k−1's
    with the ids of the segments it overlaps, so two prompts share a block hash exactly when
    they share every token up to the block's end. Integer-only hashing: stable across
    processes and ``PYTHONHASHSEED`` values."""
    out: list[int] = []
    h = hash((seed, -1))
    starts, pos = [], 0
    for sid, n in segments:
        starts.append((pos, pos + n, sid))
        pos += n
    k = 0
    while (k + 1) * block <= total:
        lo, hi = k * block, (k + 1) * block
        ids = tuple(sid for a, b, sid in starts if a < hi and b > lo)
        h = hash((h, ids))
        out.append(h)
        k += 1
    return tuple(out)


def _lognormal_int(rng: np.random.Generator, spec: dict[str, float], size: int) -> np.ndarray:
    return np.maximum(
        np.rint(spec["median"] * np.exp(spec["sigma"] * rng.standard_normal(size))), 1
    ).astype(int)


def build_workflow(
    rng: np.random.Generator, wid: str, arrival: float, model: str, stats: dict[str, Any]
) -> Workflow:
    """One beam-search workflow.

    :param rng: random generator.
    :param wid: workflow id.
    :param arrival: arrival time in seconds.
    :param model: catalog model of the generator calls.
    :param stats: the ``beam_search`` stats mapping.
    """
    g = stats["generator_invocations"]
    total = float(np.exp(g["lognormal_mu"] + g["lognormal_sigma"] * rng.standard_normal()))
    total = float(np.clip(total, g["min"], g["max"]))
    width, keep = int(stats["beam_width"]), int(stats["keep_top_k"])
    depth = max(3, int(round(total / width)))
    verifier = stats["models"]["verifier"]
    problem = int(_lognormal_int(rng, stats["problem_tokens"], 1)[0])
    beams = np.zeros(keep, dtype=int)  # tokens generated so far on each kept beam
    # Prompt contents for prefix caching: the problem, then the steps along the beam's lineage
    # (segment ids: 0 = problem, 1 + s * width + j = candidate j of step s); each model's
    # prompts hash apart (a different prompt template and a different engine).
    uid = int(rng.integers(1 << 62))
    lineage: list[list[tuple[int, int]]] = [[(0, problem)] for _ in range(keep)]
    nodes: list[Node] = []
    gate: tuple[str, ...] = ()
    for s in range(depth):
        steps = _lognormal_int(rng, stats["step_tokens"], width)
        parent_beam = np.arange(width) % keep
        scored = []
        cand: list[list[tuple[int, int]]] = []
        for j in range(width):
            ctx = problem + int(beams[parent_beam[j]])
            gid, vid = f"s{s}g{j}", f"s{s}v{j}"
            segs = lineage[parent_beam[j]]
            mine = [*segs, (1 + s * width + j, int(steps[j]))]
            cand.append(mine)
            nodes.append(
                LLMNode(
                    gid,
                    model,
                    ctx,
                    int(steps[j]),
                    gate,
                    "generate",
                    prefix_hashes=prefix_hashes(hash((uid, 1)), segs, ctx),
                )
            )
            nodes.append(
                LLMNode(
                    vid,
                    verifier,
                    ctx + int(steps[j]),
                    int(stats["verifier_output_tokens"]),
                    (gid,),
                    "verify",
                    prefix_hashes=prefix_hashes(hash((uid, 2)), mine, ctx + int(steps[j])),
                )
            )
            scored.append(vid)
        nodes.append(ToolNode(f"s{s}select", SELECT_LATENCY_S, tuple(scored), "select_top_k"))
        gate = (f"s{s}select",)
        kept = rng.choice(width, size=keep, replace=False)
        beams = beams[parent_beam[kept]] + steps[kept]
        lineage = [cand[k] for k in kept]
    meta = {"workload": "beam_search", "depth": depth, "generator_invocations": depth * width}
    return Workflow(wid, arrival, tuple(nodes), meta=meta)


def generate_beam_search(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrival_process: str = "poisson",
) -> list[Workflow]:
    """Beam-search workflows.

    :param seed: RNG seed; same seed gives the same trace.
    :param count: number of workflows (default 100).
    :param rate: mean arrival rate in workflows/s (default 1).
    :param model: generator model (default ``llama3.2-1b``).
    :param arrival_process: ``"poisson"`` or ``"bursty"``.
    """
    return generate_family(
        "beam_search", "beam", build_workflow, seed, count, rate, model, arrival_process
    )
