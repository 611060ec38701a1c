#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds everything with warnings as errors, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh -DTLP_WERROR=ON
cd build
TLP_SOURCE_DIR="$(cd .. && pwd)" ctest --output-on-failure --timeout 600 -j2
