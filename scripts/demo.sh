#!/usr/bin/env bash
# The main job, end to end on a fresh Debian 12 machine: set up, build, start the daemon on the
# bundled Wikipedia stream (on first start it trains TGN + Mass-Aware Attention, p = 1.1, with
# pair evidence, up to 6 epochs kept by validation MRR, and reuses that model afterwards), replay
# the stream through it over gRPC with progress: history first, then the test period scored
# before each batch is ingested, the first 5,000 test events also ranked one-vs-all by TopK
# beside the built-in baselines; print the results table, a few scores with their representation
# metrics and the Prometheus series, write a plot, then stop the daemon cleanly with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
TLP_TARGETS="tlpd tlpctl" bash scripts/build.sh

runs=runs/demo
mkdir -p "$runs"
tlpd=build/server/tlpd
tlpctl=build/client/tlpctl
checkpoint="$runs/wikipedia-tgn-pair-maa.pt"
data_dir="$runs/tlpd-data"
rm -rf "$data_dir"  # the evaluation needs a daemon that has not seen the stream yet
address=127.0.0.1:50051
metrics=127.0.0.1:9464
echo "== starting tlpd serve on $address (metrics on $metrics); log in $runs/tlpd.log"
[ -f "$checkpoint" ] || echo "   no model yet: tlpd trains one on data/wikipedia.csv.gz first (1-2 min)"
"$tlpd" serve --checkpoint "$checkpoint" --bootstrap-data data/wikipedia.csv.gz \
  --data-dir "$data_dir" --listen "$address" --metrics-listen "$metrics" --no-sync \
  > "$runs/tlpd.log" 2>&1 &
daemon=$!
trap 'kill -9 $daemon 2>/dev/null || true' EXIT
until "$tlpctl" --address "$address" --timeout 1 health >/dev/null 2>&1; do
  kill -0 "$daemon" 2>/dev/null || { echo "tlpd exited:"; tail -n 20 "$runs/tlpd.log"; exit 1; }
  sleep 1
done
grep -E "epoch [0-9]+  loss|checkpoint " "$runs/tlpd.log" | tail -n 4 || true
"$tlpctl" --address "$address" info

echo "== replaying data/wikipedia.csv.gz through the daemon: history, then the test period"
"$tlpctl" --address "$address" --timeout 120 eval data/wikipedia.csv.gz \
  --ranking-queries 5000 --json-out "$runs/eval.json" --plot "$runs/eval.svg"

echo "== scores with representation metrics (user -> page)"
for pair in "0 8227" "1 8228" "8000 9000" "123456 8227"; do
  # shellcheck disable=SC2086
  "$tlpctl" --address "$address" score $pair
done
echo "== top 5 pages for user 0"
"$tlpctl" --address "$address" topk 0 -k 5
echo "== node 8227"
"$tlpctl" --address "$address" node 8227 --recent 3

echo "== a few Prometheus series"
curl -s "http://$metrics/metrics" 2>/dev/null |
  grep -E '^tlpd_(events_stored|nodes_stored|ingest_events_total|checkpoint_age_seconds|build_info)' || true

echo "== stopping tlpd (SIGTERM)"
kill -TERM "$daemon"
wait "$daemon"
trap - EXIT
tail -n 3 "$runs/tlpd.log"
echo "== demo took $(( $(date +%s) - start )) s; figures in $runs/eval.json, plot in $runs/eval.svg"
