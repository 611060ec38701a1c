#include "server/attention_monitor_plot.h"

#include <map>
#include <sstream>
#include <utility>

#include "common/gnuplot.h"
#include "model/training.h"

namespace tlp::server {

Status WriteAttentionMonitorPlot(const std::vector<model::EpochRecord>& history,
                                 const std::string& title, const std::string& svg_path) {
  // One data file per head, a row per epoch.
  std::map<std::pair<std::string, int64_t>, std::ostringstream> rows;
  for (const model::EpochRecord& epoch : history) {
    for (const model::HeadMonitor& head : epoch.attention) {
      const model::EnergyFieldSummary& field = head.field;
      rows[{head.module, head.head}] << epoch.epoch << " " << field.rank << " " << field.rank_bound
                                     << " " << field.effective_rank << " " << field.query_share
                                     << " " << field.key_coherence << "\n";
    }
  }
  if (rows.empty()) return Status::FailedPrecondition("no attention monitor figures to plot");
  struct Panel {
    const char* title;
    const char* ylabel;
    const char* yrange;
    int column;  // of the data files
    std::string lines;
  };
  Panel panels[] = {
      {"energy field rank (dashed: bound)", "numerical rank", "[0:*]", 2, ""},
      {"energy field effective rank", "exp(entropy of spectrum)", "[1:*]", 4, ""},
      {"query share of the field", "varies with the query / all", "[0:*]", 5, ""},
      {"key coherence (1 = incoherent)", "(n/r) max leverage", "[1:*]", 6, ""},
  };
  GnuplotJob job;
  int index = 0;
  for (auto& [key, data] : rows) {
    const std::string file = "head" + std::to_string(index) + ".dat";
    job.data_files.emplace_back(file, data.str());
    const std::string label = key.first + " head " + std::to_string(key.second);
    const std::string colour = " lc " + std::to_string(index + 1);
    for (Panel& panel : panels) {
      panel.lines += (index == 0 ? "plot " : ", \\\n     ") + ("'" + file + "' using 1:") +
                     std::to_string(panel.column) + " with linespoints pt 7" + colour + " title '" +
                     label + "'";
      if (panel.column == 2) {  // the bound beside the rank
        panel.lines += ", '" + file + "' using 1:3 with lines dt 2" + colour + " notitle";
      }
    }
    ++index;
  }
  job.script = "set multiplot layout 2,2 title '" + title +
               "'\nset xlabel 'epoch'\nset xtics 1\nset key bottom right font ',9'\nset grid\n";
  for (const Panel& panel : panels) {
    job.script += std::string("set title '") + panel.title + "'\nset ylabel '" + panel.ylabel +
                  "'\nset yrange " + panel.yrange + "\n" + panel.lines + "\n";
  }
  job.script += "unset multiplot\n";
  return RenderSvg(job, svg_path, 1200, 800);
}

}  // namespace tlp::server
