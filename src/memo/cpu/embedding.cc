// Token embedding lookup and its scatter-add backward, fp32. Token ids are checked once on entry
// (DataError naming the position); the copies then run without checks. The backward is
// deterministic for any thread count: threads own column ranges and add tokens in order.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/elem.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {}  // namespace

// A row is copied as it is (f32 or bf16 rows of the same dtype: a bit copy) or, from f32 weights
// into bf16 activations, rounded.
template <class A, class W>
void embedding_forward(View<A> x, View<const int32_t> tokens, View<const W> wte) {
  const int64_t T = x.rows(), C = x.cols();
  const int32_t* ids = tokens.data();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    A* dst = x.data() + t * x.ld();
    if (ids[t] == kOtherShard) {
      for (int64_t c = 0; c < C; ++c) put(dst[c], 0.0f);
    } else if constexpr (std::is_same_v<A, W>) {
      std::memcpy(dst, wte.data() + ids[t] * wte.ld(), size_t(C) * sizeof(A));
    } else {
      const W* src = wte.data() + ids[t] * wte.ld();
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) put(dst[c], wide(src[c]));
    }
  }
}

void embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) {
  check_embedding_forward(x, tokens, wte);
  embedding_forward<float, float>(x, tokens, wte);
}

// Rows of dwte are shared by repeated tokens, so threads split the columns instead: thread i owns
// columns [c0, c1) of every row and walks the tokens in order 0..T-1.
template <class A>
void embedding_backward(Tensor dwte, View<const A> dx, View<const int32_t> tokens) {
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
      const A* src = dx.data() + t * dx.ld();
      float* dst = dwte.data() + ids[t] * dwte.ld();
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) dst[c] += wide(src[c]);
    }
  }
}

void embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) {
  check_embedding_backward(dwte, dx, tokens);
  embedding_backward<float>(dwte, dx, tokens);
}

template void embedding_forward<bf16, bf16>(View<bf16>, View<const int32_t>, View<const bf16>);
template void embedding_forward<bf16, float>(View<bf16>, View<const int32_t>, View<const float>);
template void embedding_backward<bf16>(Tensor, View<const bf16>, View<const int32_t>);

template void embedding_forward<float, bf16>(View<float>, View<const int32_t>, View<const bf16>);

template void embedding_forward<float, float>(View<float>, View<const int32_t>, View<const float>);
}  // namespace memo::cpu
