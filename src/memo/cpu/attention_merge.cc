// Merging two attentions of the same queries over disjoint key sets by their log-sum-exp (the
// online softmax of FlashAttention, here across the key blocks of ring attention).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "memo/backend/checks.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {

// Per (b, h, s): l = max + log(e^(lse - max) + e^(lse_part - max)); both weights are <= 1, so
// nothing overflows; a row that saw no key in one part (lse = -inf) takes the other's values.
void attention_merge(Tensor o, Tensor lse, ConstTensor o_part, ConstTensor lse_part) {
  check_attention_merge(o, lse, o_part, lse_part);
  const int64_t B = lse.dim(0), H = lse.dim(1), S = lse.dim(2), D = o.cols() / H;
#pragma omp parallel for schedule(static)
  for (int64_t bs = 0; bs < B * S; ++bs) {
    const int64_t b = bs / S, s = bs % S;
    for (int64_t h = 0; h < H; ++h) {
      float& l1 = lse(b, h, s);
      const float l2 = lse_part(b, h, s);
      const float mx = std::max(l1, l2);
      if (mx == -INFINITY) continue;
      const float e1 = std::exp(l1 - mx), e2 = std::exp(l2 - mx);
      const float l = mx + std::log(e1 + e2);
      const float w1 = std::exp(l1 - l), w2 = std::exp(l2 - l);
      float* oi = &o(bs, h * D);
      const float* pi = &o_part(bs, h * D);
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) oi[d] = oi[d] * w1 + pi[d] * w2;
      l1 = l;
    }
  }
}

}  // namespace memo::cpu
