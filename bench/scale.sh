#!/usr/bin/env bash
# Scale run (#11): a generated bipartite temporal graph (tlpctl gen: power-law activity,
# preferential attachment, bursty times) streamed into a fresh tlpd, sampled every 5 s (events
# stored, events applied, RSS), then ScoreLinks and TopK latency with hot nodes (endpoints of the
# newest events, in the neighbour cache) and cold ones (endpoints drawn from the whole stream),
# disk bytes per event, and cold start (exec to SERVING after a clean stop). Beside the stream,
# bench/cpu_account.py writes CPU per event by thread kind every 60 s (cpu_account.csv), and
# bench/rocksdb_compaction.py sums RocksDB's compactions per column family (compaction.csv).
#
# Usage: bash bench/scale.sh OUT_DIR EVENTS SOURCE_NODES [DESTINATIONS] [-- extra tlpd serve flags]
#   e.g. bash bench/scale.sh bench/results/scale-10m 10000000 10000000 10000
# Writes OUT_DIR/samples.csv, OUT_DIR/cpu_account.csv, OUT_DIR/summary.json and the raw tlpctl
# outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1 events=$2 nodes=$3 destinations=${4:-10000}
shift 3; [[ $# -gt 0 ]] && shift
[[ ${1:-} == -- ]] && shift
extra=("$@")
build=${TLP_BUILD_DIR:-build}
tlpd=$build/server/tlpd
tlpctl=$build/client/tlpctl
seconds=${TLP_BENCH_SECONDS:-10}
mkdir -p "$out"
work=${TLP_SCALE_WORK:-$(mktemp -d)}
daemon="" sampler="" accountant=""
trap 'kill $sampler $accountant $daemon 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source tests/script_support.sh

echo "== generating $events events ($nodes sources, $destinations destinations)" >&2
stream=$work/stream.csv
"$tlpctl" gen --events "$events" --nodes "$nodes" --destinations "$destinations" --seed 7 \
  --out "$stream" > /dev/null
# A featureless model of the default shape, trained on the head of the same stream.
head -n 200001 "$stream" > "$work/train.csv"
"$tlpd" train --data "$work/train.csv" --epochs 1 --no-eval --out "$work/model.pt" \
  > "$work/train.log" 2>&1
tail -n 100000 "$stream" | { echo "src,dst,ts"; cat; } > "$work/hot.csv"
{ echo "src,dst,ts"; tail -n +2 "$stream" | shuf -n 100000 --random-source=<(yes); } > "$work/cold.csv"

port=$(free_port) metrics_port=$(free_port)
address=127.0.0.1:$port
metric() {
  python3 -c 'import sys, urllib.request
for line in urllib.request.urlopen(sys.argv[1]).read().decode().splitlines():
    if line.startswith(sys.argv[2] + " "): print(int(float(line.split()[1])))' \
    "http://127.0.0.1:$metrics_port/metrics" "$1" 2> /dev/null
}
# start [SECONDS]: runs tlpd and waits for it to serve, up to SECONDS (default 60; a cold start
# of a 100M store rebuilds the neighbour index: 84-85 s on the model-106 2-core machine).
start() {
  local limit=${1:-60}
  "$tlpd" serve --listen "$address" --metrics-listen "127.0.0.1:$metrics_port" \
    --data-dir "$work/data" --checkpoint "$work/model.pt" --lateness-seconds 1e9 --max-future-seconds 0 \
    "${extra[@]}" >> "$work/tlpd.log" 2>&1 &
  daemon=$!
  for _ in $(seq $((limit * 20))); do
    "$tlpctl" --address "$address" health > /dev/null 2>&1 && return 0
    kill -0 "$daemon" 2>/dev/null || { tail -20 "$work/tlpd.log" >&2; exit 1; }
    sleep 0.05
  done
  echo "bench/scale.sh: tlpd did not serve" >&2; exit 1
}
stop() { kill -TERM "$daemon"; wait "$daemon" || true; daemon=""; }

start
begin=$(date +%s.%N)
( echo "seconds,events_stored,events_applied,rss_kib"
  while kill -0 "$daemon" 2>/dev/null; do
    echo "$(python3 -c "import time; print(f'{time.time() - $begin:.1f}')"),$(metric tlpd_events_stored || echo),$(metric tlpd_events_applied || echo),$(awk '/VmRSS/ {print $2}' "/proc/$daemon/status" 2>/dev/null)"
    sleep 5
  done ) > "$out/samples.csv" &
sampler=$!
python3 bench/cpu_account.py "$daemon" "$metrics_port" "$out/cpu_account.csv" 60 &
accountant=$!
echo "== ingest" >&2
"$tlpctl" --address "$address" --json ingest --batch-size 5000 --streams 2 "$stream" \
  > "$out/ingest.json"
"$tlpctl" --address "$address" --json info > "$out/info.json"  # waits for node memory
applied_seconds=$(python3 -c "import time; print(time.time() - $begin)")
for kind in hot cold; do
  echo "== ScoreLinks c16 and TopK, $kind nodes" >&2
  "$tlpctl" --address "$address" --json bench --kind score --concurrency 16 --pairs 10 \
    --duration "$seconds" --pairs-from "$work/$kind.csv" > "$out/score-$kind.json"
  "$tlpctl" --address "$address" --json bench --kind topk --concurrency 1 -k 10 \
    --duration "$seconds" --pairs-from "$work/$kind.csv" > "$out/topk-$kind.json"
done
rss_end=$(awk '/VmRSS/ {print $2}' "/proc/$daemon/status")
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$daemon/status")
stop
kill $sampler $accountant 2>/dev/null || true
disk=$(du -sb "$work/data" | cut -f1)
python3 bench/rocksdb_compaction.py "$work/data/LOG" > "$out/compaction.csv" || true
echo "== cold start" >&2
cold_begin=$(date +%s.%N)
start 600
cold_seconds=$(python3 -c "import time; print(time.time() - $cold_begin)")
rss_restarted=$(awk '/VmRSS/ {print $2}' "/proc/$daemon/status")
stop
cat > "$out/summary.json" <<EOF
{"events": $events, "sources": $nodes, "destinations": $destinations,
 "applied_seconds": $applied_seconds, "rss_end_kib": $rss_end, "rss_peak_kib": $hwm,
 "rss_after_restart_kib": $rss_restarted, "disk_bytes": $disk, "cold_start_seconds": $cold_seconds,
 "machine": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores",
 "commit": "$(git rev-parse --short HEAD)", "flags": "${extra[*]}"}
EOF
grep -E "memory checkpoint|replayed" "$work/tlpd.log" | tail -5 > "$out/tlpd-log-tail.txt" || true
cat "$out/summary.json"
