#!/usr/bin/env bash
# Runs client/python/test_tlp_client.py against a real tlpd: stubs generated with Debian's
# protoc, a small model trained by `tlpd train`, the daemon on a free loopback port.
set -euo pipefail
source "$(dirname "$0")/script_support.sh"
tlpd=${1:?usage: python_client_test.sh TLPD SOURCE_DIR}
root=${2:?}
work=$(mktemp -d)
daemon=""
trap 'kill $daemon 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
bash "$root/client/python/generate.sh" "$work/stubs"
{
  echo "src,dst,ts"
  for i in $(seq 0 599); do echo "$((i % 20)),$((100 + i % 7)),$i"; done
} > "$work/events.csv"
"$tlpd" train --data "$work/events.csv" --epochs 1 --memory-dim 16 --embedding-dim 16 \
  --time-dim 16 --out "$work/model.pt" --no-eval --threads 1 > "$work/train.log" 2>&1
port=$(free_port)
# Configuration through both other channels: a TOML file and the environment.
printf '[serve]\nlisten = "127.0.0.1:%s"\nmetrics-listen = ""\ndata-dir = "%s"\n' \
  "$port" "$work/data" > "$work/tlpd.toml"
TLPD_CHECKPOINT="$work/model.pt" TLPD_THREADS=1 \
  "$tlpd" --config "$work/tlpd.toml" serve --no-sync > "$work/tlpd.log" 2>&1 &
daemon=$!
for _ in $(seq 1 100); do
  grep -q "serving tlp.v1" "$work/tlpd.log" && break
  sleep 0.2
done
PYTHONPATH="$work/stubs:$root/client/python" /usr/bin/python3 \
  "$root/client/python/test_tlp_client.py" "127.0.0.1:$port" -v
