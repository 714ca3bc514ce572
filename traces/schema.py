"""The servegym trace schema: request records and workflow records (JSONL, one record a line).

Two record kinds, each tagged with a versioned ``schema`` field:

``servegym.request/1``
    One LLM request: ``id``, ``arrival`` (seconds), ``model``, ``input_tokens``,
    ``output_tokens``, ``task``, optional ``prompt`` text, optional ``prefix_hashes`` (hashes of
    the prompt's leading token blocks, for prefix caching) and optional ``slo`` (seconds).

``servegym.workflow/1``
    One agentic workflow: ``id``, ``arrival`` (seconds) and a DAG of ``nodes``; each node is an
    LLM call (``kind: "llm"``) or a tool (``kind: "tool"``, with a ``latency`` in seconds), and
    names its ``parents`` by id.

These dataclasses are the in-memory form used by the loaders, the generators and the simulator.
Parsing, validation and file I/O live in :mod:`traces.io` and :mod:`traces.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REQUEST_SCHEMA = "servegym.request/1"
WORKFLOW_SCHEMA = "servegym.workflow/1"


@dataclass(frozen=True)
class LLMNode:
    """An LLM call inside a workflow.

    :param id: node id, unique inside its workflow.
    :param model: catalog model name (see ``envs/configs/models.yaml``).
    :param input_tokens: prompt length in tokens (including context carried from parents).
    :param output_tokens: true generated length in tokens (0 for encoder-only models).
    :param parents: ids of the nodes that must finish before this one is revealed.
    :param task: task type label (``chat``, ``function_call``, ``generate``, ``value``, ...).
    :param prompt: optional prompt text (for text-based output-length predictors).
    :param prefix_hashes: optional hashes of the prompt's leading fixed-size token blocks.
    """

    id: str
    model: str
    input_tokens: int
    output_tokens: int
    parents: tuple[str, ...] = ()
    task: str = "chat"
    prompt: str | None = None
    prefix_hashes: tuple[int, ...] | None = None

    kind = "llm"


@dataclass(frozen=True)
class ToolNode:
    """A tool invocation inside a workflow: a fixed latency, no GPU work.

    :param id: node id, unique inside its workflow.
    :param latency: execution time in seconds.
    :param parents: ids of the nodes that must finish before this one runs.
    :param name: optional tool name.
    """

    id: str
    latency: float
    parents: tuple[str, ...] = ()
    name: str | None = None

    kind = "tool"


Node = LLMNode | ToolNode


@dataclass(frozen=True)
class Workflow:
    """A DAG of LLM calls and tool nodes arriving at ``arrival`` seconds.

    :param id: workflow id, unique inside its trace.
    :param arrival: arrival time in seconds from the trace start.
    :param nodes: nodes in any order; parents are referenced by id.
    :param meta: free-form provenance (workload name, source record, ...); never read by schedulers.
    """

    id: str
    arrival: float
    nodes: tuple[Node, ...]
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Request:
    """A single LLM request.

    :param id: request id, unique inside its trace.
    :param arrival: arrival time in seconds from the trace start.
    :param model: catalog model name.
    :param input_tokens: prompt length in tokens.
    :param output_tokens: true generated length in tokens.
    :param task: task type label (``sql``, ``code``, ``swe``, ``chat``, ...).
    :param prompt: optional prompt text.
    :param prefix_hashes: optional hashes of the prompt's leading fixed-size token blocks.
    :param slo: optional end-to-end latency SLO in seconds.
    """

    id: str
    arrival: float
    model: str
    input_tokens: int
    output_tokens: int
    task: str = "chat"
    prompt: str | None = None
    prefix_hashes: tuple[int, ...] | None = None
    slo: float | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


Record = Request | Workflow
