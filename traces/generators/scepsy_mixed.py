"""Scepsy §7.3 combined workload: RAG + reranker and beam search on one arrival stream.

Each arrival is RAG + reranker or beam search with probability 1/2 each (our documented
choice; Scepsy varies the two rates independently -- pass ``rag_share`` to change it). Each
workflow is built by its family's ``build_workflow``, so the per-family targets of
:mod:`~traces.generators.rag` and :mod:`~traces.generators.beam_search` hold within its share.
Default 100 workflows at 2 workflows/s.
"""

from __future__ import annotations

import numpy as np

from traces.generators._common import arrivals, check_count, load_stats
from traces.generators.beam_search import build_workflow as build_beam_search
from traces.generators.rag import build_workflow as build_rag
from traces.schema import Workflow

DEFAULT_COUNT = 100
DEFAULT_RATE_PER_S = 2.0


def generate_rag_beam_combined(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrival_process: str = "poisson",
    rag_share: float = 0.5,
) -> list[Workflow]:
    """Interleaved RAG + reranker and beam-search workflows.

    :param seed: RNG seed; same seed gives the same trace.
    :param count: number of workflows (default 100).
    :param rate: mean arrival rate in workflows/s (default 2).
    :param model: ignored unless given: overrides each family's main model (RAG generate,
        beam-search generator); by default each keeps its Scepsy model.
    :param arrival_process: ``"poisson"`` or ``"bursty"``.
    :param rag_share: probability that an arrival is RAG + reranker (0-1).
    """
    if not 0.0 <= rag_share <= 1.0:
        raise ValueError(f"rag_share must be in [0, 1], got {rag_share}")
    count = check_count(DEFAULT_COUNT if count is None else count)
    rng = np.random.default_rng(seed)
    times = arrivals(rng, count, DEFAULT_RATE_PER_S if rate is None else rate, arrival_process)
    rs, bs = load_stats("rag_reranker"), load_stats("beam_search")
    out = []
    for i in range(count):
        if rng.random() < rag_share:
            m = model or rs["defaults"]["model"]
            out.append(build_rag(rng, f"combined-{i}-rag", float(times[i]), m, rs))
        else:
            m = model or bs["defaults"]["model"]
            out.append(build_beam_search(rng, f"combined-{i}-beam", float(times[i]), m, bs))
    return out
