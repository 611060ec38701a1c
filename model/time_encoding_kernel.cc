#include "model/time_encoding_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "model/simd_level.h"

namespace tlp::model {
namespace {

// 2 pi = kTwoPiHigh + kTwoPiLow; kTwoPiHigh has 24 significant bits, so n * kTwoPiHigh is exact
// for |n| < 2^29 (|x| < ~3.4e9) and x - n * kTwoPiHigh is then exact too (Cody-Waite).
constexpr double kTwoPiHigh = 6.2831854820251465;
constexpr double kTwoPiLow = -1.748455600074497e-07;
constexpr double kInverseTwoPi = 0.15915494309189535;
// Adding and subtracting 1.5 * 2^52 rounds a double below 2^51 to the nearest integer, in a
// form the vectoriser keeps in SIMD registers (std::nearbyint is a call without SSE4.1).
constexpr double kRoundingShift = 6755399441055744.0;
// Rows with a larger |delta * omega| (deltas of ~95 years at the largest omega, 1) take
// std::cos, where the reduction above would no longer be exact.
constexpr double kLargestReducible = 3e9;

// Taylor coefficients of sin(h) = h * (1 + h^2 (c3 + h^2 (c5 + ...))) up to h^19: for
// |h| <= pi / 2 the remainder is below (pi/2)^21 / 21! = 2.6e-16.
constexpr double kSin3 = -1.0 / 6.0;
constexpr double kSin5 = 1.0 / 120.0;
constexpr double kSin7 = -1.0 / 5040.0;
constexpr double kSin9 = 1.0 / 362880.0;
constexpr double kSin11 = -1.0 / 39916800.0;
constexpr double kSin13 = 1.0 / 6227020800.0;
constexpr double kSin15 = -1.0 / 1307674368000.0;
constexpr double kSin17 = 1.0 / 355687428096000.0;
constexpr double kSin19 = -1.0 / 121645100408832000.0;

// One row: cos(delta * omega[j]) for all j. cos(r) = 1 - 2 sin^2(r / 2) keeps the polynomial on
// [-pi/2, pi/2] after reducing r to [-pi, pi]. Inlined into one function per instruction set.
__attribute__((always_inline)) inline void EncodeRowBody(double delta, const double* omega,
                                                         int64_t dim, float* out) {
  for (int64_t j = 0; j < dim; ++j) {
    const double x = delta * omega[j];
    const double turns = (x * kInverseTwoPi + kRoundingShift) - kRoundingShift;
    const double r = (x - turns * kTwoPiHigh) - turns * kTwoPiLow;
    const double h = 0.5 * r;
    const double h2 = h * h;
    double p = kSin19;
    p = p * h2 + kSin17;
    p = p * h2 + kSin15;
    p = p * h2 + kSin13;
    p = p * h2 + kSin11;
    p = p * h2 + kSin9;
    p = p * h2 + kSin7;
    p = p * h2 + kSin5;
    p = p * h2 + kSin3;
    const double sine = h + h * h2 * p;
    out[j] = static_cast<float>(1.0 - 2.0 * sine * sine);
  }
}

__attribute__((target("avx512f"))) void EncodeRowAvx512(double delta, const double* omega,
                                                        int64_t dim, float* out) {
  EncodeRowBody(delta, omega, dim, out);
}
__attribute__((target("avx2"))) void EncodeRowAvx2(double delta, const double* omega, int64_t dim,
                                                   float* out) {
  EncodeRowBody(delta, omega, dim, out);
}
void EncodeRowBaseline(double delta, const double* omega, int64_t dim, float* out) {
  EncodeRowBody(delta, omega, dim, out);
}

}  // namespace

void EncodeTimeDeltas(const double* deltas, int64_t count, const double* omega, int64_t dim,
                      float* out) {
  static const auto encode_row = ForThisCpu(EncodeRowAvx512, EncodeRowAvx2, EncodeRowBaseline);
  double largest_omega = 0;
  for (int64_t j = 0; j < dim; ++j) largest_omega = std::max(largest_omega, std::fabs(omega[j]));
  // ~100 cosines a row: 64 rows are a few microseconds of work, worth a thread hand-off.
  at::parallel_for(0, count, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* row = out + i * dim;
      if (std::fabs(deltas[i]) * largest_omega <= kLargestReducible) {
        encode_row(deltas[i], omega, dim, row);
      } else {  // also NaN and infinite deltas: cos() gives NaN for those
        for (int64_t j = 0; j < dim; ++j)
          row[j] = static_cast<float>(std::cos(deltas[i] * omega[j]));
      }
    }
  });
}

}  // namespace tlp::model
