"""Scepsy GPU-scheduler search time (compare Scepsy §7.5, Fig. 11: < 35 s for 5 LLMs on 16 GPUs
with 10 fractions per GPU; up to 70 s at 128 GPUs with 3 LLMs; up to 1 s at 20 fractions).

    python -m benchmarks.scepsy_search [--plot fig11.png] [--max-gpus 128] [--repeats 3]

Four measurements of :func:`heuristics.allocation.scepsy.search.search` (wall time of one call:
APL stage evaluations, the enumeration of fraction vectors, the placement of the result and, when
the best does not place, the ranked fallback):

1. the headline point: 5 LLMs, 16 GPUs, 10 fractions per GPU;
2. number of LLMs 2..5 at 16 GPUs, 10 fractions;
3. number of GPUs 4..128 at 3 LLMs, 10 fractions (stops after a point above ``--limit`` s);
4. fractions per GPU 1..10 at 3 LLMs, 16 GPUs.

The cluster is Scepsy's node type (§7.1): nodes of 4 RTX A6000 in two NVLink pairs.

**Profiles are synthetic** (no replay): one replica's isolated call time comes from the roofline
model (:class:`envs.sim.latency.model.LatencyModel`: prefill of the call's prompt + its decode steps
at batch 1) and its capacity from a steady batch bounded by the KV cache; the latency curve is
M/M/1-like, ``L(λ) = s / (1 − λ/μ)``, sampled at 0, 0.1μ, …, 0.9μ. The target rate is 60 % of
the highest rate the pruned space sustains. The search time depends on
the profiles only through the pruning (minimum shares from the model sizes, latency order) and
how often the best candidate fails to place; the number of fraction vectors and candidates is
printed with every point. The workflow is the paper's combined RAG + beam search (§7.1) with
hand-set per-call shapes and ``n_m`` / ``p_m``; subsets of its LLMs give the 2..4-LLM points.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

from envs.sim.allocation.allocations import Allocation, LLMAllocation
from envs.sim.allocation.placement import fits
from envs.sim.allocation.scepsy.apl import (
    AggregatePipeline,
    LLMProfile,
    ProfilePoint,
    ProfileSet,
    WorkflowStats,
)
from envs.sim.hardware.catalog import get_gpu, get_model
from envs.sim.hardware.cluster import Topology
from envs.sim.latency.model import LatencyModel
from heuristics.allocation.scepsy.search import ABLATIONS, SearchResult, search

GPU = "rtx-a6000"


@dataclass(frozen=True)
class CallShape:
    """One LLM of the combined workflow: prompt/output tokens per call, calls per workflow
    ``n`` and their parallelism ``p``."""

    prompt: int
    output: int
    n: float
    p: float


#: in the order LLMs are added for the 2..5-LLM points (beam search first, then RAG)
WORKFLOW: dict[str, CallShape] = {
    "llama3.2-1b": CallShape(prompt=600, output=120, n=40.0, p=4.0),  # beam generator
    "llama3.1-8b-prm": CallShape(prompt=700, output=1, n=40.0, p=4.0),  # process verifier
    "llama3-8b": CallShape(prompt=2000, output=200, n=1.0, p=1.0),  # RAG generator
    "e5-base-v2": CallShape(prompt=32, output=0, n=1.0, p=1.0),  # query embedding
    "bge-reranker-base": CallShape(prompt=320, output=0, n=10.0, p=10.0),  # reranker
}


def topology(gpus: int) -> Topology:
    """``gpus`` RTX A6000 in nodes of 4 with NVLink pairs (one smaller node if needed)."""
    if gpus % 4 == 0:
        return Topology(GPU, gpus // 4, 4, ((0, 1), (2, 3)))
    if gpus < 4:
        return Topology(GPU, 1, gpus, ((0, 1),) if gpus >= 2 else ())
    raise ValueError(f"{gpus} GPUs: use a multiple of 4")


def replica_profile(model: str, tp: int, fraction: float, shape: CallShape) -> LLMProfile | None:
    """Synthetic profile of one replica (module docstring); None if the model does not fit."""
    try:
        lat = LatencyModel(get_gpu(GPU), get_model(model), tp, fraction)
    except ValueError:
        return None
    prompt, out = shape.prompt, shape.output
    s = lat.prefill_time(prompt)
    if out:
        s += out * lat.decode_iteration_time(1, prompt + out // 2)
        batch = max(1, min(256, lat.kv_capacity_tokens // (prompt + out)))
        cycle = lat.prefill_time(batch * prompt, batch) + out * lat.decode_iteration_time(
            batch, batch * (prompt + out // 2)
        )
    else:
        batch = max(1, min(64, lat.max_batch_tokens // prompt))
        cycle = lat.prefill_time(batch * prompt, batch)
    mu = batch / cycle
    pts = []
    for k in range(10):
        lam = mu * k / 10
        v = s / (1 - lam / mu)
        pts.append(ProfilePoint(lam, lam, v, v, v, v, v, 0))
    return LLMProfile(model, GPU, tp, fraction, tuple(pts), mu)


def pipeline(models: list[str], units_per_gpu: int) -> AggregatePipeline:
    """APL of the combined workflow restricted to ``models``, profiled at TP 1/2 and every
    share 1/F..F/F (TP4 never fits the NVLink pairs)."""
    ps = ProfileSet()
    for m in models:
        for tp in (1, 2):
            for sh in range(1, units_per_gpu + 1):
                prof = replica_profile(m, tp, sh / units_per_gpu, WORKFLOW[m])
                if prof is not None:
                    ps.add(prof)
    stats = WorkflowStats(
        "combined",
        {m: WORKFLOW[m].n for m in models},
        {m: WORKFLOW[m].p for m in models},
    )
    return AggregatePipeline(stats, ps)


def target_rate(apl: AggregatePipeline, gpus: int, F: int, load: float = 0.6) -> float:
    """``load`` × the highest workflow rate any allocation in the pruned space sustains (found
    by a search at an unreachable rate, which returns the max-throughput allocation; untimed)."""
    res = search(apl, 1e12, topology(gpus), units_per_gpu=F, require_placement=False)
    return load * res.throughput


def run(
    models: list[str], gpus: int, F: int, repeats: int, **flags: bool
) -> tuple[float, SearchResult]:
    """Best-of-``repeats`` wall time of one search (fresh pipeline each time: no caches)."""
    best = math.inf
    res: SearchResult | None = None
    for _ in range(repeats):
        apl = pipeline(models, F)
        rate = target_rate(apl, gpus, F)
        apl = pipeline(models, F)  # fresh: no stage caches from the rate search
        t = time.perf_counter()
        res = search(apl, rate, topology(gpus), units_per_gpu=F, **flags)
        best = min(best, time.perf_counter() - t)
    assert res is not None
    return best, res


def naive_count(units: int, k: int) -> int:
    """Mappings of ``units`` units to ``k`` LLMs without pruning (§5: C(U + k − 1, k − 1))."""
    return math.comb(units + k - 1, k - 1)


HEADER = (
    f"{'LLMs':>4} {'GPUs':>5} {'F':>3} {'seconds':>8} {'unpruned':>12} {'vectors':>9} "
    f"{'candidates':>12} {'stage ev.':>9} {'rank':>5}  sustains"
)


def row(k: int, gpus: int, F: int, secs: float, res: SearchResult) -> str:
    return (
        f"{k:>4} {gpus:>5} {F:>3} {secs:>8.3f} {naive_count(gpus * F, k):>12.3g} "
        f"{res.vectors:>9} {res.candidates:>12.3g} {res.stage_evaluations:>9} {res.rank:>5}  "
        f"{res.sustains}"
    )


def placer_timing(n: int = 2000) -> float:
    """Seconds per :func:`fits` call for 10 replicas on 16 GPUs."""
    alloc = Allocation(
        (
            LLMAllocation("llama3-8b", 40, 2, 2),
            LLMAllocation("llama3.1-8b-prm", 32, 1, 4),
            LLMAllocation("e5-base-v2", 2, 1, 2),
            LLMAllocation("llama3.2-1b", 6, 1, 2),
        ),
        10,
    )
    topo = topology(16)
    assert fits(alloc, topo)
    t = time.perf_counter()
    for _ in range(n):
        fits(alloc, topo)
    return (time.perf_counter() - t) / n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plot", default=None, help="write the three growth curves to this PNG")
    ap.add_argument("--max-gpus", type=int, default=128)
    ap.add_argument("--limit", type=float, default=60.0, help="stop the GPU sweep past this (s)")
    ap.add_argument("--repeats", type=int, default=3, help="best of N runs per point")
    args = ap.parse_args(argv)
    models = list(WORKFLOW)

    print(f"fits(): {placer_timing() * 1e6:.0f} us per call (10 replicas, 16 GPUs)\n")
    print("headline (paper Fig. 11: < 35 s)")
    print(HEADER)
    secs, res = run(models, 16, 10, args.repeats)
    print(row(5, 16, 10, secs, res))
    print(f"  -> {res.allocation.describe()}\n")

    print("ablations (§7.4; 5 LLMs, 16 GPUs, 10 fractions; rate of the full space)")
    print(f"{'ablation':>17} " + HEADER)
    for name, (fractional, tp_on) in ABLATIONS.items():
        secs, res = run(models, 16, 10, args.repeats, fractional=fractional, tensor_parallel=tp_on)
        print(f"{name:>17} " + row(5, 16, 10, secs, res))
    print()

    curves: dict[str, list[tuple[int, float]]] = {"llms": [], "gpus": [], "fractions": []}
    print("number of LLMs (16 GPUs, 10 fractions)")
    print(HEADER)
    for k in range(2, 6):
        secs, res = run(models[:k], 16, 10, args.repeats)
        curves["llms"].append((k, secs))
        print(row(k, 16, 10, secs, res))

    print("\nnumber of GPUs (3 LLMs, 10 fractions)")
    print(HEADER)
    g = 4
    while g <= args.max_gpus:
        secs, res = run(models[:3], g, 10, args.repeats)
        curves["gpus"].append((g, secs))
        print(row(3, g, 10, secs, res))
        if secs > args.limit:
            print(f"  stopped: {secs:.0f} s > --limit {args.limit:g} s")
            break
        g *= 2

    print("\nfractions per GPU (3 LLMs, 16 GPUs)")
    print(HEADER)
    for F in range(1, 11):
        secs, res = run(models[:3], 16, F, args.repeats)
        curves["fractions"].append((F, secs))
        print(row(3, 16, F, secs, res))

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
        for ax, (name, label) in zip(
            axes,
            (
                ("llms", "Number of LLMs"),
                ("gpus", "Number of GPUs"),
                ("fractions", "Fractions per GPU"),
            ),
            strict=True,
        ):
            xs, ys = zip(*curves[name], strict=True)
            ax.plot(xs, ys, marker="o")
            ax.set_xlabel(label)
            ax.set_ylabel("Search time (s)")
            if name == "llms":
                ax.set_yscale("log")
        fig.suptitle("Scepsy GPU-scheduler search time (cf. Scepsy Fig. 11)")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"\nwrote {args.plot}")


if __name__ == "__main__":
    main()
