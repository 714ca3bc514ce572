"""``goodserve`` -- GoodServe's own workload (GoodServe §5 "Workloads"): single-shot requests
of three agentic benchmarks, BIRD-bench (text-to-SQL, task ``sql``), SWE-bench (task ``swe``)
and LiveCodeBench (task ``code``), submitted at the Mooncake production trace's timestamps.

The paper gives neither the mix proportions nor the length statistics it measured; the datasets
are not in the data dir. Each request picks its task uniformly (our choice). Token counts are
lognormal, set by a median and a 90th percentile and clipped
(``traces/stats/goodserve_paper.yaml``).
Where a number is read off a published statistic it is cited; where the benchmark publishes no
token statistic the number is **our estimate** from its prompt format, and says so:

* ``sql`` -- BIRD (Li et al., NeurIPS 2023: 12,751 question/SQL pairs over 95 databases; the dev
  set our mix draws from has 11 databases, bird-bench.github.io). Prompt = the database schema
  (DDL with column descriptions, shared by every question on that database) + question +
  external-knowledge evidence. Schema: median 1,000, p90 2,500 tokens (estimate: BIRD databases
  average a few tables of ~10 columns; DDL with descriptions costs ~15-25 tokens a column);
  question + evidence: median 70, p90 140 (estimate: one or two sentences plus an evidence
  hint). Output: the SQL query, median 60, p90 150 (estimate; temperature 0, an 8B/14B
  instruction model answers with the query and little prose).
* ``swe`` -- SWE-bench single-shot patch generation with the benchmark's own BM25 retrieval
  contexts (``princeton-nlp/SWE-bench_bm25_13K``: issue text + retrieved files, packed up to a
  13,000-token cap; Jimenez et al., ICLR 2024, §4 and Table 1: issue text 195 words on average).
  Because retrieved files fill the budget, prompts sit just under the cap: median 12,000, p90
  12,900, max 13,000 (estimate of the packing slack). Output: a unified-diff patch; gold
  patches edit 32.8 lines in 1.7 files on average (Table 1), which with hunk headers and three
  context lines per hunk is a few hundred tokens: median 350, p90 1,000 (estimate).
* ``code`` -- LiveCodeBench code generation (Jain et al., 2024: LeetCode / AtCoder /
  Codeforces problems). Prompt = problem statement with examples and format instructions:
  median 450, p90 900 (estimate). Output: a complete program, usually with a short
  explanation: median 400, p90 1,000 (estimate).

**Prefix sharing.** BIRD questions on the same database share its schema: every ``sql`` request
carries ``prefix_hashes`` for the full 512-token blocks of its database's schema (database
uniform over the 11, each schema's length drawn once per trace). SWE-bench and LiveCodeBench
prompts share nothing across requests (each instance has its own issue and retrieved files).

**Prompt text** (for the TF-IDF length predictors, GoodServe §3.2): a per-task template, a
difficulty phrase and requirement clauses that grow with the output length's quartile within its
task, replaced by a neighbouring level with probability 1/4 (the wording of
:mod:`traces.generators.goodserve_sessions`), so text predicts length usefully but not perfectly.

**Arrivals** (``arrivals=``):

* ``"mooncake"`` (default): the Mooncake conversation trace's arrival process from its committed
  derived statistics (no data dir needed). The trace's 12,031 timestamps fall on ticks exactly
  3.0 s apart (1,180 ticks, 2-28 requests per tick, mean 10.2); we draw each tick's batch size
  i.i.d. from the trace's batch-size histogram and space the ticks so that the mean request rate
  is ``rate``. The hour's slow drift (per-minute counts 144-247) is not modelled: a 500-request
  episode spans ~50 ticks, under three minutes of the trace at rate 1.
* ``"mooncake-replay"``: the trace's own tick sequence (needs ``$SERVEGYM_DATA``), time-scaled to
  ``rate``.
* ``"poisson"``: exponential gaps at ``rate`` (for comparison; not the paper's).

``rate`` defaults to the Mooncake rate, 3.401 requests/s (``mooncake.rate_per_s`` in the stats
file: the one constant Routing-v0's ``load_scale`` multiplies).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from traces.generators._common import check_count, data_dir, load_stats
from traces.generators.goodserve_sessions import BLOCK_TOKENS, MODEL_CONTEXT, MODELS, prompt_text
from traces.schema import Request

TASKS = ("sql", "code", "swe")
ARRIVALS = ("mooncake", "mooncake-replay", "poisson")
STATS = "goodserve_paper"
#: z of the 90th percentile of a standard normal (lognormal sigma = ln(p90 / median) / Z90).
Z90 = 1.2815515655446004
#: High bits of the schema-block hash ids, so they never collide with other generators' ids.
_SCHEMA_HASH_BASE = 1 << 50


def paper_rate() -> float:
    """The workload's arrival rate at load scale 1, requests/s (the Mooncake trace's rate)."""
    return float(load_stats(STATS)["mooncake"]["rate_per_s"])


def _lognormal(rng: np.random.Generator, spec: dict[str, float], size: int) -> np.ndarray:
    """Integer token counts, lognormal with ``spec``'s median and p90, clipped to [min, max]."""
    sigma = np.log(spec["p90"] / spec["median"]) / Z90
    x = np.exp(rng.normal(np.log(spec["median"]), sigma, size))
    return np.clip(np.rint(x), spec["min"], spec["max"]).astype(int)


