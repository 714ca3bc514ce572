"""Why the replayed TTFT misses on models the fit never saw: the counted causes behind
``docs/fidelity/serving.md``.

    python -m benchmarks.ttft_causes [--data-dir D] [--jobs 2]

Replays the deployments of :mod:`benchmarks.serving_fidelity` once (same rows, engines and
clients, the per-op calibration in force) and prints:

1. **Dense and MoE rows apart** under each held-out scheme (leave one model / engine / GPU out,
   frontends refitted without the group), and every dense model left out alone (the closest
   thing to an unseen dense model the data holds; also without the rows of
   :func:`reuses_prompts`): median and worst |error| of the mean TTFT and TPOT, and the rows
   off by more than 2x either way (predicted / measured > 2 or < 0.5);
   the header counts the replays in which the engine preempted a request.
2. **TTFT against the output length.** Per (engine, model, GPU, TP, isl, concurrency), the
   least-squares slope of the measured mean TTFT on ``osl · TPOT / concurrency`` (the mean
   time between two completions in a closed loop of ``concurrency`` clients). A slope near 1
   means every new request waited for one more request to finish, the signature of an engine
   that admits one request fewer than there are clients; near 0, that the request joined the
   running batch at once.
3. **That wait replayed**: the TensorRT-LLM Llama-3.1-8B TP2 rows with 2,048-token prompts,
   engine-only (no frontend), with ``concurrency`` and with ``concurrency - 1`` running slots.
4. **One more iteration before the first token** under overlap scheduling (TensorRT-LLM and
   SGLang hand back an iteration's tokens while the next one runs): the leave-one-model-out
   TTFT with one simulated TPOT added to each of their rows, frontends refitted.
5. **Long prompts on Hopper, per op**: every held-out whole prefill of a 70B model of 2,048
   tokens or more (:func:`envs.sim.calibration.prefill.prefill_points`) and the prefill
   attention kernel of Llama-3.1-70B's TP4 / TP8 shards, signed error under each per-op
   calibration.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import defaultdict
from typing import Any

import numpy as np

#: Models with routed experts among the replayed ones.
MOE_MODELS = ("qwen3-235b-a22b", "minimax-m2.5")


def reuses_prompts(row: Any) -> bool:
    """The dense FP8 rows of vLLM and SGLang (SGLang 0.5.6 and vLLM 0.12 Llama-3.1-8B FP8 on
    H200, vLLM 0.12 Qwen3-32B FP8): their measured TTFT does not grow with the clients, as
    with clients that reuse prompts through the prefix cache (aiconfigurator's generated
    aiperf benchmark, 100 prompts), which the replay's distinct prompts do not."""
    return row.model not in MOE_MODELS and row.precision == "fp8" and row.backend != "trtllm"


SCHEMES = ("model", "engine", "gpu")


def _errors(pairs: list) -> dict[str, float]:
    ratio = np.array([p["ttft_s"] / r.ttft_s for r, p in pairs])
    tpot = np.array([abs(p["tpot_s"] / r.tpot_s - 1) for r, p in pairs])
    return {
        "rows": len(pairs),
        "ttft_median": float(np.median(np.abs(ratio - 1))),
        "ttft_worst": float(np.abs(ratio - 1).max()),
        "off_2x": int(((ratio > 2) | (ratio < 0.5)).sum()),
        "tpot_median": float(np.median(tpot)),
    }


def _line(name: str, e: dict[str, float]) -> str:
    return (
        f"  {name:34} {e['rows']:4d} rows  TTFT median {e['ttft_median']:6.1%} worst "
        f"{e['ttft_worst']:7.1%} off >2x {e['off_2x']:3d}  TPOT median {e['tpot_median']:6.1%}"
    )


def split_report(rows: list, preds0: list[dict]) -> None:
    """Section 1: dense / MoE rows per held-out scheme, each dense model left out alone."""
    from envs.sim.calibration.serving_fit import leave_one_group_out

    preempted = sum(1 for p in preds0 if p["preemptions"] > 0)
    print(f"1. held-out errors, dense and MoE rows apart ({preempted} replays preempted)")
    for scheme in SCHEMES:
        pairs, _ = leave_one_group_out(rows, preds0, scheme)
        moe = [(r, p) for r, p in pairs if r.model in MOE_MODELS]
        dense = [(r, p) for r, p in pairs if r.model not in MOE_MODELS]
        print(_line(f"leave one {scheme} out, dense", _errors(dense)))
        print(_line(f"leave one {scheme} out, MoE", _errors(moe)))
        if scheme == "model":
            for model in sorted({r.model for r, _ in dense}):
                mine = [(r, p) for r, p in dense if r.model == model]
                print(_line(f"  unseen dense model {model}", _errors(mine)))
                rest = [(r, p) for r, p in mine if not reuses_prompts(r)]
                print(_line("    without prompt-reuse rows", _errors(rest)))


