#include "client/plot.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tlp::client {

Status WriteEvaluationPlot(const EvaluationPlot& plot, const std::string& svg_path) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return Status::FailedPrecondition(
        "plotting needs gnuplot (Debian package gnuplot-nox; scripts/setup.sh installs it)");
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tlpctl-plot-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream scores(dir / "scores.dat");
    for (float logit : plot.positive_logits) scores << "1 " << logit << "\n";
    for (float logit : plot.negative_logits) scores << "0 " << logit << "\n";
    std::ofstream norms(dir / "norms.dat");
    for (const auto& [degree, norm] : plot.degree_norm) norms << degree << " " << norm << "\n";
  }
  std::ofstream script(dir / "plot.gp");
  script << "set terminal svg size 1100,450 dynamic font 'sans,11'\n"
         << "set output '" << svg_path << "'\n"
         << "set multiplot layout 1,2 title '" << plot.title << "'\n"
         << "binwidth = 0.5\n"
         << "bin(x) = binwidth * floor(x / binwidth) + binwidth / 2\n"
         << "set title 'score distribution (test period)'\n"
         << "set xlabel 'logit'\nset ylabel 'pairs'\nset style fill transparent solid 0.5\n"
         << "plot '" << (dir / "scores.dat").string()
         << "' using (bin($2)):($1 == 1 ? 1 : 0) smooth frequency with boxes"
         << " title 'positives' lc rgb '#1f77b4', \\\n"
         << "     '' using (bin($2)):($1 == 0 ? 1 : 0) smooth frequency with boxes"
         << " title 'random negatives' lc rgb '#d62728'\n"
         << "set title 'representation norm vs degree'\n"
         << "set xlabel 'degree (events touching the node)'\nset ylabel 'representation norm'\n"
         << "set logscale x\n"
         << "plot '" << (dir / "norms.dat").string()
         << "' using 1:2 with points pt 7 ps 0.4 lc rgb '#2ca02c' notitle\n"
         << "unset multiplot\n";
  script.close();
  const std::string command =
      "gnuplot '" + (dir / "plot.gp").string() + "' 2>'" + (dir / "gnuplot.log").string() + "'";
  const int code = std::system(command.c_str());
  std::string log;
  if (code != 0) {
    std::ifstream in(dir / "gnuplot.log");
    log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (code != 0) return Status::Internal("gnuplot failed: " + log);
  return Status::Ok();
}

}  // namespace tlp::client
