#include "memo/core/shape_only.h"
#include "memo/kernels/cpu/tensor_ops.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <omp.h>

namespace memo::cpu {
namespace {

// Calls fn(row_pointer_dst, row_pointer_src, cols) for each row of 1-D or 2-D views.
int64_t rows_of(const Shape& s) { return s.ndim <= 1 ? 1 : s.dims[0]; }
int64_t cols_of(const Shape& s) { return s.ndim == 0 ? 1 : s.dims[s.ndim - 1]; }

void check_2d(const char* op, const Shape& s, bool contiguous) {
  MEMO_CHECK(s.ndim <= 2 || contiguous, op, ": view ", s, " must be 1-D, 2-D or contiguous");
}

}  // namespace

void copy(Tensor dst, ConstTensor src) {
  MEMO_CHECK(dst.numel() == src.numel(), "copy: dst ", dst.shape(), " src ", src.shape());
  if (shapes_only()) return;  // Note [Shape-only mode]
  if (dst.contiguous() && src.contiguous()) {
    std::memcpy(dst.data(), src.data(), size_t(dst.bytes()));
    return;
  }
  check_2d("copy", dst.shape(), false);
  MEMO_CHECK(same_shape(dst, src), "copy: dst ", dst.shape(), " src ", src.shape());
  const int64_t rows = rows_of(dst.shape()), cols = cols_of(dst.shape());
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dst.data() + r * (dst.ndim() == 2 ? dst.ld() : 0);
    const float* s = src.data() + r * (src.ndim() == 2 ? src.ld() : 0);
    std::memcpy(d, s, size_t(cols) * sizeof(float));
  }
}

void fill(Tensor dst, float value) {
  MEMO_CHECK(dst.contiguous(), "fill: view ", dst.shape(), " must be contiguous");
  if (shapes_only()) return;  // Note [Shape-only mode]
  float* d = dst.data();
  const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] = value;
}

void scale(Tensor x, float factor) {
  MEMO_CHECK(x.contiguous(), "scale: view ", x.shape(), " must be contiguous");
  if (shapes_only()) return;  // Note [Shape-only mode]
  float* d = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] *= factor;
}

void add_into(Tensor dst, ConstTensor src) {
  MEMO_CHECK(dst.contiguous() && src.contiguous() && dst.numel() == src.numel(), "add_into: dst ",
             dst.shape(), " src ", src.shape());
  if (shapes_only()) return;  // Note [Shape-only mode]
  float* d = dst.data();
  const float* s = src.data();
  const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
}

double sum_squares(ConstTensor x) {
  MEMO_CHECK(x.contiguous(), "sum_squares: view ", x.shape(), " must be contiguous");
  if (shapes_only()) return 0.0;  // Note [Shape-only mode]
  // Fixed chunks summed in a fixed order: the result does not depend on the thread count.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t n = x.numel();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(size_t(chunks), 0.0);  // not a hot path: once per step
  const float* p = x.data();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0.0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) s += double(p[i]) * p[i];
    partial[size_t(c)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace memo::cpu
