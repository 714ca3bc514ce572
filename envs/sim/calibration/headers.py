"""Provenance headers of the fitted latency-calibration YAMLs, one per per-op calibration variant
(``envs.sim.latency.efficiency.CALIBRATION_VARIANTS``); written by ``python -m
envs.sim.calibration.calibrate --fit``. The variants differ only in how linear layers and
elementwise kernels are fitted (:data:`envs.sim.calibration.perop.PER_OP_FITS`), so only those
paragraphs differ.
"""

from __future__ import annotations

_TEMPLATE = """\
{VARIANT}# Fitted constants of the roofline latency model (envs/sim/latency/model.py).
# Written by `python -m envs.sim.calibration.calibrate --fit` (deterministic grid searches, loss =
# mean squared log(predicted / measured)); do not hand-edit, refit instead. Data: the
# measured-latency folder described in ../shared/latency-data/SOURCES.md (never committed here).
# Paths below are relative to that folder.
#
{GEMM}
#   ampere-hbm  aiconfigurator/a100_sxm/gemm_perf.csv (vLLM 0.14, bf16)
#   hopper      aiconfigurator/h100_sxm/gemm_perf.csv + aiconfigurator/h200_sxm/gemm_perf.csv
#   volta       apex_plus/comp/V100-PCIE-16GB/gemm_0_subset.csv (peak 112 TFLOP/s, 900 GB/s)
#   ampere-gddr vidur/compute/a40/meta-llama/Llama-2-7b-hf/mlp.csv (attn_pre_proj,
#               attn_post_proj, mlp_up_proj, mlp_down_proj medians as GEMMs)
{FP8_AND_DEFAULT}
#   and memory, n,k >= 256). The fitted floor (DeepGEMM's small-shape minimum) is not kept: fp8
#   kernels share gemm_floor_seconds (see envs/sim/calibration/calibrate.py step 1b). Families
#   without these keys (no FP8 data) use their bf16 gemm_* constants at the FP8 peak.
# families.<f>.attention_*: ampere-hbm and hopper from aiconfigurator/<gpu>/
#   generation_attention_perf.csv (memory efficiency + floor) then context_attention_perf.csv
#   (isl >= 16; compute efficiency). volta and ampere-gddr have no attention tables: their
#   GEMM efficiencies times the geometric-mean attention/GEMM ratio of ampere-hbm and hopper.
{ELEMENTWISE}
{MOE}# links.nvlink: ring all-reduce fit on the faster of aiconfigurator/<gpu>/nccl_perf.csv
#   (all_reduce, half) and custom_allreduce_perf.csv (CUDA-graph rows) per (GPU, n, bytes),
#   A100/H100/H200, link bandwidth = datasheet NVLink (bidirectional aggregate).
# links.pcie: apex_plus/comm/V100-PCIE-16GB/all_reduce.csv single-node half rows, PCIe Gen3
#   32 GB/s.
# iteration_overhead_seconds + iteration_overhead_per_extra_gpu_seconds * (tp - 1): 2-D grid on
#   llm_inference_bench_anl/All_results.csv vLLM Llama-2-7B rows (A100-40GB and H100,
#   TP 1/2/4) whose KV demand fits, all other constants fixed (the TP term is the engine's
#   per-step driver-to-worker synchronisation, which grows with the worker count).
# target_heldout_median_error: the committed accuracy target for the held-out end-to-end check
#   (vLLM runs of Mistral-7B, Qwen2-7B, Qwen2-72B, Mixtral-8x7B in the same Argonne files).
"""

