// `tlpd train` and `tlpd eval`: offline training and evaluation on an event file or on a data
// dir's event log (beside the daemon serving it).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/status.h"

namespace tlp::server {

// Trains the bundled model (default architecture and settings, one epoch, seed 0) on `data` and
// writes it to `checkpoint`, with progress on stderr: what `tlpd serve` does when it starts
// without a model.
Status TrainBundledModel(const std::string& data, const std::string& checkpoint,
                         const std::string& device, int threads);

// The bundled Wikipedia stream: /usr/share/tlpd/data (the image) or the source tree's data/;
// "" when neither exists.
std::string FindBundledData();

// Adds the `train` and `eval` subcommands to `app`.
void AddTrainCommands(CLI::App& app);

}  // namespace tlp::server
