// The fixed cosine time encoding on the CPU in one pass: float64 deltas in, float32 features out.
//
// out[i * dim + j] = float(cos(deltas[i] * omega[j])).
//
// Why by hand: torch builds the float64 product [n, dim], takes Sleef's float64 cosine of it and
// casts the result (three passes over 20 bytes per output); for a 1,000-candidate TopK that is
// 10,000 x 100 cosines and was the largest single cost of the pass. Here the product and the
// argument reduction stay in float64 (deltas of ~1e9 s keep their low digits, as before) and a
// short polynomial on the reduced argument replaces the general cosine: the result differs from
// float64 cos() by < 1e-14 before rounding to float32, so it is that value rounded, but for the
// rare argument that lands that close to a float32 rounding boundary. No FMA contraction, so
// every CPU (AVX-512, AVX2 or plain SSE2 build of the loop) computes the same bits.
#pragma once

#include <cstdint>

namespace tlp::model {

// deltas: [count]; omega: [dim]; out: [count, dim], row-major. Non-finite deltas give NaN.
void EncodeTimeDeltas(const double* deltas, int64_t count, const double* omega, int64_t dim,
                      float* out);

}  // namespace tlp::model
