#!/usr/bin/env bash
# The test suites under sanitizers, each in its own build directory:
#   build-asan: ASan + UBSan, the common, storage, server and Kafka suites (the server suite runs
#               the daemon in process over loopback gRPC and RocksDB);
#   build-tsan: TSan, the storage suite and the server's concurrency tests (ingest writer, score
#               batcher, concurrent clients, a model swap under ingest and scoring; this tree's
#               server_test holds only the files of the suites filtered below: tests/CMakeLists.txt).
#               Not the Kafka suite: librdkafka starts its threads
#               with C11 thrd_create, which GCC 12's TSan does not intercept, so TSan crashes
#               (SEGV in its runtime) as soon as one of those threads calls into it.
# Third-party libraries (LibTorch, gRPC, RocksDB, librdkafka) are not instrumented; ASan still sees every
# access our code makes, TSan every race between our threads.
set -euo pipefail
cd "$(dirname "$0")/.."
configure() {
  local dir=$1 sanitize=$2
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTLP_WERROR=ON \
      -DTLP_BUILD_BENCH=OFF -DTLP_SANITIZE="$sanitize" > /dev/null
  fi
}
export TLP_SOURCE_DIR=$PWD
configure build-asan address,undefined
cmake --build build-asan --parallel "${TLP_BUILD_JOBS:-2}" --target common_test storage_test server_test \
  kafka_test
# LibTorch and protobuf free some memory with a different operator than they allocated it with.
export ASAN_OPTIONS=alloc_dealloc_mismatch=0:detect_leaks=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for test in common_test storage_test server_test kafka_test; do
  echo "== ASan+UBSan: $test"
  "build-asan/tests/$test" --gtest_brief=1
done
configure build-tsan thread
cmake --build build-tsan --parallel "${TLP_BUILD_JOBS:-2}" --target storage_test server_test
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp"
echo "== TSan: storage_test"
# The SIGKILL test forks a multi-threaded process, which TSan cannot follow.
build-tsan/tests/storage_test --gtest_brief=1 --gtest_filter='-*Sigkill*'
echo "== TSan: server_test (concurrency)"
build-tsan/tests/server_test --gtest_brief=1 \
  --gtest_filter='IngestWriterTest.*:DaemonTest.*:EngineTest.LoadedModel*:EngineTest.Rollback*'
echo "sanitize: all passed"
