#!/usr/bin/env bash
# Regenerates the README's "Results (Routing-v0, measured)" tables (GoodServe, papers/002).
#
#   bash examples/routing_results.sh               # from the repository root, in the venv
#
# Stages (STAGES="paper sessions ablations diagnosis capacity", all by default):
#   paper      Fig. 6 on the paper workload (goodserve, the default): every router, SLO scale
#              1..3, held-out seeds 100-104, default load 0.35 (1.19 requests/s)
#   sessions   the same grid on our session workload (goodserve-sessions) at load 0.3
#              (1.02 requests/s), seeds 100-102
#   ablations  GoodServe with the residual-life re-prediction, the history predictor, oracle
#              lengths, KV migration (paper workload, seeds 100-104)
#   diagnosis  benchmarks.routing_estimates: misses by cause, migrations, prediction error per
#              task class, per router (paper workload, alpha 2 and 3, seeds 100-104)
#   capacity   least-request latency vs load_scale (the load the goodserve-4 preset sustains)
#
# Every table depends on the ``vllm`` engine preset (envs/configs/engines.yaml): rerun this
# script after the preset changes. About 25 minutes of one core for paper, 15 for sessions.
set -euo pipefail
PY=${PYTHON:-python}
OUT=${OUT:-results}
STAGES=${STAGES:-"paper sessions ablations diagnosis capacity"}
has() { [[ " $STAGES " == *" $1 "* ]]; }

ROUTERS=random-route,power-of-two,round-robin,least-request,lowest-tpm,preble,llumnix,llm-d,sglang-cache-aware,dynamo-kv,prefix-aware-low,earliest-finish,goodserve-no-migration,goodserve+shorten,goodserve+queue-aware,goodserve
ALPHAS=slo_scale=1,1.5,2,2.5,3

if has paper; then
  $PY evaluate.py --quiet --env routing --sweep $ALPHAS --seeds 100,101,102,103,104 \
    --policies $ROUTERS --out "$OUT/routing-paper"
fi
if has sessions; then
  $PY evaluate.py --quiet --env routing --workload goodserve-sessions --load-scale 0.3 \
    --sweep $ALPHAS --seeds 100,101,102 --policies $ROUTERS --out "$OUT/routing-sessions"
fi
if has ablations; then
  for opt in "--output-predictor moe-residual" "--output-predictor history" \
             "--output-predictor oracle" "--migration kv"; do
    name=$(echo "$opt" | tr -d ' -' )
    $PY evaluate.py --quiet --env routing --sweep $ALPHAS --seeds 100,101,102,103,104 \
      --policies goodserve,goodserve-no-migration $opt --out "$OUT/routing-ablation-$name"
  done
fi
if has diagnosis; then
  for a in 2 3; do
    $PY -m benchmarks.routing_estimates --diagnose --slo-scale $a --seeds 100,101,102,103,104 \
      --policies preble,least-request,dynamo-kv,goodserve-no-migration,goodserve+shorten,goodserve
  done
fi
if has capacity; then
  $PY -m benchmarks.routing_estimates --capacity --policy least-request --seeds 100,101,102 \
    --loads 0.1,0.2,0.35,0.5,0.7,1.0
fi
