"""Run Vidur (the pip package ``vidur``, 0.0.26) on a trace file with local profiling data.

This script runs in *Vidur's* Python environment, not servegym's: ``python -m
benchmarks.peer_vidur`` starts it as ``<vidur python> benchmarks/vidur_driver.py --spec
spec.json`` and reads what it writes. It imports only Vidur and the standard library.

What it adds to ``python -m vidur.main``:

- **Local profiling data.** Vidur 0.0.26 downloads its profiles from Hugging Face datasets
  (``SklearnExecutionTimePredictor._get_input_files``); this script points that method at the
  files of a local copy of Vidur's ``data/profiling`` tree instead
  (``compute/<device>/<org>/<model>/{mlp,attention}.csv``, ``network/<node>/{all_reduce,
  send_recv}.csv``; the layout of Vidur's repository), so no network is needed.
- **An attention table when Vidur's is missing.** When the data has no ``attention.csv`` for
  the model and ``spec["attention_from"]`` names an AIConfigurator folder (its
  ``context_attention_perf.csv`` and ``generation_attention_perf.csv``: vLLM flash-attention
  kernels measured on the same GPU), the prefill rows (one sequence, no earlier KV) and decode
  rows (batch, KV tokens) are rewritten into Vidur's attention-profile columns; Vidur then
  trains its own predictors on them. ``attn_kv_cache_save`` is absent there and Vidur prices it
  at 0 (its loader's default for a missing column). The written table and its source are named
  in the output.
- **Timing.** Wall seconds (``time.perf_counter``) of: building the simulator (training or
  loading Vidur's execution-time predictors: ``setup_s``), the event loop (``run_s``: from the
  first arrival event to the last completion, without writing outputs) and writing the metrics
  files (``write_s``). Python start-up and imports are outside all three.

Output: Vidur's own files in ``spec["output_dir"]/<timestamp>/`` (``request_metrics.csv`` is the
one the benchmark reads) and ``spec["output_dir"]/peer_run.json`` with the timings, the metrics
folder and the effective configuration (KV blocks, block size, attention source).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import sys
import time
from pathlib import Path

#: Vidur's attention-profile columns that identify a model shard.
ATTENTION_KEYS = ("n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers")


def attention_from_aiconfigurator(
    folder: Path,
    n_embd: int,
    n_q_head: int,
    n_kv_head: int,
    tp: int,
    block_size: int,
) -> list[dict]:
    """Vidur attention-profile rows from AIConfigurator's attention tables of one GPU.

    Prefill rows: ``context_attention_perf.csv`` with ``batch_size`` 1 (one prompt of ``isl``
    tokens, no earlier KV) -> ``kv_cache_size`` 0, ``prefill_chunk_size`` = isl. Decode rows:
    ``generation_attention_perf.csv`` (``step`` tokens already cached, one new token per
    sequence) -> ``batch_size``, ``kv_cache_size`` = step + 1 (the tokens the new one attends to,
    itself included, as Vidur counts them), ``prefill_chunk_size`` 0. Both tables list heads per
    GPU (after the tensor-parallel split); latencies are milliseconds per layer, as Vidur's are.
    """
    q_per_gpu, kv_per_gpu = n_q_head // tp, max(1, n_kv_head // tp)

    def rows(name: str) -> list[dict]:
        with open(folder / name, newline="") as fh:
            return [
                r
                for r in csv.DictReader(fh)
                if int(r["num_heads"]) == q_per_gpu and int(r["num_key_value_heads"]) == kv_per_gpu
            ]

    ctx = [r for r in rows("context_attention_perf.csv") if int(r["batch_size"]) == 1]
    gen = rows("generation_attention_perf.csv")
    if not ctx or not gen:
        raise SystemExit(
            f"vidur_driver: {folder} has no attention rows for {q_per_gpu} query / {kv_per_gpu} "
            f"KV heads per GPU (context rows {len(ctx)}, generation rows {len(gen)})"
        )
    shard = dict(zip(ATTENTION_KEYS, (n_embd, n_q_head, n_kv_head, block_size, tp), strict=True))
    out = [
        {
            **shard,
            "batch_size": 1,
            "kv_cache_size": 0,
            "prefill_chunk_size": int(r["isl"]),
            "time_stats.attn_prefill.median": float(r["latency"]),
            "time_stats.attn_decode.median": "",
        }
        for r in ctx
    ]
    out += [
        {
            **shard,
            "batch_size": int(r["batch_size"]),
            "kv_cache_size": int(r["step"]) + 1,
            "prefill_chunk_size": 0,
            "time_stats.attn_prefill.median": "",
            "time_stats.attn_decode.median": float(r["latency"]),
        }
        for r in gen
    ]
    return out


def input_files(spec: dict, model_config, replica_config, block_size: int) -> tuple[str, ...]:
    """The (mlp, attention, all_reduce, send_recv) files Vidur's predictor trains on."""
    data = Path(spec["data_dir"])
    compute = data / "compute" / replica_config.device / spec["profile_model"]
    network = data / "network" / replica_config.network_device
    mlp = compute / "mlp.csv"
    if not mlp.is_file():
        raise SystemExit(f"vidur_driver: no compute profile {mlp} (Vidur's mlp.csv)")
    attention = compute / "attention.csv"
    if attention.is_file():
        spec["attention_source"] = str(attention)
    elif spec.get("attention_from"):
        rows = attention_from_aiconfigurator(
            Path(spec["attention_from"]),
            model_config.embedding_dim,
            model_config.num_q_heads,
            model_config.num_kv_heads,
            replica_config.tensor_parallel_size,
            block_size,
        )
        attention = Path(spec["output_dir"]) / "attention_from_aiconfigurator.csv"
        with open(attention, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        spec["attention_source"] = f"{spec['attention_from']} (rewritten to {attention})"
    else:
        raise SystemExit(
            f"vidur_driver: no attention profile {attention}; pass an AIConfigurator folder "
            "(--vidur-attention-from) to build one from its measured attention kernels"
        )
    return (
        str(mlp),
        str(attention),
        str(network / "all_reduce.csv"),
        str(network / "send_recv.csv"),
    )


def profiles_id(spec: dict) -> str:
    """A name for the compute profiles the run trains on: device, model folder, and a digest of
    the files (Vidur's ``mlp.csv`` and its ``attention.csv`` or the AIConfigurator tables)."""
    compute = Path(spec["data_dir"]) / "compute" / spec["device"] / spec["profile_model"]
    files = [compute / "mlp.csv", compute / "attention.csv"]
    if not files[1].is_file() and spec.get("attention_from"):
        folder = Path(spec["attention_from"])
        files[1:] = [
            folder / "context_attention_perf.csv",
            folder / "generation_attention_perf.csv",
        ]
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes() if f.is_file() else b"-")
    return f"local/{spec['device']}/{spec['profile_model']}/{digest.hexdigest()[:12]}"