def slope_report(rows: list) -> None:
    """Section 2: measured TTFT against osl · TPOT / concurrency, per group of rows."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        groups[(r.backend, r.model, r.gpu, r.tp, r.isl, r.concurrency)].append(r)
    slopes: dict[tuple, list[float]] = defaultdict(list)
    for key, mine in groups.items():
        x = np.array([r.osl * r.tpot_s / r.concurrency for r in mine])
        if len(mine) < 2 or np.ptp(x) == 0:
            continue
        y = np.array([r.ttft_s for r in mine])
        band = "c<32" if key[-1] < 32 else "c>=32"
        slopes[(key[0], key[1], band)].append(float(np.polyfit(x, y, 1)[0]))
    print("\n2. slope of the measured TTFT on osl x TPOT / concurrency (median [quartiles])")
    for key in sorted(slopes):
        s = np.array(slopes[key])
        q1, q3 = np.percentile(s, [25, 75])
        name = " ".join(key)
        print(f"  {name:40} {len(s):3d} groups  {np.median(s):+6.2f} [{q1:+.2f}, {q3:+.2f}]")


def slots_report(rows: list) -> None:
    """Section 3: TensorRT-LLM Llama-3.1-8B TP2, isl 2048, with c and c - 1 engine slots."""
    from envs.sim.calibration.benchmark_client import closed_loop
    from envs.sim.engines.presets import get_engine

    preset = dataclasses.replace(get_engine("trtllm"), calibrated={})
    print(
        "\n3. TensorRT-LLM Llama-3.1-8B TP2, 2,048-token prompts: measured TTFT and the engine-"
        "only replay\n   with concurrency and concurrency - 1 slots, ms"
    )
    mine = [
        r
        for r in rows
        if r.backend == "trtllm" and r.model == "llama3.1-8b" and r.tp == 2 and r.isl == 2048
    ]
    for r in sorted(mine, key=lambda r: (r.concurrency, r.osl)):
        kwargs: dict[str, Any] = r.closed_loop_kwargs()
        kwargs["engine"] = preset
        full = closed_loop(**kwargs)["ttft_mean_s"]
        kwargs["engine"] = dataclasses.replace(preset, max_batch=((0.0, r.concurrency - 1),))
        less = closed_loop(**kwargs)["ttft_mean_s"]
        print(
            f"  osl {r.osl:4d} c{r.concurrency:<4d} measured {r.ttft_s * 1e3:6.0f}  "
            f"c slots {full * 1e3:6.0f}  c-1 slots {less * 1e3:6.0f}"
        )


def overlap_report(rows: list, preds0: list[dict]) -> None:
    """Section 4: leave one model out with one more iteration before the first token."""
    from envs.sim.calibration.serving_fit import leave_one_group_out

    later = [
        {**p, "ttft_s": p["ttft_s"] + (p["tpot_s"] if r.backend in ("trtllm", "sglang") else 0)}
        for r, p in zip(rows, preds0, strict=True)
    ]
    print("\n4. leave one model out, TTFT with one more iteration on overlap-scheduled engines")
    for name, preds in (("as replayed", preds0), ("+1 iteration", later)):
        pairs, _ = leave_one_group_out(rows, preds, "model")
        dense = [(r, p) for r, p in pairs if r.model not in MOE_MODELS]
        moe = [(r, p) for r, p in pairs if r.model in MOE_MODELS]
        print(_line(f"{name}, all", _errors(pairs)))
        print(_line(f"{name}, dense", _errors(dense)))
        print(_line(f"{name}, MoE", _errors(moe)))


def long_prompt_report(data_dir: Any) -> None:
    """Section 5: long-prompt prefill of 70B models on Hopper, per-op, both calibrations."""
    from envs.sim.calibration.data import find_data_dir
    from envs.sim.calibration.prefill import context_attention_s, prefill_points
    from envs.sim.hardware.catalog import get_gpu, get_model
    from envs.sim.latency.efficiency import CALIBRATION_VARIANTS, load_calibration
    from envs.sim.latency.model import LatencyModel

    folder = find_data_dir(data_dir)
    variants = sorted(CALIBRATION_VARIANTS)
    print(
        "\n5. long prompts, 70B on Hopper, signed error per variant ("
        + ", ".join(variants)
        + "): held-out whole prefills of >= 2,048 tokens"
    )
    by_variant = {
        v: {
            p.label: p
            for p in prefill_points(folder, load_calibration(variant=v), v)
            if p.generation == "Hopper" and p.tokens >= 2048 and "70b" in p.label
        }
        for v in variants
    }
    for label in sorted(by_variant[variants[0]]):
        errs = "  ".join(
            f"{by_variant[v][label].predicted_s / by_variant[v][label].measured_s - 1:+6.1%}"
            for v in variants
        )
        print(f"  {label:40} {errs}")
    print("   and one FlashAttention prefill kernel (aiconfigurator, one sequence, one layer):")
    spec = get_model("llama3.1-70b")
    for gpu, folder_name in (("h100-sxm", "h100_sxm"), ("h200", "h200_sxm")):
        measured = context_attention_s(folder, folder_name)
        for tp in (4, 8):
            heads, kv = spec.num_heads // tp, spec.num_kv_heads // tp
            cells = []
            for isl in (2048, 4096, 8192, 16384):
                if (heads, kv, isl) not in measured:
                    continue
                errs = []
                for v in variants:
                    m = LatencyModel(get_gpu(gpu), spec, tp, 1.0, load_calibration(variant=v))
                    per_layer = m.prefill_components(isl)["attention"] / spec.num_layers
                    errs.append(f"{per_layer / measured[(heads, kv, isl)] - 1:+.0%}")
                cells.append(f"{isl}: {'/'.join(errs)}")
            print(f"  {gpu} TP{tp} ({heads} q / {kv} kv heads)  " + "  ".join(cells))


def main(argv: list[str] | None = None) -> int:
    from envs.sim.calibration.calibrate_serving import load_rows, predict_rows
    from envs.sim.latency.efficiency import resolve_calibration_variant

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ttft_causes", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data-dir", help="measured-latency folder (default ../shared/...)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = parser.parse_args(argv)
    try:
        rows, _ = load_rows(args.data_dir)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} deployments; per-op calibration {resolve_calibration_variant()!r}")
    preds0 = predict_rows(rows, {r.backend: {} for r in rows}, jobs=args.jobs, progress=True)
    split_report(rows, preds0)
    slope_report(rows)
    slots_report(rows)
    overlap_report(rows, preds0)
    long_prompt_report(args.data_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
