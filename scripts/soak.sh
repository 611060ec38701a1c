#!/usr/bin/env bash
# Soak: tlpd under steady load for SOAK_SECONDS (default 600). A writer ingests 500 new events/s
# (10,000 nodes, increasing ts) while `tlpctl bench` scores at SOAK_RATE requests/s (default 200,
# 10 pairs each, 8 callers); every 10 s one line: RSS, events stored, score p50/p99, failures.
# Fails on any failed request, on a daemon that dies, or when RSS less RocksDB's memtables grows
# by more than SOAK_RSS_BOUND_MB (default 64) from the end of the first quarter to the end.
# Memtables are excluded because they are data, not leaks: they fill with the stream until a
# flush (by default up to 2 x 64 MiB per column family, 5 families), and RSS follows them.
# Usage: scripts/soak.sh [BUILD_DIR]   (CI runs it with SOAK_SECONDS=60)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
seconds=${SOAK_SECONDS:-600}
rate=${SOAK_RATE:-200}
bound_mb=${SOAK_RSS_BOUND_MB:-64}
tlpd=$build/server/tlpd
tlpctl=$build/client/tlpctl
work=$(mktemp -d)
daemon="" writer=""
trap 'kill $daemon $writer 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source tests/script_support.sh
port=$(free_port)
metrics_port=$(free_port)
address=127.0.0.1:$port
chunk() {  # chunk N: 5,000 events with ts from N*10 s on, over 10,000 nodes (seeded)
  /usr/bin/python3 - "$1" <<'PY'
import random, sys
n = int(sys.argv[1]); r = random.Random(n)
print("src,dst,ts")
for i in range(5000):
    print(f"{r.randrange(10000)},{10000 + r.randrange(1000)},{n * 10 + i * 0.002:.3f}")
PY
}
chunk 0 > "$work/chunk-0.csv"
"$tlpd" train --data "$work/chunk-0.csv" --epochs 1 --out "$work/model.pt" --no-eval \
  --threads 1 > "$work/train.log" 2>&1
"$tlpd" serve --listen "$address" --data-dir "$work/data" \
  --metrics-listen "127.0.0.1:$metrics_port" --checkpoint "$work/model.pt" --threads 1 \
  > "$work/tlpd.log" 2>&1 &
daemon=$!
until "$tlpctl" --address "$address" --timeout 1 health > /dev/null 2>&1; do sleep 0.2; done
"$tlpctl" --address "$address" ingest "$work/chunk-0.csv" > /dev/null

( n=1
  while true; do
    chunk "$n" > "$work/chunk-$n.csv"
    "$tlpctl" --address "$address" ingest "$work/chunk-$n.csv" > /dev/null 2> "$work/ingest.err" ||
      { echo "ingest of chunk $n failed:"; tail -n 2 "$work/ingest.err"; } >> "$work/writer.log"
    rm -f "$work/chunk-$n.csv"
    n=$((n + 1))
    sleep 10
  done ) &
writer=$!

rss_mb() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$daemon/status"; }
memtable_mb() {
  curl -s "http://127.0.0.1:$metrics_port/metrics" |
    awk '/^tlpd_rocksdb_memtable_bytes / {printf "%.1f", $2 / 1048576}'
}
printf "%6s %9s %9s %9s %9s %9s %9s %9s\n" "t(s)" "RSS MiB" "memtables" "rest" "events" \
  "p50 ms" "p99 ms" "failed"
samples=$((seconds / 10))
quarter_rest=""
failures=0
for i in $(seq 1 "$samples"); do
  result=$("$tlpctl" --address "$address" --json bench --duration 10 --rate "$rate" \
    --concurrency 8 --pairs 10 --seed "$i") || true
  kill -0 "$daemon" 2>/dev/null || { echo "soak: tlpd died"; tail -n 20 "$work/tlpd.log"; exit 1; }
  sleep 1.2  # let the metrics gauges (refreshed every second) catch up with RSS
  rss=$(rss_mb)
  memtables=$(memtable_mb)
  rest=$(/usr/bin/python3 -c "print(round($rss - ${memtables:-0}, 1))")
  events=$("$tlpctl" --address "$address" --json info | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["events_applied"])')
  read -r p50 p99 failed < <(/usr/bin/python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(round(r["p50_ms"],2), round(r["p99_ms"],2), r["failures"])' "$result")
  printf "%6d %9s %9s %9s %9s %9s %9s %9s\n" $((i * 10)) "$rss" "$memtables" "$rest" "$events" \
    "$p50" "$p99" "$failed"
  failures=$((failures + failed))
  [ "$i" -eq $(( (samples + 3) / 4 )) ] && quarter_rest=$rest
done
if [ -s "$work/writer.log" ]; then echo "soak: writer errors:"; cat "$work/writer.log"; exit 1; fi
[ "$failures" -eq 0 ] || { echo "soak: $failures failed requests"; exit 1; }
growth=$(/usr/bin/python3 -c "print(round($rest - $quarter_rest, 1))")
echo "soak: RSS less memtables $quarter_rest -> $rest MiB (growth $growth MiB, bound $bound_mb);" \
  "RSS $rss MiB at the end; $seconds s, no failed request"
/usr/bin/python3 -c "import sys; sys.exit(0 if $growth <= $bound_mb else 1)" ||
  { echo "soak: RSS grew beyond the bound"; exit 1; }
