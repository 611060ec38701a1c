#!/usr/bin/env bash
# A real Prometheus server (Debian's package) on loopback scrapes a running tlpd every second;
# through Prometheus' HTTP query API the test asserts that tlpd's series are there and that
# they move while events are ingested.
set -euo pipefail
tlpd=${1:?usage: prometheus_scrape_test.sh TLPD TLPCTL}
tlpctl=${2:?}
work=$(mktemp -d)
daemon="" prometheus=""
trap 'kill $daemon $prometheus 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source "$(dirname "$0")/script_support.sh"
grpc_port=$(free_port)
metrics_port=$(free_port)
prometheus_port=$(free_port)

{
  echo "src,dst,ts"
  for i in $(seq 0 599); do echo "$((i % 20)),$((100 + i % 7)),$i"; done
} > "$work/first.csv"
{
  echo "src,dst,ts"
  for i in $(seq 600 1199); do echo "$((i % 20)),$((100 + i % 7)),$i"; done
} > "$work/second.csv"
"$tlpd" train --data "$work/first.csv" --epochs 1 --memory-dim 16 --embedding-dim 16 \
  --time-dim 16 --out "$work/model.pt" --no-eval --threads 1 > "$work/train.log" 2>&1
"$tlpd" serve --listen "127.0.0.1:$grpc_port" --metrics-listen "127.0.0.1:$metrics_port" \
  --data-dir "$work/data" --checkpoint "$work/model.pt" --no-sync --threads 1 \
  > "$work/tlpd.log" 2>&1 &
daemon=$!

cat > "$work/prometheus.yml" <<CONFIG
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tlpd
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
CONFIG
prometheus --config.file "$work/prometheus.yml" --storage.tsdb.path "$work/tsdb" \
  --web.listen-address "127.0.0.1:$prometheus_port" > "$work/prometheus.log" 2>&1 &
prometheus=$!

# query EXPR WANT [TIMEOUT]: polls Prometheus until the first sample of EXPR equals WANT.
query() {
  /usr/bin/python3 - "$prometheus_port" "$1" "$2" "${3:-30}" <<'PY'
import json, sys, time, urllib.parse, urllib.request
port, expr, want, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
deadline, last = time.time() + timeout, None
while time.time() < deadline:
    try:
        url = f"http://127.0.0.1:{port}/api/v1/query?query=" + urllib.parse.quote(expr)
        result = json.load(urllib.request.urlopen(url, timeout=2))["data"]["result"]
        last = float(result[0]["value"][1]) if result else None
        if last == want:
            print(f"ok: {expr} = {last}")
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
print(f"FAILED: {expr} = {last}, expected {want} within {timeout} s")
sys.exit(1)
PY
}

query 'up{job="tlpd"}' 1 60
query 'tlpd_events_stored' 0
query 'count(tlpd_build_info{architecture="tgn"})' 1
"$tlpctl" --address "127.0.0.1:$grpc_port" ingest "$work/first.csv" > /dev/null 2>&1
query 'tlpd_events_stored' 600
query 'sum(tlpd_ingest_events_total{result="accepted"})' 600
"$tlpctl" --address "127.0.0.1:$grpc_port" ingest "$work/second.csv" > /dev/null 2>&1
query 'tlpd_events_stored' 1200
query 'sum(tlpd_grpc_requests_total{method="IngestBatch", code="OK"})' 2
# The counter moved between scrapes: Prometheus sees a positive increase.
query 'increase(tlpd_ingest_events_total{result="accepted"}[1m]) > bool 0' 1
echo "prometheus scrape test passed"
