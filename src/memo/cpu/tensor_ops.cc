#include "memo/cpu/tensor_ops.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/elem.h"

namespace memo::cpu {
namespace {

// Calls fn(row_pointer_dst, row_pointer_src, cols) for each row of 1-D or 2-D views.
int64_t rows_of(const Shape& s) { return s.ndim <= 1 ? 1 : s.dims[0]; }
int64_t cols_of(const Shape& s) { return s.ndim == 0 ? 1 : s.dims[s.ndim - 1]; }

void check_2d(const char* op, const Shape& s, bool contiguous) {
  MEMO_CHECK(s.ndim <= 2 || contiguous, op, ": view ", s, " must be 1-D, 2-D or contiguous");
}

}  // namespace

void convert(View<bf16> dst, View<const float> src) {
  const int64_t n = dst.numel();
  bf16* d = dst.data();
  const float* s = src.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
}

void convert(View<float> dst, View<const bf16> src) {
  const int64_t n = dst.numel();
  float* d = dst.data();
  const bf16* s = src.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_float(s[i]);
}

void copy(Tensor dst, ConstTensor src) {
  check_copy(dst, src);
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
  check_fill(dst, value);
  float* d = dst.data();
  const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] = value;
}

void scale(Tensor x, float factor) {
  check_scale(x, factor);
  float* d = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] *= factor;
}

template <class D, class S>
void add_into(View<D> dst, View<const S> src) {
  D* d = dst.data();
  const S* s = src.data();
  const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) put(d[i], wide(d[i]) + wide(s[i]));
}

void add_into(Tensor dst, ConstTensor src) {
  check_add_into(dst, src);
  add_into<float, float>(dst, src);
}

template void add_into<bf16, bf16>(View<bf16>, View<const bf16>);
template void add_into<bf16, float>(View<bf16>, View<const float>);
template void add_into<float, bf16>(View<float>, View<const bf16>);

// bf16 copies, fills and scales (Note [bf16 elementwise on the CPU]): the same rows or elements as
// the f32 ones, a copy moving the bits.
void copy(View<bf16> dst, View<const bf16> src) {
  if (dst.contiguous() && src.contiguous()) {
    std::memcpy(dst.data(), src.data(), size_t(dst.numel()) * sizeof(bf16));
    return;
  }
  const int64_t rows = dst.ndim() == 2 ? dst.rows() : 1, cols = dst.numel() / rows;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst.data() + r * (dst.ndim() == 2 ? dst.ld() : 0),
                src.data() + r * (src.ndim() == 2 ? src.ld() : 0), size_t(cols) * sizeof(bf16));
}

void fill(View<bf16> dst, float value) {
  const bf16 v = float_to_bf16(value);
  bf16* d = dst.data();
  const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] = v;
}

void scale(View<bf16> x, float factor) {
  bf16* d = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) put(d[i], wide(d[i]) * factor);
}

// One thread in index order: the loss of a micro-batch is this sum of its token losses, and it
// must not depend on the thread count.
double sum(ConstTensor x) {
  check_sum(x);
  const float* p = x.data();
  double total = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) total += p[i];
  return total;
}

double sum_squares(ConstTensor x) {
  check_sum_squares(x);
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

namespace memo::cpu {
namespace {

constexpr int64_t kNoiseProbeChunk = int64_t(1) << 14;  // elements per partial sum: fixed
constexpr int kLanes = 8;  // independent double accumulators: vectorisable, no reassociation

}  // namespace

int64_t noise_probe_chunks(int64_t n) { return (n + kNoiseProbeChunk - 1) / kNoiseProbeChunk; }

// One read of g per element: the probe's whole cost per micro-batch.
double noise_probe_pass(Tensor g_t, Tensor sum_t, NoiseProbePass pass, View<double> partial_t) {
  const int64_t n = g_t.numel(), chunks = noise_probe_chunks(n);
  check_optimizer_update("noise_probe_pass", g_t, g_t, {sum_t});
  MEMO_CHECK(partial_t.numel() >= chunks, "noise_probe_pass: ", partial_t.numel(),
             " partial sums for ", chunks, " chunks");
  float* g = g_t.data();
  float* sum = sum_t.data();
  double* partial = partial_t.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t c = 0; c < chunks; ++c) {
    double acc[kLanes] = {};
    const int64_t begin = c * kNoiseProbeChunk, end = std::min(n, begin + kNoiseProbeChunk);
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      for (int j = 0; j < kLanes; ++j) acc[j] += double(g[i + j]) * double(g[i + j]);
    for (int j = 0; i < end; ++i, ++j) acc[j] += double(g[i]) * double(g[i]);
    if (pass == NoiseProbePass::kFirst) {
#pragma omp simd
      for (i = begin; i < end; ++i) sum[i] = g[i], g[i] = 0.0f;
    } else if (pass == NoiseProbePass::kMiddle) {
#pragma omp simd
      for (i = begin; i < end; ++i) sum[i] += g[i], g[i] = 0.0f;
    } else {
#pragma omp simd
      for (i = begin; i < end; ++i) g[i] += sum[i];
    }
    double s = 0.0;
    for (int j = 0; j < kLanes; ++j) s += acc[j];
    partial[c] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

}  // namespace memo::cpu
