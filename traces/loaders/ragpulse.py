"""RAGPulse (university policy Q&A RAG service) -> RAG :class:`~traces.schema.Workflow` records.

Source: ``flashserve/RAGPulse`` ``data/`` (SOURCES.md §3, MIT; cite arXiv 2511.12979).
``0_trace.jsonl`` holds one request a line (``timestamp`` seconds as a string, ``input_length``,
``output_length``, ``session_id`` and ``hash_ids`` with per-component chunk ids); files
``1_sys_prompt`` ... ``5_web_search`` give each chunk id's ``token_length``.

The request lines are **not sorted** by timestamp (SOURCES.md: "sort before replay"), so the
loader sorts them by ``(timestamp, line)`` -- the fix the source itself prescribes -- and shifts
the first to 0 s (the source's first timestamp is 0 = 12:00:00).

Each request becomes one workflow, built from what the trace records:

========  ==============================================  ==========================================
node      when                                            tokens / latency
========  ==============================================  ==========================================
embed     request has retrieved passages                  ``embed_model``; input = user_input chunk
                                                          tokens; output 0
retrieve  after embed                                     tool, ``retrieve_latency`` s (assumed: the
                                                          trace does not time retrieval)
rerank    after retrieve, if ``rerank_model`` is set      input = passages x (user_input + passage)
                                                          tokens of the *kept* passages (the
                                                          candidate set is not recorded: a lower
                                                          bound); output 0
web       request has web_search chunks                   tool, ``web_search_latency`` s (assumed)
generate  always, after all of the above                  ``model``; input_length / output_length
========  ==============================================  ==========================================

``generate.prefix_hashes`` are the request's leading system-prompt chunk ids while those chunks
are full 512-token blocks (the only component known to sit at the start of the prompt); all
component ids are kept in ``meta["hash_ids"]`` for passage-level (non-prefix) reuse studies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traces.loaders._common import check_limit, iter_jsonl, require_int, source_file
from traces.schema import LLMNode, Node, ToolNode, Workflow

#: Component -> (file, id field). ``passages_ids`` in the trace maps to ``2_passages.jsonl``.
_COMPONENT_FILES = {
    "sys_prompt": ("ragpulse/1_sys_prompt.jsonl", "sys_prompt_id"),
    "passages_ids": ("ragpulse/2_passages.jsonl", "passage_id"),
    "history": ("ragpulse/3_history.jsonl", "history_id"),
    "user_input": ("ragpulse/4_user_input.jsonl", "user_input_id"),
    "web_search": ("ragpulse/5_web_search.jsonl", "web_search_id"),
}
#: Chunk size in tokens at which RAGPulse cuts components (SOURCES.md §3).
RAGPULSE_BLOCK_TOKENS = 512


def _chunk_lengths(data_dir: Path | str | None) -> dict[str, dict[int, int]]:
    tables: dict[str, dict[int, int]] = {}
    for comp, (rel, id_field) in _COMPONENT_FILES.items():
        path = source_file(data_dir, rel)
        table: dict[int, int] = {}
        for lineno, obj in iter_jsonl(path):
            where = f"{path}:{lineno}"
            cid = require_int(obj.get(id_field), field=id_field, where=where)
            if cid in table:
                raise ValueError(f"{where}: duplicate {id_field} {cid}")
            table[cid] = require_int(obj.get("token_length"), field="token_length", where=where)
        tables[comp] = table
    return tables


def _component_tokens(
    hash_ids: Any, lengths: dict[str, dict[int, int]], where: str
) -> dict[str, list[int]]:
    """Per prompt component, the token lengths of the chunks ``hash_ids`` names.

    :raises ValueError: naming ``where`` for a malformed ``hash_ids`` or an unknown chunk id.
    """
    if not isinstance(hash_ids, dict) or set(hash_ids) != set(_COMPONENT_FILES):
        raise ValueError(
            f"{where}: hash_ids must be an object with keys {sorted(_COMPONENT_FILES)}, "
            f"got {hash_ids!r}"
        )
    tokens: dict[str, list[int]] = {}
    for comp, ids in hash_ids.items():
        if not isinstance(ids, list):
            raise ValueError(f"{where}: hash_ids.{comp} must be a list, got {ids!r}")
        try:
            tokens[comp] = [lengths[comp][i] for i in ids]
        except (KeyError, TypeError) as exc:
            raise ValueError(
                f"{where}: hash_ids.{comp} id {exc.args[0]!r} is not in {_COMPONENT_FILES[comp][0]}"
            ) from exc
    return tokens


def load_ragpulse(
    data_dir: Path | str | None = None,
    *,
    model: str = "llama3.1-8b",
    embed_model: str = "e5-base-v2",
    rerank_model: str | None = "bge-reranker-base",
    retrieve_latency: float = 0.05,
    web_search_latency: float = 1.0,
    limit: int | None = None,
) -> list[Workflow]:
    """Load RAGPulse as RAG workflows, sorted by arrival (seconds from the first request).

    :param data_dir: data directory holding ``ragpulse/`` (``None``: ``$SERVEGYM_DATA``).
    :param model: catalog model of the generate call.
    :param embed_model: catalog model of the query-embedding call.
    :param rerank_model: catalog model of the rerank call, or ``None`` for no rerank node.
    :param retrieve_latency: vector-search tool latency in seconds (an assumption, not traced).
    :param web_search_latency: web-search tool latency in seconds (an assumption, not traced).
    :param limit: return only the ``limit`` earliest requests after sorting (``None``: all 7,106).
    :return: workflows; ``meta`` holds ``source``, ``line``, ``session_id``, the source
        ``timestamp`` (s) and the component ``hash_ids``.
    :raises ValueError: for a bad field or a chunk id missing from its component file.
    """
    check_limit(limit)
    for name, value in (
        ("retrieve_latency", retrieve_latency),
        ("web_search_latency", web_search_latency),
    ):
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
    lengths = _chunk_lengths(data_dir)
    path = source_file(data_dir, "ragpulse/0_trace.jsonl")
    rows: list[tuple[int, int, dict]] = []
    for lineno, obj in iter_jsonl(path):
        ts_text = obj.get("timestamp")
        if not isinstance(ts_text, str) or not ts_text.isdigit():
            raise ValueError(
                f"{path}:{lineno}: timestamp must be a string of digits, got {ts_text!r}"
            )
        rows.append((int(ts_text), lineno, obj))
    rows.sort(key=lambda r: (r[0], r[1]))
    if limit is not None:
        rows = rows[:limit]
    first = rows[0][0] if rows else 0
    workflows: list[Workflow] = []
    for ts, lineno, obj in rows:
        where = f"{path}:{lineno}"
        n_in = require_int(obj.get("input_length"), field="input_length", where=where, minimum=1)
        n_out = require_int(obj.get("output_length"), field="output_length", where=where, minimum=1)
        hash_ids = obj.get("hash_ids")
        tokens = _component_tokens(hash_ids, lengths, where)
        nodes: list[Node] = []
        gen_parents: list[str] = []
        query_tokens = sum(tokens["user_input"])
        passage_tokens = tokens["passages_ids"]
        if passage_tokens:
            nodes.append(LLMNode("embed", embed_model, max(1, query_tokens), 0, task="embed"))
            nodes.append(ToolNode("retrieve", retrieve_latency, ("embed",), name="retrieve"))
            gen_parents = ["retrieve"]
            if rerank_model is not None:
                rerank_in = sum(query_tokens + p for p in passage_tokens)
                nodes.append(LLMNode("rerank", rerank_model, rerank_in, 0, ("retrieve",), "rerank"))
                gen_parents = ["rerank"]
        if hash_ids["web_search"]:
            nodes.append(ToolNode("web_search", web_search_latency, name="web_search"))
            gen_parents.append("web_search")
        prefix: list[int] = []
        for cid, n in zip(hash_ids["sys_prompt"], tokens["sys_prompt"], strict=True):
            if n != RAGPULSE_BLOCK_TOKENS:
                break
            prefix.append(cid)
        nodes.append(
            LLMNode(
                "generate",
                model,
                n_in,
                n_out,
                tuple(gen_parents),
                task="rag",
                prefix_hashes=tuple(prefix) or None,
            )
        )
        workflows.append(
            Workflow(
                id=f"ragpulse-{lineno}",
                arrival=float(ts - first),
                nodes=tuple(nodes),
                meta={
                    "source": "ragpulse/0_trace.jsonl",
                    "line": lineno,
                    "timestamp": ts,
                    "session_id": obj.get("session_id"),
                    "hash_ids": hash_ids,
                    "passages": len(passage_tokens),
                    "passage_tokens": sum(passage_tokens),
                },
            )
        )
    return workflows
