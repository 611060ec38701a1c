#!/usr/bin/env bash
# Model refresh through tlpctl against a real daemon (tlp.v1.Admin over loopback): a load swaps
# the model while events arrive and scores name it; status, rollback, the refusals, the admin
# token, /metrics, and a restart that serves the committed model.
set -euo pipefail
tlpd=${1:?usage: model_admin_test.sh TLPD TLPCTL}
tlpctl=${2:?}
work=$(mktemp -d)
daemon=""
trap 'kill $daemon 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source "$(dirname "$0")/script_support.sh"
fail() { echo "FAILED: $*" >&2; exit 1; }
small=(--memory-dim 16 --embedding-dim 16 --time-dim 16 --pair-neighbors 8 --pair-hop-neighbors 4
       --threads 1 --no-eval)
stream() {  # FIRST LAST
  echo "src,dst,ts"
  for i in $(seq "$1" "$2"); do echo "$((i % 30)),$((100 + (i % 30 + i / 90) % 12)),$i"; done
}
stream 0 1999 > "$work/first.csv"
stream 2000 2599 > "$work/second.csv"
"$tlpd" train --data "$work/first.csv" --epochs 1 --seed 1 "${small[@]}" --out "$work/a.pt" \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training a"; }
"$tlpd" train --data "$work/first.csv" --epochs 1 --seed 2 "${small[@]}" --out "$work/b.pt" \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training b"; }
address=127.0.0.1:$(free_port)
metrics=127.0.0.1:$(free_port)
start() {  # extra flags
  "$tlpd" serve --listen "$address" --metrics-listen "$metrics" --data-dir "$work/data" \
    --checkpoint "$work/a.pt" --no-sync --threads 1 "$@" >> "$work/tlpd.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do "$tlpctl" --address "$address" health > /dev/null 2>&1 && return; sleep 0.1; done
  cat "$work/tlpd.log"; fail "the daemon did not become ready"
}
ctl() { "$tlpctl" --address "$address" --json "$@"; }
field() {  # KEY: of the JSON object on stdin (of its first element when it is a list)
  python3 -c "import json,sys; j=json.load(sys.stdin); print((j[0] if isinstance(j, list) else j)['$1'])"
}

start
ctl ingest "$work/first.csv" > /dev/null 2>&1
a=$(ctl info | field fingerprint)
[[ $(ctl model status | field phase) == idle ]] || fail "a fresh daemon is not idle"

# Refusals: a missing file, the serving model, no model to roll back to.
set +e
ctl model load "$work/missing.pt" > "$work/out" 2>&1; code=$?
set -e
[[ $code != 0 ]] && grep -q INVALID_ARGUMENT "$work/out" || { cat "$work/out"; fail "missing file"; }
set +e
ctl model load "$work/a.pt" > "$work/out" 2>&1; code=$?
set -e
[[ $code != 0 ]] && grep -q ALREADY_EXISTS "$work/out" || { cat "$work/out"; fail "serving model"; }
set +e
ctl model rollback > "$work/out" 2>&1; code=$?
set -e
[[ $code != 0 ]] && grep -q FAILED_PRECONDITION "$work/out" || { cat "$work/out"; fail "rollback"; }

# The load, while a second file is ingested.
ctl ingest "$work/second.csv" > /dev/null 2>&1 &
ingest=$!
ctl model load "$work/b.pt" --wait > "$work/status.json" || { cat "$work/status.json"; fail "load"; }
wait $ingest || fail "ingest during the load"
b=$(field fingerprint < "$work/status.json")
[[ $b != "$a" && $(field previous_fingerprint < "$work/status.json") == "$a" ]] \
  || { cat "$work/status.json"; fail "the load did not swap"; }
[[ $(ctl info | field fingerprint) == "$b" ]] || fail "info does not name the new model"
[[ $(ctl info | field events_applied) == 2600 ]] || fail "events lost across the swap"
await_metrics "$metrics" "$work/metrics" '^tlpd_model_swaps_total 1$' || fail "swaps not counted"
grep -q "fingerprint=\"$b\"" "$work/metrics" && ! grep -q "fingerprint=\"$a\"" "$work/metrics" \
  || fail "build_info does not follow the swap"
score_b=$(ctl score 3 105 | field probability)

# A restart with the same --checkpoint serves the committed model, with the same scores.
kill $daemon && wait $daemon || true
start
[[ $(ctl info | field fingerprint) == "$b" ]] || fail "the restart does not serve the committed model"
[[ $(ctl score 3 105 | field probability) == "$score_b" ]] || fail "scores changed across the restart"

ctl model rollback --wait > "$work/status.json" || { cat "$work/status.json"; fail "rollback"; }
[[ $(field fingerprint < "$work/status.json") == "$a" ]] || fail "rollback did not serve a"

# With tokens required, admin calls need an admin token.
kill $daemon && wait $daemon || true
echo data-token > "$work/tokens"
echo admin-token > "$work/admin-tokens"
start --token-file "$work/tokens"
set +e
"$tlpctl" --address "$address" --token-file "$work/tokens" model status > "$work/out" 2>&1; code=$?
set -e
[[ $code != 0 ]] && grep -q PERMISSION_DENIED "$work/out" || { cat "$work/out"; fail "admin open"; }
kill $daemon && wait $daemon || true
start --token-file "$work/tokens" --admin-token-file "$work/admin-tokens"
set +e
"$tlpctl" --address "$address" --token-file "$work/tokens" model status > "$work/out" 2>&1; code=$?
set -e
[[ $code != 0 ]] && grep -q "refused the credentials" "$work/out" || { cat "$work/out"; fail "data token"; }
"$tlpctl" --address "$address" --token-file "$work/admin-tokens" model status > /dev/null \
  || fail "the admin token is refused"
echo "model admin: swap, status, rollback, refusals, tokens, restart: ok"
