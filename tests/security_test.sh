#!/usr/bin/env bash
# tlpd with mutual TLS, bearer tokens and basic auth on /metrics, against tlpctl and curl:
# the right credentials get in, every missing or wrong one is refused with a clear error.
set -euo pipefail
source "$(dirname "$0")/script_support.sh"
tlpd=${1:?usage: security_test.sh TLPD TLPCTL}
tlpctl=${2:?}
work=$(mktemp -d)
daemon=""
trap 'kill $daemon 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
tlpd=$(realpath "$tlpd")
tlpctl=$(realpath "$tlpctl")
cd "$work"
fail() { echo "FAILED: $*"; exit 1; }

make_test_certificates .
printf '# tokens, one per line\nold-token-being-rotated-out\ns3cret-token\n' > tokens
echo "s3cret-token" > token
echo "wrong-token" > wrong
printf 'prometheus:scrape-password\n' > metrics-auth

{
  echo "src,dst,ts"
  for i in $(seq 0 299); do echo "$((i % 10)),$((100 + i % 5)),$i"; done
} > events.csv
"$tlpd" train --data events.csv --epochs 1 --memory-dim 8 --embedding-dim 8 --time-dim 8 \
  --out model.pt --no-eval --threads 1 > train.log 2>&1
port=$(free_port)
metrics=$(free_port)
"$tlpd" serve --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$metrics" --data-dir data \
  --checkpoint model.pt --no-sync --threads 1 --tls-cert server.pem --tls-key server.key \
  --tls-client-ca ca.pem --token-file tokens --metrics-auth-file metrics-auth > tlpd.log 2>&1 &
daemon=$!

tls=(--address "localhost:$port" --tls-ca ca.pem --tls-cert client.pem --tls-key client.key)
for _ in $(seq 1 100); do
  "$tlpctl" "${tls[@]}" --timeout 1 health > /dev/null 2>&1 && break
  sleep 0.2
done
"$tlpctl" "${tls[@]}" health | grep -q SERVING || fail "health over mutual TLS"

"$tlpctl" "${tls[@]}" --token-file token ingest events.csv > ok.log 2>&1 || fail "right token: $(cat ok.log)"
"$tlpctl" "${tls[@]}" --token-file token score 1 101 | grep -q "101" || fail "score with the right token"

if "$tlpctl" "${tls[@]}" info > none.log 2>&1; then fail "no token was accepted"; fi
grep -q "Bearer" none.log || fail "no token: unclear error: $(cat none.log)"
if "$tlpctl" "${tls[@]}" --token-file wrong info > wrong.log 2>&1; then fail "wrong token accepted"; fi
grep -q "not accepted" wrong.log || fail "wrong token: unclear error: $(cat wrong.log)"
if "$tlpctl" --address "localhost:$port" --tls-ca ca.pem --token-file token --timeout 3 info \
  > nocert.log 2>&1; then fail "TLS without a client certificate accepted"; fi
if "$tlpctl" --address "127.0.0.1:$port" --token-file token --timeout 3 info > plain.log 2>&1; then
  fail "plaintext accepted by a TLS server"
fi
grep -q "cannot reach tlpd at 127.0.0.1:$port" plain.log || fail "plaintext: unclear error: $(cat plain.log)"

code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$metrics/metrics")
[ "$code" = 401 ] || fail "/metrics without credentials answered $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -u prometheus:nope "http://127.0.0.1:$metrics/metrics")
[ "$code" = 401 ] || fail "/metrics with a wrong password answered $code"
for _ in $(seq 1 30); do  # the store gauges are refreshed every second
  body=$(curl -sf -u prometheus:scrape-password "http://127.0.0.1:$metrics/metrics") ||
    fail "/metrics with the right password"
  grep -q '^tlpd_events_stored 300' <<< "$body" && break
  sleep 0.2
done
grep -q '^tlpd_events_stored 300' <<< "$body" || fail "tlpd_events_stored is not 300"
grep -q 'tlpd_grpc_requests_total{code="UNAUTHENTICATED",method="GetModelInfo"} 2' <<< "$body" ||
  fail "refused calls are not counted as UNAUTHENTICATED"
echo "security test passed"
