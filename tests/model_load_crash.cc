// Helper of engine_test's crash tests: opens an engine on DATA_DIR with checkpoint A, ingests
// EVENTS events, loads checkpoint B, and kills itself with SIGKILL as the load enters PHASE
// ("replaying", "committed" or "swapped"). Exits 2 when anything fails before that.
//
// Usage: model_load_crash DATA_DIR A B PHASE EVENTS
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "server/engine.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: model_load_crash DATA_DIR A B PHASE EVENTS\n");
    return 2;
  }
  const std::string phase = argv[4];
  tlp::server::EngineOptions options;
  options.data_dir = argv[1];
  options.checkpoint = argv[2];
  options.sync_writes = false;
  options.memory_batch = 4;
  options.on_load_phase = [&](tlp::server::ModelLoadPhase entered) {
    if (phase == tlp::server::ModelLoadPhaseName(entered)) raise(SIGKILL);
  };
  std::unique_ptr<tlp::server::Engine> engine;
  tlp::Status status = tlp::server::Engine::Open(options, &engine);
  tlp::EventBatch events;
  const int count = std::atoi(argv[5]);
  for (int i = 0; i < count; ++i) {
    events.Add(1 + i % 5, 100 + i % 7, 1.0 + i, {}, "e" + std::to_string(i));
  }
  tlp::storage::AppendResult appended;
  if (status.ok()) status = engine->Ingest(events, &appended);
  if (status.ok()) status = engine->AwaitMemory();
  if (status.ok()) status = engine->LoadModel(argv[3]);
  if (status.ok()) status = engine->AwaitModelLoad();
  std::fprintf(stderr, "the load ended without entering phase %s: %s\n", phase.c_str(),
               status.ToString().c_str());
  return 2;
}
