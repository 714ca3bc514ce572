#!/usr/bin/env bash
# Regenerates the GoodServe reproduction page's tables (docs/reproductions/goodserve.md).
#
#   bash examples/routing_results.sh               # from the repository root, in the venv
#
# Stages (STAGES="paper sessions ablations diagnosis capacity", all by default):
#   paper      Fig. 6 on the paper workload (goodserve, the default): every router, SLO scale
#              1..3, default load 0.35 (1.19 requests/s)
#   sessions   the same grid on our session workload (goodserve-sessions) at load 0.3
#              (1.02 requests/s)
#   ablations  GoodServe with the residual-life re-prediction, the history predictor, oracle
#              lengths, KV migration, risk checks of running requests only (paper workload,
#              SLO scale 2 and 3)
#   diagnosis  benchmarks.routing_estimates: misses by cause, migrations, prediction error per
#              task class, per router (paper workload, SLO scale 2 and 3)
#   capacity   least-request latency vs load_scale (the load the goodserve-4 preset sustains)
#
# SEEDS: held-out seeds (default 100,101,102; nothing was tuned on them). Every table depends
# on the ``vllm`` engine preset (envs/configs/engines.yaml): rerun this script after the preset
# changes. About 12 minutes of one core for paper, 15 for sessions, 5 for the rest.
set -euo pipefail
PY=${PYTHON:-python}
OUT=${OUT:-results}
STAGES=${STAGES:-"paper sessions ablations diagnosis capacity"}
SEEDS=${SEEDS:-100,101,102}
has() { [[ " $STAGES " == *" $1 "* ]]; }

ROUTERS=random-route,power-of-two,round-robin,least-request,lowest-tpm,preble,llumnix,llm-d,sglang-cache-aware,dynamo-kv,prefix-aware-low,earliest-finish,goodserve-no-migration,goodserve+shorten,goodserve+queue-aware,goodserve
ALPHAS=slo_scale=1,1.5,2,2.5,3

if has paper; then
  $PY evaluate.py --quiet --env routing-v0 --sweep $ALPHAS --seeds "$SEEDS" \
    --policies $ROUTERS --out "$OUT/routing-paper"
  cp "$OUT/routing-paper/goodput_vs_slo_scale_goodserve.png" docs/routing_goodput_vs_slo_scale.png
fi
if has sessions; then
  $PY evaluate.py --quiet --env routing-v0 --workload goodserve-sessions --load-scale 0.3 \
    --sweep $ALPHAS --seeds "$SEEDS" --policies $ROUTERS --out "$OUT/routing-sessions"
fi
if has ablations; then
  for opt in "--output-predictor moe-residual" "--output-predictor history" \
             "--output-predictor oracle" "--migration kv"; do
    name=$(echo "$opt" | tr -d ' -' )
    $PY evaluate.py --quiet --env routing-v0 --sweep slo_scale=2,3 --seeds "$SEEDS" \
      --policies goodserve $opt --out "$OUT/routing-ablation-$name"
  done
  for a in 2 3; do
    $PY -m benchmarks.routing_estimates --diagnose --slo-scale $a --seeds "$SEEDS" \
      --policies goodserve --running-checks-only
  done
fi
if has diagnosis; then
  for a in 2 3; do
    $PY -m benchmarks.routing_estimates --diagnose --slo-scale $a --seeds "$SEEDS" \
      --policies preble,least-request,dynamo-kv,goodserve-no-migration,goodserve+shorten,goodserve
  done
  for p in goodserve preble; do  # where requests go and how wrong Eq. 2 is there, per GPU
    $PY -m benchmarks.routing_estimates --policy $p --slo-scale 3 --seeds "$SEEDS"
  done
fi
if has capacity; then
  $PY -m benchmarks.routing_estimates --capacity --policy least-request --seeds "$SEEDS" \
    --loads 0.2,0.35,0.5,0.7,1.0
fi
