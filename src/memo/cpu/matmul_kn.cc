// matmul_token_panels_kn: the per-token product for weights stored [in, out] (GPT-2's Conv1D
// layout, and column slices of its fused c_attn weight). Same panels as matmul_token_panels, so
// a token range rebuilt from a panel boundary is bit-identical (see Note [Token panels] in
// matmul.cc); only the BLAS transpose flag differs.
#include <algorithm>

#include "memo/cpu/kernels.h"

namespace memo::cpu {

void matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  MEMO_CHECK(c.ndim() == 2 && a.ndim() == 2 && c.rows() == a.rows(), "matmul_token_panels_kn: c ",
             c.shape(), " a ", a.shape(), " (need the same token rows)");
  for (int64_t r0 = 0; r0 < c.rows(); r0 += kTokenPanelRows) {
    const int64_t r1 = std::min(c.rows(), r0 + kTokenPanelRows);
    matmul(c.slice_rows(r0, r1), a.slice_rows(r0, r1), b, false, false, 1.0f, beta);
  }
}

}  // namespace memo::cpu
