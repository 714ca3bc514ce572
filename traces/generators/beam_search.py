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

Generator calls carry ``prefix_hashes`` over 16-token blocks (:data:`PREFIX_BLOCK_TOKENS`): the
candidates of one beam share its prompt, and a beam's next step shares its lineage — the "high
prefix cache hit rates in the multi-turn beam search workflow" Scepsy §4 reports. Read them with
``Simulation(prefix_cache_blocks="kv", prefix_block_tokens=16)`` (``servegym/Allocation-v0``
does).

**The verifier re-reads the whole trajectory on every call** (``verifier_prefix_cache=False``,
the default). Scepsy §7.1 names its beam search as Hugging Face's
search-and-learn [15, 16] with Llama-3.2-1B and Llama3.1-8B-PRM. There the PRM
(``RLHFlow/Llama3.1-8B-PRM-Deepseek-Data``, ``sal/models/reward_models.py``) scores a candidate
by one forward pass over the question and *every* step so far, loaded with
``config.use_cache = False``: nothing of the previous step's pass is reused, so a verifier call
costs a prefill of the full trajectory, growing with depth. Scepsy does not say how it served
the PRM. With ``verifier_prefix_cache=True`` (a named
variant) a verifier call hashes its prompt like a generator call and, behind a cache-aware
router, prefills only the new step. That variant made the verifier's GPU demand about equal to
the generator's, and so it left allocation little to gain: by the APL's own numbers, the best
allocation was 1.03–1.05× the equal split. The paper's 1.5–2.4×
needs a workload where the two LLMs' demands differ.

