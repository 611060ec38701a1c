// tlpctl eval's plot as SVG, drawn by gnuplot (common/gnuplot.h).
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
