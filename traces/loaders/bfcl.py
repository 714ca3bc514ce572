"""BFCL v4 function-calling tasks -> function-calling :class:`~traces.schema.Workflow` DAGs.

Source: ``ShishirPatil/gorilla`` ``berkeley-function-call-leaderboard/bfcl_eval/data/``
(SOURCES.md §7, Apache-2.0): question files ``BFCL_v4_<category>.json`` and the ground truth in
``possible_answer/``; multi-turn tool docs in ``multi_turn_func_doc/``. All are JSON Lines.

Workflow shape (one workflow per task; node ids ``t<turn>.s<step>`` for LLM steps and
``t<turn>.c<step>[.<j>]`` for tool calls):

* **Multi-turn** (``multi_turn_*``): user turns in sequence. A turn with ground-truth calls
  ``c_0..c_{k-1}`` (listed in execution order, mostly dependent, e.g. ``cd`` then ``mv``) is the
  chain ``s0 -> c0 -> s1 -> c1 -> ... -> c_{k-1} -> s_k``: one LLM step per tool round, each
  emitting one call, and a closing step ``s_k`` that answers without a call (BFCL's inference loop
  ends a turn only when the model returns no call). The next turn's first step follows ``s_k``.
* **Single-turn parallel / multiple** (``parallel``, ``multiple``, ``parallel_multiple``,
  ``live_parallel``, ``live_parallel_multiple``): ``s0`` emits all ground-truth calls at once, the
  calls run as a fan-out of tool nodes, and the closing step ``s1`` waits for all of them.

Token counts come from text through :data:`traces.tokens.TOKENS_PER_CHAR` (BFCL has no token
counts). A step's input is the system prompt (the JSON tool docs offered at that turn) plus the
conversation so far: user messages, earlier emitted calls and closing replies. Output tokens of a
call step are those of the ground-truth call text (multi-turn: the given call strings;
single-turn: ``name(param=value, ...)`` with each parameter's first acceptable value, parameters
whose first acceptable value is ``""`` -- i.e. optional -- left out; several calls joined as
``[a(..), b(..)]``).

Not in the source, hence parameters with documented defaults: tool results (``tool_result_tokens``
added to the context per executed call, default 0: a lower bound -- ``multi_turn_long_context``
is long precisely because of tool results, which this loader cannot see), the closing reply
(``reply_tokens``, default 1: the end-of-turn token) and tool latency (``tool_latency``, default
0 s: BFCL executes its multi-turn APIs as in-process Python simulations). Multi-turn tool docs
follow the task: ``excluded_function`` is never offered, and ``missed_function`` entries are
withheld until their turn (miss_func). BFCL has no timestamps: arrivals are a Poisson process of
``rate`` workflows/s (default 40, as in HexAgent §7.1) seeded by ``seed``, over the tasks in
``categories`` order and file order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from traces.loaders._common import check_limit, iter_jsonl, poisson_arrivals, source_file
from traces.schema import LLMNode, Node, ToolNode, Workflow
from traces.tokens import TOKENS_PER_CHAR, estimate_tokens, estimate_tokens_from_chars

MULTI_TURN_CATEGORIES = (
    "multi_turn_base",
    "multi_turn_long_context",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
)
SINGLE_TURN_CATEGORIES = (
    "parallel",
    "multiple",
    "parallel_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
BFCL_CATEGORIES = MULTI_TURN_CATEGORIES + SINGLE_TURN_CATEGORIES

#: Multi-turn API class -> tool-doc file in ``multi_turn_func_doc/`` (SOURCES.md §7).
CLASS_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system",
    "TwitterAPI": "posting_api",
    "PostingAPI": "posting_api",
    "MessageAPI": "message_api",
    "TicketAPI": "ticket_api",
    "MathAPI": "math_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
    "WebSearchAPI": "web_search",
}
_ROOT = "bfcl_v4_data"


def _read_pairs(data_dir: Path | str | None, category: str) -> list[tuple[dict, dict]]:
    qpath = source_file(data_dir, f"{_ROOT}/BFCL_v4_{category}.json")
    apath = source_file(data_dir, f"{_ROOT}/possible_answer/BFCL_v4_{category}.json")
    answers = {}
    for lineno, obj in iter_jsonl(apath):
        if "id" not in obj or "ground_truth" not in obj:
            raise ValueError(f"{apath}:{lineno}: expected keys 'id' and 'ground_truth'")
        answers[obj["id"]] = obj
    pairs = []
    for lineno, q in iter_jsonl(qpath):
        if q.get("id") not in answers:
            raise ValueError(f"{qpath}:{lineno}: task {q.get('id')!r} has no entry in {apath}")
        pairs.append((q, answers[q["id"]]))
    return pairs


def _message_chars(turn: Any, where: str) -> int:
    if not isinstance(turn, list):
        raise ValueError(f"{where}: a question turn must be a list of messages, got {turn!r}")
    total = 0
    for msg in turn:
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), str):
            raise ValueError(f"{where}: message must be {{role, content: str}}, got {msg!r}")
        total += len(msg["content"])
    return total


def _doc_chars(doc: dict) -> int:
    return len(json.dumps(doc, ensure_ascii=False))


def _render_call(entry: Any, where: str) -> str:
    """``{name: {param: [acceptable values]}}`` -> ``name(param=value, ...)``."""
    if not isinstance(entry, dict) or len(entry) != 1:
        raise ValueError(
            f"{where}: ground-truth call must be {{name: {{param: [values]}}}}, got {entry!r}"
        )
    ((name, params),) = entry.items()
    if not isinstance(params, dict):
        raise ValueError(f"{where}: parameters of {name!r} must be an object, got {params!r}")
    args = []
    for param, values in params.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}: {name}.{param} must list acceptable values, got {values!r}")
        if values[0] == "":
            continue
        args.append(f"{param}={values[0]!r}")
    return f"{name}({', '.join(args)})"


class _Builder:
    """Accumulates nodes and the running context (chars of text + tokens not in the source)."""

    def __init__(self, model: str, tool_latency: float, tpc: float) -> None:
        self.model, self.tool_latency, self.tpc = model, tool_latency, tpc
        self.nodes: list[Node] = []
        self.context_chars = 0
        self.extra_tokens = 0

    def llm(self, node_id: str, parents: tuple[str, ...], output_tokens: int) -> str:
        n_in = estimate_tokens_from_chars(self.context_chars, tokens_per_char=self.tpc)
        self.nodes.append(
            LLMNode(
                node_id,
                self.model,
                max(1, n_in + self.extra_tokens),
                output_tokens,
                parents,
                task="function_call",
            )
        )
        return node_id

    def tool(self, node_id: str, parent: str, call: str) -> str:
        name = call.split("(", 1)[0].strip() or None
        self.nodes.append(ToolNode(node_id, self.tool_latency, (parent,), name=name))
        return node_id


def _multi_turn(
    q: dict,
    a: dict,
    docs: dict[str, list[dict]],
    b: _Builder,
    *,
    where: str,
    tool_result_tokens: int,
    reply_tokens: int,
) -> None:
    turns, truth = q.get("question"), a["ground_truth"]
    if not isinstance(turns, list) or not isinstance(truth, list) or len(turns) != len(truth):
        raise ValueError(
            f"{where}: question and ground_truth must be lists with one entry per turn, got "
            f"{len(turns) if isinstance(turns, list) else turns!r} turns and "
            f"{len(truth) if isinstance(truth, list) else truth!r} ground-truth entries"
        )
    excluded = set(q.get("excluded_function") or ())
    missed = {int(t): set(names) for t, names in (q.get("missed_function") or {}).items()}
    offered: list[dict] = []
    for cls in q.get("involved_classes") or ():
        if cls not in docs:
            raise ValueError(f"{where}: involved class {cls!r} not in {sorted(CLASS_DOC_FILES)}")
        offered.extend(d for d in docs[cls] if d["name"] not in excluded)
    withheld = set().union(*missed.values()) if missed else set()
    not_offered = withheld - {d["name"] for d in offered}
    if not_offered:
        raise ValueError(f"{where}: missed_function {sorted(not_offered)} not in the tool docs")
    doc_chars = {id(d): _doc_chars(d) for d in offered}
    system_chars = sum(doc_chars[id(d)] for d in offered if d["name"] not in withheld)
    history_chars = 0
    prev: tuple[str, ...] = ()
    for t, (turn, calls) in enumerate(zip(turns, truth, strict=True)):
        if t in missed:
            system_chars += sum(doc_chars[id(d)] for d in offered if d["name"] in missed[t])
        history_chars += _message_chars(turn, f"{where} turn {t}")
        if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
            raise ValueError(
                f"{where}: ground_truth[{t}] must be a list of call strings, got {calls!r}"
            )
        for i, call in enumerate(calls):
            b.context_chars = system_chars + history_chars
            step = b.llm(f"t{t}.s{i}", prev, estimate_tokens(call, tokens_per_char=b.tpc))
            prev = (b.tool(f"t{t}.c{i}", step, call),)
            history_chars += len(call)
            b.extra_tokens += tool_result_tokens
        b.context_chars = system_chars + history_chars
        prev = (b.llm(f"t{t}.s{len(calls)}", prev, reply_tokens),)
        b.extra_tokens += reply_tokens


def _single_turn(
    q: dict, a: dict, b: _Builder, *, where: str, tool_result_tokens: int, reply_tokens: int
) -> None:
    turns, truth = q.get("question"), a["ground_truth"]
    functions = q.get("function")
    if not isinstance(turns, list) or not isinstance(functions, list):
        raise ValueError(f"{where}: expected 'question' and 'function' lists")
    if not isinstance(truth, list) or not truth:
        raise ValueError(f"{where}: ground_truth must be a non-empty list of calls, got {truth!r}")
    calls = [_render_call(entry, where) for entry in truth]
    b.context_chars = sum(_doc_chars(f) for f in functions) + sum(
        _message_chars(turn, where) for turn in turns
    )
    emitted = calls[0] if len(calls) == 1 else "[" + ", ".join(calls) + "]"
    step = b.llm("t0.s0", (), estimate_tokens(emitted, tokens_per_char=b.tpc))
    tools = tuple(
        b.tool(f"t0.c0.{j}" if len(calls) > 1 else "t0.c0", step, call)
        for j, call in enumerate(calls)
    )
    b.context_chars += len(emitted)
    b.extra_tokens += tool_result_tokens * len(calls)
    b.llm("t0.s1", tools, reply_tokens)


def load_bfcl(
    data_dir: Path | str | None = None,
    *,
    model: str = "llama3.1-8b",
    categories: tuple[str, ...] | list[str] = BFCL_CATEGORIES,
    rate: float = 40.0,
    seed: int = 0,
    tool_latency: float = 0.0,
    tool_result_tokens: int = 0,
    reply_tokens: int = 1,
    tokens_per_char: float = TOKENS_PER_CHAR,
    limit: int | None = None,
) -> list[Workflow]:
    """Load BFCL v4 tasks as function-calling workflows with Poisson arrivals.

    :param data_dir: data directory holding ``bfcl_v4_data/`` (``None``: ``$SERVEGYM_DATA``).
    :param model: catalog model for every LLM step.
    :param categories: BFCL categories to load, in this order (see :data:`BFCL_CATEGORIES`).
    :param rate: Poisson arrival rate in workflows per second.
    :param seed: seed of the arrival process.
    :param tool_latency: latency of every tool call in seconds (not in the source).
    :param tool_result_tokens: tokens each tool result adds to later steps' input (not in the
        source; 0 = lower bound).
    :param reply_tokens: output tokens of a turn's closing step (not in the source; >= 1).
    :param tokens_per_char: text-to-token factor (default: :data:`traces.tokens.TOKENS_PER_CHAR`).
    :param limit: return only the first ``limit`` tasks in ``categories`` order (``None``: all).
    :return: workflows sorted by arrival; ``meta`` holds ``source``, ``category``, ``task_id``,
        ``turns`` and ``calls`` (ground-truth call count).
    :raises ValueError: for an unknown category or a task whose question and answer disagree.
    """
    check_limit(limit)
    unknown = [c for c in categories if c not in BFCL_CATEGORIES]
    if unknown or not categories:
        raise ValueError(
            f"unknown BFCL categories {unknown or categories!r}; expected a non-empty "
            f"subset of {list(BFCL_CATEGORIES)}"
        )
    if not tool_latency >= 0:
        raise ValueError(f"tool_latency must be >= 0 seconds, got {tool_latency!r}")
    if tool_result_tokens < 0 or reply_tokens < 1:
        raise ValueError(
            f"need tool_result_tokens >= 0 and reply_tokens >= 1, got "
            f"{tool_result_tokens!r} and {reply_tokens!r}"
        )
    docs: dict[str, list[dict]] = {}
    if any(c in MULTI_TURN_CATEGORIES for c in categories):
        by_file: dict[str, list[dict]] = {}
        for cls, stem in CLASS_DOC_FILES.items():
            if stem not in by_file:
                path = source_file(data_dir, f"{_ROOT}/multi_turn_func_doc/{stem}.json")
                by_file[stem] = [doc for _, doc in iter_jsonl(path)]
            docs[cls] = by_file[stem]
    built: list[tuple[str, dict, _Builder, int]] = []
    for category in categories:
        for q, a in _read_pairs(data_dir, category):
            if limit is not None and len(built) >= limit:
                break
            where = f"BFCL {category} task {q['id']!r}"
            b = _Builder(model, tool_latency, tokens_per_char)
            if category in MULTI_TURN_CATEGORIES:
                _multi_turn(
                    q,
                    a,
                    docs,
                    b,
                    where=where,
                    tool_result_tokens=tool_result_tokens,
                    reply_tokens=reply_tokens,
                )
            else:
                _single_turn(
                    q,
                    a,
                    b,
                    where=where,
                    tool_result_tokens=tool_result_tokens,
                    reply_tokens=reply_tokens,
                )
            built.append((category, q, b, len(q["question"])))
    arrivals = poisson_arrivals(len(built), rate=rate, seed=seed)
    return [
        Workflow(
            id=f"bfcl-{q['id']}",
            arrival=t,
            nodes=tuple(b.nodes),
            meta={
                "source": f"{_ROOT}/BFCL_v4_{category}.json",
                "category": category,
                "task_id": q["id"],
                "turns": turns,
                "calls": sum(1 for n in b.nodes if isinstance(n, ToolNode)),
            },
        )
        for (category, q, b, turns), t in zip(built, arrivals, strict=True)
    ]
