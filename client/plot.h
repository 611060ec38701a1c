// Evaluation plots as SVG, drawn by gnuplot (Debian's gnuplot-nox): a maintained plotting
// program lays out axes, bins and legends better than anything we would draw by hand. The data
// and the script go to a temporary directory, gnuplot renders, the directory is removed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tlp::client {

struct EvaluationPlot {
  std::string title;
  std::vector<float> positive_logits, negative_logits;  // score distribution panel
  std::vector<std::pair<double, double>> degree_norm;   // (degree, representation norm) panel
};

// Writes a two-panel SVG: histograms of positive and negative logits, and representation
// norm against node degree (log x). FAILED_PRECONDITION when gnuplot is not installed.
Status WriteEvaluationPlot(const EvaluationPlot& plot, const std::string& svg_path);

}  // namespace tlp::client
