#!/usr/bin/env bash
# The second outcome end to end: `tlpd train --node-state` on a JODIE file (its label column),
# both outcome-attention modes in the run JSON; the labels travel through `tlpctl ingest` into
# the store (a model trains on them from the store); a daemon serving the model scores node
# states (`tlpctl node-state`, GetModelInfo, Prometheus), and one serving a link-only model
# refuses them with a message that says why.
set -euo pipefail
tlpd=${1:?usage: node_state_test.sh TLPD TLPCTL}
tlpctl=${2:?}
work=$(mktemp -d)
daemon=""
trap 'kill $daemon 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source "$(dirname "$0")/script_support.sh"
address=127.0.0.1:$(free_port)
metrics_address=127.0.0.1:$(free_port)
small=(--memory-dim 16 --embedding-dim 16 --time-dim 16 --pair-neighbors 8 --pair-hop-neighbors 4
       --threads 1 --epochs 1 --selection-queries 50 --mrr-queries 0 --test-ranking-queries 0
       --no-probe)
fail() { echo "FAILED: $*" >&2; exit 1; }

# 40 sources over 15 pages; sources 0-3 are the busiest and every 5th of their events is
# labelled 1 (the JODIE format: u,i,ts,label).
{
  echo "u,i,ts,label"
  for i in $(seq 0 2399); do
    if (( i % 3 == 0 )); then src=$(( (i / 3) % 4 )); else src=$((4 + i % 36)); fi
    echo "$src,$((100 + (i * 7) % 15)),$i,$(( src < 4 && i % 5 == 0 ? 1 : 0 ))"
  done
} > "$work/events.csv"

for mode in shared indexed; do
  "$tlpd" train --data "$work/events.csv" "${small[@]}" --node-state --outcome-attention "$mode" \
    --out "$work/$mode.pt" --json-out "$work/$mode.json" > "$work/train.log" 2>&1 \
    || { cat "$work/train.log"; fail "training with --outcome-attention $mode"; }
  python3 - "$work/$mode.json" "$mode" <<'PY' || fail "the $mode run JSON"
import json, sys
run, mode = json.load(open(sys.argv[1])), sys.argv[2]
assert run["config"]["node_state"] is True and run["config"]["outcome_attention"] == mode, run["config"]
epoch = run["epochs"][0]
outcomes = {o["outcome"]: o for o in epoch["outcomes"]}
assert sorted(outcomes) == ["link", "node_state"], epoch
for o in outcomes.values():
    assert len(o["query_norms"]) == 1 and 0 <= o["normalised_entropy"] <= 1, o
same = outcomes["link"]["query_norms"] == outcomes["node_state"]["query_norms"]
assert same == (mode == "shared"), outcomes  # indexed: a query projection per outcome
figures = run["test"]["node_state"]
assert figures["positives"] > 0 and 0 <= figures["auc"] <= 1, figures
PY
  grep -q "node_state attention: entropy" "$work/train.log" || fail "the log lacks the outcome monitor"
done
# A stream without labels cannot train a node state, and says why.
cut -d, -f1-3 "$work/events.csv" | sed '1s/.*/src,dst,ts/' > "$work/unlabelled.csv"
if "$tlpd" train --data "$work/unlabelled.csv" "${small[@]}" --node-state --out "$work/x.pt" \
    > "$work/x.log" 2>&1; then
  fail "a node-state model trained without labels"
fi
grep -q "needs events with state labels" "$work/x.log" || { cat "$work/x.log"; fail "no-label message"; }
if "$tlpd" train --data "$work/events.csv" "${small[@]}" --node-state --outcome-attention indexed \
    --architecture graphmixer --out "$work/x.pt" > "$work/x.log" 2>&1; then
  fail "outcome-indexed attention without temporal attention trained"
fi
grep -q "outcome-indexed attention needs" "$work/x.log" || { cat "$work/x.log"; fail "indexed message"; }

"$tlpd" serve --listen "$address" --metrics-listen "$metrics_address" --data-dir "$work/data" \
  --checkpoint "$work/indexed.pt" --no-sync --threads 1 > "$work/tlpd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do "$tlpctl" --address "$address" health > /dev/null 2>&1 && break; sleep 0.1; done
"$tlpctl" --address "$address" ingest "$work/events.csv" > /dev/null
"$tlpctl" --address "$address" --json info | python3 -c '
import json, sys
info = json.load(sys.stdin)
assert info["node_state"] is True and info["outcome_attention"] == "indexed", info' \
  || fail "GetModelInfo does not describe the node-state head"
"$tlpctl" --address "$address" --json node-state 1 | python3 -c '
import json, sys
(score,) = json.load(sys.stdin)
assert score["node"] == 1 and 0 < score["probability"] < 1 and score["at"] > 2399, score
assert score["metrics"]["neighbors_used"] > 0 and not score["metrics"]["cold_start"], score
assert len(score["model"]) == 16, score' || fail "tlpctl node-state"
"$tlpctl" --address "$address" --json node-state 123456 --at 100 | python3 -c '
import json, sys
(score,) = json.load(sys.stdin)
assert score["metrics"]["cold_start"] and score["at"] == 100, score' || fail "an unknown node"
await_metrics "$metrics_address" "$work/metrics.txt" 'tlpd_node_state_probability_count [1-9]' \
  'tlpd_representation_norm_count\{role="node"\} [1-9]' \
  'tlpd_grpc_requests_total\{code="OK",method="ScoreNodeStates"\} 2' || fail "node-state metrics"

# The labels were stored with their events: a node-state model trains from the store.
"$tlpd" train --from-store "$work/data" "${small[@]}" --node-state --out "$work/refreshed.pt" \
  --json-out "$work/refreshed.json" > "$work/refresh.log" 2>&1 \
  || { cat "$work/refresh.log"; fail "a node-state model from the store's labels"; }
python3 -c '
import json, sys
figures = json.load(open(sys.argv[1]))["test"]["node_state"]
assert figures["positives"] > 0, figures' "$work/refreshed.json" || fail "labels from the store"

# A link-only model serves no node states.
kill -TERM $daemon; wait $daemon || true; daemon=""
"$tlpd" train --data "$work/events.csv" "${small[@]}" --out "$work/links.pt" > /dev/null 2>&1 \
  || fail "training a link-only model"
"$tlpd" serve --listen "$address" --data-dir "$work/links" --checkpoint "$work/links.pt" \
  --no-sync --threads 1 > "$work/tlpd2.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do "$tlpctl" --address "$address" health > /dev/null 2>&1 && break; sleep 0.1; done
if "$tlpctl" --address "$address" node-state 1 > "$work/refused.txt" 2>&1; then
  fail "a link-only model scored a node state"
fi
grep -q "FAILED_PRECONDITION" "$work/refused.txt" && grep -q -- "--node-state" "$work/refused.txt" \
  || { cat "$work/refused.txt"; fail "the refusal should say FAILED_PRECONDITION and --node-state"; }
echo "node_state: ok"
