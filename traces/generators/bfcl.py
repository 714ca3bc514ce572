"""BFCL function-calling workflows (HexAgent §7.1, "BFCL-v3", fitted to BFCL v4 data).

A workflow is one BFCL task of one of three kinds, drawn with the BFCL task-count proportions:

* ``multi_turn`` (BFCL v3 multi-turn sets): U user turns; in each turn k sequential
  dependent calls -- LLM step (emits one call) -> tool -> LLM step ... -> closing reply LLM call.
* ``single`` (parallel / multiple / parallel_multiple / live sets): one LLM step emits w calls
  at once -> w parallel tool nodes (fan-out where w >= 2) -> one reply LLM call (fan-in).
* ``web_search``: h hops, each an LLM step -> search tool, then a reply LLM call.

The prompt of every LLM call is the tool docs + the conversation so far (user turns, emitted
calls, tool results and replies), so inputs grow along the workflow. Tool latency and result
size come from the TraceLab agent tool calls (BFCL has no timings). BFCL has no assistant
replies, so a closing reply's length is drawn from the user-turn length distribution (an
assumption: a reply restating the request).

Target statistics (``traces/stats/bfcl.yaml`` ``targets``, fitted by
:func:`traces.fit.fit_bfcl`):

* ``mean_llm_calls_per_workflow`` -- the workflow rule applied to every BFCL task.
* ``mean_tool_calls_per_workflow`` -- ground-truth calls per task.
* ``mean_parallel_fanout`` -- mean width of parallel steps (w >= 2).
* ``mean_call_output_tokens`` -- chars/4 of one emitted call (tokens of ``function_call``
  steps).
* ``mean_user_turns_multi_turn`` -- user turns per multi-turn task.
* ``arrival_rate_per_s`` -- HexAgent §7.1: 400 workflows at 40/s (Poisson).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traces.generators._common import generate_family, sample_hist, sample_tokens
from traces.schema import LLMNode, Node, ToolNode, Workflow


class _Builder:
    """Accumulates nodes and the growing context of one workflow."""

    def __init__(self, rng: np.random.Generator, model: str, stats: dict[str, Any], doc: int):
        self.rng, self.model, self.stats = rng, model, stats
        self.context = doc
        self.nodes: list[Node] = []
        self.frontier: tuple[str, ...] = ()

    def tokens(self, key: str, n: int = 1) -> np.ndarray:
        return sample_tokens(self.rng, self.stats[key]["quantiles"], n)

    def llm(self, output: int, task: str) -> str:
        nid = f"llm{len(self.nodes)}"
        self.nodes.append(
            LLMNode(nid, self.model, int(self.context), int(output), self.frontier, task)
        )
        self.context += output
        self.frontier = (nid,)
        return nid

    def tools(self, width: int, name: str) -> None:
        lat = self.tokens("tool_latency_ms", width) / 1000.0
        results = self.tokens("tool_result_tokens", width)
        ids = []
        for j in range(width):
            nid = f"tool{len(self.nodes)}"
            self.nodes.append(ToolNode(nid, round(float(lat[j]), 6), self.frontier, name))
            ids.append(nid)
        self.context += int(results.sum())
        self.frontier = tuple(ids)


def build_workflow(
    rng: np.random.Generator, wid: str, arrival: float, model: str, stats: dict[str, Any]
) -> Workflow:
    """One BFCL-style function-calling workflow.

    :param rng: random generator.
    :param wid: workflow id.
    :param arrival: arrival time in seconds.
    :param model: catalog model name for every LLM call.
    :param stats: the ``bfcl`` stats mapping.
    """
    kinds = sorted(stats["kind_probability"])
    p = np.array([stats["kind_probability"][k] for k in kinds])
    kind = str(rng.choice(kinds, p=p / p.sum()))
    ks = stats[kind]
    b = _Builder(rng, model, stats, int(sample_tokens(rng, ks["doc_tokens"]["quantiles"], 1)[0]))
    if kind == "multi_turn":
        for _ in range(int(sample_hist(rng, ks["turns"]["histogram"], 1)[0])):
            b.context += int(b.tokens("user_tokens")[0])
            for _ in range(int(sample_hist(rng, ks["calls_per_turn"]["histogram"], 1)[0])):
                b.llm(int(b.tokens("call_tokens")[0]), "function_call")
                b.tools(1, "api")
            b.llm(int(b.tokens("user_tokens")[0]), "reply")
    elif kind == "single":
        width = int(sample_hist(rng, ks["parallel_width"]["histogram"], 1)[0])
        b.context += int(b.tokens("user_tokens")[0])
        b.llm(
            int(b.tokens("call_tokens", width).sum()),
            "parallel_call" if width > 1 else "function_call",
        )
        b.tools(width, "api")
        b.llm(int(b.tokens("user_tokens")[0]), "reply")
    else:
        b.context += int(b.tokens("user_tokens")[0])
        for _ in range(int(sample_hist(rng, ks["hops"]["histogram"], 1)[0])):
            b.llm(int(b.tokens("call_tokens")[0]), "function_call")
            b.tools(1, "web_search")
        b.llm(int(b.tokens("user_tokens")[0]), "reply")
    return Workflow(wid, arrival, tuple(b.nodes), meta={"workload": "bfcl", "kind": kind})


def generate_bfcl(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrival_process: str = "poisson",
) -> list[Workflow]:
    """BFCL function-calling workflows.

    :param seed: RNG seed; same seed gives the same trace.
    :param count: number of workflows (default 400, HexAgent §7.1).
    :param rate: mean arrival rate in workflows/s (default 40).
    :param model: catalog model (default ``llama3.1-70b``).
    :param arrival_process: ``"poisson"`` or ``"bursty"``.
    """
    return generate_family(
        "bfcl", "bfcl", build_workflow, seed, count, rate, model, arrival_process
    )
