// Scratch directories and small untrained model checkpoints for the tests that run an Engine or
// a daemon (the model's weights do not matter to them, only that every run uses the same ones).
#pragma once

#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/checkpoint.h"

namespace tlp::testing {

// An empty directory /tmp/<name>_<pid>, removed first if it exists.
inline std::filesystem::path FreshDirectory(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A checkpoint (TGN unless `architecture` says otherwise) with memory, embedding and time widths
// `width`, weights drawn with `seed`; with a node-state head when `outcome_attention` ("shared"
// or "indexed") is given.
inline Status WriteSmallModel(const std::filesystem::path& path, int64_t width, uint64_t seed,
                              const std::string& architecture = "tgn",
                              const std::string& outcome_attention = "") {
  torch::manual_seed(seed);
  model::ModelConfig config;
  config.architecture = architecture;
  config.node_state = !outcome_attention.empty();
  if (config.node_state) config.outcome_attention = outcome_attention;
  config.memory_dim = config.embedding_dim = config.time_dim = width;
  if (config.pair_wise()) config.neighbors = 3;
  model::TemporalLinkModel model(config);
  return model::SaveCheckpoint(path.string(), model);
}

}  // namespace tlp::testing
