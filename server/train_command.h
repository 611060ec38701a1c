// `tlpd train` and `tlpd eval`: offline training and evaluation on an event file.
#pragma once

#include <CLI/CLI.hpp>

namespace tlp::server {

// Adds the `train` and `eval` subcommands to `app`.
void AddTrainCommands(CLI::App& app);

}  // namespace tlp::server
