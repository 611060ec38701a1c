// The widest vector instruction set of this CPU, for the hand-written kernels (time encoding,
// fused attention) that are compiled once per set and pick one at run time.
//
// Not GCC's target_clones: its ifunc resolver runs while the program is being loaded, before
// ThreadSanitizer's runtime, and crashed TSan builds. The kernels compile without FMA
// contraction, so every level computes the same bits; only the speed differs.
#pragma once

namespace tlp::model {

enum class SimdLevel { kBaseline, kAvx2, kAvx512 };

// Detected once, on first call.
SimdLevel DetectSimdLevel();

// The version of a kernel for this CPU: one function pointer per level, all of the same type.
template <typename Function>
Function ForThisCpu(Function avx512, Function avx2, Function baseline) {
  switch (DetectSimdLevel()) {
    case SimdLevel::kAvx512:
      return avx512;
    case SimdLevel::kAvx2:
      return avx2;
    case SimdLevel::kBaseline:
      break;
  }
  return baseline;
}

}  // namespace tlp::model
