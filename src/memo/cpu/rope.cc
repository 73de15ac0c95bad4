// Rotary position embedding, Hugging Face Llama convention (rotate_half: pairs (i, i + D/2)).
// The table is computed in double and stored in float; the rotation is elementwise fp32, parallel
// over rows and vectorised over i, so results do not depend on the thread count.
#include <cmath>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/elem.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {

// Rotates every head of x's rows by +angle (sign = 1) or -angle (sign = -1):
//   (x1, x2) -> (x1 cos - sign x2 sin, x2 cos + sign x1 sin).
template <class A>
void rotate(View<A> x, ConstTensor cos, ConstTensor sin, int64_t head_dim, int64_t first_row,
            float sign) {
  const int64_t T = x.rows(), S = cos.rows(), half = head_dim / 2;
  const int64_t n_heads = x.cols() / head_dim;
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = (first_row + t) % S;
    const float* cr = cos.data() + pos * cos.ld();
    const float* sr = sin.data() + pos * sin.ld();
    for (int64_t h = 0; h < n_heads; ++h) {
      A* x1 = x.data() + t * x.ld() + h * head_dim;
      A* x2 = x1 + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float a = wide(x1[i]), b = wide(x2[i]), s = sign * sr[i];
        put(x1[i], a * cr[i] - b * s);
        put(x2[i], b * cr[i] + a * s);
      }
    }
  }
}

}  // namespace

void rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq, double attention_factor,
                int64_t first_position) {
  check_rope_table(cos, sin, inv_freq, attention_factor, first_position);
  const int64_t S = cos.rows(), half = cos.cols();
  for (int64_t p = 0; p < S; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(first_position + p) * inv_freq[size_t(i)];
      cos(p, i) = float(std::cos(angle) * attention_factor);
      sin(p, i) = float(std::sin(angle) * attention_factor);
    }
  }
}

void rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim, int64_t first_row) {
  check_rope_forward(x, cos, sin, head_dim, first_row);
  rotate<float>(x, cos, sin, head_dim, first_row, 1.0f);
}
void rope_forward(View<bf16> x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                  int64_t first_row) {
  rotate<bf16>(x, cos, sin, head_dim, first_row, 1.0f);
}

// The rotation is orthogonal, so its transpose (rotation by -angle) maps dy to dx.
void rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                   int64_t first_row) {
  check_rope_backward(dx, cos, sin, head_dim, first_row);
  rotate<float>(dx, cos, sin, head_dim, first_row, -1.0f);
}
void rope_backward(View<bf16> dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                   int64_t first_row) {
  rotate<bf16>(dx, cos, sin, head_dim, first_row, -1.0f);
}

}  // namespace memo::cpu
