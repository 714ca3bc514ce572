"""Cross-check against a peer simulator: Vidur and servegym on the same request list.

    python -m benchmarks.peer_vidur --count 1000 10000 --load 0.7 --seed 0 \\
        --model llama3-8b --gpu a100-80g --vidur-python PATH [--vidur-data DIR]

One engine serving ``--model`` on one ``--gpu`` receives ``--count`` requests of ``--isl`` prompt
and ``--osl`` output tokens with Poisson arrivals at ``--rate`` requests/s (default: ``--load``
times servegym's measured capacity of that engine). The request list is written once as a trace
file in Vidur's trace-replay format and both simulators read it (servegym: :func:`read_trace`;
Vidur: its ``trace_replay`` generator). Printed side by side: TTFT, TPOT and end-to-end latency
(median, p99) and simulated requests per wall second of each core run, in one invocation.

The engines are configured alike (printed with every table): Vidur's Sarathi scheduler (chunked
prefill: every iteration has a budget of ``--chunk-size`` tokens, running decodes take one token
each first, then partly prefilled prompts, then new requests first come first served) and
servegym's ``chunked`` monolithic instance (the same rule, :class:`envs.sim.engines.instances.
MonolithicInstance`); ``--batch-cap`` running requests; KV capacity as Vidur computes it (80 GB
minus a ``--memory-margin`` share minus the weights, in ``--block-size``-token blocks; servegym's
memory utilisation is set so its KV capacity equals Vidur's); no prefix caching; bf16; one GPU.

Wall time (``time.perf_counter``, no start-up or imports) is each simulator's event loop:
:meth:`envs.sim.Simulation.run` and Vidur's ``Simulator.run`` without writing metrics files;
setup (building each simulator; Vidur trains or loads its predictors) is printed beside it.

Vidur is an optional extra, never a dependency: it runs in a subprocess of the Python given by
``--vidur-python`` (or ``$SERVEGYM_VIDUR_PYTHON``; the current one if it can import ``vidur``),
through ``benchmarks/vidur_driver.py``, on Vidur's profiling data (``--vidur-data``, default
``$SERVEGYM_LATENCY_DATA/vidur``). Without it only the servegym side runs and the install steps
are printed (``--require-vidur``: an error). Documentation: ``docs/benchmarks/peer-vidur.md``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.sim.calibration.benchmark_client import deployment
from envs.sim.core.scheduler import DefaultScheduler
from envs.sim.core.simulation import LatencyCache, Simulation
from envs.sim.engines.presets import EnginePreset, get_engine
from envs.sim.hardware.catalog import get_gpu, get_model
from envs.sim.latency.efficiency import resolve_calibration_variant
from traces.schema import Request

DRIVER = Path(__file__).with_name("vidur_driver.py")
#: servegym catalog model -> (Vidur 0.0.26 model name, folder of its profiles under
#: ``compute/<device>/`` in Vidur's ``data/profiling`` tree): the profiled models that fit one GPU.
MODELS = {
    "llama3-8b": ("meta-llama/Llama-3-8B", "meta-llama/Meta-Llama-3-8B"),
    "llama2-7b": ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"),
}
#: servegym catalog GPU -> (Vidur device, Vidur node, AIConfigurator folder of that GPU).
GPUS = {
    "a100-80g": ("a100", "a100_dgx", "a100_sxm"),
    "h100-sxm": ("h100", "h100_dgx", "h100_sxm"),
}
#: Vidur's device memory, GB (``vidur/config/device_sku_config.py``: 80 for A100 and H100),
#: which its memory planner multiplies by 1024**3.
VIDUR_MEMORY_GB = 80
TRACE_DATE = "2000-01-01"
TRACE_COLUMNS = ("Date", "Time", "PromptTokenCount", "CompletionTokenCount")
#: Vidur predicts attention KV sizes on a 256-token grid (``kv_cache_prediction_granularity``).
VIDUR_KV_GRANULARITY = 256
#: Hyper-parameter searches of Vidur's random-forest predictors (``GridSearchCV`` per operation):
#: ``vidur`` is its default (250/500/750 trees x depth 8/16/32 x min split 2/5/10, 10-fold);
#: ``quick`` keeps depth and split but fits 250 trees with 5 folds (about 1/12 of the fits),
#: for machines where the default takes hours. The trained predictors are cached per search.
GRIDS: dict[str, dict[str, Any] | None] = {
    "vidur": None,
    "quick": {"num_estimators": [250], "k_fold_cv_splits": 5},
}
INSTALL_HELP = """\
Vidur is not available, so only the servegym side ran. To run Vidur beside it:
  python3 -m venv /path/vidur-venv
  /path/vidur-venv/bin/pip install torch==2.13.0   # optional; vidur 0.0.26 itself needs no torch
  /path/vidur-venv/bin/pip install vidur==0.0.26
  python -m benchmarks.peer_vidur --vidur-python /path/vidur-venv/bin/python \\
      --vidur-data <copy of Vidur's data/profiling folder>
