// libFuzzer target: the event file readers (JODIE, SNAP, tlpd CSV; gzip or plain) on arbitrary
// file contents must return events or an error naming a line, never crash or loop.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/event_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A memory-backed file: EventReader opens paths (through zlib), and the disk stays out of it.
  const int fd = memfd_create("fuzz-events", 0);
  if (fd < 0) return 0;
  if (write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  std::unique_ptr<tlp::EventReader> reader;
  if (tlp::EventReader::Open(path, &reader).ok()) {
    tlp::EventBatch batch;
    for (int round = 0; round < 1000; ++round) {
      if (!reader->Next(64, &batch).ok() || batch.empty()) break;
      if (batch.features.size() != batch.size() * batch.feature_dim) __builtin_trap();
    }
  }
  close(fd);
  return 0;
}
