"""LATS / ToT tree-search logs -> tree-search :class:`~traces.schema.Workflow` records.

Source: ``lapisrocks/LanguageAgentTreeSearch`` (SOURCES.md §11, MIT):
``webshop_lats_example.log`` (LATS MCTS on WebShop) and ``hotpot_tot_10it.log`` (ToT-DFS on
HotpotQA). Python logging text, ``YYYY-MM-DD HH:MM:SS,mmm - LEVEL - message``, a message may
span several lines.

One workflow per logged task instance (an *episode*: it starts at ``Iteration 1...`` in the
LATS log and at ``DFS at node depth 0...`` in the ToT log). Inside an episode, each expansion is
a *layer*, built from the log in order:

* ``PROMPT:`` + ``SAMPLED ACTION: [s_0, ..., s_{n-1}]`` -> n generator LLM nodes
  ``g<L>.<j>`` (task ``generate``; the n samples of one call fan out, each with the full
  prompt as input and its sample as output);
* each ``NEW NODE: Node(depth=d, ...)`` -> the environment step of the next sample, a tool node
  ``e<L>.<j>`` whose latency is the logged time since the previous structural log entry
  (prompt, samples, node or value output), parent ``g<L>.<j>``;
* each ``VALUE PROMPT:`` + ``VALUE OUTPUTS:`` pair -> a value-model LLM node ``v<L>.<k>``
  (task ``value``) after all environment steps of the layer (LATS evaluates the new children
  after expanding them).

The next layer's generator nodes wait for the previous layer's value nodes (selection needs the
values), or for its environment steps when there are none (ToT). Token counts come from the text
through :data:`traces.tokens.TOKENS_PER_CHAR` (the logs have no token counts). ``meta`` records
the tree ``depth`` (largest logged ``Node(depth=...)``), the number of layers, samples and value
calls.

The logs hold no reflection calls: LATS reflects only after a failed trajectory, and both logged
WebShop episodes succeed in their first iteration. Filter rule (reported with a
:class:`~traces.loaders._common.FilteredRecordsWarning`): an episode with no ``NEW NODE`` never
reached the environment -- in the WebShop log, one episode stops after its first prompt and the
last one is cut off by the end of the file -- and is dropped. The logs do not name the model
(the run scripts default to gpt-3.5-turbo) and have no arrival times: arrivals are Poisson with
``rate`` workflows/s (default 40, as in HexAgent §7.1) and ``seed``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from traces.loaders._common import (
    check_limit,
    poisson_arrivals,
    source_file,
    warn_filtered,
)
from traces.schema import LLMNode, Node, ToolNode, Workflow
from traces.tokens import TOKENS_PER_CHAR, estimate_tokens

LATS_FILES = {
    "webshop": "lats_logs/webshop_lats_example.log",
    "hotpot": "lats_logs/hotpot_tot_10it.log",
}
_ENTRY = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - [A-Z]+ - (.*)$")
_EPISODE_START = re.compile(r"^(Iteration 1\.\.\.|DFS at node depth 0\.\.\.)\s*$")
_DEPTH = re.compile(r"^NEW NODE: Node\(depth=(\d+),")


@dataclass
class _Entry:
    line: int
    time: float
    message: str


@dataclass
class _Episode:
    start_line: int
    nodes: list[Node] = field(default_factory=list)
    depth: int = 0
    layers: int = 0
    samples: int = 0
    values: int = 0
    env_steps: int = 0


def _read_entries(path: Path) -> list[_Entry]:
    entries: list[_Entry] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            m = _ENTRY.match(line)
            if m:
                t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                entries.append(_Entry(lineno, t, m.group(2)))
            elif entries:
                entries[-1].message += "\n" + line
            elif line.strip():
                raise ValueError(f"{path}:{lineno}: text before the first log entry: {line[:80]!r}")
    return entries


def _literal_list(entry: _Entry, prefix: str, path: Path) -> list[str]:
    text = entry.message[len(prefix) :].strip()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"{path}:{entry.line}: {prefix!r} is not a Python list literal") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{path}:{entry.line}: {prefix!r} must be a list of strings")
    return value


def _parse_episodes(path: Path, model: str, value_model: str, tpc: float) -> list[_Episode]:
    episodes: list[_Episode] = []
    ep: _Episode | None = None
    prompt: str | None = None
    value_prompt: str | None = None
    gen_ids: list[str] = []
    env_ids: list[str] = []
    value_ids: list[str] = []
    frontier: tuple[str, ...] = ()
    last_time = 0.0
    for e in _read_entries(path):
        msg = e.message
        if _EPISODE_START.match(msg):
            ep = _Episode(start_line=e.line)
            episodes.append(ep)
            prompt, value_prompt, gen_ids, env_ids, value_ids, frontier = None, None, [], [], [], ()
            last_time = e.time
            continue
        if ep is None:
            continue
        where = f"{path}:{e.line}"
        if msg.startswith("PROMPT:"):
            # A new expansion: it waits for the previous layer's values (or its env steps).
            frontier = tuple(value_ids or env_ids or gen_ids) or frontier
            prompt, gen_ids, env_ids, value_ids = msg[len("PROMPT:") :].strip(), [], [], []
            last_time = e.time
        elif msg.startswith("SAMPLED ACTION:"):
            if prompt is None or gen_ids:
                raise ValueError(f"{where}: SAMPLED ACTION without a PROMPT before it")
            ep.layers += 1
            for j, sample in enumerate(_literal_list(e, "SAMPLED ACTION:", path)):
                node_id = f"g{ep.layers}.{j}"
                n_in = max(1, estimate_tokens(prompt, tokens_per_char=tpc))
                n_out = estimate_tokens(sample, tokens_per_char=tpc)
                ep.nodes.append(LLMNode(node_id, model, n_in, n_out, frontier, task="generate"))
                gen_ids.append(node_id)
            ep.samples += len(gen_ids)
            last_time = e.time
        elif msg.startswith("NEW NODE:"):
            m = _DEPTH.match(msg)
            if m is None:
                raise ValueError(f"{where}: NEW NODE without 'Node(depth=<int>,'")
            if len(env_ids) >= len(gen_ids):
                raise ValueError(
                    f"{where}: NEW NODE number {len(env_ids) + 1} of layer {ep.layers}, but the "
                    f"layer sampled only {len(gen_ids)} actions"
                )
            node_id = f"e{ep.layers}.{len(env_ids)}"
            parent = gen_ids[len(env_ids)]
            ep.nodes.append(ToolNode(node_id, round(e.time - last_time, 3), (parent,), name="env"))
            env_ids.append(node_id)
            ep.env_steps += 1
            ep.depth = max(ep.depth, int(m.group(1)))
            last_time = e.time
        elif msg.startswith("VALUE PROMPT:"):
            value_prompt = msg[len("VALUE PROMPT:") :].strip()
        elif msg.startswith("VALUE OUTPUTS:"):
            if value_prompt is None:
                raise ValueError(f"{where}: VALUE OUTPUTS without a VALUE PROMPT before it")
            outputs = _literal_list(e, "VALUE OUTPUTS:", path)
            node_id = f"v{ep.layers}.{len(value_ids)}"
            parents = tuple(env_ids or gen_ids) or frontier
            n_in = max(1, estimate_tokens(value_prompt, tokens_per_char=tpc))
            n_out = estimate_tokens("".join(outputs), tokens_per_char=tpc)
            ep.nodes.append(LLMNode(node_id, value_model, n_in, n_out, parents, task="value"))
            value_ids.append(node_id)
            ep.values += 1
            value_prompt = None
            last_time = e.time
    return episodes


def load_lats(
    data_dir: Path | str | None = None,
    *,
    model: str = "llama3.1-8b",
    value_model: str | None = None,
    logs: tuple[str, ...] | list[str] = ("webshop", "hotpot"),
    rate: float = 40.0,
    seed: int = 0,
    tokens_per_char: float = TOKENS_PER_CHAR,
    limit: int | None = None,
) -> list[Workflow]:
    """Load the LATS/ToT logs as tree-search workflows with Poisson arrivals.

    :param data_dir: data directory holding ``lats_logs/`` (``None``: ``$SERVEGYM_DATA``).
    :param model: catalog model of the generator calls.
    :param value_model: catalog model of the value (verifier) calls (``None``: ``model``, as in
        LATS, where one LLM plays both roles).
    :param logs: which logs to read, in this order (keys of :data:`LATS_FILES`).
    :param rate: Poisson arrival rate in workflows per second.
    :param seed: seed of the arrival process.
    :param tokens_per_char: text-to-token factor (default: :data:`traces.tokens.TOKENS_PER_CHAR`).
    :param limit: return only the first ``limit`` episodes (``None``: all; the logs hold 3 usable).
    :return: workflows sorted by arrival; ``meta`` holds ``source``, ``line`` (episode start),
        ``depth``, ``layers``, ``samples``, ``value_calls`` and ``env_steps``.
    :raises ValueError: for an unknown log name or a log entry out of the expected order.
    """
    check_limit(limit)
    unknown = [name for name in logs if name not in LATS_FILES]
    if unknown or not logs:
        raise ValueError(
            f"unknown LATS logs {unknown or logs!r}; expected a non-empty subset of "
            f"{sorted(LATS_FILES)}"
        )
    kept: list[tuple[str, _Episode]] = []
    dropped = 0
    for name in logs:
        path = source_file(data_dir, LATS_FILES[name])
        for ep in _parse_episodes(path, model, value_model or model, tokens_per_char):
            if ep.env_steps == 0:
                dropped += 1
            else:
                kept.append((name, ep))
    warn_filtered("lats", {"episodes that never reached the environment (no NEW NODE)": dropped})
    if limit is not None:
        kept = kept[:limit]
    arrivals = poisson_arrivals(len(kept), rate=rate, seed=seed)
    return [
        Workflow(
            id=f"lats-{name}-L{ep.start_line}",
            arrival=t,
            nodes=tuple(ep.nodes),
            meta={
                "source": LATS_FILES[name],
                "line": ep.start_line,
                "depth": ep.depth,
                "layers": ep.layers,
                "samples": ep.samples,
                "value_calls": ep.values,
                "env_steps": ep.env_steps,
            },
        )
        for (name, ep), t in zip(kept, arrivals, strict=True)
    ]
