#include "client/plot.h"

#include <sstream>

#include "common/gnuplot.h"

namespace tlp::client {

Status WriteEvaluationPlot(const EvaluationPlot& plot, const std::string& svg_path) {
  std::ostringstream scores, norms;
  for (float logit : plot.positive_logits) scores << "1 " << logit << "\n";
  for (float logit : plot.negative_logits) scores << "0 " << logit << "\n";
  for (const auto& [degree, norm] : plot.degree_norm) norms << degree << " " << norm << "\n";
  GnuplotJob job;
  job.data_files = {{"scores.dat", scores.str()}, {"norms.dat", norms.str()}};
  job.script = "set multiplot layout 1,2 title '" + plot.title +
               "'\n"
               "binwidth = 0.5\n"
               "bin(x) = binwidth * floor(x / binwidth) + binwidth / 2\n"
               "set title 'score distribution (test period)'\n"
               "set xlabel 'logit'\nset ylabel 'pairs'\nset style fill transparent solid 0.5\n"
               "plot 'scores.dat' using (bin($2)):($1 == 1 ? 1 : 0) smooth frequency with boxes"
               " title 'positives' lc rgb '#1f77b4', \\\n"
               "     '' using (bin($2)):($1 == 0 ? 1 : 0) smooth frequency with boxes"
               " title 'random negatives' lc rgb '#d62728'\n"
               "set title 'representation norm vs degree'\n"
               "set xlabel 'degree (events touching the node)'\n"
               "set ylabel 'representation norm'\n"
               "set logscale x\n"
               "plot 'norms.dat' using 1:2 with points pt 7 ps 0.4 lc rgb '#2ca02c' notitle\n"
               "unset multiplot\n";
  return RenderSvg(job, svg_path);
}

}  // namespace tlp::client
