#!/usr/bin/env bash
# Packs this Debian machine's GoogleTest, Google Benchmark and zlib (headers, libraries and CMake
# files, in their /usr layout) into one prefix that bench/gpu.sh adds to CMAKE_PREFIX_PATH: the
# GPU machine has CUDA LibTorch, CMake and a compiler but none of these, and cannot fetch them.
# GoogleTest and zlib are static; Google Benchmark is Debian's shared library, which bench/gpu.sh
# puts on LD_LIBRARY_PATH. All built with GCC 12 and the C++11 string ABI, as is PyTorch's
# LibTorch since 2.7.
# Usage: bash bench/gpu_deps.sh [PREFIX]   (default .gpu-deps, which .gitignore leaves out)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-.gpu-deps}
multiarch=lib/x86_64-linux-gnu
rm -rf "$prefix"
mkdir -p "$prefix/usr/include" "$prefix/usr/$multiarch/cmake"
for header in gtest benchmark zlib.h zconf.h; do
  cp -r "/usr/include/$header" "$prefix/usr/include/"
done
cp -r "/usr/$multiarch/cmake/GTest" "/usr/$multiarch/cmake/benchmark" "$prefix/usr/$multiarch/cmake/"
cp -L /usr/$multiarch/libgtest*.a /usr/$multiarch/libgmock*.a /usr/$multiarch/libbenchmark* \
  /usr/$multiarch/libz.a "$prefix/usr/$multiarch/"
du -sh "$prefix"
