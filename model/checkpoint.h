// Model checkpoints and devices.
//
// A checkpoint is one torch archive holding the model config (typed values, plus the same as a
// JSON document for people and tools), every parameter, and a fingerprint: a 64-bit FNV-1a hash
// of the config and the parameter bytes, so two daemons serving the same fingerprint serve the
// same model. Node memory is not in it: that is derived state the server checkpoints with its
// event-log watermark.
#pragma once

#include <torch/torch.h>

#include <string>

#include "common/status.h"
#include "model/temporal_model.h"

namespace tlp::model {

Status SaveCheckpoint(const std::string& path, TemporalLinkModel& model);
// Builds a model from the checkpoint's own config on `device`.
Status LoadCheckpoint(const std::string& path, const torch::Device& device,
                      TemporalLinkModel* model);
// Like LoadCheckpoint, but fails with FAILED_PRECONDITION naming the first differing setting
// when the checkpoint's architecture is not `expected`.
Status LoadCheckpointExpecting(const std::string& path, const ModelConfig& expected,
                               const torch::Device& device, TemporalLinkModel* model);

// 16 hex digits; changes whenever the config or any parameter does.
std::string ModelFingerprint(TemporalLinkModel& model);
std::string ConfigToJson(const ModelConfig& config);

// "cpu", "cuda" or "cuda:N". A CUDA device when none is present falls back to the CPU (and
// `note` says so) rather than failing: the daemon must run wherever it is started.
torch::Device ResolveDevice(const std::string& requested, std::string* note);

}  // namespace tlp::model
