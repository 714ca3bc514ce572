"""Parrot's MetaGPT run -> one layered fan-out :class:`~traces.schema.Workflow`.

Source: ``microsoft/ParrotServe`` (branch ``artifact``) ``artifact/workloads/metagpt/
log_3_round.jsonl`` (rounds r0-r3) and ``log_new_rounds.jsonl`` (r4-r7) (SOURCES.md §10, MIT).
A real MetaGPT run of "Write a deep learning framework like PyTorch" on gpt-4-32k; each line is
``{"r<k>_queries": {name: {system, user_msg}}, "r<k>_responses": {name: chat.completion}}``.

Structure (as logged): r0 is the architect (1 call); odd rounds are 8 engineer calls, even
rounds >= 2 are 8 reviewer calls, one per file. Every call of round k reads the whole codebase of
round k-1, so each node of round k has all nodes of round k-1 as parents (fan-out of 8 with an
all-to-all barrier). Token counts are the measured ``usage.prompt_tokens`` /
``usage.completion_tokens``. The original calls ran one after another (10-30 s apart), so their
``created`` times (kept in ``meta["created"]``) say nothing about parallelism.
"""

from __future__ import annotations

import re
from pathlib import Path

from traces.loaders._common import check_limit, iter_jsonl, require_int, source_file
from traces.schema import LLMNode, Workflow

PARROT_FILES = ("parrot_metagpt/log_3_round.jsonl", "parrot_metagpt/log_new_rounds.jsonl")
_ROUND_KEY = re.compile(r"^r(\d+)_(queries|responses)$")


def _role(round_index: int) -> str:
    if round_index == 0:
        return "architect"
    return "engineer" if round_index % 2 else "reviewer"


def load_parrot_metagpt(
    data_dir: Path | str | None = None,
    *,
    model: str = "llama3.1-70b",
    with_prompts: bool = False,
    limit: int | None = None,
) -> list[Workflow]:
    """Load the Parrot MetaGPT run as one workflow of 57 LLM calls in 8 rounds, arriving at 0 s.

    :param data_dir: data directory holding ``parrot_metagpt/`` (``None``: ``$SERVEGYM_DATA``).
    :param model: catalog model for every call (the run used gpt-4-32k, not in the catalog).
    :param with_prompts: attach each call's prompt text (system + user message) to its node.
    :param limit: maximum number of workflows (the source holds one).
    :return: ``[workflow]``; node ids are ``r<k>.<file>``, task labels ``architect`` /
        ``engineer`` / ``reviewer``; ``meta["created"]`` maps node id to the unix time logged.
    :raises ValueError: for a round without responses, a call without a response, or bad usage.
    """
    check_limit(limit)
    rounds: dict[int, dict[str, tuple[dict, dict]]] = {}
    for rel in PARROT_FILES:
        path = source_file(data_dir, rel)
        for lineno, obj in iter_jsonl(path):
            where = f"{path}:{lineno}"
            parsed = {}
            for key, value in obj.items():
                m = _ROUND_KEY.match(key)
                if m is None:
                    raise ValueError(
                        f"{where}: unexpected key {key!r}; expected r<k>_queries/responses"
                    )
                parsed[(int(m.group(1)), m.group(2))] = value
            for (k, kind), queries in parsed.items():
                if kind != "queries":
                    continue
                if k in rounds:
                    raise ValueError(f"{where}: round r{k} appears twice")
                responses = parsed.get((k, "responses"))
                if responses is None or set(responses) != set(queries):
                    raise ValueError(
                        f"{where}: r{k}_responses must answer exactly the calls {sorted(queries)}, "
                        f"got {sorted(responses or {})}"
                    )
                rounds[k] = {name: (queries[name], responses[name]) for name in queries}
    order = sorted(rounds)
    if order != list(range(len(order))):
        raise ValueError(f"MetaGPT rounds must be r0..r{len(order) - 1} without gaps, got {order}")
    nodes: list[LLMNode] = []
    created: dict[str, int] = {}
    prev_ids: tuple[str, ...] = ()
    for k in order:
        ids = []
        for name, (query, resp) in rounds[k].items():
            where = f"parrot_metagpt r{k} {name}"
            usage = resp.get("usage") or {}
            node_id = f"r{k}.{name}"
            prompt = query["system"] + "\n" + query["user_msg"] if with_prompts else None
            nodes.append(
                LLMNode(
                    node_id,
                    model,
                    require_int(
                        usage.get("prompt_tokens"), field="prompt_tokens", where=where, minimum=1
                    ),
                    require_int(
                        usage.get("completion_tokens"),
                        field="completion_tokens",
                        where=where,
                        minimum=1,
                    ),
                    prev_ids,
                    task=_role(k),
                    prompt=prompt,
                )
            )
            created[node_id] = resp.get("created")
            ids.append(node_id)
        prev_ids = tuple(ids)
    workflow = Workflow(
        id="parrot-metagpt-0",
        arrival=0.0,
        nodes=tuple(nodes),
        meta={"source": "parrot_metagpt", "rounds": len(order), "created": created},
    )
    return [workflow]
