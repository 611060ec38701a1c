#!/usr/bin/env bash
# Generates the Python stubs of tlp.v1 into OUT_DIR with Debian's protoc + grpc_python_plugin.
set -euo pipefail
out=${1:?usage: generate.sh OUT_DIR}
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
protoc --proto_path="$root/proto" --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin "$root/proto/tlp/v1/tlp.proto"
touch "$out/tlp/__init__.py" "$out/tlp/v1/__init__.py"
