"""One serving deployment under a closed-loop benchmark client: TTFT, TPOT and latency.

This is how serving engines are benchmarked (aiperf, genai-perf, vLLM's ``benchmark_serving``
with ``--max-concurrency``): ``concurrency`` clients each send ``requests_per_client`` requests
back to back, every request with ``isl`` prompt tokens and exactly ``osl`` output tokens. The
deployment is one monolithic instance (``tp`` GPUs) run by an engine preset
(:mod:`envs.sim.engines.presets`); each client is a chain of LLM calls with no think time.

How the clients start and which requests are measured (the benchmark tools' knobs):

- ``stagger``: ``"none"`` (every client sends its first request at t = 0, as vLLM's
  ``benchmark_serving --max-concurrency`` and aiperf's concurrency mode do), ``"even"`` (client i
  starts at i/N of one *period*, the run-alone latency of one request, so the clients' phases are
  spread evenly over a round) or ``"random"`` (uniform over one period, drawn from ``seed``);
  ``start_spread_s`` > 0 overrides the period in seconds (uniform random starts).
  With identical request lengths and all clients starting together, every round's prompts reach
  the engine together and the clients stay in lock step; staggered starts break that.
- ``warmup_requests``: each client's first requests are sent but not measured (aiperf's
  ``--warmup-request-count`` is a total; here it is per client).
- ``steady_state``: measure only the requests sent after the warm-up and finished before the
  first client ran out of requests, i.e. while every client was still sending (the drain at the
  end, where fewer clients remain, is excluded); throughput is then concurrency / mean latency
  of those requests (Little's law for a closed loop without think time).
- ``dataset_entries``: the number of distinct prompts the clients draw from (aiperf's
  ``--num-dataset-entries``, 100 by default there; genai-perf's likewise). Requests take the
  entries in a seeded shuffled order, reshuffled when exhausted (aiperf's default ``shuffle``
  sampling), so with fewer entries than requests the same prompts come back; ``None`` gives
  every request its own prompt. A repeated prompt hits the engine's prefix cache when the
  engine keeps one (``prefix_caching``, by default the preset's): it prefills only its
  uncached tail, at least one token. The cache holds the KV that is not holding the clients'
  generated tokens, (capacity − concurrency × osl) tokens, least recently used blocks evicted
  first: vLLM and SGLang keep prompt blocks cached (a running request's prompt blocks are
  cache entries too) and evict the least recently used ones when requests need the room.

Token budget of engines that cannot chunk a prompt (``mixed-whole``: TensorRT-LLM without chunked
context): at the documented ``max_num_tokens`` 8,192 a prompt runs only when it fits whole beside
the running decodes, so prompts about as long as the budget are served nearly one at a time (as
TensorRT-LLM's tuning guide, "Tuning Max Batch Size and Max Num Tokens", describes). Its
benchmark tools size the budget instead (``trtllm-bench`` from the dataset; aiconfigurator
``max_batch_size + isl + 1500``, 32-token blocks); ``budget_sizing="benchmark"`` (default, with
``token_budget=None``) does the same whenever the default cannot hold one prompt beside
``concurrency`` decodes; ``"engine-default"`` keeps the documented default.

:data:`CALIBRATION_CLIENT` is the setting the fidelity benchmark and the engine calibration use.

Usage::

    from envs.sim.calibration.benchmark_client import closed_loop
    r = closed_loop(gpu="h200", model="llama3.1-70b", tp=4, precision="fp8", engine="vllm",
                    isl=1024, osl=1024, concurrency=32, requests_per_client=20, seed=0)
    r["ttft_mean_s"], r["tpot_mean_s"], r["latency_mean_s"]

Command line::

    python -m envs.sim.calibration.benchmark_client --gpu h200 --model llama3.1-70b --tp 4 \\
        --precision fp8 --engine vllm --isl 1024 --osl 1024 --concurrency 32

Definitions (as benchmark clients report them): TTFT = first token time − send time (queueing
included); TPOT = (last token − first token) / (osl − 1) per request; latency = last token − send
time; all three averaged over requests. The preset's fitted ``frontend_seconds`` is a
client-side constant added to every TTFT and latency: what the clients measure beyond the
simulated engine (API server, tokenisation, streaming of the first chunk, and whatever else the
fit absorbs). It is not a delay inside the loop: placed there (a pause before each request
reaches the engine) it would idle the engine between rounds and change its load, so the fitted
value would no longer be what the client adds; as a client-side constant it is fitted exactly
(:func:`envs.sim.calibration.serving_fit.fit_frontend`) and the held-out checks validate that form.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from envs.sim.calibration.client_checks import (
    BUDGET_SIZINGS,
    STAGGERS,
    ServingConfigError,
    check_client,
    positive_int,
)
from envs.sim.core.simulation import Assignment, Invocation, LatencyCache, Simulation
from envs.sim.engines.presets import EnginePreset, engine_names, get_engine
from envs.sim.hardware.cluster import ClusterSpec, InstanceSpec
from envs.sim.latency.model import InsufficientMemoryError
from traces.schema import LLMNode, ToolNode, Workflow

#: The closed-loop client setting of the engine calibration and the fidelity benchmark
#: (``python -m benchmarks.serving_fidelity``): all clients start together and every request is
#: measured, as the measured deployments' aiperf-style clients did (they record no stagger or
#: warm-up; aiperf's defaults are none). ``--client steady`` in the benchmark reports the
#: staggered, warmed-up, steady-state alternative beside it.
CALIBRATION_CLIENT: dict[str, Any] = {
    "stagger": "none",
    "warmup_requests": 0,
    "steady_state": False,
}
#: The steady-state alternative (even stagger over one period, one warm-up request per client).
STEADY_CLIENT: dict[str, Any] = {"stagger": "even", "warmup_requests": 1, "steady_state": True}
#: aiconfigurator's generated benchmark (``bench_run.sh.j2``: ``aiperf --concurrency N
#: --num-requests 20N --warmup-request-count 2N``, aiperf's 100 prompts reused via prefix caches).
AIPERF_DATASET_CLIENT: dict[str, Any] = {
    "stagger": "none",
    "warmup_requests": 2,
    "steady_state": False,
    "dataset_entries": 100,
}
#: Extra tokens aiconfigurator's generator adds to the prompt in its token budgets
#: (``max_batch_size + isl + 1500``; ai-dynamo/aiconfigurator,
#: src/aiconfigurator/generator/rule_plugin/benchmark/{trtllm,vllm}.rule).
AIC_BUDGET_SLACK_TOKENS = 1500
#: Block size of the prompt hashes of :func:`closed_loop_workload`, tokens (coarser than the
#: engines' 16-32-token KV blocks: the benchmark prompts are either identical or share nothing,
#: so only the cost of hashing changes).
PROMPT_BLOCK_TOKENS = 256


def benchmark_token_budget(isl: int, concurrency: int, block_tokens: int = 32) -> int:
    """Tokens per iteration aiconfigurator's generator gives an aggregated deployment:
    ``concurrency + isl + 1500`` rounded up to whole ``block_tokens`` blocks (TensorRT-LLM
    requires a multiple of ``tokens_per_block``, 32; pass 1 for vLLM, which takes it as is)."""
    budget = concurrency + isl + AIC_BUDGET_SLACK_TOKENS
    return -(-budget // block_tokens) * block_tokens


class _FCFSRouter:
    """Sends every request to the one instance, first come first served."""

    def plan(self, sim: Simulation, inv: Invocation) -> list[Assignment]:
        return [Assignment(c, c.revealed_at, prefill_instance=0) for c in inv.new_calls]


def closed_loop_workload(
    model: str,
    isl: int,
    osl: int,
    concurrency: int,
    requests_per_client: int,
    start_spread_s: float = 0.0,
    seed: int = 0,
    frontend_seconds: float = 0.0,
    starts: np.ndarray | None = None,
    dataset_entries: int | None = None,
) -> list[Workflow]:
    """The clients as workflows: one chain of ``requests_per_client`` calls per client, each
    call behind a ``frontend_seconds`` tool node (the API server's path to the engine) when
    that is > 0.

    :param start_spread_s: clients start at uniform random times in [0, start_spread_s).
    :param starts: explicit start time of each client, seconds (overrides ``start_spread_s``).
    :param dataset_entries: distinct prompts (see the module docstring); each call carries the
        ``prefix_hashes`` of its entry (blocks of :data:`PROMPT_BLOCK_TOKENS` tokens). None:
        no hashes (every prompt distinct).
    """
    if starts is None:
        rng = np.random.default_rng(seed)
        starts = (
            np.sort(rng.uniform(0.0, start_spread_s, concurrency))
            if start_spread_s > 0
            else np.zeros(concurrency)
        )
    elif len(starts) != concurrency:
        raise ServingConfigError(f"{len(starts)} start times for {concurrency} clients")
    entries = prompt_entries(concurrency, requests_per_client, dataset_entries, seed)
    blocks = -(-isl // PROMPT_BLOCK_TOKENS)
    out = []
    for i in range(concurrency):
        nodes: list[LLMNode | ToolNode] = []
        for j in range(requests_per_client):
            parents: tuple[str, ...] = (f"r{j - 1}",) if j else ()
            if frontend_seconds > 0:
                nodes.append(ToolNode(id=f"f{j}", latency=frontend_seconds, parents=parents))
                parents = (f"f{j}",)
            hashes = None
            if entries is not None:
                e = int(entries[j, i])
                hashes = tuple(hash((e, k)) for k in range(blocks))
            nodes.append(
                LLMNode(
                    id=f"r{j}",
                    model=model,
                    input_tokens=isl,
                    output_tokens=osl,
                    parents=parents,
                    task="benchmark",
                    prefix_hashes=hashes,
                )
            )
        out.append(Workflow(id=f"client-{i}", arrival=float(starts[i]), nodes=tuple(nodes)))
    return out


def prompt_entries(
    concurrency: int, requests_per_client: int, dataset_entries: int | None, seed: int = 0
) -> np.ndarray | None:
    """Dataset entry of request j of client i, ``[j, i]``: the entries in a seeded shuffled
    order, reshuffled each time they are used up, handed out round by round (aiperf's
    ``shuffle`` sampling as the clients send); None when ``dataset_entries`` is None."""
    if dataset_entries is None:
        return None
    rng = np.random.default_rng([seed, 0x5EED])
    n = concurrency * requests_per_client
    order = np.concatenate(
        [rng.permutation(dataset_entries) for _ in range(-(-n // dataset_entries))]
    )
    return order[:n].reshape(requests_per_client, concurrency)


def deployment(
    gpu: str,
    model: str,
    tp: int = 1,
    precision: str = "bf16",
    kv_precision: str | None = None,
    fraction: float = 1.0,
) -> ClusterSpec:
    """A one-instance monolithic cluster serving ``model`` on ``tp`` GPUs of type ``gpu``."""
    spec = InstanceSpec(
        index=0,
        name=f"{model}-tp{tp}-{gpu}",
        role="monolithic",
        gpu=gpu,
        model=model,
        tp=tp,
        fraction=fraction,
        precision=precision,
        kv_precision=kv_precision,
    )
    return ClusterSpec(name=f"deployment-{spec.name}", architecture="monolithic", instances=(spec,))


def closed_loop(
    *,
    gpu: str,
    model: str,
    isl: int,
    osl: int,
    concurrency: int,
    tp: int = 1,
    precision: str = "bf16",
    kv_precision: str | None = None,
    engine: str | EnginePreset = "vllm",
    requests_per_client: int = 20,
    seed: int = 0,
    start_spread_s: float = 0.0,
    fraction: float = 1.0,
    token_budget: int | None = None,
    stagger: str = "none",
    warmup_requests: int = 0,
    steady_state: bool = False,
    dataset_entries: int | None = None,
    prefix_caching: bool | None = None,
    budget_sizing: str = "benchmark",
) -> dict[str, Any]:
    """Simulate one deployment under a closed-loop client and report what the client measures.

    :param gpu: catalog GPU (``h100-sxm``, ``h200``, ...).
    :param model: catalog model.
    :param isl: prompt tokens per request (>= 1).
    :param osl: output tokens per request (>= 1).
    :param concurrency: concurrent clients (>= 1).
    :param tp: tensor-parallel degree.
    :param precision: ``bf16`` or ``fp8`` weights/GEMMs.
    :param kv_precision: KV-cache precision (None: same as ``precision``).
    :param engine: engine preset (``vllm``, ``sglang``, ``trtllm``) or an
        :class:`~envs.sim.engines.presets.EnginePreset` (e.g. with refitted constants).
    :param requests_per_client: requests each client sends back to back.
    :param seed: seeds the clients' start times (``stagger="random"`` or ``start_spread_s``).
    :param start_spread_s: clients start uniformly over this many seconds (0: see ``stagger``).
    :param fraction: GPU share of the instance.
    :param token_budget: override the engine's tokens per iteration.
    :param stagger: ``none``, ``even`` or ``random`` client starts (module docstring).
    :param warmup_requests: requests per client sent but not measured (< requests_per_client).
    :param steady_state: measure only while every client is still sending (module docstring).
    :param dataset_entries: distinct prompts the clients draw from (None: all distinct).
    :param prefix_caching: the engine reuses cached prompts (None: the preset's default).
    :param budget_sizing: ``benchmark`` or ``engine-default`` (module docstring); only used
        when ``token_budget`` is None.
    :return: ``ttft_mean_s``, ``ttft_p50_s``, ``ttft_p90_s``, ``ttft_p99_s``, ``tpot_mean_s``,
        ``tpot_p50_s``, ``tpot_p90_s``, ``tpot_p99_s``, ``latency_mean_s``, ``latency_p99_s``,
        ``requests`` (measured), ``duration_s`` (the measurement window, seconds),
        ``request_throughput`` (requests/s: with ``steady_state`` concurrency / mean measured
        latency, Little's law for a closed loop; else all requests over the whole run),
        ``output_token_throughput`` (tokens/s),
        ``preemptions``, ``kv_capacity_tokens``, ``token_budget``, ``max_batch``,
        ``period_s`` (one request's run-alone latency), ``starts_s`` (client start times),
        ``cached_tokens`` (prompt tokens served from the prefix cache, all requests),
        ``events``, ``wall_seconds`` and the configuration (client setting included).
    :raises ServingConfigError: for a combination the simulator cannot represent (unknown
        engine/GPU/model, unsupported precision on the GPU, bad TP, weights that do not fit,
        a request larger than the KV cache).
    """
    isl = positive_int("isl", isl)
    osl = positive_int("osl", osl)
    concurrency = positive_int("concurrency", concurrency)
    requests_per_client = positive_int("requests_per_client", requests_per_client)
    dataset_entries = check_client(
        start_spread_s,
        stagger,
        budget_sizing,
        dataset_entries,
        prefix_caching,
        warmup_requests,
        requests_per_client,
    )
    config = {
        "gpu": gpu,
        "model": model,
        "tp": tp,
        "precision": precision,
        "kv_precision": kv_precision or precision,
        "engine": getattr(engine, "name", engine),
        "isl": isl,
        "osl": osl,
        "concurrency": concurrency,
        "requests_per_client": requests_per_client,
        "seed": seed,
        "stagger": stagger,
        "warmup_requests": int(warmup_requests),
        "steady_state": bool(steady_state),
        "dataset_entries": dataset_entries,
    }
    client_keys = ("seed", "stagger", "warmup_requests", "steady_state", "dataset_entries")
    where = ", ".join(f"{k}={v}" for k, v in config.items() if k not in client_keys)
    try:
        preset = get_engine(engine)
        cluster = deployment(gpu, model, tp, precision, kv_precision, fraction)
        cache = LatencyCache()  # the simulation reuses the model built (and checked) here
        lat = cache.get(cluster.instances[0], preset)
    except (KeyError, ValueError, InsufficientMemoryError) as exc:
        raise ServingConfigError(f"cannot represent deployment ({where}): {exc}") from exc
    if lat.model.encoder_only:
        raise ServingConfigError(
            f"cannot represent deployment ({where}): {model} is encoder-only and generates no "
            "tokens; TTFT/TPOT do not apply"
        )
    if isl + osl > lat.kv_capacity_tokens:
        raise ServingConfigError(
            f"cannot represent deployment ({where}): one request needs {isl + osl} KV tokens "
            f"but the instance holds {lat.kv_capacity_tokens}"
        )
    frontend = preset.frontend_seconds
    whole_prompts = preset.scheduling == "mixed-whole"
    if token_budget is None and budget_sizing == "benchmark" and whole_prompts:
        default = preset.token_budget_for(lat.gpu)
        if isl + concurrency > default:  # the default cannot hold a prompt beside the decodes
            token_budget = benchmark_token_budget(isl, concurrency)
    caching = preset.prefix_caching if prefix_caching is None else prefix_caching
    cache_blocks = 0
    if caching and dataset_entries is not None:
        free = lat.kv_capacity_tokens - concurrency * osl
        cache_blocks = max(0, free // PROMPT_BLOCK_TOKENS)
    config["prefix_caching"] = caching
    period = run_alone_seconds(lat, isl, osl)
    starts = client_starts(concurrency, stagger, period, start_spread_s, seed)
    workload = closed_loop_workload(
        model,
        isl,
        osl,
        concurrency,
        requests_per_client,
        seed=seed,
        starts=starts,
        dataset_entries=dataset_entries,
    )
    sim = Simulation(
        cluster,
        workload,
        seed=seed,
        compute_horizons=False,
        online_horizons=False,
        latency_cache=cache,
        engine=preset,
        token_budget=token_budget,
        prefix_cache_blocks=cache_blocks,
        prefix_block_tokens=PROMPT_BLOCK_TOKENS,
    )
    res = sim.run(_FCFSRouter())
    calls = res.calls
    if any(c.decode_end < 0 for c in calls):  # pragma: no cover - the run always drains
        raise RuntimeError(f"closed-loop run ({where}) ended with unfinished requests")
    measured, t0, t1 = measured_requests(calls, warmup_requests, steady_state)
    if not measured:
        raise ServingConfigError(
            f"no request to measure ({where}, warmup_requests={warmup_requests}, "
            f"steady_state={steady_state}): send more requests per client"
        )
    # the clients' constant beyond the engine (module docstring)
    ttft = np.array([c.ttft for c in measured]) + frontend
    latency = np.array([c.latency for c in measured]) + frontend
    out: dict[str, Any] = dict(config)
    out.update(_summary("ttft", ttft))
    if osl > 1:
        out.update(_summary("tpot", np.array([c.tpot for c in measured])))
    else:
        out.update({f"tpot_{k}_s": math.nan for k in ("mean", "p50", "p90", "p99")})
    out["latency_mean_s"] = float(latency.mean())
    out["latency_p99_s"] = float(np.percentile(latency, 99))
    inst = sim.monolithic[0]
    if steady_state:
        # Little's law for a closed loop without think time: X = N / R. Counting completions in
        # the window instead is off by up to one request per window when the clients are
        # staggered (a burst boundary when they are not).
        throughput = concurrency / float(np.mean([c.latency for c in measured]))
    else:
        t0, t1 = float(min(w.arrival for w in workload)), res.end_time
        throughput = len(calls) / (t1 - t0)
    duration = t1 - t0
    out.update(
        {
            "requests": len(measured),
            "duration_s": duration,
            "request_throughput": throughput,
            "output_token_throughput": throughput * osl,
            "period_s": period,
            "starts_s": starts.tolist(),
            "preemptions": int(sum(c.preemptions for c in calls)),
            "cached_tokens": int(sum(c.cached_tokens for c in calls)),
            "kv_capacity_tokens": inst.capacity,
            "token_budget": inst.token_budget,
            "max_batch": inst.max_batch,
            "events": res.events,
            "wall_seconds": res.wall_seconds,
        }
    )
    return out


def run_alone_seconds(lat: Any, isl: int, osl: int) -> float:
    """Engine seconds of one request alone: its prefill, then ``osl - 1`` decode iterations."""
    decode = lat.decode_steps_time(1, isl + 1, osl - 1) if osl > 1 else 0.0
    return float(lat.prefill_time(isl) + decode)


def client_starts(
    concurrency: int, stagger: str, period_s: float, start_spread_s: float = 0.0, seed: int = 0
) -> np.ndarray:
    """Start time of each client, seconds (see the module docstring for ``stagger``)."""
    if start_spread_s > 0:
        rng = np.random.default_rng(seed)
        return np.sort(rng.uniform(0.0, start_spread_s, concurrency))
    if stagger == "even":
        return np.arange(concurrency) * (period_s / concurrency)
    if stagger == "random":
        return np.sort(np.random.default_rng(seed).uniform(0.0, period_s, concurrency))
    return np.zeros(concurrency)


def measured_requests(
    calls: list,
    warmup_requests: int,
    steady_state: bool,
) -> tuple[list, float, float]:
    """The requests a client measures and the measurement window ``(t0, t1)``, seconds.

    Warm-up: each client's first ``warmup_requests`` are dropped. Steady state: the window runs
    from the last warm-up completion to the moment the first client finished its last request;
    only requests sent and finished inside it count. Without steady state every post-warm-up
    request counts and the window is (nan, nan).
    """
    by_client: dict[str, list] = {}
    for c in calls:
        by_client.setdefault(c.workflow_id, []).append(c)
    for reqs in by_client.values():
        reqs.sort(key=lambda c: c.revealed_at)
    kept = [c for reqs in by_client.values() for c in reqs[warmup_requests:]]
    if not steady_state:
        return kept, math.nan, math.nan
    t0 = max(
        (reqs[warmup_requests - 1].decode_end if warmup_requests else reqs[0].revealed_at)
        for reqs in by_client.values()
    )
    t1 = min(reqs[-1].decode_end for reqs in by_client.values())
    inside = [c for c in kept if c.revealed_at >= t0 and c.decode_end <= t1]
    return inside, t0, t1


def _summary(name: str, values: np.ndarray) -> dict[str, float]:
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {
        f"{name}_mean_s": float(values.mean()),
        f"{name}_p50_s": float(p50),
        f"{name}_p90_s": float(p90),
        f"{name}_p99_s": float(p99),
    }


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m envs.sim.calibration.benchmark_client",
        description="Simulate one deployment under a closed-loop benchmark client "
        "(N clients, each sending R fixed-size requests back to back).",
    )
    parser.add_argument("--gpu", required=True, help="catalog GPU, e.g. h100-sxm, h200")
    parser.add_argument("--model", required=True, help="catalog model, e.g. llama3.1-70b")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    parser.add_argument("--precision", default="bf16", help="bf16 or fp8 (weights and GEMMs)")
    parser.add_argument("--kv-precision", default=None, help="KV-cache precision (default: same)")
    parser.add_argument("--engine", default="vllm", choices=engine_names())
    parser.add_argument("--isl", type=int, required=True, help="prompt tokens per request")
    parser.add_argument("--osl", type=int, required=True, help="output tokens per request")
    parser.add_argument("--concurrency", type=int, required=True, help="concurrent clients")
    parser.add_argument("--requests-per-client", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stagger", default="none", choices=STAGGERS, help="client starts")
    parser.add_argument(
        "--warmup-requests", type=int, default=0, help="requests per client not measured"
    )
    parser.add_argument(
        "--steady-state", action="store_true", help="measure only while every client sends"
    )
    parser.add_argument(
        "--dataset-entries",
        type=int,
        default=None,
        help="distinct prompts the clients draw from (default: every prompt distinct)",
    )
    parser.add_argument(
        "--prefix-caching",
        choices=("preset", "on", "off"),
        default="preset",
        help="engine prefix cache (default: the preset's)",
    )
    parser.add_argument(
        "--budget-sizing",
        choices=BUDGET_SIZINGS,
        default="benchmark",
        help="token budget of engines that cannot chunk prompts (see the module docstring)",
    )
    args = parser.parse_args(argv)
    try:
        r = closed_loop(
            gpu=args.gpu,
            model=args.model,
            tp=args.tp,
            precision=args.precision,
            kv_precision=args.kv_precision,
            engine=args.engine,
            isl=args.isl,
            osl=args.osl,
            concurrency=args.concurrency,
            requests_per_client=args.requests_per_client,
            seed=args.seed,
            stagger=args.stagger,
            warmup_requests=args.warmup_requests,
            steady_state=args.steady_state,
            dataset_entries=args.dataset_entries,
            prefix_caching={"preset": None, "on": True, "off": False}[args.prefix_caching],
            budget_sizing=args.budget_sizing,
        )
    except ServingConfigError as exc:
        parser.exit(2, f"error: {exc}\n")
    print(
        f"{r['model']} on {r['tp']}x {r['gpu']} ({r['precision']}, KV {r['kv_precision']}), "
        f"{r['engine']}: budget {r['token_budget']} tokens/iteration, max batch {r['max_batch']}, "
        f"KV capacity {r['kv_capacity_tokens']:,} tokens"
    )
    print(
        f"{r['concurrency']} clients x {r['requests_per_client']} requests, "
        f"isl {r['isl']} / osl {r['osl']}"
    )
    for key, label in (("ttft", "TTFT"), ("tpot", "TPOT")):
        print(
            f"  {label}  mean {r[f'{key}_mean_s'] * 1e3:9.2f} ms   p50 "
            f"{r[f'{key}_p50_s'] * 1e3:9.2f}   p90 {r[f'{key}_p90_s'] * 1e3:9.2f}   p99 "
            f"{r[f'{key}_p99_s'] * 1e3:9.2f}"
        )
    print(
        f"  latency mean {r['latency_mean_s']:.3f} s, throughput {r['request_throughput']:.2f} "
        f"req/s = {r['output_token_throughput']:,.0f} output tokens/s, "
        f"{r['preemptions']} preemptions, {r['cached_tokens']:,} prompt tokens from the prefix "
        f"cache ({r['wall_seconds']:.2f} s wall)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
