#!/usr/bin/env bash
# Installs every Debian 12 package that tlpd's build, tests and demo need.
# Idempotent and non-interactive; run as root (or with sudo) on a fresh machine.
# Nothing is downloaded from anywhere but Debian's own archive.
#
# `setup.sh --build-only` installs only what building tlpd and tlpctl needs (configure with
# -DTLP_BUILD_TESTS=OFF -DTLP_BUILD_BENCH=OFF): the Docker image's build stage, which has no use
# for the test, fuzzing and Python toolchains.
set -euo pipefail

build_only=false
case "${1:-}" in
  "") ;;
  --build-only) build_only=true ;;
  *) echo "usage: setup.sh [--build-only]" >&2; exit 2 ;;
esac

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config
  # the gRPC API
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # storage, model, metrics
  librocksdb-dev libtorch-dev prometheus-cpp-dev
  # the Kafka source
  librdkafka-dev
  # OpenBLAS on OpenMP, the threading runtime LibTorch already uses (one pool of threads, not
  # two competing ones); its static TLS is what server/thread_stack.cc makes room for
  libopenblas0-openmp
  # the daemon's allocator (server/CMakeLists.txt)
  libjemalloc-dev
  # utility libraries
  zlib1g-dev libabsl-dev libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
)
DEVELOPMENT_PACKAGES=(
  # compiler cache, formatting, the scripts' tools
  ccache clang-format git curl
  # kcat, an independent Kafka producer in the Kafka test
  kcat
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # Python client and its test
  python3 python3-grpcio python3-protobuf
  # the Python package client/python: built with pip in a venv, its tests use pandas
  python3-pip python3-venv python3-setuptools python3-wheel python3-pandas
  # tlpctl eval --plot draws with gnuplot
  gnuplot-nox
  # deploy checks: promtool, a real Prometheus for the scrape test, YAML parsing of manifests
  prometheus python3-yaml
  # certificates for the TLS test; clang for the libFuzzer targets
  openssl clang libclang-rt-14-dev
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! $build_only; then PACKAGES+=("${DEVELOPMENT_PACKAGES[@]}"); fi

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
else
  echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# apt may have pulled in the pthread OpenBLAS, whose alternatives priority wins; pin the OpenMP one.
for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
  openmp="/usr/lib/x86_64-linux-gnu/openblas-openmp/${lib}"
  if [ -e "$openmp" ]; then
    $SUDO update-alternatives --quiet --set "${lib}-x86_64-linux-gnu" "$openmp" || true
  fi
done
echo "setup: done"
