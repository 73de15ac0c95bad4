// Bias gradient: db[c] += sum_t dy[t,c]. Parallel over column blocks; each column's tokens are
// summed in order 0..T-1 in double, so the result is the same for any thread count and its only
// error is the final rounding.
#include <algorithm>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/elem.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {
// Columns one thread sums over all tokens at a time: a double accumulator on the stack.
constexpr int64_t kBiasColBlock = 128;
}  // namespace

template <class A>
void bias_backward(Tensor db, View<const A> dy) {
  const int64_t T = dy.rows(), C = dy.cols();
  const int64_t n_blocks = (C + kBiasColBlock - 1) / kBiasColBlock;
  float* dbp = db.data();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t blk = 0; blk < n_blocks; ++blk) {
    const int64_t c0 = blk * kBiasColBlock;
    const int64_t n = std::min(kBiasColBlock, C - c0);
    double acc[kBiasColBlock] = {};
    for (int64_t t = 0; t < T; ++t) {
      const A* dyr = dy.data() + t * dy.ld() + c0;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) acc[c] += double(wide(dyr[c]));
    }
    for (int64_t c = 0; c < n; ++c) dbp[c0 + c] = float(double(dbp[c0 + c]) + acc[c]);
  }
}

void bias_backward(Tensor db, ConstTensor dy) {
  check_bias_backward(db, dy);
  bias_backward<float>(db, dy);
}

template void bias_backward<bf16>(Tensor, View<const bf16>);

}  // namespace memo::cpu

namespace memo::cpu {

// Each element is one float add, so a row's result does not depend on which rows share the call.
template <class A, class W>
void bias_add(View<A> y, View<const W> b) {
  const int64_t T = y.rows(), C = y.cols();
  const W* bp = b.data();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    A* yr = y.data() + t * y.ld();
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) put(yr[c], wide(yr[c]) + wide(bp[c]));
  }
}

void bias_add(Tensor y, ConstTensor b) {
  check_bias_add(y, b);
  bias_add<float, float>(y, b);
}

template void bias_add<bf16, bf16>(View<bf16>, View<const bf16>);
template void bias_add<bf16, float>(View<bf16>, View<const float>);

template void bias_add<float, bf16>(View<float>, View<const bf16>);

template void bias_add<float, float>(View<float>, View<const float>);
}  // namespace memo::cpu
