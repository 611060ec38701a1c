// tlpd train --monitor-plot: the attention monitor's figures per head and epoch as SVG.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/training.h"

namespace tlp::server {

// Four panels against the epoch, a line per attention head: the energy field's numerical rank
// beside its bound min(head_dim, keys - 1, queries), its effective rank, its query share, and
// the key coherence.
// FAILED_PRECONDITION without gnuplot or when no epoch has monitor figures.
Status WriteAttentionMonitorPlot(const std::vector<model::EpochRecord>& history,
                                 const std::string& title, const std::string& svg_path);

}  // namespace tlp::server