def vidur_argv(spec: dict) -> list[str]:
    """``python -m vidur.main`` options of the run (Vidur's flat CLI)."""
    predictor = "random_forrest_execution_time_predictor_config"
    sched = spec["scheduler"]
    options = {
        "seed": spec["seed"],
        "log_level": "warning",
        "replica_config_model_name": spec["vidur_model"],
        "replica_config_device": spec["device"],
        "replica_config_network_device": spec["network_device"],
        "replica_config_tensor_parallel_size": spec["tp"],
        "replica_config_num_pipeline_stages": 1,
        "cluster_config_num_replicas": 1,
        "cache_config_block_size": spec["block_size"],
        "cache_config_memory_margin_fraction": spec["memory_margin_fraction"],
        "replica_scheduler_config_type": sched,
        f"{sched}_scheduler_config_batch_size_cap": spec["batch_cap"],
        "request_generator_config_type": "trace_replay",
        "trace_request_generator_config_trace_file": spec["trace_file"],
        "trace_request_generator_config_date": spec["trace_date"],
        "trace_request_generator_config_max_tokens": spec["max_tokens"],
        "trace_request_generator_config_prefill_scale_factor": 1,
        "trace_request_generator_config_decode_scale_factor": 1,
        "trace_request_generator_config_time_scale_factor": 1,
        "execution_time_predictor_config_type": "random_forrest",
        f"{predictor}_cache_dir": spec["cache_dir"],
        # Vidur keys its predictor cache by this name (and a few sizes), not by model or GPU:
        # naming the local files and their content keeps one cache valid for all of them.
        f"{predictor}_model_profiling_dataset": profiles_id(spec),
        f"{predictor}_network_profiling_dataset": f"local/{spec['network_device']}",
        f"{predictor}_prediction_max_tokens_per_request": spec["max_tokens"],
        f"{predictor}_prediction_max_batch_size": spec["batch_cap"],
        f"{predictor}_prediction_max_prefill_chunk_size": spec["chunk_size"],
        "metrics_config_output_dir": spec["output_dir"],
    }
    off = (
        "cache_config_enable_prefix_caching",
        "metrics_config_store_plots",
        "metrics_config_enable_chrome_trace",
        "metrics_config_write_json_trace",
        "metrics_config_store_operation_metrics",
        "metrics_config_store_utilization_metrics",
        "metrics_config_store_batch_metrics",
    )
    argv = [item for key, value in options.items() for item in (f"--{key}", str(value))]
    argv += [f"--no-{key}" for key in off]
    if sched == "sarathi":
        argv += ["--sarathi_scheduler_config_chunk_size", str(spec["chunk_size"])]
    grid = spec.get("grid") or {}
    for key in ("num_estimators", "max_depth", "min_samples_split"):
        if key in grid:
            argv += [f"--{predictor}_{key}", *(str(v) for v in grid[key])]
    if "k_fold_cv_splits" in grid:
        argv += [f"--{predictor}_k_fold_cv_splits", str(grid["k_fold_cv_splits"])]
    return argv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="JSON file written by peer_vidur")
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    os.environ.setdefault("WANDB_MODE", "disabled")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no downloads: the data are local

    from vidur.config import SimulationConfig
    from vidur.execution_time_predictor import sklearn_execution_time_predictor as skl
    from vidur.simulator import Simulator
    from vidur.utils.random import set_seeds

    def local_inputs(self):
        return input_files(spec, self._model_config, self._replica_config, self._block_size)

    def no_hub(self):
        raise RuntimeError("predictions are trained from the local profiles")

    skl.SklearnExecutionTimePredictor._get_input_files = local_inputs
    skl.SklearnExecutionTimePredictor._load_predictions_from_hf = no_hub

    Path(spec["output_dir"]).mkdir(parents=True, exist_ok=True)
    sys.argv = ["vidur.main", *vidur_argv(spec)]
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)

    t0 = time.perf_counter()
    simulator = Simulator(config)
    t1 = time.perf_counter()
    write = {"s": 0.0}
    write_output = simulator._write_output

    def timed_write() -> None:
        start = time.perf_counter()
        write_output()
        write["s"] = time.perf_counter() - start

    simulator._write_output = timed_write
    simulator.run()
    t2 = time.perf_counter()

    replica_scheduler = next(iter(simulator.scheduler._replica_schedulers.values()))
    cache = config.cluster_config.cache_config
    out = {
        "vidur_version": __import__("vidur").__version__,
        "metrics_dir": config.metrics_config.output_dir,
        "setup_s": t1 - t0,
        "run_s": (t2 - t1) - write["s"],
        "write_s": write["s"],
        "kv_blocks": int(cache.num_blocks),
        "block_size": int(cache.block_size),
        "kv_capacity_tokens": int(cache.num_blocks) * int(cache.block_size),
        "max_batch_size": int(replica_scheduler._max_batch_size),
        "attention_source": spec.get("attention_source"),
        "argv": sys.argv[1:],
    }
    (Path(spec["output_dir"]) / "peer_run.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
