// Token embedding lookup and its scatter-add backward, fp32. Token ids are checked once on entry
// (DataError naming the position); the copies then run without checks. The backward is
// deterministic for any thread count: threads own column ranges and add tokens in order.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {}  // namespace

void embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) {
  check_embedding_forward(x, tokens, wte);
  const int64_t T = x.rows(), C = x.cols();
  const int32_t* ids = tokens.data();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    if (ids[t] == kOtherShard)
      std::fill_n(x.data() + t * x.ld(), C, 0.0f);
    else
      std::memcpy(x.data() + t * x.ld(), wte.data() + ids[t] * wte.ld(), size_t(C) * sizeof(float));
  }
}

// Rows of dwte are shared by repeated tokens, so threads split the columns instead: thread i owns
// columns [c0, c1) of every row and walks the tokens in order 0..T-1.
void embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) {
  check_embedding_backward(dwte, dx, tokens);
  const int64_t T = dx.rows(), C = dx.cols();
  constexpr int64_t kAlign = 16;  // column ranges start on a 64-byte line
  const int32_t* ids = tokens.data();
#pragma omp parallel if (T * C >= kParallelMinNumel)
  {
    const int64_t n_threads = omp_get_num_threads(), i = omp_get_thread_num();
    const int64_t per_thread = (C + n_threads * kAlign - 1) / (n_threads * kAlign) * kAlign;
    const int64_t c0 = std::min(C, i * per_thread), c1 = std::min(C, c0 + per_thread);
    for (int64_t t = 0; t < T; ++t) {
      if (ids[t] == kOtherShard) continue;
      const float* src = dx.data() + t * dx.ld();
      float* dst = dwte.data() + ids[t] * dwte.ld();
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace memo::cpu
