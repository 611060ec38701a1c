#!/usr/bin/env bash
# Every tlpd benchmark on this machine, as one table beside the machine's limits.
#
# Runs model_bench and storage_bench (Google Benchmark), then a real daemon on loopback with the
# bundled Wikipedia stream (157,474 events): durable ingest over gRPC with 1 and 4 client
# streams, ScoreLinks at concurrency 1/16/64, TopK over all 1,000 pages, RSS and RocksDB bytes
# per event, cold start (open + replay of the whole log without a memory checkpoint), and
# events/s from Kafka to durable state (kafka_bench, 1 and 4 partitions), training events/s.
# Beside ScoreLinks, TopK and training it records the process's minor page faults per scored
# pair, per TopK and per training event (from /proc/PID/stat and getrusage), and the machine:
# CPU model, THP mode, OPENBLAS_CORETYPE.
# Writes OUT_DIR/results.json and OUT_DIR/table.md (bench/report.py) and prints the table.
#
# Usage: bash bench/run.sh [OUT_DIR]   (default bench/results/<date>-<host>)
# Then each other architecture (TLP_BENCH_ARCHITECTURES, default "tgat graphmixer dygformer";
# empty: none): one epoch trained (events/s), served on a fresh store of the stream, ScoreLinks at
# concurrency 16 and TopK over all pages (DyGFormer also with --topk-shortlist 100).
# Env: TLP_BUILD_DIR (default build), TLP_BENCH_MODEL (a tlpd train checkpoint to reuse;
# default: the one epoch trained first, ~40 s), TLP_BENCH_SECONDS (per load
# run, default 10). About 6 minutes on the 2-core machine, and ~7 more for the architectures.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${TLP_BUILD_DIR:-build}
out=${1:-bench/results/$(date +%F)-$(hostname)}
seconds=${TLP_BENCH_SECONDS:-10}
architectures=${TLP_BENCH_ARCHITECTURES-tgat graphmixer dygformer}
data=$root/data/wikipedia.csv.gz
tlpd=$build/server/tlpd
tlpctl=$build/client/tlpctl
for binary in "$tlpd" "$tlpctl" "$build/bench/model_bench" "$build/bench/storage_bench" \
  "$build/bench/kafka_bench"; do
  [[ -x $binary ]] || { echo "bench/run.sh: $binary missing: run scripts/build.sh" >&2; exit 1; }
done
mkdir -p "$out"
work=$(mktemp -d)
daemon=""
trap 'kill $daemon 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source tests/script_support.sh
export TLP_SOURCE_DIR=$root

echo "== machine" >&2
{
  echo "{\"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)\","
  echo " \"cpu_model\": $(awk -F: '/^model[[:space:]]*:/ {print $2 + 0; exit}' /proc/cpuinfo),"
  echo " \"thp\": \"$(grep -o '\[[a-z]*\]' /sys/kernel/mm/transparent_hugepage/enabled | tr -d '[]')\","
  echo " \"openblas_coretype\": \"${OPENBLAS_CORETYPE:-}\","
  echo " \"cores\": $(nproc), \"memory_gib\": $(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo),"
  echo " \"commit\": \"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\", \"date\": \"$(date -u +%FT%TZ)\"}"
} > "$out/machine.json"

echo "== model_bench" >&2
"$build/bench/model_bench" --benchmark_format=json --benchmark_out="$out/model_bench.json" \
  --benchmark_out_format=json > /dev/null
echo "== storage_bench" >&2
"$build/bench/storage_bench" --benchmark_filter='Append/batch:10000/sync:1|RawWriteBatch|Recent' \
  --benchmark_out="$out/storage_bench.json" --benchmark_out_format=json > /dev/null

# Training: one epoch of the bundled model; its events/s and the process's minor faults.
echo "== training the bundled model (1 epoch)" >&2
/usr/bin/time -f '{"minor_faults": %R, "max_rss_kib": %M, "wall_seconds": %e}' -o "$out/train-rusage.json" \
  "$tlpd" train --data "$data" --epochs 1 --no-eval --out "$work/model.pt" \
  --json-out "$out/train.json" > "$work/train.log" 2>&1
model=${TLP_BENCH_MODEL:-$work/model.pt}

port=$(free_port)
address=127.0.0.1:$port
metrics_port=$(free_port)
memtable_bytes() {  # RocksDB memtables, from tlpd's /metrics: data, not a leak (flushed at 64 MiB)
  python3 -c 'import sys, urllib.request
for line in urllib.request.urlopen(sys.argv[1]).read().decode().splitlines():
    if line.startswith("tlpd_rocksdb_memtable_bytes "): print(int(float(line.split()[1])))' \
    "http://127.0.0.1:$metrics_port/metrics"
}
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
minor_faults() { awk '{print $10}' "/proc/$1/stat"; }  # the process's minflt so far
# start DATA_DIR [FLAGS...]: a daemon on $address; the streams of the 4-stream run drift apart in event
# time by up to 4 batches (days of Wikipedia), so lateness and the future bound are opened wide
# for every run alike.
start() {  # DATA_DIR [extra tlpd serve flags]; serves $model
  local data=$1
  shift
  "$tlpd" serve --listen "$address" --data-dir "$data" --checkpoint "$model" \
    --metrics-listen "127.0.0.1:$metrics_port" --lateness-seconds 1e9 --max-future-seconds 0 "$@" > "$data.log" 2>&1 &
  daemon=$!
  for _ in $(seq 300); do
    "$tlpctl" --address "$address" health > /dev/null 2>&1 && return 0
    kill -0 "$daemon" 2>/dev/null || { cat "$data.log" >&2; exit 1; }
    sleep 0.05
  done
  echo "bench/run.sh: tlpd did not serve" >&2; exit 1
}
stop() { kill -TERM "$daemon"; wait "$daemon" || true; daemon=""; }

