#!/usr/bin/env bash
# Model refresh under load: a daemon serving model A on DATA is told to load model B
# (`tlpctl model load`) while ScoreLinks traffic runs (16 callers, 10 pairs a call). Reports the
# load's time to swap and how long ingest was held (tlpctl model status), and ScoreLinks
# latency before the load and during its background replay.
#
# Usage: bash bench/model_swap.sh [OUT_DIR]   (default bench/results/<date>-model-swap-<host>)
# Env: DATA (default data/wikipedia.csv.gz), BUILD (build), SECONDS_BEFORE (10); GENERATE=N
# streams N generated events instead (tlpctl gen, GENERATE_NODES sources, default N / 10, and
# 10,000 destinations; the models trained on its first 200,000).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/$(date +%F)-model-swap-$(hostname)}
data=${DATA:-data/wikipedia.csv.gz}
build=${BUILD:-build}
tlpd=$build/server/tlpd
tlpctl=$build/client/tlpctl
mkdir -p "$out"
work=$(mktemp -d)
daemon=""
trap 'kill $daemon 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source tests/script_support.sh
address=127.0.0.1:$(free_port)
if [[ -n ${GENERATE:-} ]]; then
  echo "== generating $GENERATE events" >&2
  "$tlpctl" gen --events "$GENERATE" --nodes "${GENERATE_NODES:-$((GENERATE / 10))}" \
    --destinations 10000 --seed 7 --out "$work/stream.csv" > /dev/null
  data=$work/stream.csv
  head -n 200001 "$data" > "$work/train.csv"
  { echo "src,dst,ts"; tail -n 100000 "$data"; } > "$work/pairs.csv"  # the newest: hot nodes
fi
train_data=${GENERATE:+$work/train.csv}
pairs=$data
[[ -n ${GENERATE:-} ]] && pairs=$work/pairs.csv
for seed in 1 2; do
  echo "== training model $seed (1 epoch)" >&2
  "$tlpd" train --data "${train_data:-$data}" --epochs 1 --seed "$seed" --no-eval --out "$work/model-$seed.pt" \
    > "$work/train-$seed.log" 2>&1 || { tail -5 "$work/train-$seed.log"; exit 1; }
done
"$tlpd" serve --listen "$address" --metrics-listen "" --data-dir "$work/data" \
  --checkpoint "$work/model-1.pt" --no-sync > "$work/tlpd.log" 2>&1 &
daemon=$!
for _ in $(seq 600); do "$tlpctl" --address "$address" health > /dev/null 2>&1 && break; sleep 0.2; done
echo "== ingesting $data" >&2
ingest_start=$(date +%s.%N)
"$tlpctl" --address "$address" ingest "$data" > /dev/null 2>&1
"$tlpctl" --address "$address" score 1 2 > /dev/null 2>&1  # returns once memory caught up
echo "ingest and memory: $(python3 -c "print(f'{$(date +%s.%N) - $ingest_start:.1f}')") s" > "$out/ingest.txt"
bench() {  # SECONDS
  "$tlpctl" --address "$address" --json bench --kind score --concurrency 16 --pairs 10 \
    --duration "$1" --pairs-from "$pairs"
}
echo "== ScoreLinks before the load" >&2
bench "${SECONDS_BEFORE:-10}" > "$out/score-before.json"
echo "== ScoreLinks during the load" >&2
"$tlpctl" --address "$address" --json model load "$work/model-2.pt" > "$out/load-started.json"
rm -f "$out/score-during.jsonl"
while [[ $("$tlpctl" --address "$address" --json model status |
           python3 -c 'import json,sys; print(json.load(sys.stdin)["phase"])') != idle ]]; do
  bench 2 >> "$out/score-during.jsonl"  # one line a run
done
"$tlpctl" --address "$address" --json model status > "$out/status.json"
echo "== ScoreLinks after the swap" >&2
bench "${SECONDS_BEFORE:-10}" > "$out/score-after.json"
grep -E "loading model|serves now|memory checkpoint at" "$work/tlpd.log" > "$out/tlpd-load.log" || true
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
status = json.load(open(os.path.join(out, "status.json")))
def row(name, runs):
    if not runs:
        return f"| {name} | (no run) | | | |"
    requests = sum(r["requests"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    p50 = max(r["p50_ms"] for r in runs)
    p99 = max(r["p99_ms"] for r in runs)
    failures = sum(r["failures"] for r in runs)
    return f"| {name} | {requests / seconds:.0f} | {p50:.2f} | {p99:.2f} | {failures} |"
def load_lines(name):
    path = os.path.join(out, name)
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []
load = lambda pattern: [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, pattern)))]
lines = [
    f"swap: {status['last_swap_seconds']:.2f} s from the call (replay of "
    f"{status['replayed_events']} events), ingest held {status['last_hold_seconds'] * 1000:.1f} ms; "
    f"serving {status['fingerprint']} (was {status['previous_fingerprint']}); "
    f"last error: {status['last_error'] or 'none'}",
    "",
    "| ScoreLinks, 16 callers x 10 pairs | requests/s | p50 ms (worst run) | p99 ms (worst run) | failures |",
    "|---|---|---|---|---|",
    row("before the load", load("score-before.json")),
    row("during the replay", load_lines("score-during.jsonl")),
    row("after the swap", load("score-after.json")),
]
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
