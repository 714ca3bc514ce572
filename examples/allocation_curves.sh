#!/usr/bin/env bash
# Regenerates the Scepsy reproduction page's curves (docs/reproductions/scepsy.md; Scepsy §7.2 Fig. 6 and §7.4 Fig. 10 on the
# simulator): throughput-latency sweeps on scepsy-16 at 4, 8 and 16 GPUs for RAG + reranker and
# beam search, the APL-accuracy runs, the tables and the plot. About 7 hours of one core, most of
# it beam search at 16 GPUs (measured stage by stage: RAG curves + HPA 30 min, beam search at
# 4 GPUs 50 min); the first run also profiles both workloads (~8 min, cached in
# $SERVEGYM_CACHE).
#
#   bash examples/allocation_curves.sh            # from the repository root, in the venv
#
# The stages (curves: every policy but K8s HPA; hpa; apl; report) can run apart, e.g. the two
# workloads on two cores at once, then the rest:
#   WORKLOADS=rag_reranker STAGES="curves hpa" bash examples/allocation_curves.sh &
#   WORKLOADS=beam_search STAGES="curves hpa" bash examples/allocation_curves.sh; wait
#   STAGES="apl report" bash examples/allocation_curves.sh
# SIZES="8 16" likewise picks pool sizes; SEEDS=0 and RATES_<workload>_<size>=r1,r2,... give a
# cheaper sweep (the Scepsy reproduction page says where it used one).
#
# Protocol: each swept rate runs 24 periods of 15 s (360 s) after the allocation is loaded; the
# metrics cover arrivals after a 120 s warm-up (longer than the latencies measured below the
# knee: achieved throughput counts completions inside the window, which a system that has not
# filled up yet under-counts), and the backlog drains for up to 120 s. K8s HPA
# starts at one pod per LLM and needs ~3 minutes of 15-s syncs and cold starts to reach its
# steady state, so it runs 40 periods (600 s) with a 300 s warm-up. Rates span 0.2-1.3x the
# peak the APL predicts for Scepsy's allocation. Seeds 0 and 1.
set -euo pipefail
PY=${PYTHON:-python}
OUT=${OUT:-results}
WORKLOADS=${WORKLOADS:-"rag_reranker beam_search"}
SIZES=${SIZES:-"4 8 16"}
STAGES=${STAGES:-"curves hpa apl report"}
has() { [[ " $STAGES " == *" $1 "* ]]; }
RATES_rag_reranker_4=${RATES_rag_reranker_4:-0.6,1.2,1.8,2.5,2.8,3.1,3.5,4.0}
RATES_rag_reranker_8=${RATES_rag_reranker_8:-1.4,2.9,4.3,5.8,6.5,7.2,8.3,9.3}
RATES_rag_reranker_16=${RATES_rag_reranker_16:-3.1,6.2,9.2,12.3,13.9,15.4,17.7,20}
RATES_beam_search_4=${RATES_beam_search_4:-0.25,0.5,0.75,1.0,1.15,1.27,1.45,1.65}
RATES_beam_search_8=${RATES_beam_search_8:-0.5,1.0,1.5,2.0,2.3,2.55,2.9,3.3}
RATES_beam_search_16=${RATES_beam_search_16:-1.0,2.0,2.9,3.9,4.4,4.9,5.6,6.4}
SEEDS=${SEEDS:-0,1}
COMMON="--env allocation-v0 --period-seconds 15 --apl-info true --seeds $SEEDS --quiet"
for wl in $WORKLOADS; do
  for g in $SIZES; do
    var=RATES_${wl}_${g}
    rates=${!var}
    has curves && $PY evaluate.py $COMMON --workload $wl --gpus $g --sweep workflow_rate=$rates \
      --policies scepsy,scepsy-parallelism-only,scepsy-fractional-only,naive-equal,demand-proportional \
      --periods 24 --warmup-seconds 120 --out $OUT/alloc-$wl-$g
    has hpa && $PY evaluate.py $COMMON --workload $wl --gpus $g --sweep workflow_rate=$rates \
      --policies k8s-hpa --periods 40 --warmup-seconds 300 --out $OUT/alloc-hpa-$wl-$g
  done
done
# APL accuracy: Scepsy at 20 / 50 / 80 % of its peak sustainable throughput, three seeds.
curves=$(for wl in $WORKLOADS; do for g in $SIZES; do echo "$OUT/alloc-$wl-$g/results.json"; done; done)
has apl && $PY -m heuristics.allocation.scepsy.report $curves \
  --apl-rates 0.2,0.5,0.8 | grep -- "--sweep" | while IFS=: read -r key sweep; do
  wl=${key%%,*}; g=$(echo "$key" | sed 's/.*, \([0-9]*\) GPUs/\1/')
  $PY evaluate.py --env allocation-v0 --workload $wl --gpus $g --policies scepsy --periods 24 \
    --period-seconds 15 --warmup-seconds 120 --apl-info true $sweep --seeds ${APL_SEEDS:-0,1,2} --quiet \
    --out $OUT/alloc-apl-$wl-$g
done
has report || exit 0
$PY -m heuristics.allocation.scepsy.report $OUT/alloc-{,hpa-}{rag_reranker,beam_search}-{4,8,16}/results.json \
  --markdown --plot docs/allocation_throughput_latency.png
$PY -m heuristics.allocation.scepsy.report $OUT/alloc-apl-*/results.json --apl-policy scepsy