# Three runs per setting (a fresh store each): one run is ~1 s, and single runs vary by up to a
# third on this machine. The daemon of the last 1-stream run stays up for the load runs.
for streams in 4 1; do
  for run in 1 2 3; do
    echo "== ingest, $streams stream(s), run $run" >&2
    rm -rf "$work/data"
    start "$work/data"
    rss_empty=$(rss_kib "$daemon")
    "$tlpctl" --address "$address" --json ingest --batch-size 5000 --streams "$streams" "$data" \
      > "$out/ingest-$streams-$run.json" 2> /dev/null
    # GetModelInfo waits until node memory caught up with the log: durable + applied.
    info_begin=$(date +%s.%N)
    "$tlpctl" --address "$address" --json info > /dev/null
    info_end=$(date +%s.%N)
    sleep 1.1  # tlpd refreshes its gauges every second; a 157k-event ingest can take less
    echo "{\"info_begin\": $info_begin, \"info_end\": $info_end," \
         "\"rss_empty_kib\": $rss_empty, \"rss_after_kib\": $(rss_kib "$daemon")," \
         "\"memtable_bytes\": $(memtable_bytes)}" \
      > "$out/ingest-$streams-$run-extra.json"
    [[ $streams == 1 && $run == 3 ]] || stop
  done
done

# faults_during NAME: the daemon's minor faults over the load run that wrote $out/NAME.json.
faults_before=0
for concurrency in 1 16 64; do
  echo "== ScoreLinks, concurrency $concurrency" >&2
  faults_before=$(minor_faults "$daemon")
  "$tlpctl" --address "$address" --json bench --kind score --concurrency "$concurrency" \
    --pairs 10 --duration "$seconds" --pairs-from "$data" > "$out/score-$concurrency.json"
  echo "{\"minor_faults\": $(( $(minor_faults "$daemon") - faults_before ))}" \
    > "$out/score-$concurrency-faults.json"
done
echo "== TopK over all pages" >&2
faults_before=$(minor_faults "$daemon")
"$tlpctl" --address "$address" --json bench --kind topk --concurrency 1 -k 10 \
  --duration "$seconds" --pairs-from "$data" > "$out/topk-1.json"
echo "{\"minor_faults\": $(( $(minor_faults "$daemon") - faults_before )), \"rss_idle_kib\": $(rss_kib "$daemon")}" \
  > "$out/topk-1-faults.json"
stop
echo "{\"bytes\": $(du -sb "$work/data" | cut -f1)}" > "$out/disk.json"

echo "== Kafka source (librdkafka mock broker in the benchmark process)" >&2
"$build/bench/kafka_bench" --model "$model" --data "$data" --partitions 1,4 \
  > "$out/kafka_bench.json" 2> "$work/kafka_bench.log" || { cat "$work/kafka_bench.log" >&2; exit 1; }

echo "== cold start" >&2
begin=$(date +%s.%N)
start "$work/data" --rebuild-memory
echo "{\"begin\": $begin, \"serving\": $(date +%s.%N)," \
     "\"log\": $(grep -m1 'replayed' "$work/data.log" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')}" \
  > "$out/cold-start.json"
stop

# The other architectures, with the settings of bench/ranking.sh's sweeps (bench/ranking.sh).
for architecture in $architectures; do
  case $architecture in
    tgat) flags=(--architecture tgat) ;;
    graphmixer) flags=(--architecture graphmixer --neighbors 30 --layers 2) ;;
    dygformer) flags=(--architecture dygformer --neighbors 31 --patch-size 2 --layers 2
                      --pair-neighbors 0) ;;
    *) echo "bench/run.sh: unknown architecture '$architecture'" >&2; exit 1 ;;
  esac
  echo "== $architecture: 1 epoch, ScoreLinks c16, TopK" >&2
  "$tlpd" train --data "$data" --epochs 1 --no-eval --selection-queries 0 "${flags[@]}" \
    --out "$work/$architecture.pt" --json-out "$out/train-arch-$architecture.json" \
    > "$work/train.log" 2>&1 || { tail -5 "$work/train.log" >&2; exit 1; }
  model=$work/$architecture.pt
  rm -rf "$work/data"
  for shortlist in 0 100; do
    [[ $shortlist == 100 && $architecture != dygformer ]] && continue
    start "$work/data" --topk-shortlist "$shortlist"
    if [[ $shortlist == 0 ]]; then
      "$tlpctl" --address "$address" ingest --batch-size 5000 "$data" > /dev/null 2>&1
      "$tlpctl" --address "$address" --json info > /dev/null
      "$tlpctl" --address "$address" --json bench --kind score --concurrency 16 --pairs 10 \
        --duration "$seconds" --pairs-from "$data" > "$out/score-16-$architecture.json"
    fi
    "$tlpctl" --address "$address" --json bench --kind topk --concurrency 1 -k 10 \
      --duration "$seconds" --pairs-from "$data" > "$out/topk-1-$architecture-$shortlist.json"
    stop
  done
done

python3 bench/report.py "$out"
