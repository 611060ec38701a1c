#!/usr/bin/env bash
# Configures and builds tlpd into ./build (Ninja, ccache when present). Extra arguments go to
# CMake, e.g. -DTLP_WERROR=ON. TLP_TARGETS (e.g. "tlpd tlpctl") limits what is built.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
else
  cmake -S . -B build "$@" >/dev/null
fi
# Two jobs: each torch translation unit needs ~1.5 GiB and the machines have 2 cores.
targets=()
for target in ${TLP_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build build --parallel "${TLP_BUILD_JOBS:-2}" "${targets[@]}"