(or `pip install -e .[peer]` to put Vidur in this environment)."""


class PeerConfigError(ValueError):
    """An option the benchmark cannot run with (the message names it)."""


@dataclass(frozen=True)
class EngineSetup:
    """The engine both simulators run, configured alike.

    :param model: servegym catalog model (a key of :data:`MODELS`).
    :param gpu: servegym catalog GPU (a key of :data:`GPUS`).
    :param isl: prompt tokens per request.
    :param osl: output tokens per request (the first comes with the prefill).
    :param batch_cap: running requests at most (Vidur ``batch_size_cap``, servegym ``max_batch``).
    :param chunk_size: tokens per iteration (Vidur Sarathi ``chunk_size``, servegym
        ``token_budget``).
    :param block_size: KV block, tokens (Vidur's paging unit; servegym counts whole tokens).
    :param memory_margin: share of GPU memory neither engine uses (Vidur
        ``memory_margin_fraction``).
    :param overlap_scheduling: servegym prices its per-iteration CPU overheads at 0, as for an
        engine that overlaps them with the GPU
        (:data:`envs.sim.engines.presets.CPU_OVERHEAD_FIELDS`); Vidur 0.0.26 prices no CPU work. A
        named variant: off by default (vLLM's preset).
    """

    model: str = "llama3-8b"
    gpu: str = "a100-80g"
    isl: int = 512
    osl: int = 128
    batch_cap: int = 128
    chunk_size: int = 512
    block_size: int = 16
    memory_margin: float = 0.1
    overlap_scheduling: bool = False

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise PeerConfigError(
                f"--model {self.model!r}: Vidur profiles exist for {sorted(MODELS)}"
            )
        if self.gpu not in GPUS:
            raise PeerConfigError(f"--gpu {self.gpu!r}: Vidur profiles exist for {sorted(GPUS)}")
        for name in ("isl", "osl", "batch_cap", "chunk_size", "block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PeerConfigError(f"{name}={value!r}; expected an integer >= 1")
        if self.osl < 2:
            raise PeerConfigError(f"osl={self.osl}; TPOT needs at least 2 output tokens")
        if not 0 <= self.memory_margin < 1:
            raise PeerConfigError(f"memory_margin={self.memory_margin!r}; expected [0, 1)")

    @property
    def max_tokens(self) -> int:
        """Vidur's per-request token bound (trace generator and prediction tables): a request,
        a chunk and a batch of decodes all fit, rounded up to its 256-token KV grid."""
        need = max(self.isl + self.osl, self.chunk_size, self.batch_cap)
        return -(-need // VIDUR_KV_GRANULARITY) * VIDUR_KV_GRANULARITY

    def describe(self) -> str:
        return (
            f"{self.model} on one {self.gpu}, bf16, {self.isl} prompt / {self.osl} output tokens; "
            f"chunked prefill (Vidur sarathi / servegym chunked) with {self.chunk_size} tokens "
            f"per iteration, at most {self.batch_cap} running requests, KV in "
            f"{self.block_size}-token blocks (servegym: whole tokens), memory margin "
            f"{self.memory_margin:g}, no prefix caching"
            + (
                "; servegym CPU overheads priced 0 (overlap scheduling)"
                if self.overlap_scheduling
                else ""
            )
        )


def vidur_kv_capacity_tokens(setup: EngineSetup) -> int:
    """KV tokens Vidur 0.0.26 gives one replica (TP 1, one pipeline stage).

    Its ``MemoryPlanner.get_max_kv_cache_size_in_tokens``: (memory GB · 1024³ · (1 − margin) −
    2 bytes · parameters) // (2 · 2 bytes · head_dim · KV heads · layers), where parameters
    counts the attention and MLP matrices only (``ParamCounter``: no embeddings or LM head);
    then ``BaseReplicaScheduler`` keeps whole request slots of ``max_tokens``: blocks =
    (max_tokens // block) · (tokens // max_tokens).
    """
    m = get_model(setup.model)
    head_dim = m.hidden_size // m.num_heads
    attention = m.hidden_size * head_dim * (2 * m.num_heads + 2 * m.num_kv_heads)
    mlp = (3 if m.gated_mlp else 2) * m.hidden_size * m.intermediate_size
    params = (attention + mlp) * m.num_layers
    memory = VIDUR_MEMORY_GB * 1024**3 * (1 - setup.memory_margin)
    tokens = int((memory - 2 * params) // (4 * head_dim * m.num_kv_heads * m.num_layers))
    blocks = (setup.max_tokens // setup.block_size) * (tokens // setup.max_tokens)
    if blocks < 1:
        raise PeerConfigError(
            f"{setup.model} on one {setup.gpu} leaves {tokens} KV tokens, less than one request "
            f"slot of {setup.max_tokens} tokens (--memory-margin {setup.memory_margin})"
        )
    return blocks * setup.block_size


def servegym_engine(setup: EngineSetup, kv_tokens: int) -> EnginePreset:
    """servegym's vLLM preset configured as Vidur's engine: chunked scheduling, ``chunk_size``
    token budget, ``batch_cap`` running requests, paged KV, no prefix cache, and the memory
    utilisation at which the instance holds exactly ``kv_tokens`` KV tokens."""
    lat = LatencyCache().get(deployment(setup.gpu, setup.model).instances[0], get_engine("vllm"))
    util = kv_tokens * lat.kv_bytes_per_token + lat.weight_bytes + 0.5 * lat.kv_bytes_per_token
    util /= get_gpu(setup.gpu).memory_bytes
    return dataclasses.replace(
        get_engine("vllm"),
        name="vllm-as-vidur",
        scheduling="chunked",
        token_budget=((0.0, setup.chunk_size),),
        max_batch=((0.0, setup.batch_cap),),
        small_tier_families=(),
        kv_policy="paged",
        memory_utilization=util,
        prefix_caching=False,
        overlap_scheduling=setup.overlap_scheduling,
    )


def poisson_requests(count: int, rate: float, setup: EngineSetup, seed: int) -> list[Request]:
    """``count`` requests with exponential gaps of mean 1/``rate`` seconds (a Poisson process,
    first arrival one gap after 0), each ``setup.isl`` prompt / ``setup.osl`` output tokens."""
    if count < 1:
        raise PeerConfigError(f"--count {count}; expected >= 1")
    if not (math.isfinite(rate) and rate > 0):
        raise PeerConfigError(f"--rate {rate!r}; expected requests/s > 0")
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, count))
    return [
        Request(
            id=f"r{i}",
            arrival=float(t),
            model=setup.model,
            input_tokens=setup.isl,
            output_tokens=setup.osl,
            task="peer",
        )
        for i, t in enumerate(arrivals)
    ]


def write_trace(requests: list[Request], path: Path) -> None:
    """The request list as a Vidur trace-replay CSV (arrival seconds written exactly: ``repr``)."""
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(TRACE_COLUMNS)
        for r in requests:
            out.writerow((TRACE_DATE, repr(r.arrival), r.input_tokens, r.output_tokens))


def read_trace(path: Path, model: str) -> list[Request]:
    """The requests of a Vidur trace-replay CSV (the rows of :data:`TRACE_DATE`), as Vidur's
    ``TraceReplayRequestGenerator`` reads them with scale factors 1."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if rows and set(TRACE_COLUMNS) - set(rows[0]):
        raise PeerConfigError(
            f"{path}: missing columns {sorted(set(TRACE_COLUMNS) - set(rows[0]))}"
        )
    return [
        Request(
            id=f"r{i}",
            arrival=float(row["Time"]),
            model=model,
            input_tokens=max(1, int(row["PromptTokenCount"])),
            output_tokens=max(1, int(row["CompletionTokenCount"])),
            task="peer",
        )
        for i, row in enumerate(r for r in rows if r["Date"] == TRACE_DATE)
    ]


@dataclass
class SideResult:
    """Per-request latencies (seconds, in arrival order) and wall seconds of one simulator."""

    name: str
    ttft: np.ndarray
    tpot: np.ndarray
    latency: np.ndarray
    run_s: float
    setup_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def requests_per_wall_s(self) -> float:
        return len(self.latency) / self.run_s if self.run_s > 0 else math.inf


def run_servegym(requests: list[Request], setup: EngineSetup, kv_tokens: int) -> SideResult:
    """Simulate ``requests`` on one servegym monolithic instance configured as Vidur's engine."""
    preset = servegym_engine(setup, kv_tokens)
    t0 = time.perf_counter()
    sim = Simulation(
        deployment(setup.gpu, setup.model),
        requests,
        compute_horizons=False,
        online_horizons=False,
        engine=preset,
    )
    setup_s = time.perf_counter() - t0
    res = sim.run(DefaultScheduler())
    inst = sim.monolithic[0]
    if inst.capacity != kv_tokens:
        raise RuntimeError(f"servegym KV capacity {inst.capacity} != Vidur's {kv_tokens} tokens")
    calls = sorted(res.calls, key=lambda c: c.revealed_at)
    return SideResult(
        name="servegym",
        ttft=np.array([c.ttft for c in calls]),
        tpot=np.array([c.tpot for c in calls]),
        latency=np.array([c.latency for c in calls]),
        run_s=res.wall_seconds,
        setup_s=setup_s,
        extra={
            "kv_capacity_tokens": inst.capacity,
            "token_budget": inst.token_budget,
            "max_batch": inst.max_batch,
            "preemptions": int(sum(c.preemptions for c in calls)),
            "calibration": resolve_calibration_variant(),
        },
    )


def servegym_capacity(setup: EngineSetup, kv_tokens: int, count: int = 2000) -> float:
    """Requests/s the engine sustains when saturated: ``count`` requests all at t = 0,
    completions per second between the 10th and the 90th percentile completion (ramp-up and
    drain left out)."""
    burst = [dataclasses.replace(r, arrival=0.0) for r in poisson_requests(count, 1.0, setup, 0)]
    done = np.sort(run_servegym(burst, setup, kv_tokens).latency)
    lo, hi = int(0.1 * count), int(0.9 * count)
    return (hi - lo) / float(done[hi] - done[lo])


def parse_vidur_output(output_dir: Path) -> SideResult:
    """Vidur's results: ``peer_run.json`` (written by the driver) and the ``request_metrics.csv``
    it names. Per request, Vidur's ``prefill_e2e_time`` is the TTFT and ``request_e2e_time`` the
    latency (both from arrival); TPOT = (latency − TTFT) / (decode tokens − 1), the definition
    servegym uses (Vidur's own ``decode_time_execution_plus_preemption_normalized`` divides by
    all decode tokens)."""
    run = json.loads((output_dir / "peer_run.json").read_text())
    metrics = Path(run["metrics_dir"]) / "request_metrics.csv"
    with open(metrics, newline="") as fh:
        rows = list(csv.DictReader(fh))
    need = ("Request Id", "request_e2e_time", "prefill_e2e_time", "request_num_decode_tokens")
    missing = [c for c in need if not rows or c not in rows[0]]
    if missing:
        raise PeerConfigError(f"{metrics}: no rows or missing columns {missing}")
    rows.sort(key=lambda r: int(float(r["Request Id"])))
    ttft = np.array([float(r["prefill_e2e_time"]) for r in rows])
    latency = np.array([float(r["request_e2e_time"]) for r in rows])
    decode = np.array([float(r["request_num_decode_tokens"]) for r in rows])
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(decode > 1, (latency - ttft) / (decode - 1), np.nan)
    extra = {k: run[k] for k in run if k not in ("setup_s", "run_s")}
    return SideResult("Vidur", ttft, tpot, latency, run["run_s"], run["setup_s"], extra)


def run_vidur(
    trace: Path, count: int, setup: EngineSetup, args: argparse.Namespace, work: Path
) -> SideResult:
    """Run Vidur on ``trace`` through the driver in ``args.vidur_python``; parse its output."""
    vidur_model, profile_model = MODELS[setup.model]
    device, node, _ = GPUS[setup.gpu]
    out = work / f"vidur-{count}"
    spec = {
        "seed": args.seed,
        "vidur_model": vidur_model,
        "profile_model": profile_model,
        "device": device,
        "network_device": node,
        "tp": 1,
        "block_size": setup.block_size,
        "memory_margin_fraction": setup.memory_margin,
        "scheduler": "sarathi",
        "batch_cap": setup.batch_cap,
        "chunk_size": setup.chunk_size,
        "trace_file": str(trace),
        "trace_date": TRACE_DATE,
        "max_tokens": setup.max_tokens,
        "cache_dir": str(args.vidur_cache / args.vidur_grid),
        "grid": GRIDS[args.vidur_grid],
        "output_dir": str(out),
        "data_dir": str(args.vidur_data),
        "attention_from": str(args.vidur_attention_from) if args.vidur_attention_from else None,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(spec, indent=2))
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [args.vidur_python, str(DRIVER), "--spec", str(out / "spec.json")],
        capture_output=True,
        text=True,
        env=env,
    )
    process_s = time.perf_counter() - t0
    (out / "driver.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise RuntimeError(
            f"Vidur failed (exit {proc.returncode}; log {out / 'driver.log'}):\n{tail}"
        )
    result = parse_vidur_output(out)
    result.extra["process_s"] = process_s
    return result


def find_vidur_python(explicit: str | None) -> str | None:
    """``--vidur-python``, else ``$SERVEGYM_VIDUR_PYTHON``, else this interpreter if it has
    ``vidur``; None when none is found.

    :raises PeerConfigError: when a given interpreter cannot import ``vidur``.
    """
    given = explicit or os.environ.get("SERVEGYM_VIDUR_PYTHON")
    if given is None:
        return sys.executable if importlib.util.find_spec("vidur") else None
    try:
        check = subprocess.run([given, "-c", "import vidur"], capture_output=True, text=True)
    except OSError as exc:
        raise PeerConfigError(f"--vidur-python {given}: cannot run it ({exc})") from exc
    if check.returncode != 0:
        raise PeerConfigError(
            f"--vidur-python {given}: cannot import vidur ({check.stderr.strip()[-300:]})"
        )
    return given


def _cell(side: SideResult | None, values: str, q: float, scale: float) -> str:
    if side is None:
        return "-"
    return f"{float(np.nanpercentile(getattr(side, values), q)) * scale:10.2f}"


def format_table(ours: SideResult, peer: SideResult | None) -> str:
    """TTFT / TPOT / latency (median, p99) and speed of both sides, with servegym's difference."""
    lines = [f"{'':28}{'servegym':>11}{'Vidur':>11}{'diff':>9}"]
    for label, values, scale in (
        ("TTFT ms", "ttft", 1e3),
        ("TPOT ms", "tpot", 1e3),
        ("latency s", "latency", 1.0),
    ):
        for q, qname in ((50, "median"), (99, "p99")):
            a = float(np.nanpercentile(getattr(ours, values), q))
            diff = "-"
            if peer is not None:
                b = float(np.nanpercentile(getattr(peer, values), q))
                diff = f"{(a / b - 1) * 100:+7.1f}%"
            row = f"  {label} {qname}"
            lines.append(
                f"{row:28}{_cell(ours, values, q, scale):>11}{_cell(peer, values, q, scale):>11}"
                f"{diff:>9}"
            )
    speed = f"{ours.requests_per_wall_s:10,.0f}"
    peer_speed = "-" if peer is None else f"{peer.requests_per_wall_s:10,.0f}"
    ratio = "-" if peer is None else f"{ours.requests_per_wall_s / peer.requests_per_wall_s:6.1f}x"
    lines.append(f"{'  requests / wall s (run)':28}{speed:>11}{peer_speed:>11}{ratio:>9}")
    lines.append(
        f"{'  core run / setup, wall s':28}{f'{ours.run_s:.2f}/{ours.setup_s:.2f}':>11}"
        f"{'-' if peer is None else f'{peer.run_s:.2f}/{peer.setup_s:.2f}':>11}"
    )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    from envs.sim.calibration.data import find_data_dir

    data = find_data_dir()
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.peer_vidur",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--count", type=int, nargs="+", default=[1000, 10000], help="requests")
    ap.add_argument(
        "--rate", type=float, default=None, help="requests/s (default: --load x capacity)"
    )
    ap.add_argument("--load", type=float, default=0.7, help="share of servegym's capacity")
    ap.add_argument("--seed", type=int, default=0, help="seeds the arrivals")
    ap.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    ap.add_argument("--gpu", default="a100-80g", choices=sorted(GPUS))
    ap.add_argument("--isl", type=int, default=512, help="prompt tokens per request")
    ap.add_argument("--osl", type=int, default=128, help="output tokens per request")
    ap.add_argument("--batch-cap", type=int, default=128, help="running requests at most")
    ap.add_argument("--chunk-size", type=int, default=512, help="tokens per iteration")
    ap.add_argument("--block-size", type=int, default=16, help="Vidur KV block, tokens")
    ap.add_argument("--memory-margin", type=float, default=0.1, help="GPU memory share unused")
    ap.add_argument(
        "--overlap-scheduling",
        action="store_true",
        help="servegym variant: per-iteration CPU overheads priced 0 (Vidur prices none)",
    )
    ap.add_argument("--vidur-python", default=None, help="Python of an env with vidur==0.0.26")
    ap.add_argument("--vidur-data", type=Path, default=data / "vidur", help="Vidur profiles")
    ap.add_argument(
        "--vidur-attention-from",
        type=Path,
        default=None,
        help="AIConfigurator folder whose attention kernels stand in for a missing Vidur "
        "attention.csv (default: <latency data>/aiconfigurator/<gpu>)",
    )
    ap.add_argument(
        "--vidur-cache",
        type=Path,
        default=Path.home() / ".cache" / "servegym" / "vidur",
        help="Vidur's trained predictors, reused across runs",
    )
    ap.add_argument(
        "--vidur-grid",
        choices=sorted(GRIDS),
        default="vidur",
        help="hyper-parameter search of Vidur's predictors (see GRIDS)",
    )
    ap.add_argument("--work-dir", type=Path, default=None, help="traces and Vidur outputs")
    ap.add_argument("--require-vidur", action="store_true", help="exit with an error when no "
                    "Python with Vidur is found (default: servegym side only)")  # fmt: skip
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        setup = EngineSetup(
            model=args.model,
            gpu=args.gpu,
            isl=args.isl,
            osl=args.osl,
            batch_cap=args.batch_cap,
            chunk_size=args.chunk_size,
            block_size=args.block_size,
            memory_margin=args.memory_margin,
            overlap_scheduling=args.overlap_scheduling,
        )
        vidur_python = find_vidur_python(args.vidur_python)
        if vidur_python is None and args.require_vidur:
            raise PeerConfigError(
                "--require-vidur: no Python with vidur found; pass --vidur-python or set "
                "SERVEGYM_VIDUR_PYTHON (see docs/benchmarks/peer-vidur.md, Running it)"
            )
        if not 0 < args.load <= 1.5:
            raise PeerConfigError(f"--load {args.load}; expected a share in (0, 1.5]")
        profiles = args.vidur_data / "compute" / GPUS[setup.gpu][0] / MODELS[setup.model][1]
        if vidur_python is not None and not (profiles / "mlp.csv").is_file():
            raise PeerConfigError(
                f"--vidur-data {args.vidur_data}: no Vidur compute profile {profiles}/mlp.csv "
                "(point it at a copy of Vidur's data/profiling folder, or set "
                "SERVEGYM_LATENCY_DATA)"
            )
        kv_tokens = vidur_kv_capacity_tokens(setup)
        for count in args.count:
            poisson_requests(count, 1.0 if args.rate is None else args.rate, setup, args.seed)
    except PeerConfigError as exc:
        ap.exit(2, f"benchmarks.peer_vidur: error: {exc}\n")
    args.vidur_python = vidur_python
    if args.vidur_attention_from is None:
        candidate = args.vidur_data.parent / "aiconfigurator" / GPUS[setup.gpu][2]
        args.vidur_attention_from = candidate if candidate.is_dir() else None
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="peer_vidur_"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"engine: {setup.describe()}")
    print(f"KV capacity (Vidur's formula, both sides): {kv_tokens:,} tokens")
    if args.rate is None:
        capacity = servegym_capacity(setup, kv_tokens)
        rate = args.load * capacity
        print(
            f"servegym capacity {capacity:.2f} req/s (saturated); Poisson rate {rate:.2f} req/s "
            f"(--rate {rate!r})"
        )
    else:
        rate = args.rate
        print(f"Poisson rate {rate:.2f} req/s (given)")
    if vidur_python is None:
        print(INSTALL_HELP)
    for count in args.count:
        trace = work / f"trace-{count}.csv"
        write_trace(poisson_requests(count, rate, setup, args.seed), trace)
        shared = read_trace(trace, setup.model)
        ours = run_servegym(shared, setup, kv_tokens)
        try:
            peer = None if vidur_python is None else run_vidur(trace, count, setup, args, work)
        except (RuntimeError, PeerConfigError) as exc:
            print(f"benchmarks.peer_vidur: error: {exc}", file=sys.stderr)
            return 1
        print(f"\n{count:,} requests, seed {args.seed}, trace {trace}")
        if peer is not None and peer.extra.get("kv_capacity_tokens") != kv_tokens:
            print(f"  note: Vidur reports {peer.extra.get('kv_capacity_tokens')} KV tokens")
        print(format_table(ours, peer))
        print(
            f"  servegym: budget {ours.extra['token_budget']} tokens/iteration, max batch "
            f"{ours.extra['max_batch']}, {ours.extra['preemptions']} preemptions, calibration "
            f"{ours.extra['calibration']}"
        )
        if peer is not None:
            print(
                f"  Vidur {peer.extra['vidur_version']}: sarathi, {peer.extra['kv_blocks']:,} "
                f"blocks x {peer.extra['block_size']}, max batch {peer.extra['max_batch_size']}, "
                f"predictor search {args.vidur_grid}, "
                f"attention {peer.extra['attention_source']}; process "
                f"{peer.extra['process_s']:.1f} s wall incl. start-up; outputs "
                f"{peer.extra['metrics_dir']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
