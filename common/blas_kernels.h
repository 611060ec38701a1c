// BLAS kernel choice for processes that run the model.
//
// Why: Debian 12's OpenBLAS (0.3.21) picks its kernels from the CPU model number, and for CPUs
// newer than its release (e.g. Intel family 6 model 207, which our 2-core machines have been
// seen with) it falls back to the SSE3 "Prescott" kernels although the CPU has AVX-512: float32
// GEMM ran at 31 GFLOP/s instead of 123-152, node memory updates at 127k events/s instead of
// 233k, scoring at 29k pairs/s instead of 44k (build/bench/model_bench, 2-core machine). OpenBLAS
// reads its choice once, at load, from OPENBLAS_CORETYPE; so when it chose a generic core on a
// CPU with AVX-512 or AVX2, the process sets that variable and executes itself again.
#pragma once

namespace tlp {

// Call first thing in main(), before any thread starts. Returns (doing nothing) when
// OPENBLAS_CORETYPE is already set, when the BLAS is not OpenBLAS, or when OpenBLAS chose a core
// matching the CPU; otherwise re-executes the program with the same arguments and never returns
// (unless exec fails, when it returns and the process goes on with the slow kernels).
void UseBestBlasKernels(char** argv);

// The OpenBLAS core in use ("Cooperlake", "Prescott", ...), or "" when the BLAS is not OpenBLAS.
const char* BlasCoreName();

}  // namespace tlp
