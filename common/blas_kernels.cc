#include "common/blas_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

namespace tlp {
namespace {

// OpenBLAS's kernels for the widest vector units this CPU has, or null for none we know.
const char* BestCoreForThisCpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

}  // namespace

const char* BlasCoreName() {
  // Looked up at run time: the BLAS comes in through LibTorch and may not be OpenBLAS.
  using CoreName = char* (*)();
  const auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return core_name == nullptr ? "" : core_name();
}

void UseBestBlasKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string_view current = BlasCoreName();
  const char* best = BestCoreForThisCpu();
  if (current.empty() || best == nullptr) return;
  // The cores OpenBLAS falls back to for CPUs it does not know; anything else it chose itself.
  constexpr std::string_view kFallbacks[] = {"Prescott",   "Core2", "Nehalem",     "Penryn",
                                             "Dunnington", "Atom",  "Sandybridge", "unknown"};
  bool fell_back = false;
  for (std::string_view fallback : kFallbacks) fell_back |= current == fallback;
  if (!fell_back) return;
  setenv("OPENBLAS_CORETYPE", best, 1);
  execv("/proc/self/exe", argv);
}

}  // namespace tlp