_BLOCKS = {
    "roofline": {
        "VARIANT": """\
# Per-op calibration variant "roofline" (HexAgent §4.2's hard roofline; every -v0 env pins it),
# selected by SERVEGYM_LATENCY_CALIBRATION=roofline; refit with --fit --calibration roofline.
""",
        "GEMM": """\
# families.<f>.gemm_*: fit of t = max(2mnk/(gemm_compute*peak), 2(mk+kn+mn)/(gemm_memory*bw))
#   + gemm_floor_seconds on GEMM kernel rows with n,k >= 256 (<= 3000 evenly spaced rows/table):""",
        "FP8_AND_DEFAULT": """\
#   default     geometric mean of the four (used by Ada / L40S, which has no measurements)
# families.hopper.gemm_*_fp8: the same fit for fp8-weight linear layers, with 1-byte operands and
#   a bf16 output, t = max(2mnk/(gemm_compute_fp8*peak_fp8), (mk+kn+2mn)/(gemm_memory_fp8*bw))
#   + floor, on infersim/h800/gemm.csv (DeepGEMM fp8_gemm_nt kernels on H800 = H100-SXM compute""",
        "ELEMENTWISE": """\
# families.<f>.elementwise_memory: fit of t = bytes/(elementwise_memory*bw) (bytes per token of
#   the fused add+RMSNorm, rotary and activation kernels, envs/sim/latency/model.py
#   elementwise_bytes_per_token) on the summed input_layernorm, attn_rope,
#   post_attention_layernorm, mlp_act and add medians of vidur/compute/<gpu>/*/*/mlp.csv rows
#   with >= 256 tokens (every model and TP degree): ampere-hbm a100, hopper h100, ampere-gddr
#   a40; volta its gemm_memory times their geometric-mean ratio; default the geometric mean.""",
        "MOE": "",
    },
    "smooth-roofline": {
        "VARIANT": """\
# Per-op calibration variant "smooth-roofline" (ours; the default: the better held-out errors,
# docs/fidelity/serving.md); refit with --fit --calibration smooth-roofline.
""",
        "GEMM": """\
# families.<f>.gemm_*: fit of t = (C^p + R^p)^(1/p) + gemm_floor_seconds with
#   C = 2mnk/(gemm_compute*peak), R = 2(mk+kn+mn)/(gemm_memory*bw), p = gemm_roofline_exponent
#   (absent: max(C, R)), on GEMM kernel rows with n,k >= 256 (<= 3000 evenly spaced rows/table):""",
        "FP8_AND_DEFAULT": """\
#   default     geometric mean of the four (used by Ada / L40S, which has no measurements);
#               its gemm_roofline_exponent is the median of theirs
# families.hopper.gemm_*_fp8: the same fit for fp8-weight linear layers at the family's
#   gemm_roofline_exponent, with 1-byte operands and a bf16 output,
#   C = 2mnk/(gemm_compute_fp8*peak_fp8), R = (mk+kn+2mn)/(gemm_memory_fp8*bw), on
#   infersim/h800/gemm.csv (DeepGEMM fp8_gemm_nt kernels on H800 = H100-SXM compute""",
        "ELEMENTWISE": """\
# families.<f>.elementwise_*: fit of t = bytes/(elementwise_memory*bw)
#   + 5*elementwise_floor_seconds (bytes per token of the fused add+RMSNorm, rotary and
#   activation kernels, envs/sim/latency/model.py elementwise_bytes_per_token) on the summed
#   input_layernorm, attn_rope, post_attention_layernorm, mlp_act and add medians of
#   vidur/compute/<gpu>/*/*/mlp.csv rows (every model, TP degree and token count): ampere-hbm
#   a100, hopper h100, ampere-gddr a40; volta its gemm_memory times their geometric-mean ratio
#   and their mean floor; default the geometric mean / mean. The model charges the floor
#   elementwise_kernels_per_layer (4: vLLM's fused kernels) times per layer.""",
        "MOE": """\
# moe_kernels.<f>.<precision>: routed-expert kernel efficiencies and per-layer floor of
#   envs/sim/latency/moe.py (MoE layers priced from their physics), fitted by
#   `python -m envs.sim.calibration.moe_kernels --tables DIR` at the hopper
#   gemm_roofline_exponent on AIConfigurator's measured vLLM 0.14 fused_moe tables
#   (ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/systems/data/{h100_sxm,h200_sxm}/
#   moe/vllm/0.14.0/moe_perf.parquet, balanced routing, <= 8 GPUs; bf16 rows and fp8_block rows
#   for fp8); kept across refits of the rest. default (families without MoE tables):
#   AIConfigurator's achieved-util levels of unmeasured MoE kernels (operators/moe.rs
#   MOE_QUANT_UTIL_LEVEL: bf16 0.53, fp8 0.40) on both bounds, with the hopper floors.
# engines.<engine>: Calibration fields this variant sets for one engine preset, kept across
#   refits. trtllm.moe_kernels: the same fit on TensorRT-LLM 1.2.0rc5's tables (--engine
#   trtllm; CUTLASS MoE kernels). vllm: custom_allreduce and no per-extra-GPU overhead (vLLM
#   0.11+ all-reduces with its custom kernel and broadcasts to workers without the V0 per-worker
#   step): chosen because it lowers the held-out serving errors of dense and MoE rows
#   (docs/fidelity/moe.md; python -m benchmarks.serving_fidelity).
""",
    },
}


def yaml_header(variant: str) -> str:
    """The comment header of ``variant``'s calibration YAML (its fit and data sources).

    :param variant: one of ``envs.sim.latency.efficiency.CALIBRATION_VARIANTS``.
    """
    if variant not in _BLOCKS:
        raise ValueError(
            f"unknown calibration variant {variant!r}; expected one of {sorted(_BLOCKS)}"
        )
    return _TEMPLATE.format(**_BLOCKS[variant])
