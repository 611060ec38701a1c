#!/usr/bin/env bash
# docs/model.md's AP table: plain TGN and TGAT (no pair evidence) on Wikipedia and CollegeMsg, p over
# {1, 1.05, 1.1, 1.2, 1.3, 2}, seeds 0-2, each run `tlpd train` (EPOCHS epochs, then the test
# evaluation). Runs JOBS trainings at a time with one torch thread each; skips runs whose JSON
# exists, so it can be resumed. Then prints the table (scripts/results_table.py).
#   usage: scripts/sweep.sh [OUT_DIR]      env: EPOCHS (1), JOBS (2), DATASETS, ARCHITECTURES
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/sweep}
epochs=${EPOCHS:-1}
jobs=${JOBS:-2}
datasets=${DATASETS:-"collegemsg wikipedia"}
architectures=${ARCHITECTURES:-"tgn tgat"}
mkdir -p "$out"
declare -A files=([wikipedia]=data/wikipedia.csv.gz [collegemsg]=data/collegemsg.txt.gz)
for dataset in $datasets; do
  for architecture in $architectures; do
    # The table's columns first (softmax, p = 2, the default 1.1), then the rest of the sweep.
    for p in 1 2 1.1 1.05 1.2 1.3; do
      for seed in 0 1 2; do
        name="$dataset-$architecture-p$p-s$seed"
        [ -f "$out/$name.json" ] && continue
        echo "build/server/tlpd train --data ${files[$dataset]} --architecture $architecture --p $p" \
             "--seed $seed --epochs $epochs --threads 1 --mrr-queries 200 --pair-neighbors 0" \
             "--selection-queries 0 --learning-rate 1e-4 --out $out/$name.pt --json-out $out/$name.json > $out/$name.log 2>&1"
      done
    done
  done
done | xargs -P "$jobs" -I{} sh -c '{}'
/usr/bin/python3 scripts/results_table.py "$out"
