#!/usr/bin/env bash
# Regenerates the HexAgent reproduction page's tables (docs/reproductions/hexagent.md; HexAgent Tables 1-3 on the simulator, both
# baseline families, three length predictors, the load sweep and HexAgent's own knobs).
#
#   bash examples/pd_cluster_results.sh              # from the repository root, in the venv
#
# Stages (STAGES="main predictors load threshold async prefix", all by default):
#   main        every policy of both families on sharegpt, bfcl, lats, mixed (hetero-1, Llama)
#   predictors  oracle / task-mean / mlp length predictors on bfcl and mixed
#   load        load_scale 0.5, 1, 2, 4 on sharegpt, bfcl and mixed, hetero-1 and hetero-2,
#               with Req99-vs-load plots per run (results/<run>/req99_vs_load_scale_*.png)
#               and all of them in docs/pd_req99_vs_load.png (examples/plot_pd_load.py)
#   threshold   HexAgent's greedy / one-pass switch (benchmarks/hexagent_threshold.py)
#   async       HexAgent with its measured planning time and 10x it applied asynchronously
#   prefix      the chain-heavy agent-chain workload with and without the prefill prefix cache
#
# COUNT (workflows per episode; default: the paper's 100 / 400 / 100 / 100), SEEDS (default
# 0,1,2) and POLICIES (default: both baseline families and hexagent) make a cheaper run; the
# reproduction page says which sizes each table used, e.g.
#   SEEDS=0 STAGES=main bash examples/pd_cluster_results.sh
#   COUNT=100 SEEDS=0,1 POLICIES=per-call-fcfs,atlas,per-call-fcfs+earliest-finish,\
#     workflow-llf+earliest-finish,atlas+earliest-finish,hexagent STAGES=predictors bash ...
# One seed of the main stage takes about 30 minutes of one core (LATS and BFCL dominate: about
# 2 and 1.3 minutes per episode). RAY=1 runs each evaluate.py grid as Ray tasks on this
# machine's cores (same results).
set -euo pipefail
PY=${PYTHON:-python}
OUT=${OUT:-results}
SEEDS=${SEEDS:-0,1,2}
STAGES=${STAGES:-"main predictors load threshold async prefix"}
COUNT_FLAG=${COUNT:+--count $COUNT}
RAY_FLAG=${RAY:+--ray}
has() { [[ " $STAGES " == *" $1 "* ]]; }
ev() { $PY evaluate.py --quiet --env pd-cluster-v0 --seeds "$SEEDS" $COUNT_FLAG $RAY_FLAG "$@"; }

both_families=per-call-fcfs,workflow-fcfs,workflow-llf,atlas,per-call-fcfs+earliest-finish,workflow-fcfs+earliest-finish,workflow-llf+earliest-finish,atlas+earliest-finish,hexagent
POLICIES=${POLICIES:-$both_families}
speed_aware=per-call-fcfs,per-call-fcfs+earliest-finish,workflow-llf+earliest-finish,atlas+earliest-finish,hexagent

if has main; then
  ev --cluster hetero-1 --model llama3.1-70b --workload sharegpt,bfcl,lats,mixed \
     --policies "$POLICIES" --out "$OUT/pd-main-hetero-1-llama"
fi
if has predictors; then
  ev --cluster hetero-1 --model llama3.1-70b --workload bfcl,mixed \
     --policies "$POLICIES" --sweep output_predictor=oracle,task-mean,mlp \
     --out "$OUT/pd-predictors-hetero-1-llama"
fi
if has load; then
  for cluster in ${CLUSTERS:-hetero-1 hetero-2}; do
    ev --cluster "$cluster" --model llama3.1-70b --workload sharegpt,bfcl,mixed \
       --policies "$POLICIES" --sweep load_scale=0.5,1,2,4 \
       --out "$OUT/pd-load-$cluster-llama"
  done
  $PY examples/plot_pd_load.py "$OUT"/pd-load-*/results.json --out docs/pd_req99_vs_load.png
fi
if has threshold; then
  $PY -m benchmarks.hexagent_threshold --workloads bfcl,mixed --seeds "$SEEDS" \
      --thresholds 0,32,none $COUNT_FLAG | tee "$OUT/pd-hexagent-threshold.txt"
fi
# Asynchronous planning (HexAgent §4.3): fixed delays of 0, HexAgent's measured planning time
# (about 13 ms per invocation here) and 10x it; deterministic, unlike planning_delay=measured.
if has async; then
  ev --cluster hetero-1 --model llama3.1-70b --workload bfcl,mixed --policies hexagent \
     --sweep planning_delay=0,0.013,0.13 --out "$OUT/pd-async-hetero-1-llama"
fi
# Prefix caching on the chain-heavy agent_chain workload: cache off / on (schedulers see hits),
# and HexAgent blind to a cache that is physically there.
if has prefix; then
  ev --cluster hetero-1 --model llama3.1-70b --workload agent_chain --policies "$speed_aware" \
     --sweep prefix_cache=false,true --out "$OUT/pd-prefix-hetero-1-llama"
  ev --cluster hetero-1 --model llama3.1-70b --workload agent_chain --policies hexagent \
     --prefix-cache true --prefix-cache-visible false --out "$OUT/pd-prefix-blind-hetero-1-llama"
fi
