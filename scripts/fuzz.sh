#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into ./build-fuzz and runs each for
# FUZZ_SECONDS (default 60) from its committed corpus in fuzz/corpus/<target>; new inputs go to
# a scratch directory, crashes to build-fuzz/crashes and fail the script.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
targets=(event_codec_fuzzer event_reader_fuzzer ingest_request_fuzzer)
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTLP_FUZZ=ON -DTLP_BUILD_TESTS=OFF -DTLP_BUILD_BENCH=OFF -DTLP_WERROR=ON > /dev/null
fi
cmake --build build-fuzz --parallel "${TLP_BUILD_JOBS:-2}" --target "${targets[@]}"
mkdir -p build-fuzz/crashes
for target in "${targets[@]}"; do
  name=${target%_fuzzer}
  scratch=$(mktemp -d)
  echo "== $target for $seconds s (corpus fuzz/corpus/$name)"
  UBSAN_OPTIONS=halt_on_error=1 "build-fuzz/fuzz/$target" -max_total_time="$seconds" \
    -max_len=4096 -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1 \
    "$scratch" "fuzz/corpus/$name" 2>&1 | grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY|INFO: Seed)" || true
  rm -rf "$scratch"
  if ls build-fuzz/crashes/* > /dev/null 2>&1; then
    echo "fuzz: $target found a crash: $(ls build-fuzz/crashes)"
    exit 1
  fi
done
echo "fuzz: no crashes"
