#!/usr/bin/env bash
# `tlpd train --from-store`: trains on a serving daemon's own event log (a RocksDB secondary
# instance) while the daemon keeps serving; the window flags pick the events; the result is a
# checkpoint a daemon serves, and the daemon never stopped accepting events.
set -euo pipefail
tlpd=${1:?usage: train_from_store_test.sh TLPD TLPCTL}
tlpctl=${2:?}
work=$(mktemp -d)
daemon=""
trap 'kill $daemon 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source "$(dirname "$0")/script_support.sh"
address=127.0.0.1:$(free_port)
small=(--memory-dim 16 --embedding-dim 16 --time-dim 16 --pair-neighbors 8 --pair-hop-neighbors 4
       --threads 1)
fail() { echo "FAILED: $*" >&2; exit 1; }

# 30 sources that each come back to a few of 12 destinations: something to learn.
stream() {  # FIRST LAST
  echo "src,dst,ts"
  for i in $(seq "$1" "$2"); do echo "$((i % 30)),$((100 + (i % 30 + i / 90) % 12)),$i"; done
}
stream 0 1999 > "$work/first.csv"
stream 2000 2599 > "$work/second.csv"  # 2,600 in all: whole 200-event memory chunks
"$tlpd" train --data "$work/first.csv" --epochs 1 "${small[@]}" --out "$work/model.pt" --no-eval \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training on the file"; }
"$tlpd" serve --listen "$address" --data-dir "$work/data" --checkpoint "$work/model.pt" \
  --no-sync --threads 1 > "$work/tlpd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do "$tlpctl" --address "$address" health > /dev/null 2>&1 && break; sleep 0.1; done
"$tlpctl" --address "$address" ingest "$work/first.csv" > /dev/null

# The whole log, while the daemon holds the store open; ingest goes on meanwhile.
"$tlpd" train --from-store "$work/data" --epochs 2 "${small[@]}" --mrr-queries 0 \
  --test-ranking-queries 100 --no-probe --out "$work/refreshed.pt" --json-out "$work/refreshed.json" \
  > "$work/refresh.log" 2>&1 &
trainer=$!
"$tlpctl" --address "$address" ingest "$work/second.csv" > /dev/null
wait $trainer || { cat "$work/refresh.log"; fail "training from the store"; }
grep -Eq "(2[0-6]00) events of \1 stored" "$work/refresh.log" \
  || { cat "$work/refresh.log"; fail "the log does not say how many events were read"; }
python3 - "$work/refreshed.json" "$work/data" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["data"] == "store " + sys.argv[2], report["data"]
assert len(report["epochs"]) >= 1 and report["test"]["one_vs_all"]["queries"] > 0, report
print("trained from the store:", report["test"]["one_vs_all"])
PY
"$tlpctl" --address "$address" health > /dev/null || fail "the daemon stopped serving"
"$tlpctl" --address "$address" --json info | python3 -c '
import json, sys
info = json.load(sys.stdin)
assert int(info["events_applied"]) == 2600, info' || fail "the daemon lost events"

# tlpd eval reads the store the same way (offline protocol, with the baselines on its queries).
"$tlpd" eval --from-store "$work/data" --checkpoint "$work/refreshed.pt" --mrr-queries 0 \
  --test-ranking-queries 50 --json-out "$work/eval.json" > "$work/eval.log" 2>&1 \
  || { cat "$work/eval.log"; fail "tlpd eval --from-store"; }
python3 -c '
import json, sys
report = json.load(open(sys.argv[1]))
assert report["one_vs_all"]["queries"] > 0 and "recency_popularity" in report["one_vs_all_baselines"]
' "$work/eval.json" || fail "tlpd eval --from-store report"

# Windows: the newest 600 events by arrival; from ts 2200 on; nothing left is an error.
"$tlpd" train --from-store "$work/data" --last-events 600 --epochs 1 "${small[@]}" --no-eval \
  --out "$work/window.pt" > "$work/window.log" 2>&1 || { cat "$work/window.log"; fail "--last-events"; }
grep -q "600 events of 2600 stored" "$work/window.log" || { cat "$work/window.log"; fail "--last-events read"; }
"$tlpd" train --from-store "$work/data" --since 2200 --epochs 1 "${small[@]}" --no-eval \
  --out "$work/window.pt" > "$work/window.log" 2>&1 || { cat "$work/window.log"; fail "--since"; }
grep -q "400 events of 2600 stored" "$work/window.log" || { cat "$work/window.log"; fail "--since read"; }
if "$tlpd" train --from-store "$work/data" --since 1e9 --epochs 1 "${small[@]}" --no-eval \
    --out "$work/window.pt" > "$work/window.log" 2>&1; then
  fail "an empty window trained"
fi
grep -q "no events to train on" "$work/window.log" || { cat "$work/window.log"; fail "empty window message"; }
if "$tlpd" train --from-store "$work" --epochs 1 --no-eval --out "$work/x.pt" > "$work/x.log" 2>&1; then
  fail "a directory without a store trained"
fi
grep -q "no store at" "$work/x.log" || { cat "$work/x.log"; fail "missing-store message"; }

# The refreshed checkpoint served on the same store: its node memory rebuilt from the log.
kill -TERM $daemon; wait $daemon || true; daemon=""
"$tlpd" serve --listen "$address" --data-dir "$work/data" --checkpoint "$work/refreshed.pt" \
  --no-sync --threads 1 > "$work/tlpd2.log" 2>&1 &
daemon=$!
for _ in $(seq 200); do "$tlpctl" --address "$address" health > /dev/null 2>&1 && break; sleep 0.1; done
"$tlpctl" --address "$address" --json topk 3 -k 5 > "$work/topk.json" \
  || { cat "$work/tlpd2.log"; fail "TopK with the refreshed model"; }
echo "train from store test passed"