Parameter sources: generator/verifier models, Scepsy §7.1; invocation counts 24–844 per
request, Scepsy §2 (fitted, ``traces/stats/beam_search.yaml``); 8 candidates per step keeping
4, search-and-learn's N/M structure at N = 8, M = 2 (its Llama-3.2-1B recipe runs N = 16,
M = 4; kept at 8 so that depth = invocations / 8 stays at the fitted ~21 steps; not measured at
16); one output token per verifier call (the step score is read from the logits of one
position); problem and step lengths are our assumptions (stats YAML). search-and-learn's
``lookahead = 1`` (a greedy extra step scored, then discarded) is not modelled.
"""

from __future__ import annotations

import bisect
from functools import partial
from typing import Any

import numpy as np

from traces.generators._common import generate_family
from traces.schema import LLMNode, Node, ToolNode, Workflow

SELECT_LATENCY_S = 0.001
#: Tokens per prefix-cache block of the ``prefix_hashes`` this generator writes: vLLM's default
#: KV block size (16), so a simulation must use ``prefix_block_tokens=16`` to read them.
PREFIX_BLOCK_TOKENS = 16


def prefix_hashes(
    seed: int,
    segments: list[tuple[int, int]],
    total: int,
    block: int = PREFIX_BLOCK_TOKENS,
    known: tuple[int, ...] = (),
) -> tuple[int, ...]:
    """Hashes of the full ``block``-token blocks of a prompt made of ``segments`` (``(segment
    id, tokens)`` in prompt order) and ``total`` tokens long. Block k's hash chains block k−1's
    with the ids of the segments it overlaps, so two prompts share a block hash exactly when
    they share every token up to the block's end. Integer-only hashing: stable across
    processes and ``PYTHONHASHSEED`` values.

    :param known: the hashes of this prompt's first blocks, already computed for a prompt that
        shares them (a beam's earlier prompt under the same ``seed``): only the blocks after
        them are hashed, with the same result as hashing all.
    """
    out = list(known)
    h = known[-1] if known else hash((seed, -1))
    ends, pos = [], 0
    for _, n in segments:
        pos += n
        ends.append(pos)
    lo = len(known) * block
    first = bisect.bisect_right(ends, lo)  # the first segment that ends after the block start
    for k in range(len(known), total // block):
        lo, hi = k * block, (k + 1) * block
        while first < len(ends) and ends[first] <= lo:
            first += 1
        j, overlap = first, []
        while j < len(ends) and ends[j] - segments[j][1] < hi:  # starts before the block end
            overlap.append(segments[j][0])
            j += 1
        h = hash((h, tuple(overlap)))
        out.append(h)
    return tuple(out)


def _lognormal_int(rng: np.random.Generator, spec: dict[str, float], size: int) -> np.ndarray:
    return np.maximum(
        np.rint(spec["median"] * np.exp(spec["sigma"] * rng.standard_normal(size))), 1
    ).astype(int)


def build_workflow(
    rng: np.random.Generator,
    wid: str,
    arrival: float,
    model: str,
    stats: dict[str, Any],
    verifier_prefix_cache: bool = False,
) -> Workflow:
    """One beam-search workflow.

    :param rng: random generator.
    :param wid: workflow id.
    :param arrival: arrival time in seconds.
    :param model: catalog model of the generator calls.
    :param stats: the ``beam_search`` stats mapping.
    :param verifier_prefix_cache: give verifier calls prefix hashes (module docstring; default
        False: each verifier call prefills its whole trajectory, as search-and-learn's PRM).
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
    # Per kept beam, the hashes already computed for its lineage: the generator's (its prompt
    # one step ago, a prefix of the lineage) and the verifier's (the lineage itself).
    gen_seed, ver_seed = hash((uid, 1)), hash((uid, 2))
    known: list[tuple[tuple[int, ...], tuple[int, ...]]] = [((), ()) for _ in range(keep)]
    block = PREFIX_BLOCK_TOKENS
    nodes: list[Node] = []
    gate: tuple[str, ...] = ()
    for s in range(depth):
        steps = _lognormal_int(rng, stats["step_tokens"], width)
        parent_beam = np.arange(width) % keep
        scored = []
        cand: list[list[tuple[int, int]]] = []
        cand_known: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        gen_hashes: dict[int, tuple[int, ...]] = {}
        for j in range(width):
            b = int(parent_beam[j])
            ctx = problem + int(beams[b])
            gid, vid = f"s{s}g{j}", f"s{s}v{j}"
            segs = lineage[b]
            mine = [*segs, (1 + s * width + j, int(steps[j]))]
            if b not in gen_hashes:  # the beam's candidates share their generator prompt
                gen_known, _ = known[b]
                gen_hashes[b] = prefix_hashes(gen_seed, segs, ctx, known=gen_known)
            ver_hashes = prefix_hashes(
                ver_seed, mine, ctx + int(steps[j]), known=known[b][1][: ctx // block]
            )
            cand.append(mine)
            cand_known.append((gen_hashes[b], ver_hashes))
            nodes.append(
                LLMNode(
                    gid,
                    model,
                    ctx,
                    int(steps[j]),
                    gate,
                    "generate",
                    prefix_hashes=gen_hashes[b],
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
                    prefix_hashes=ver_hashes if verifier_prefix_cache else None,
                )
            )
            scored.append(vid)
        nodes.append(ToolNode(f"s{s}select", SELECT_LATENCY_S, tuple(scored), "select_top_k"))
        gate = (f"s{s}select",)
        kept = rng.choice(width, size=keep, replace=False)
        beams = beams[parent_beam[kept]] + steps[kept]
        lineage = [cand[k] for k in kept]
        # A kept candidate's lineage = its verifier's prompt; its generator prompt was the
        # parent's lineage, whose full blocks the next generator prompt shares.
        known = [cand_known[k] for k in kept]
    meta = {"workload": "beam_search", "depth": depth, "generator_invocations": depth * width}
    return Workflow(wid, arrival, tuple(nodes), meta=meta)


def generate_beam_search(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrival_process: str = "poisson",
    verifier_prefix_cache: bool = False,
) -> list[Workflow]:
    """Beam-search workflows.

    :param seed: RNG seed; same seed gives the same trace.
    :param count: number of workflows (default 100).
    :param rate: mean arrival rate in workflows/s (default 1).
    :param model: generator model (default ``llama3.2-1b``).
    :param arrival_process: ``"poisson"`` or ``"bursty"``.
    :param verifier_prefix_cache: the variant whose verifier calls share cached
        prefixes (module docstring).
    """
    build = partial(build_workflow, verifier_prefix_cache=verifier_prefix_cache)
    return generate_family("beam_search", "beam", build, seed, count, rate, model, arrival_process)
