"""Seeded, calibrated workload generators (registry ``GENERATORS``).

Every generator has the signature ``(seed, count=None, *, rate=None, model=None, **kw) ->
list[Record]`` and uses paper defaults for whatever is None. Parameters are the fitted
statistics in ``traces/stats/*.yaml`` (see :mod:`traces.fit`); each module's docstring lists the
target statistics it reproduces and where they come from.

=====================  ====================================================  =================
name                   workload                                              paper
=====================  ====================================================  =================
``sharegpt``           conversational chains                                 HexAgent §7.1
``bfcl``               function-calling workflows (tool fan-out)             HexAgent §7.1
``lats``               LATS tree search (generator fan-out + value calls)    HexAgent §7.1
``mixed``              the three above interleaved                           HexAgent §7.1
``goodserve``          BIRD / SWE-bench / LiveCodeBench single-shot          GoodServe §5
                       requests at Mooncake timestamps, with prompt text
``goodserve-sessions`` ours: sql / code + SWE-agent sessions sharing          servegym
                       prefixes (not the paper's workload)
``rag_reranker``       embed -> retrieve -> k rerankers -> generate          Scepsy §7.1
``beam_search``        generator beams + PRM verifier, data-dependent depth  Scepsy §2, §7.1
``rag_beam_combined``  RAG + reranker and beam search interleaved            Scepsy §7.3
``agent_chain``        agent chains resending a growing prompt, with         ours (SWE-bench)
                       ``prefix_hashes`` (SWE-bench-style trajectories)
=====================  ====================================================  =================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from traces.generators.agent_chain import generate_agent_chain
from traces.generators.beam_search import generate_beam_search
from traces.generators.bfcl import generate_bfcl
from traces.generators.goodserve import generate_goodserve
from traces.generators.goodserve_sessions import generate_goodserve_sessions
from traces.generators.lats import generate_lats
from traces.generators.mixed import generate_mixed
from traces.generators.rag import generate_rag_reranker
from traces.generators.scepsy_mixed import generate_rag_beam_combined
from traces.generators.sharegpt import generate_sharegpt
from traces.schema import Record

GENERATORS: dict[str, Callable[..., Sequence[Record]]] = {
    "sharegpt": generate_sharegpt,
    "bfcl": generate_bfcl,
    "lats": generate_lats,
    "mixed": generate_mixed,
    "goodserve": generate_goodserve,
    "goodserve-sessions": generate_goodserve_sessions,
    "rag_reranker": generate_rag_reranker,
    "beam_search": generate_beam_search,
    "rag_beam_combined": generate_rag_beam_combined,
    "agent_chain": generate_agent_chain,
}


def generate(name: str, **kw: Any) -> list[Record]:
    """Run the generator registered as ``name``.

    :param name: a key of :data:`GENERATORS`.
    :param kw: the generator's arguments (``seed`` is required).
    :raises KeyError: naming the unknown generator and listing the known ones.
    """
    if name not in GENERATORS:
        raise KeyError(f"unknown generator {name!r}; known: {', '.join(sorted(GENERATORS))}")
    return list(GENERATORS[name](**kw))


__all__ = ["GENERATORS", "generate"]
