#include "model/simd_level.h"

namespace tlp::model {

SimdLevel DetectSimdLevel() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return SimdLevel::kAvx512;
    if (__builtin_cpu_supports("avx2")) return SimdLevel::kAvx2;
    return SimdLevel::kBaseline;
  }();
  return level;
}

}  // namespace tlp::model
