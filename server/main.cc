// tlpd: the temporal link prediction daemon (serve), and its offline tools (train, eval).
#include <CLI/CLI.hpp>

#include "common/allocator_tuning.h"
#include "common/blas_kernels.h"
#include "server/serve_command.h"
#include "server/train_command.h"

int main(int argc, char** argv) {
  tlp::UseBestBlasKernels(argv);
  tlp::KeepLargeAllocationsInHeap();
  CLI::App app{"tlpd " TLPD_VERSION
               ": temporal link prediction daemon (TGN/TGAT with Mass-Aware Attention)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", TLPD_VERSION);
  app.set_config("--config", "", "TOML config file (a [serve] section holds serve's options)");
  tlp::server::AddServeCommand(app);
  tlp::server::AddTrainCommands(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
