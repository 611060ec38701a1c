// SVG plots drawn by gnuplot (Debian's gnuplot-nox): a maintained plotting program lays out
// axes, legends and scales better than anything we would draw by hand. Shared by tlpctl's
// evaluation plot and tlpd train's attention monitor.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tlp {

struct GnuplotJob {
  // Files written beside the script, named (no directories) and referred to by those names.
  std::vector<std::pair<std::string, std::string>> data_files;
  // The drawing commands: everything after the terminal and output settings (which RenderSvg
  // writes; text is plain, not gnuplot's enhanced markup). Runs in the data files' directory.
  std::string script;
};

// Renders `job` into `svg_path` (size in pixels). The data and the script go to a fresh
// temporary directory, removed afterwards. FAILED_PRECONDITION when gnuplot is not installed;
// INTERNAL with gnuplot's own message when it fails.
Status RenderSvg(const GnuplotJob& job, const std::string& svg_path, int width = 1100,
                 int height = 450);

}  // namespace tlp
