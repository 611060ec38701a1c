#!/usr/bin/env bash
# The GPU check of issue #9, as one script for a lent GPU machine (no gRPC or RocksDB there):
# builds model/ with the machine's CUDA LibTorch (TLP_MODEL_ONLY), runs the model tests (where
# the Device.Cuda* tests compare cuda:0 with the CPU and train on cuda:0 instead of skipping),
# then model_bench on cuda:0: pairs/s at batches of 200 / 2,000 / 20,000, memory updates/s, GEMM
# FLOP/s and the gather bandwidth, which it prints as a fraction of the GPU's memory bandwidth.
# GoogleTest, Google Benchmark and zlib come from TLP_GPU_DEPS (default .gpu-deps, made on a
# Debian machine by bench/gpu_deps.sh and carried along) when the GPU machine lacks them.
# Usage: bash bench/gpu.sh [OUT_DIR]   (default $OUT when set, else build-gpu/results)
# Env: TLP_GPU_BANDWIDTH_GBS: the GPU's memory bandwidth in GB/s (default 4800, an H200).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-build-gpu/results}}
mkdir -p "$out"
deps=$(realpath -m "${TLP_GPU_DEPS:-.gpu-deps}")/usr
export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# CMake 4 refuses the `cmake_policy(VERSION 2.6...)` floor of Debian's exported GTest targets.
export CMAKE_POLICY_VERSION_MINIMUM=3.5
prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
  "cxx11_abi", torch._C._GLIBCXX_USE_CXX11_ABI)' | tee "$out/torch.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" || true
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S . -B build-gpu "${generator[@]}" -DTLP_MODEL_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix;$deps" -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
  > "$out/configure.log" 2>&1 || { tail -60 "$out/configure.log"; exit 1; }
# Keep going past a failing file, so that one run shows every error against this LibTorch.
keep_going=()
[[ ${#generator[@]} -gt 0 ]] && keep_going=(-- -k 0)
cmake --build build-gpu -j"$(nproc)" "${keep_going[@]}" > "$out/build.log" 2>&1 ||
  { grep -E -B2 -A6 'error|Error' "$out/build.log" | head -150; exit 1; }
# A failing test does not stop the benchmark (its figures are still worth having), but the
# script then exits with the tests' status.
test_status=0
if [[ -x build-gpu/tests/model_test ]]; then
  build-gpu/tests/model_test > "$out/model_test.txt" 2>&1 || test_status=$?
  grep -E -A3 '^\[  (FAILED|PASSED|SKIPPED)|Failure' "$out/model_test.txt" || true
fi
[[ -x build-gpu/bench/model_bench ]] || { echo "no Google Benchmark: no model_bench" >&2; exit 1; }
TLP_DEVICE=cuda:0 TLP_SOURCE_DIR=$PWD build-gpu/bench/model_bench \
  --benchmark_out="$out/model_bench_cuda.json" --benchmark_out_format=json | tee "$out/model_bench_cuda.txt"
python3 - "$out/model_bench_cuda.json" "${TLP_GPU_BANDWIDTH_GBS:-4800}" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
peak = float(sys.argv[2]) * 1e9
for entry in report["benchmarks"]:
    if entry["name"].startswith("BM_Gather"):
        print(f"gather {entry['bytes_per_s'] / 1e9:.0f} GB/s = {entry['bytes_per_s'] / peak:.1%} of {peak / 1e9:.0f} GB/s")
PY
if [[ $test_status -ne 0 ]]; then
  echo "model_test failed (exit $test_status): see $out/model_test.txt" >&2
  exit "$test_status"
fi
