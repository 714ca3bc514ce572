"""Agent chains with prompt reuse: SWE-bench-style coding-agent trajectories.

A workflow is one agent trajectory: a chain of T steps, each an LLM call that emits an action,
then a tool node that runs it. Step t's prompt is step t − 1's prompt + its output + the tool
result, so the prompt grows along the chain and every call after the first resends its
parent's prompt and output. Every call carries ``prefix_hashes`` over ``block_tokens``-token
blocks derived from that ancestry (:func:`traces.generators._common.chain_prefix_hashes`), so a
prefix cache on the instance that served the parent hits the parent's whole prompt.

Shape (where it comes from):

* The statistic: in public SWE-bench agent runs 88 % of LLM calls had
  cached prompt tokens, with a mean of 13.8 k cached of 16.5 k prompt tokens.
* TraceLab's coding-agent example sessions (``traces-raw/tracelab_example``: one Claude Code
  and one Codex session): a round's cached prefix is the previous round's prompt
  (``prefix_tokens`` ≈ the previous ``input_tokens_total``), its new tokens are the previous
  output plus tool results; outputs average ≈ 940 (Claude) and ≈ 210 (Codex) tokens.

Derivation of the defaults (:class:`AgentChainShape`): T is geometric with p = 0.12, so 12 % of
calls are first calls with nothing to reuse and 88 % resend a parent's prompt (the issue's
share). A geometric chain is memoryless, so over all calls the step index is geometric too,
with mean (1 − p)/p = 7.33, and the mean prompt is L_0 + 7.33·g for a first prompt L_0 and a
growth g = output + tool result per step. L_0 = 6,000 tokens (an agent's system prompt, tool
docs and issue text) and g = 1,432 tokens (500 output, between TraceLab's two agents, + 932
tool result) give the issue's mean prompt of 16.5 k; the reused part, the parent's prompt, is
then 88 % × 16.5 k ≈ 14.5 k per call on average (the issue's 13.8 k also counts real cache
misses). Lengths are log-normal with the means above; tool latencies are the TraceLab agent
tool-call latencies (``traces/stats/bfcl.yaml`` ``tool_latency_ms``, as BFCL's tools use).
Chains stop at ``max_steps`` or before a prompt would pass ``max_context_tokens``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from traces.generators._common import (
    arrivals,
    chain_prefix_hashes,
    check_count,
    load_stats,
    sample_tokens,
)
from traces.schema import LLMNode, Node, ToolNode, Workflow

#: Tokens per prefix block of the hashes written by default: the simulator's default
#: ``prefix_block_tokens`` (Mooncake's 512-token blocks).
PREFIX_BLOCK_TOKENS = 512


@dataclasses.dataclass(frozen=True)
class AgentChainShape:
    """The distributions of an agent chain (see the module docstring for their derivation).

    :param first_call_share: p, the share of calls that start a chain (T ~ Geometric(p)).
    :param max_steps: longest chain (LLM calls).
    :param first_prompt_tokens: mean tokens of the first prompt L_0 (log-normal).
    :param output_tokens: mean output tokens per step (log-normal).
    :param tool_result_tokens: mean tool-result tokens per step (log-normal).
    :param sigma: log-normal shape σ of the three lengths.
    :param max_context_tokens: a chain stops before a prompt + output would exceed this.
    """

    first_call_share: float = 0.12
    max_steps: int = 50
    first_prompt_tokens: float = 6000.0
    output_tokens: float = 500.0
    tool_result_tokens: float = 932.0
    sigma: float = 0.8
    max_context_tokens: int = 120_000

    def __post_init__(self) -> None:
        if not 0.0 < self.first_call_share <= 1.0:
            raise ValueError(f"first_call_share must be in (0, 1], got {self.first_call_share}")
        for name in ("first_prompt_tokens", "output_tokens", "tool_result_tokens"):
            if not getattr(self, name) >= 1.0:
                raise ValueError(f"{name} must be >= 1 token, got {getattr(self, name)}")
        if self.max_steps < 1 or self.sigma < 0.0 or self.max_context_tokens < 2:
            raise ValueError(
                f"need max_steps >= 1, sigma >= 0 and max_context_tokens >= 2; got "
                f"{self.max_steps}, {self.sigma}, {self.max_context_tokens}"
            )


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, size: int) -> np.ndarray:
    """Integer lengths >= 1 from a log-normal with the given mean and shape σ."""
    mu = np.log(mean) - 0.5 * sigma**2
    return np.maximum(np.rint(rng.lognormal(mu, sigma, size)), 1).astype(int)


def build_workflow(
    rng: np.random.Generator,
    wid: str,
    arrival: float,
    model: str,
    shape: AgentChainShape,
    tool_latency_ms: list[int],
    block_tokens: int,
) -> Workflow:
    """One agent trajectory: LLM step -> tool -> LLM step ... (the last step has no tool).

    :param rng: random generator.
    :param wid: workflow id.
    :param arrival: arrival time in seconds.
    :param model: catalog model name for every call.
    :param shape: the chain's distributions.
    :param tool_latency_ms: 0th..100th percentiles of tool latency (milliseconds).
    :param block_tokens: tokens per prefix block of the hashes.
    """
    steps = min(int(rng.geometric(shape.first_call_share)), shape.max_steps)
    out = _lognormal(rng, shape.output_tokens, shape.sigma, steps)
    result = _lognormal(rng, shape.tool_result_tokens, shape.sigma, steps)
    latency = sample_tokens(rng, tool_latency_ms, steps) / 1000.0
    prompt = int(_lognormal(rng, shape.first_prompt_tokens, shape.sigma, 1)[0])
    salt = int(rng.integers(0, 2**62))
    nodes: list[Node] = []
    parents: tuple[str, ...] = ()
    for t in range(steps):
        if prompt + int(out[t]) > shape.max_context_tokens:
            if t:
                break
            out[t] = min(out[t], shape.max_context_tokens // 2)  # a first call is cut to fit
            prompt = shape.max_context_tokens - int(out[t])
        nodes.append(LLMNode(f"step{t}", model, prompt, int(out[t]), parents, "agent_step"))
        if t == steps - 1:
            break
        nodes.append(ToolNode(f"tool{t}", round(float(latency[t]), 6), (f"step{t}",), "agent"))
        parents = (f"tool{t}",)
        prompt += int(out[t]) + int(result[t])
    if nodes[-1].kind == "tool":  # the window ended the chain after a tool: drop the tool
        nodes.pop()
    return Workflow(
        wid,
        arrival,
        chain_prefix_hashes(nodes, salt, block_tokens),
        meta={"workload": "agent_chain", "block_tokens": block_tokens},
    )


def generate_agent_chain(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrival_process: str = "poisson",
    block_tokens: int = PREFIX_BLOCK_TOKENS,
    shape: AgentChainShape | None = None,
    **shape_overrides: Any,
) -> list[Workflow]:
    """SWE-bench-style agent chains with prefix hashes (see the module docstring).

    :param seed: RNG seed; same seed gives the same trace.
    :param count: number of workflows (default 100).
    :param rate: mean arrival rate in workflows/s (default 0.5: about 7 LLM calls/s of 16.5 k
        prompt tokens, which keeps hetero-1's prefill pool busy without the cache).
    :param model: catalog model (default ``llama3.1-70b``).
    :param arrival_process: ``"poisson"`` or ``"bursty"``.
    :param block_tokens: tokens per prefix block of the hashes; run the simulator with the same
        ``prefix_block_tokens``.
    :param shape: the chain's distributions (default :class:`AgentChainShape`).
    :param shape_overrides: fields of :class:`AgentChainShape` to change.
    """
    base = shape or AgentChainShape()
    unknown = sorted(set(shape_overrides) - {f.name for f in dataclasses.fields(base)})
    if unknown:
        raise ValueError(
            f"unknown agent_chain options {unknown}; known: "
            f"{[f.name for f in dataclasses.fields(base)]}"
        )
    shape = dataclasses.replace(base, **shape_overrides)
    count = check_count(100 if count is None else count)
    rng = np.random.default_rng(seed)
    times = arrivals(rng, count, 0.5 if rate is None else rate, arrival_process)
    tool_ms = load_stats("bfcl")["tool_latency_ms"]["quantiles"]
    model = model or "llama3.1-70b"
    return [
        build_workflow(rng, f"agent-{i}", float(times[i]), model, shape, tool_ms, block_tokens)
        for i in range(count)
    ]
