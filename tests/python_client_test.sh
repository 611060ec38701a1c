#!/usr/bin/env bash
# The Python package client/python (tlpd-client) as a user gets it: installed with pip into a
# fresh virtual environment (stubs generated from proto/ at build time), then its tests and the
# README's example against two real daemons: a plaintext one that admits one ingest call at a
# time (so that the client's retries happen), and one with mutual TLS and bearer tokens.
set -euo pipefail
source "$(dirname "$0")/script_support.sh"
tlpd=${1:?usage: python_client_test.sh TLPD SOURCE_DIR}
root=${2:?}
work=$(mktemp -d)
daemons=()
trap 'kill "${daemons[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

/usr/bin/python3 -m venv --system-site-packages "$work/venv"
# Build from a copy: pip builds in the source tree, which must stay clean.
cp -r "$root/client/python" "$work/package"
# Without what a local `pip install` left there: its build/lib copy, younger than the sources
# once copied, would be packaged instead of them.
rm -rf "$work/package/build" "$work/package/"*.egg-info
TLP_PROTO_DIR="$root/proto" "$work/venv/bin/pip" install --quiet --no-build-isolation \
  --no-index "$work/package" > "$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }

{
  echo "src,dst,ts"
  for i in $(seq 0 599); do echo "$((i % 20)),$((100 + i % 7)),$i"; done
} > "$work/events.csv"
"$tlpd" train --data "$work/events.csv" --epochs 1 --memory-dim 16 --embedding-dim 16 \
  --time-dim 16 --out "$work/model.pt" --no-eval --threads 1 > "$work/train.log" 2>&1
"$tlpd" train --data "$work/events.csv" --epochs 1 --memory-dim 16 --embedding-dim 16 \
  --time-dim 16 --seed 2 --out "$work/model-b.pt" --no-eval --threads 1 > "$work/train.log" 2>&1

make_test_certificates "$work"
printf 's3cret-token\n' > "$work/tokens"
plain=$(free_port)
secure=$(free_port)
# Configuration through both other channels: a TOML file and the environment.
printf '[serve]\nlisten = "127.0.0.1:%s"\nmetrics-listen = ""\ndata-dir = "%s"\n' \
  "$plain" "$work/plain" > "$work/tlpd.toml"
TLPD_CHECKPOINT="$work/model.pt" TLPD_THREADS=1 TLPD_MAX_INFLIGHT_INGEST=1 \
  "$tlpd" --config "$work/tlpd.toml" serve --no-sync --lateness-seconds 1e9 \
  > "$work/plain.log" 2>&1 &
daemons+=($!)
"$tlpd" serve --listen "127.0.0.1:$secure" --metrics-listen "" --data-dir "$work/secure" \
  --checkpoint "$work/model.pt" --no-sync --threads 1 --tls-cert "$work/server.pem" \
  --tls-key "$work/server.key" --tls-client-ca "$work/ca.pem" --token-file "$work/tokens" \
  > "$work/secure.log" 2>&1 &
daemons+=($!)
for log in plain secure; do
  for _ in $(seq 1 100); do
    grep -q "serving tlp.v1" "$work/$log.log" && break
    sleep 0.2
  done
done

# Run from the work directory, away from the source tree: the installed package is the one
# imported (a script's own directory comes first on sys.path).
cd "$work"
cp "$root/client/python/test_tlpd_client.py" .
PLAIN_ADDRESS="127.0.0.1:$plain" SECURE_ADDRESS="localhost:$secure" CERT_DIR="$work" \
  MODEL_B="$work/model-b.pt" \
  "$work/venv/bin/python" test_tlpd_client.py -v
# The README's example, as written, against the plaintext daemon.
sed -n '/^```python$/,/^```$/p' "$root/client/python/README.md" | sed '1d;$d' > example.py
TLPD_ADDRESS="127.0.0.1:$plain" "$work/venv/bin/python" example.py | tee example.log
grep -q "^SERVING$" example.log
grep -q "accepted=3" example.log
grep -q "^INVALID_ARGUMENT event 0: field 'ts'" example.log
echo "python client: OK"
