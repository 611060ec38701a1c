// Stopwatch: wall time elapsed on the steady clock, in seconds: what tlp logs, exports as
// metrics and reports as durations. One definition instead of a helper in every file that times
// something.
#pragma once

#include <chrono>

namespace tlp {

class Stopwatch {
 public:
  using Clock = std::chrono::steady_clock;

  Stopwatch() : start_(Clock::now()) {}

  // Seconds since construction or the last Lap.
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  // Seconds since construction or the last Lap, and starts the next lap now: consecutive stages
  // of one operation timed without a gap between them.
  double Lap() {
    const Clock::time_point now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - start_).count();
    start_ = now;
    return seconds;
  }

 private:
  Clock::time_point start_;
};

}  // namespace tlp
