"""Accuracy and latency of every registered predictor on the fixed test split (GoodServe §4.3,
Fig. 8: normalised MAE per predictor; the paper's MoE takes ~2.5 ms per request).

Online predictors (``task-mean``, ``history``) run over each test chunk as one episode (reset at
its start), observing every request right after predicting it: feedback without delay, the most
favourable case for them. Latency is the median wall time of ``predict`` on one request (as a
router calls it), and of ``predict_many`` on the whole test split divided by its size.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from envs.common.predictors import PREDICTORS, make_predictor
from envs.common.predictors.data import CHUNK, goodserve_requests, probes

LEARNED = ("mlp", "moe")


def measure(
    model: str = "llama3.1-8b",
    train_count: int = 4000,
    test_count: int = 2000,
    error: float = 0.2,
    seed: int = 0,
    latency_calls: int = 200,
) -> list[dict[str, Any]]:
    """One row per predictor: normalised MAE, MAE (tokens), latencies (ms), training (s)."""
    test = probes(goodserve_requests("test", test_count, model))
    truth = np.array([c.output_tokens for c in test], dtype=np.float64)
    rows = []
    for name in PREDICTORS:
        kw: dict[str, Any] = {"train_count": train_count} if name in LEARNED else {}
        t0 = time.perf_counter()
        pred: Any = (  # an OutputPredictor; every one here also has predict_many
            make_predictor(name, model=model, seed=seed, error=error, use_cache=False, **kw)
            if name in LEARNED
            else make_predictor(name, model=model, seed=seed, error=error)
        )
        train_s = time.perf_counter() - t0 if name in LEARNED else 0.0
        out = np.empty(len(test))
        for i, c in enumerate(test):
            if i % CHUNK == 0:
                pred.reset(seed=seed)
            out[i] = pred.predict(c)
            pred.observe(c)
        single = []
        memo = getattr(pred, "_memo", None)
        for c in test[:latency_calls]:
            if memo is not None:
                memo.clear()  # time a first prediction, not a memoised repeat
            t = time.perf_counter()
            pred.predict(c)
            single.append(time.perf_counter() - t)
        t = time.perf_counter()
        pred.predict_many(test)
        batched = (time.perf_counter() - t) / len(test)
        mae = float(np.abs(out - truth).mean())
        rows.append(
            {
                "predictor": name + (f" (e={error})" if name == "oracle-error" else ""),
                "nmae": mae / float(truth.mean()),
                "mae_tokens": mae,
                "latency_ms": 1e3 * float(np.median(single)),
                "batched_latency_ms": 1e3 * batched,
                "train_s": train_s,
            }
        )
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'predictor':<20} {'norm. MAE':>9} {'MAE tok':>8} {'ms/req':>7} "
        f"{'ms/req batch':>12} {'train s':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['predictor']:<20} {r['nmae']:>9.3f} {r['mae_tokens']:>8.1f} "
            f"{r['latency_ms']:>7.3f} {r['batched_latency_ms']:>12.4f} {r['train_s']:>7.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m envs.common.predictors", description=__doc__)
    ap.add_argument("--report", action="store_true", help="measure every predictor")
    ap.add_argument("--model", default="llama3.1-8b")
    ap.add_argument("--train-count", type=int, default=4000, help="training requests")
    ap.add_argument("--test-count", type=int, default=2000, help="test requests")
    ap.add_argument("--error", type=float, default=0.2, help="e of oracle-error")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    if not args.report:
        ap.error("nothing to do: pass --report")
    rows = measure(args.model, args.train_count, args.test_count, args.error, args.seed)
    print(
        f"goodserve test split: {args.test_count} requests ({args.model}); learned predictors "
        f"trained on {args.train_count} (synthetic prompt text)"
    )
    print(format_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=2)
