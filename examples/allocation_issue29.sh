#!/usr/bin/env bash
# Regenerates the README's "Allocation-v0 at HEAD (issue 29)" numbers: the choice of the env's
# default rates (training seed 0), Scepsy against the paper's baselines at those rates on a
# held-out seed (the env's quick episode and a steady-state one), a reduced throughput sweep at
# 4 and 8 GPUs (peak sustainable throughput, Fig. 6) and the APL's latency error on it.
#
#   bash examples/allocation_issue29.sh          # from the repository root, in the venv
#
# STAGES (default "select default steady curves report") runs parts of it; WORKLOADS and SIZES
# likewise. The first run profiles both workloads (~15 min of one core; cached).
# Steady state: 24 periods of 15 s, the first 120 s not measured (K8s HPA: 40 periods, 300 s,
# to let it scale up from one pod per LLM), as examples/allocation_curves.sh.
set -euo pipefail
PY=${PYTHON:-python}
OUT=${OUT:-results}
WORKLOADS=${WORKLOADS:-"rag_reranker beam_search"}
SIZES=${SIZES:-"4 8"}
STAGES=${STAGES:-"select default steady curves report"}
HELDOUT=${HELDOUT:-1000000}
has() { [[ " $STAGES " == *" $1 "* ]]; }
POLICIES=k8s-hpa,naive-equal,demand-proportional,scepsy
GRID_rag_reranker=0.5,1,2
GRID_beam_search=0.05,0.1,0.2,0.4
RATES_rag_reranker_4=0.5,1,2,3
RATES_rag_reranker_8=1,2,4,6
RATES_beam_search_4=0.05,0.1,0.2,0.4
RATES_beam_search_8=0.1,0.2,0.4,0.8
for wl in $WORKLOADS; do
  grid=GRID_$wl
  # the env's default rate: the highest grid rate every policy serves >= 25 % of within SLO
  has select && $PY evaluate.py --env allocation --workload $wl --gpus 4 --policies $POLICIES \
    --seeds 0 --sweep workflow_rate=${!grid} --quiet --out $OUT/alloc29-select-$wl
  for g in $SIZES; do
    # the env's quick episode (one 120-s period) at the default rate, held-out seed
    has default && $PY evaluate.py --env allocation --workload $wl --gpus $g --seeds $HELDOUT \
      --policies $POLICIES,scepsy-full-capacity --apl-info true --quiet \
      --out $OUT/alloc29-default-$wl-$g
    # steady state at the default rate
    has steady && $PY evaluate.py --env allocation --workload $wl --gpus $g --seeds $HELDOUT \
      --policies naive-equal,demand-proportional,scepsy,scepsy-full-capacity --periods 24 \
      --period-seconds 15 --warmup-seconds 120 --apl-info true --quiet \
      --out $OUT/alloc29-steady-$wl-$g
    has steady && $PY evaluate.py --env allocation --workload $wl --gpus $g --seeds $HELDOUT \
      --policies k8s-hpa --periods 40 --period-seconds 15 --warmup-seconds 300 --quiet \
      --out $OUT/alloc29-steady-hpa-$wl-$g
    rates=RATES_${wl}_${g}
    has curves && $PY evaluate.py --env allocation --workload $wl --gpus $g --seeds $HELDOUT \
      --policies naive-equal,scepsy --periods 24 --period-seconds 15 --warmup-seconds 120 \
      --apl-info true --sweep workflow_rate=${!rates} --quiet --out $OUT/alloc29-curve-$wl-$g
    has curves && $PY evaluate.py --env allocation --workload $wl --gpus $g --seeds $HELDOUT \
      --policies k8s-hpa --periods 40 --period-seconds 15 --warmup-seconds 300 \
      --sweep workflow_rate=${!rates} --quiet --out $OUT/alloc29-curve-hpa-$wl-$g
  done
done
has report || exit 0
curves=$(for wl in $WORKLOADS; do for g in $SIZES; do
  echo "$OUT/alloc29-curve-$wl-$g/results.json $OUT/alloc29-curve-hpa-$wl-$g/results.json"
done; done)
# shellcheck disable=SC2086
$PY -m heuristics.allocation.scepsy.report $curves --markdown --apl-policy scepsy