def _quartile(value: float, spec: dict[str, float]) -> int:
    """Quartile (0-3) of ``value`` under ``spec``'s lognormal."""
    from math import erf, log, sqrt

    sigma = log(spec["p90"] / spec["median"]) / Z90
    z = (log(max(value, 1e-9)) - log(spec["median"])) / sigma
    return int(min(3, (0.5 * (1.0 + erf(z / sqrt(2.0)))) * 4))


def mooncake_tick_stats(directory: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The Mooncake conversation trace's tick statistics, as committed in the stats file.

    :param directory: raw-trace dir (default ``$SERVEGYM_DATA``).
    :returns: ``rate_per_s`` (rounded to 3 decimals), ``tick_s`` (mean tick spacing rounded to
        0.1 s), ``ticks`` and ``batch_size_counts``.
    """
    ms = _mooncake_ms(directory)
    ticks, counts = np.unique(ms, return_counts=True)
    return {
        "rate_per_s": round((len(ms) - 1) / ((ms[-1] - ms[0]) / 1000.0), 3),
        "tick_s": round(float(np.diff(ticks).mean()) / 1000.0, 1),
        "ticks": int(len(ticks)),
        "batch_size_counts": np.bincount(counts).tolist(),
    }


def _mooncake_ms(directory: str | os.PathLike[str] | None) -> np.ndarray:
    path = data_dir(directory) / "mooncake" / "conversation_trace.jsonl"
    with open(path, encoding="utf-8") as f:
        return np.sort([int(json.loads(line)["timestamp"]) for line in f if line.strip()])


def mooncake_arrivals(
    rng: np.random.Generator,
    n: int,
    rate: float,
    replay: bool = False,
    directory: str | os.PathLike[str] | None = None,
) -> np.ndarray:
    """``n`` arrival times (s, first at 0) of the Mooncake tick process at mean ``rate`` req/s.

    :param replay: replay the trace's own ticks (needs the data dir) instead of drawing batch
        sizes from the committed histogram.
    """
    moon = load_stats(STATS)["mooncake"]
    if replay:
        ms = _mooncake_ms(directory)
        ticks, sizes = np.unique(ms, return_counts=True)
        times = (ticks - ticks[0]) / 1000.0
        span = times[-1] + moon["tick_s"]
        reps = -(-n // int(sizes.sum()))
        times = np.concatenate([times + r * span for r in range(reps)])
        sizes = np.tile(sizes, reps)
        own_rate = (int(sizes.sum()) / reps) / span
    else:
        hist = np.asarray(moon["batch_size_counts"], dtype=float)
        mean_batch = float((np.arange(len(hist)) * hist).sum() / hist.sum())
        k = int(np.ceil(n / mean_batch)) + 8
        sizes = rng.choice(len(hist), size=k, p=hist / hist.sum())
        while sizes.sum() < n:
            sizes = np.concatenate([sizes, rng.choice(len(hist), size=k, p=hist / hist.sum())])
        times = np.arange(len(sizes)) * moon["tick_s"]
        own_rate = mean_batch / moon["tick_s"]
    out = np.repeat(times, sizes)[:n] * (own_rate / rate)
    return np.round(out - out[0], 6)


def generate_goodserve(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrivals: str = "mooncake",
    data_dir: str | os.PathLike[str] | None = None,
) -> list[Request]:
    """GoodServe's §5 workload (see the module docstring).

    :param seed: RNG seed; the same seed gives the same trace.
    :param count: number of requests (default 1000).
    :param rate: mean request rate, requests/s (default: the Mooncake rate, :func:`paper_rate`).
    :param model: ``llama3.1-8b`` (default) or ``qwen2.5-14b``; prompts longer than its context
        window minus the output are cut to fit.
    :param arrivals: ``"mooncake"`` (default), ``"mooncake-replay"`` or ``"poisson"``.
    :param data_dir: raw-trace dir for ``"mooncake-replay"`` (default ``$SERVEGYM_DATA``).
    :raises ValueError: on an unknown model or arrival process, or a rate <= 0.
    """
    stats = load_stats(STATS)
    count = check_count(stats["defaults"]["count"] if count is None else count)
    rate = paper_rate() if rate is None else float(rate)
    if not rate > 0:
        raise ValueError(f"goodserve rate must be > 0 requests/s, got {rate}")
    model = model or stats["defaults"]["model"]
    if model not in MODELS:
        raise ValueError(f"goodserve model {model!r} not one of {MODELS}")
    if arrivals not in ARRIVALS:
        raise ValueError(f"unknown arrivals {arrivals!r}; expected one of {ARRIVALS}")
    context = MODEL_CONTEXT[model]
    rng = np.random.default_rng(seed)
    ts = stats["tasks"]
    tasks = rng.integers(0, len(TASKS), count)
    if arrivals == "poisson":
        times = np.round(
            np.concatenate([[0.0], np.cumsum(rng.exponential(1 / rate, count - 1))]), 6
        )
    else:
        times = mooncake_arrivals(rng, count, rate, arrivals == "mooncake-replay", data_dir)
    sql = ts["sql"]
    schemas = _lognormal(rng, sql["schema_tokens"], int(sql["databases"]))
    out: list[Request] = []
    for i in range(count):
        task = TASKS[int(tasks[i])]
        spec = ts[task]
        out_tok = int(_lognormal(rng, spec["output_tokens"], 1)[0])
        hashes: tuple[int, ...] = ()
        meta: dict[str, Any] = {}
        if task == "sql":
            db = int(rng.integers(0, len(schemas)))
            schema = int(schemas[db])
            inp = schema + int(_lognormal(rng, sql["question_tokens"], 1)[0])
            hashes = tuple(
                _SCHEMA_HASH_BASE + (db << 20) + b for b in range(schema // BLOCK_TOKENS)
            )
            meta["database"] = db
        else:
            inp = int(_lognormal(rng, spec["input_tokens"], 1)[0])
        inp = max(1, min(inp, context - out_tok - 1))
        hashes = hashes[: inp // BLOCK_TOKENS]
        prompt = prompt_text(rng, task, _quartile(out_tok, spec["output_tokens"]))
        out.append(
            Request(
                f"gs-{i}",
                float(times[i]),
                model,
                inp,
                out_tok,
                task,
                prompt,
                prefix_hashes=hashes,
                meta=meta,
            )
        )
    return out
