#!/usr/bin/env bash
# One-vs-all ranking results: trains each configuration on each bundled data set with several
# seeds (early stopping on validation one-vs-all MRR; then `tlpd train`'s offline test report:
# AP/AUC with random, historical and inductive negatives, new-node AP, the degree probe),
# evaluates each through the replay protocol (`tlpd eval --replay`: TopK over every destination
# seen so far, for the first RANKING_QUERIES test events, beside the built-in baselines on the
# same queries), and writes two JSON per run under OUT_DIR/runs/, then the table
# (bench/ranking_table.py).
#
# Usage: bash bench/ranking.sh [OUT_DIR]   (default bench/results/<date>-ranking-<host>)
# Env: TLPD (default build/server/tlpd), SEEDS (default "0 1 2"), EPOCHS (default 5),
# PATIENCE (2), RANKING_QUERIES (5000; -1 = the whole test period), DATASETS (default both
# bundled), CONFIGS (default below: name=flags, separated by ';'), EVAL_FLAGS (added to every
# replay, e.g. "--topk-shortlist 100 --ranking-k 100" for the pair-wise DyGFormer). About 3
# minutes a TGN run on the 2-core machine; DyGFormer's are ~10x that.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/$(date +%F)-ranking-$(hostname)}
tlpd=${TLPD:-build/server/tlpd}
seeds=${SEEDS:-0 1 2}
epochs=${EPOCHS:-5}
patience=${PATIENCE:-2}
queries=${RANKING_QUERIES:-5000}
datasets=${DATASETS:-data/wikipedia.csv.gz data/collegemsg.txt.gz}
read -ra eval_flags <<< "${EVAL_FLAGS:-}"
# The default: TGN (the bundled model) and TGAT, both with the default pair evidence and walks,
# at softmax, MAA p = 1.1 (the default) and p = 2.
configs=${CONFIGS:-"tgn-walk-softmax=--p 1;tgn-walk-maa1.1=--p 1.1;tgn-walk-maa2=--p 2;tgat-walk-softmax=--architecture tgat --p 1;tgat-walk-maa1.1=--architecture tgat --p 1.1;tgat-walk-maa2=--architecture tgat --p 2"}
mkdir -p "$out/runs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
IFS=';' read -ra config_list <<< "$configs"
# Seeds outermost: a partial sweep already has every cell once.
for seed in $seeds; do
  for data in $datasets; do
    name=$(basename "$data" | cut -d. -f1)
    for config in "${config_list[@]}"; do
      label=${config%%=*}
      read -ra flags <<< "${config#*=}"
      run="$out/runs/$name-$label-seed$seed"
      [[ -f $run.eval.json ]] && continue  # resumable across sessions
      echo "== $name $label seed $seed" >&2
      "$tlpd" train --data "$data" --seed "$seed" --epochs "$epochs" --patience "$patience" \
        --mrr-queries 0 --test-ranking-queries 0 "${flags[@]}" --out "$work/model.pt" \
        --json-out "$run.train.json" \
        > "$work/train.log" 2>&1 || { tail -5 "$work/train.log" >&2; exit 1; }
      "$tlpd" eval --replay --data "$data" --checkpoint "$work/model.pt" --seed "$seed" \
        --mrr-queries 0 --ranking-queries "$queries" "${eval_flags[@]}" \
        --json-out "$run.eval.json.partial" \
        > "$work/eval.log" 2>&1 || { tail -5 "$work/eval.log" >&2; exit 1; }
      mv "$run.eval.json.partial" "$run.eval.json"
    done
  done
done
python3 bench/ranking_table.py "$out"
