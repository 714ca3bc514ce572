"""``goodserve-sessions`` -- OUR OWN session workload, not the paper's: BIRD-like ``sql``,
LiveCodeBench-like ``code`` and SWE-agent *sessions* (``swe`` steps that resend a growing,
shared context), with prompt text that carries signal about the output length.

GoodServe §5 "Workloads" replays single-shot BIRD / SWE-bench / LiveCodeBench requests (that is
the ``goodserve`` generator, :mod:`traces.generators.goodserve`, and Routing-v0's default). This
generator was the project's first stand-in for it and is kept under its own name because it is a
different problem: about 81 % of its requests are SWE-session steps whose shared prefixes make up
~98 % of prompt tokens, so prefix locality decides routing there. Each task borrows the closest
public length statistics (``traces/stats/goodserve.yaml``, fitted by
:func:`traces.fit.fit_goodserve`):

* ``sql`` (BIRD: schema + question in, a short SQL query out) -- Azure 2023 *code* trace:
  structured context of ~2k tokens in, short generated code out (mean 28 tokens).
* ``code`` (LiveCodeBench: problem statement in, long reasoning + program out) -- input from the
  etalon ShareGPT prefill (user-written requests with context), output from the ServeGen
  DeepSeek-R1 client-35 output-length PDF (long, reasoning-model outputs, mean ~2.4k tokens).
* ``swe`` (SWE-bench agent: very long, growing inputs, short outputs) -- a session of steps sent
  as separate requests (``meta`` ``session`` / ``step``): the first input and every output from
  the Mooncake conversation trace (mean input 12k tokens), each later step's input = previous
  input + previous output + appended observation tokens (TraceLab ``newly_append_tokens``),
  capped at 120,000 tokens; steps per session ~ 1 + Poisson(mean - 1) with the TraceLab mean;
  a step arrives one TraceLab round gap after the previous one.

Prompts longer than the model's context window minus the request's output are cut to fit it
(Qwen2.5-14B: 32,768 tokens, so long ``swe`` contexts are truncated for it).

Prefix caching: the steps of a ``swe`` session extend one growing context, so each step carries
``prefix_hashes`` (one id per full 512-token block of its prompt, unique to the session): a step
routed where the previous one ran finds its earlier context cached. ``sql`` and ``code`` prompts
carry none (BIRD schemas shared across questions are not modelled: no data on which questions
share a database).

Each arrival picks a task uniformly (GoodServe gives no proportions). Prompt text: a per-task
template, a difficulty phrase and a number of requirement clauses that both grow with a
difficulty level; the level is the output length's quartile inside its task, replaced by a
neighbouring level with probability 1/4, so text predicts length usefully but not perfectly.

Arrivals: ``"poisson"`` (default) or ``"bursty"`` (Gamma gaps, CV = ServeGen rate-weighted mean
``bursty_cv``) at ``rate`` requests/s (default: the Mooncake conversation trace rate), or
``"mooncake"``: session starts replay the Mooncake conversation timestamps (needs the data dir),
rescaled so the request rate equals ``rate`` (default: Mooncake's own rate).

Target statistics (``targets``): ``sql_mean_output_tokens``, ``sql_mean_input_tokens``,
``code_mean_output_tokens``, ``code_mean_input_tokens``, ``swe_first_step_mean_input_tokens``,
``swe_mean_output_tokens``, ``swe_mean_steps_per_session``, ``arrival_rate_per_s`` (requests/s).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from traces.generators._common import (
    arrivals,
    check_count,
    data_dir,
    load_stats,
    sample_quantiles,
    sample_tokens,
)
from traces.schema import Request

TASKS = ("sql", "code", "swe")
#: Context windows in tokens (``envs/configs/models.yaml``, from the models' config.json): a
#: request's prompt + output never exceeds its model's window, so prompts are capped to fit.
MODEL_CONTEXT = {"llama3.1-8b": 131_072, "qwen2.5-14b": 32_768}
MODELS = tuple(MODEL_CONTEXT)
SWE_INPUT_CAP = 120_000  # tokens: leaves room for the output in a 128k context window
#: Prefix-cache block size, tokens (Mooncake hashes 512-token blocks).
BLOCK_TOKENS = 512
LEVEL_NOISE = 0.25

_LEVEL_WORDS = {
    "sql": [
        "a simple lookup",
        "a filtered aggregate",
        "a multi-table join",
        "a nested query with window functions and several joins",
    ],
    "code": ["an easy", "a medium", "a hard", "a very hard competition-level"],
    "swe": ["a typo-level", "a single-function", "a multi-file", "an architectural"],
}
_CLAUSES = {
    "sql": [
        "group the result by region",
        "exclude rows with null dates",
        "order by the computed ratio",
        "join the accounts table on client id",
        "keep only the top ten",
        "compute a running total per year",
    ],
    "code": [
        "handle up to 2*10^5 queries",
        "the answer must be modulo 998244353",
        "consider every edge case with empty input",
        "an O(n log n) solution is needed",
        "explain the algorithm step by step",
        "prove the greedy choice is correct",
    ],
    "swe": [
        "reproduce the failing test first",
        "keep backward compatibility",
        "update the documentation",
        "add a regression test",
        "refactor the shared helper",
        "check the other call sites",
    ],
}
_TEMPLATES = {
    "sql": "Database schema is given above. Write {level} SQL query answering the question.",
    "code": "Solve {level} programming problem from a contest. Write a complete program.",
    "swe": "You are a software engineering agent. Resolve {level} issue in the repository.",
}


def prompt_text(rng: np.random.Generator, task: str, level: int, step: int | None = None) -> str:
    """Prompt text whose wording and clause count rise with ``level`` (0-3)."""
    if rng.random() < LEVEL_NOISE:
        level = int(np.clip(level + rng.choice([-1, 1]), 0, 3))
    clauses = rng.choice(
        _CLAUSES[task], size=min(level + int(rng.integers(0, 2)), 6), replace=False
    )
    text = _TEMPLATES[task].format(level=_LEVEL_WORDS[task][level])
    if clauses.size:
        text += " Requirements: " + "; ".join(str(c) for c in clauses) + "."
    if step is not None:
        text += f" Step {step}: continue from the last observation."
    return text


def _level(value: float, table: list[int]) -> int:
    """Quartile (0-3) of ``value`` inside a percentile table."""
    pct = np.interp(value, np.asarray(table, dtype=float), np.linspace(0.0, 1.0, len(table)))
    return int(min(3, pct * 4))


def _mooncake_times(directory: Any, n: int) -> np.ndarray:
    """The first ``n`` Mooncake conversation arrival times (s), cycled if ``n`` exceeds it."""
    path = data_dir(directory) / "mooncake" / "conversation_trace.jsonl"
    with open(path, encoding="utf-8") as f:
        ts = np.sort([json.loads(line)["timestamp"] for line in f if line.strip()]) / 1000.0
    ts = ts - ts[0]
    span = ts[-1] + (ts[-1] / (len(ts) - 1))
    reps = -(-n // len(ts))
    return np.concatenate([ts + r * span for r in range(reps)])[:n]


def default_rate() -> float:
    """The generator's default request rate, requests/s (the Mooncake conversation trace's)."""
    return float(load_stats("goodserve")["defaults"]["rate_per_s"])


def generate_goodserve_sessions(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrivals_mode: str = "poisson",
    data_dir_path: str | os.PathLike[str] | None = None,
    **kw: Any,
) -> list[Request]:
    """Our SWE-session request mix (see the module docstring; not the paper's workload).

    :param seed: RNG seed; same seed gives the same trace.
    :param count: number of requests (default 1000).
    :param rate: mean request rate in requests/s (default: Mooncake conversation rate, 3.4).
    :param model: ``llama3.1-8b`` (default) or ``qwen2.5-14b``.
    :param arrivals_mode: ``"poisson"``, ``"bursty"`` or ``"mooncake"``; also accepted as
        ``arrivals=``.
    :param data_dir_path: raw-trace dir for ``"mooncake"`` (default ``$SERVEGYM_DATA``); also
        accepted as ``data_dir=``.
    """
    arrivals_mode = kw.pop("arrivals", arrivals_mode)
    data_dir_path = kw.pop("data_dir", data_dir_path)
    if kw:
        raise TypeError(f"generate_goodserve_sessions got unknown arguments {sorted(kw)}")
    stats = load_stats("goodserve")
    d = stats["defaults"]
    count = check_count(d["count"] if count is None else count)
    rate = float(d["rate_per_s"] if rate is None else rate)
    model = model or d["model"]
    if model not in MODELS:
        raise ValueError(f"goodserve model {model!r} not one of {MODELS}")
    context = MODEL_CONTEXT[model]
    rng = np.random.default_rng(seed)
    ts = stats["tasks"]
    mean_steps = ts["swe"]["mean_steps_per_session"]
    # Sessions of swe steps make one arrival unit carry several requests on average.
    unit_rate = rate * len(TASKS) / (len(TASKS) - 1 + mean_steps)
    # Draw each unit's task and session length first. A few spare units keep the trace's end
    # in steady state: sessions started late still have steps inside the truncated window.
    tasks: list[str] = []
    n_steps: list[int] = []
    while sum(n_steps) < count * 1.05 + 4 * mean_steps:
        tasks.append(TASKS[int(rng.integers(0, len(TASKS)))])
        n_steps.append(1 + int(rng.poisson(mean_steps - 1)) if tasks[-1] == "swe" else 1)
    n_units = len(tasks)
    if arrivals_mode == "mooncake":
        raw = _mooncake_times(data_dir_path, n_units)
        starts = np.round(raw * stats["mooncake_rate_per_s"] / unit_rate, 6)
    elif arrivals_mode in ("poisson", "bursty"):
        starts = arrivals(rng, n_units, unit_rate, arrivals_mode, stats["bursty_cv"])
    else:
        raise ValueError(
            f"unknown arrivals {arrivals_mode!r}; expected 'poisson', 'bursty' or 'mooncake'"
        )
    out: list[Request] = []
    for u in range(n_units):
        task = tasks[u]
        t = ts[task]
        o_table = t["output_tokens"]["quantiles"]
        if task != "swe":
            inp = int(sample_tokens(rng, t["input_tokens"]["quantiles"], 1)[0])
            out_tok = int(sample_tokens(rng, o_table, 1)[0])
            inp = max(1, min(inp, context - out_tok - 1))
            prompt = prompt_text(rng, task, _level(out_tok, o_table))
            out.append(
                Request(
                    f"gs-{u}", float(starts[u]), model, inp, out_tok, task, prompt, meta={"unit": u}
                )
            )
            continue
        steps = n_steps[u]
        inp = int(sample_tokens(rng, t["input_tokens"]["quantiles"], 1)[0])
        outs = sample_tokens(rng, o_table, steps)
        appends = sample_tokens(rng, t["append_tokens"]["quantiles"], steps)
        gaps = sample_quantiles(rng, t["step_gap_ms"]["quantiles"], steps) / 1000.0
        arrival = float(starts[u])
        for k in range(steps):
            prompt = prompt_text(rng, task, _level(int(outs[k]), o_table), step=k)
            step_in = max(1, min(inp, SWE_INPUT_CAP, context - int(outs[k]) - 1))
            out.append(
                Request(
                    f"gs-{u}-s{k}",
                    round(arrival, 6),
                    model,
                    step_in,
                    int(outs[k]),
                    task,
                    prompt,
                    prefix_hashes=tuple((u << 24) | b for b in range(step_in // BLOCK_TOKENS)),
                    meta={"unit": u, "session": f"swe-{u}", "step": k},
                )
            )
            inp += int(outs[k] + appends[k])
            arrival += float(gaps[k])
    out.sort(key=lambda r: (r.arrival, r.id))
    return out[:count]
