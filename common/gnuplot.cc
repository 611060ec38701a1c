#include "common/gnuplot.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace tlp {

Status RenderSvg(const GnuplotJob& job, const std::string& svg_path, int width, int height) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return Status::FailedPrecondition(
        "plotting needs gnuplot (Debian package gnuplot-nox; scripts/setup.sh installs it)");
  }
  // The script runs in the scratch directory, so the output path must not be relative.
  const std::filesystem::path output = std::filesystem::absolute(svg_path);
  static std::atomic<int> jobs{0};
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("tlp-plot-" + std::to_string(getpid()) + "-" + std::to_string(jobs++));
  std::filesystem::create_directories(dir);
  for (const auto& [name, content] : job.data_files) std::ofstream(dir / name) << content;
  std::ofstream(dir / "plot.gp") << "set terminal svg size " << width << "," << height
                                 << " dynamic noenhanced font 'sans,11'\n"
                                 << "set output '" << output.string() << "'\n"
                                 << job.script;
  const std::string command = "cd '" + dir.string() + "' && gnuplot plot.gp 2>gnuplot.log";
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

}  // namespace tlp
