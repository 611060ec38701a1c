#!/usr/bin/env bash
# The main job, end to end on a fresh Debian 12 machine: set up, build, train TGN with
# Mass-Aware Attention on the bundled Wikipedia stream (or reuse the checkpoint), start the
# daemon, stream every event into it over gRPC, score links and rank candidates with their
# representation metrics, then stop the daemon cleanly with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TLP_TARGETS="tlpd tlpctl" bash scripts/build.sh

runs=runs/demo
mkdir -p "$runs"
tlpd=build/server/tlpd
tlpctl=build/client/tlpctl
checkpoint="$runs/wikipedia-tgn-maa.pt"

if [ ! -f "$checkpoint" ]; then
  echo "== training TGN + MAA (p = 1.1) on data/wikipedia.csv.gz, 1 epoch"
  "$tlpd" train --data data/wikipedia.csv.gz --epochs 1 --p 1.1 --seed 0 \
    --out "$checkpoint" --json-out "$runs/train.json"
fi

data_dir="$runs/tlpd-data"
rm -rf "$data_dir"
address=127.0.0.1:50051
metrics=127.0.0.1:9464
echo "== starting tlpd serve on $address (metrics on $metrics)"
"$tlpd" serve --checkpoint "$checkpoint" --data-dir "$data_dir" --listen "$address" \
  --metrics-listen "$metrics" --no-sync > "$runs/tlpd.log" 2>&1 &
daemon=$!
trap 'kill -9 $daemon 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  if "$tlpctl" --address "$address" --timeout 1 health >/dev/null 2>&1; then break; fi
  sleep 0.2
done

echo "== streaming data/wikipedia.csv.gz into the daemon"
"$tlpctl" --address "$address" ingest data/wikipedia.csv.gz
"$tlpctl" --address "$address" info

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
curl -s "http://$metrics/metrics" 2>/dev/null | grep -E '^tlpd_(events_stored|nodes_stored|ingest_events_total)' || true

echo "== stopping tlpd (SIGTERM)"
kill -TERM "$daemon"
wait "$daemon"
trap - EXIT
tail -n 3 "$runs/tlpd.log"
