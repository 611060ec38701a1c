#include "server/attention_monitor_plot.h"

#include <map>
#include <sstream>
#include <utility>

#include "common/gnuplot.h"

namespace tlp::server {

Status WriteAttentionMonitorPlot(const std::vector<model::EpochRecord>& history,
                                 const std::string& title, const std::string& svg_path) {
  // One data file per head: epoch, rank, bound, effective rank, key coherence.
  std::map<std::pair<std::string, int64_t>, std::ostringstream> rows;
  for (const model::EpochRecord& epoch : history) {
    for (const model::HeadMonitor& head : epoch.attention) {
      rows[{head.module, head.head}] << epoch.epoch << " " << head.field.rank << " "
                                     << head.field.rank_bound << " " << head.field.effective_rank
                                     << " " << head.field.key_coherence << "\n";
    }
  }
  if (rows.empty()) return Status::FailedPrecondition("no attention monitor figures to plot");
  GnuplotJob job;
  std::string rank_lines, effective_lines, coherence_lines;
  int index = 0;
  for (auto& [key, data] : rows) {
    const std::string file = "head" + std::to_string(index) + ".dat";
    const std::string label = key.first + " head " + std::to_string(key.second);
    job.data_files.emplace_back(file, data.str());
    const std::string colour = " lc " + std::to_string(index + 1);
    const std::string separator = index == 0 ? "plot " : ", \\\n     ";
    rank_lines += separator + "'" + file + "' using 1:2 with linespoints pt 7" + colour +
                  " title '" + label + "', '" + file + "' using 1:3 with lines dt 2" + colour +
                  " notitle";
    effective_lines += separator + "'" + file + "' using 1:4 with linespoints pt 7" + colour +
                       " title '" + label + "'";
    coherence_lines += separator + "'" + file + "' using 1:5 with linespoints pt 7" + colour +
                       " title '" + label + "'";
    ++index;
  }
  job.script = "set multiplot layout 1,3 title '" + title +
               "'\n"
               "set xlabel 'epoch'\nset xtics 1\nset key bottom right font ',9'\nset grid\n"
               "set title 'energy field rank (dashed: bound)'\nset ylabel 'numerical rank'\n"
               "set yrange [0:*]\n" +
               rank_lines +
               "\n"
               "set title 'energy field effective rank'\nset ylabel 'exp(entropy of spectrum)'\n"
               "set yrange [1:*]\n" +
               effective_lines +
               "\n"
               "set title 'key coherence (1 = incoherent)'\nset ylabel '(n/r) max leverage'\n" +
               coherence_lines + "\nunset multiplot\n";
  return RenderSvg(job, svg_path, 1500, 450);
}

}  // namespace tlp::server
