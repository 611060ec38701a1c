#!/usr/bin/env bash
# Scheduled model refresh against a real daemon: the event trigger retrains the serving model's
# architecture from the store in a child `tlpd train`, compares both models on the same
# held-back events and promotes the new one (min gain -1: always); `tlpctl model refresh` on a
# daemon that never promotes (min gain 1) keeps the serving model; a second request while one
# runs is refused; stopping the daemon stops its training process.
set -euo pipefail
tlpd=${1:?usage: model_refresh_test.sh TLPD TLPCTL}
tlpctl=${2:?}
work=$(mktemp -d)
daemon=""
trap 'kill $daemon 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source "$(dirname "$0")/script_support.sh"
fail() { echo "FAILED: $*" >&2; cat "$work/tlpd.log" >&2 || true; exit 1; }
stream() {  # FIRST LAST
  echo "src,dst,ts"
  for i in $(seq "$1" "$2"); do echo "$((i % 30)),$((100 + (i % 30 + i / 90) % 12)),$i"; done
}
stream 0 2999 > "$work/events.csv"
"$tlpd" train --data "$work/events.csv" --epochs 1 --seed 1 --memory-dim 16 --embedding-dim 16 \
  --time-dim 16 --pair-neighbors 8 --pair-hop-neighbors 4 --threads 1 --no-eval \
  --out "$work/a.pt" > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training a"; }
address=127.0.0.1:$(free_port)
metrics=127.0.0.1:$(free_port)
start() {  # extra flags
  "$tlpd" serve --listen "$address" --metrics-listen "$metrics" --data-dir "$work/data" \
    --checkpoint "$work/a.pt" --no-sync --threads 1 --refresh-epochs 1 \
    --refresh-ranking-queries 100 "$@" >> "$work/tlpd.log" 2>&1 &
  daemon=$!
  for _ in $(seq 300); do "$tlpctl" --address "$address" health > /dev/null 2>&1 && return; sleep 0.1; done
  fail "the daemon did not become ready"
}
ctl() { "$tlpctl" --address "$address" --json "$@"; }
value() {  # PYTHON EXPRESSION over j, the JSON on stdin
  python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"
}
# Waits until CONDITION (a Python expression over j, the model status) holds; the training runs
# at nice +10, so on a busy machine (ctest -j2 beside other suites) it may take minutes.
await_status() {
  local deadline=$((SECONDS + 400))
  while (( SECONDS < deadline )); do
    ctl model status > "$work/status.json"
    [[ $(value "$1" < "$work/status.json") == True ]] && return
    sleep 0.5
  done
  cat "$work/status.json"; tail -20 "$work/data/refresh/train.log" || true
  fail "timed out waiting for: $1"
}

# The event trigger, with a gain every new model has.
start --refresh-every-events 2500 --refresh-min-gain -1
a=$(ctl info | value "j['fingerprint']")
ctl ingest "$work/events.csv" > /dev/null 2>&1
await_status "j['refresh']['refreshes'] >= 1 and not j['refresh']['running'] and j['phase'] == 'idle'"
[[ $(value "j['refresh']['last_outcome']" < "$work/status.json") == promoted ]] \
  || { cat "$work/status.json"; cat "$work/data/refresh/train.log"; fail "no promoted refresh"; }
b=$(value "j['refresh']['candidate_fingerprint']" < "$work/status.json")
[[ $(value "j['fingerprint']" < "$work/status.json") == "$b" && $b != "$a" ]] \
  || { cat "$work/status.json"; fail "the new model does not serve"; }
[[ $(value "j['refresh']['serving_fingerprint']" < "$work/status.json") == "$a" ]] \
  || fail "the comparison does not name the model that served"
[[ $(value "j['refresh']['held_back_queries'] > 0 and 0 <= j['refresh']['candidate_mrr'] <= 1 and 0 < j['refresh']['serving_mrr'] <= 1" < "$work/status.json") == True ]] \
  || { cat "$work/status.json"; fail "the comparison's figures"; }
grep -q "model refresh: new model $b one-vs-all MRR" "$work/tlpd.log" || fail "the log lacks both figures"
await_metrics "$metrics" "$work/metrics" '^tlpd_model_refreshes_total\{outcome="promoted"\} 1$' \
  '^tlpd_model_refresh_mrr\{model="serving"\} 0\.[0-9]+' '^tlpd_model_swaps_total 1$' \
  || fail "the refresh's series"
[[ $(ctl info | value "j['events_applied']") == 3000 ]] || fail "events lost across the refresh"

# Asked for through tlpctl, on a daemon that never promotes.
kill $daemon && wait $daemon || true
start --refresh-min-gain 1
ctl model refresh > /dev/null || fail "refresh refused"
set +e
ctl model refresh > "$work/out" 2>&1; code=$?
set -e
[[ $code != 0 ]] && grep -q FAILED_PRECONDITION "$work/out" || { cat "$work/out"; fail "a second refresh"; }
await_status "not j['refresh']['running']"
[[ $(value "j['refresh']['last_outcome']" < "$work/status.json") == kept ]] \
  || { cat "$work/status.json"; fail "the refresh did not keep the serving model"; }
[[ $(value "j['fingerprint']" < "$work/status.json") == "$b" ]] || fail "a kept refresh swapped"

# Stopping the daemon stops its training.
ctl model refresh > /dev/null || fail "third refresh refused"
for _ in $(seq 300); do pgrep -f -- "--from-store $work/data" > /dev/null && break; sleep 0.1; done
pgrep -f -- "--from-store $work/data" > /dev/null || fail "no training process"
kill $daemon && wait $daemon || true
daemon=""
sleep 1
! pgrep -f -- "--from-store $work/data" > /dev/null || fail "the training outlived the daemon"
tail -3 "$work/tlpd.log" | grep -q "stopped cleanly" || fail "no clean stop"
grep "model refresh: new model" "$work/tlpd.log"
echo "model refresh: event trigger, promotion, comparison, tlpctl refresh, refusal, stop: ok"
