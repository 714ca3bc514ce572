"""RAG + reranker workflows (Scepsy §7.1), fitted to RAGPulse.

embed (``e5-base-v2``, the question) -> retrieve (tool) -> k parallel reranker calls
(``bge-reranker-base``, question + one passage each) -> generate (``llama3-8b``, the full RAG
prompt). Embedding and reranker models are encoder-only, so their ``output_tokens`` is 0.

Target statistics (``traces/stats/rag_reranker.yaml`` ``targets``, fitted by
:func:`traces.fit.fit_rag_reranker` on the RAGPulse requests that retrieved passages):

* ``mean_k`` -- reranker fan-out = passages per request.
* ``mean_generate_input_tokens``, ``mean_generate_output_tokens`` -- generator call lengths.
* ``mean_rerank_input_tokens`` -- question + passage tokens per reranker call.
* ``arrival_rate_per_s`` -- 4 req/s, inside Scepsy's 1-28 req/s sweep (4 GPUs).

Retrieval latency (lognormal, median 10 ms) is an assumption; RAGPulse does not time it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traces.generators._common import generate_family, sample_hist, sample_tokens
from traces.schema import LLMNode, Node, ToolNode, Workflow


def build_workflow(
    rng: np.random.Generator, wid: str, arrival: float, model: str, stats: dict[str, Any]
) -> Workflow:
    """One RAG + reranker workflow.

    :param rng: random generator.
    :param wid: workflow id.
    :param arrival: arrival time in seconds.
    :param model: catalog model of the generate call.
    :param stats: the ``rag_reranker`` stats mapping.
    """
    m = stats["models"]
    k = int(sample_hist(rng, stats["k"]["histogram"], 1)[0])
    query = int(sample_tokens(rng, stats["query_tokens"]["quantiles"], 1)[0])
    passages = sample_tokens(rng, stats["passage_tokens"]["quantiles"], k)
    lat = stats["retrieve_latency_s"]
    latency = float(lat["median"] * np.exp(lat["sigma"] * rng.standard_normal()))
    gen_in = int(sample_tokens(rng, stats["generate_input_tokens"]["quantiles"], 1)[0])
    gen_out = int(sample_tokens(rng, stats["generate_output_tokens"]["quantiles"], 1)[0])
    nodes: list[Node] = [
        LLMNode("embed", m["embed"], query, 0, (), "embed"),
        ToolNode("retrieve", round(latency, 6), ("embed",), "retrieve"),
    ]
    nodes += [
        LLMNode(f"rerank{j}", m["rerank"], query + int(passages[j]), 0, ("retrieve",), "rerank")
        for j in range(k)
    ]
    nodes.append(
        LLMNode(
            "generate", model, gen_in, gen_out, tuple(f"rerank{j}" for j in range(k)), "generate"
        )
    )
    return Workflow(wid, arrival, tuple(nodes), meta={"workload": "rag_reranker", "k": k})


def generate_rag_reranker(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrival_process: str = "poisson",
) -> list[Workflow]:
    """RAG + reranker workflows.

    :param seed: RNG seed; same seed gives the same trace.
    :param count: number of workflows (default 100).
    :param rate: mean arrival rate in workflows/s (default 4).
    :param model: catalog model of the generate call (default ``llama3-8b``).
    :param arrival_process: ``"poisson"`` or ``"bursty"``.
    """
    return generate_family(
        "rag_reranker", "rag", build_workflow, seed, count, rate, model, arrival_process
    )
