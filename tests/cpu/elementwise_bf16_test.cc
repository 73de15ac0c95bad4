// The CPU's row and elementwise kernels over bf16 tensors (Note [bf16 elementwise on the CPU]):
// each gives, bit for bit, what Bf16StorageBackend gives by widening its bf16 arguments around the
// f32 kernel, over awkward shapes (one row, odd widths, a strided column slice, rows enough for
// the threads), with bf16 and f32 working weights, and in place where the model calls it so.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "memo/backend/bf16_storage.h"
#include "memo/backend/checks.h"
#include "memo/cpu/cpu_backend.h"

namespace memo {
namespace {

CpuBackend& widening_cpu() {
  static CpuBackend be(
      CpuOptions{.bf16_products = false, .bf16_attention = false, .bf16_elementwise = false});
  return be;
}
CpuBackend& native_cpu() {
  static CpuBackend be(
      CpuOptions{.bf16_products = false, .bf16_attention = false, .bf16_elementwise = true});
  return be;
}

// A matrix of bf16 or f32 values (normal, scaled), with its rows `ld` elements apart.
struct Mat {
  int64_t rows, cols, ld;
  DType dtype;
  std::vector<bf16> b;
  std::vector<float> f;
  Mat(int64_t r, int64_t c, DType dt, uint64_t seed, float scale = 1.0f, int64_t pad = 0)
      : rows(r), cols(c), ld(c + pad), dtype(dt) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    const size_t n = size_t(rows * ld);
    if (dt == DType::kBF16)
      for (size_t i = 0; i < n; ++i) b.push_back(float_to_bf16(d(rng)));
    else
      for (size_t i = 0; i < n; ++i) f.push_back(d(rng));
  }
  // [rows, cols], rows ld apart; and all elements as one vector (ld == cols).
  Tensor t() {
    const Shape shape{rows, cols};
    const std::array<int64_t, kMaxDims> stride{ld, 1};
    if (dtype == DType::kBF16) return Tensor(View<bf16>(b.data(), shape, stride));
    return Tensor(View<float>(f.data(), shape, stride));
  }
  Tensor v() { return t().reshape({rows * cols}); }
  bool operator==(const Mat& o) const {
    // the bits (memcmp, not ==: NaN payloads and signed zeros count); an empty vector's data()
    // may be null, which memcmp must not get
    const auto same = [](const void* x, const void* y, size_t n) {
      return n == 0 || std::memcmp(x, y, n) == 0;
    };
    return b.size() == o.b.size() && f.size() == o.f.size() &&
           same(b.data(), o.b.data(), b.size() * sizeof(bf16)) &&
           same(f.data(), o.f.data(), f.size() * sizeof(float));
  }
};

// Runs `call` on copies of `args` through bf16 storage over each CPU backend and expects every
// argument (inputs too: a kernel must not write them) to end with the same bits.
void expect_same_bits(const std::string& what, const std::vector<Mat>& args,
                      const std::function<void(Backend&, std::vector<Mat>&)>& call) {
  std::vector<Mat> widened = args, native = args;
  Bf16StorageBackend wide_be(widening_cpu()), native_be(native_cpu());
  call(wide_be, widened);
  call(native_be, native);
  EXPECT_EQ(native_be.scratch_bytes(), 0) << what << ": a native kernel widened something";
  for (size_t i = 0; i < args.size(); ++i)
    EXPECT_TRUE(widened[i] == native[i]) << what << ": argument " << i;
}

struct RowShape {
  int64_t T, C, pad;
};
// One row; widths off the 8- and 16-lane vectors; a strided slice; rows for two threads. The norms
// also take f32 activations with bf16 weights (a bf16 model decoding in f32).
const RowShape kShapes[] = {{1, 24, 0}, {7, 37, 0}, {5, 64, 6}, {300, 257, 0}};

TEST(Bf16Elementwise, norms_give_the_bits_of_widening) {
  const DType b16 = DType::kBF16, f32 = DType::kF32;
  for (const RowShape& s : kShapes)
    for (auto [xt, wt] : {std::pair{b16, b16}, {b16, f32}, {f32, b16}}) {
      const std::string at = std::to_string(s.T) + "x" + std::to_string(s.C) +
                             (xt == b16 ? " bf16" : " f32") + " activations, " +
                             (wt == b16 ? "bf16" : "f32") + " weights";
      // y, inv_rms, x, w
      expect_same_bits("rmsnorm_forward " + at,
                       {Mat(s.T, s.C, xt, 1, 1.0f, s.pad), Mat(s.T, 1, f32, 2),
                        Mat(s.T, s.C, xt, 3, 3.0f, s.pad), Mat(1, s.C, wt, 4)},
                       [](Backend& be, std::vector<Mat>& m) {
                         be.rmsnorm_forward(m[0].t(), m[1].v(), m[2].t(), m[3].v(), 1e-5f);
                       });
      // dx (added into), dw, dy, x, w, inv_rms
      expect_same_bits("rmsnorm_backward " + at,
                       {Mat(s.T, s.C, xt, 5, 1.0f, s.pad), Mat(1, s.C, f32, 6),
                        Mat(s.T, s.C, xt, 7, 1.0f, s.pad), Mat(s.T, s.C, xt, 8, 2.0f, s.pad),
                        Mat(1, s.C, wt, 9), Mat(s.T, 1, f32, 10)},
                       [](Backend& be, std::vector<Mat>& m) {
                         be.rmsnorm_backward(m[0].t(), m[1].v(), m[2].t(), m[3].t(), m[4].v(),
                                             m[5].v());
                       });
      // y, mean, rstd, x, w, b
      expect_same_bits(
          "layernorm_forward " + at,
          {Mat(s.T, s.C, xt, 11, 1.0f, s.pad), Mat(s.T, 1, f32, 12), Mat(s.T, 1, f32, 13),
           Mat(s.T, s.C, xt, 14, 3.0f, s.pad), Mat(1, s.C, wt, 15), Mat(1, s.C, wt, 16)},
          [](Backend& be, std::vector<Mat>& m) {
            be.layernorm_forward(m[0].t(), m[1].v(), m[2].v(), m[3].t(), m[4].v(), m[5].v(), 1e-5f);
          });
      // dx (added into), dw, db, dy, x, w, mean, rstd
      expect_same_bits(
          "layernorm_backward " + at,
          {Mat(s.T, s.C, xt, 17, 1.0f, s.pad), Mat(1, s.C, f32, 18), Mat(1, s.C, f32, 19),
           Mat(s.T, s.C, xt, 20, 1.0f, s.pad), Mat(s.T, s.C, xt, 21, 2.0f, s.pad),
           Mat(1, s.C, wt, 22), Mat(s.T, 1, f32, 23, 0.1f), Mat(s.T, 1, f32, 24, 0.5f)},
          [](Backend& be, std::vector<Mat>& m) {
            be.layernorm_backward(m[0].t(), m[1].v(), m[2].v(), m[3].t(), m[4].t(), m[5].v(),
                                  m[6].v(), m[7].v());
          });
    }
}

TEST(Bf16Elementwise, activations_rope_biases_and_embeddings_give_the_bits_of_widening) {
  const DType b16 = DType::kBF16, f32 = DType::kF32;
  for (const RowShape& s : kShapes) {
    const std::string at = std::to_string(s.T) + "x" + std::to_string(s.C);
    // a, g (large enough to saturate the sigmoid), u; then dg, du, da, g, u
    expect_same_bits(
        "swiglu_forward " + at,
        {Mat(s.T, s.C, b16, 31, 1.0f, s.pad), Mat(s.T, s.C, b16, 32, 8.0f, s.pad),
         Mat(s.T, s.C, b16, 33, 1.0f, s.pad)},
        [](Backend& be, std::vector<Mat>& m) { be.swiglu_forward(m[0].t(), m[1].t(), m[2].t()); });
    expect_same_bits("swiglu_backward " + at,
                     {Mat(s.T, s.C, b16, 34, 1.0f, s.pad), Mat(s.T, s.C, b16, 35, 1.0f, s.pad),
                      Mat(s.T, s.C, b16, 36, 1.0f, s.pad), Mat(s.T, s.C, b16, 37, 8.0f, s.pad),
                      Mat(s.T, s.C, b16, 38, 1.0f, s.pad)},
                     [](Backend& be, std::vector<Mat>& m) {
                       be.swiglu_backward(m[0].t(), m[1].t(), m[2].t(), m[3].t(), m[4].t());
                     });
    expect_same_bits("gelu " + at,
                     {Mat(s.T, s.C, b16, 39, 1.0f, s.pad), Mat(s.T, s.C, b16, 40, 6.0f, s.pad),
                      Mat(s.T, s.C, b16, 41, 1.0f, s.pad)},
                     [](Backend& be, std::vector<Mat>& m) {
                       be.gelu_forward(m[0].t(), m[1].t());
                       be.gelu_backward(m[2].t(), m[0].t(), m[1].t());
                     });
    for (DType wt : {b16, f32})
      expect_same_bits(
          std::string("biases ") + at,
          {Mat(s.T, s.C, b16, 42, 1.0f, s.pad), Mat(1, s.C, wt, 43), Mat(1, s.C, f32, 44)},
          [](Backend& be, std::vector<Mat>& m) {
            be.bias_add(m[0].t(), m[1].v());
            be.bias_backward(m[2].v(), m[0].t());
          });
    // RoPE over heads of 8 (pairs (i, i + 4)): the C columns rounded down to whole heads.
    const int64_t heads = s.C / 8;
    expect_same_bits("rope " + at,
                     {Mat(s.T, heads * 8, b16, 45, 1.0f, s.pad), Mat(s.T + 3, 4, f32, 46),
                      Mat(s.T + 3, 4, f32, 47)},
                     [](Backend& be, std::vector<Mat>& m) {
                       be.rope_forward(m[0].t(), m[1].t(), m[2].t(), 8, 2);
                       be.rope_backward(m[0].t(), m[1].t(), m[2].t(), 8, 1);
                     });
    for (auto [xt, wt] : {std::pair{b16, b16}, {b16, f32}, {f32, b16}}) {
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < s.T; ++t) ids.push_back(int32_t(t * 7 % 5));
      if (s.T > 2) ids[1] = kOtherShard;
      expect_same_bits(
          std::string("embedding ") + at,
          {Mat(s.T, s.C, b16, 48, 1.0f, s.pad), Mat(5, s.C, wt, 49), Mat(5, s.C, f32, 50)},
          [&ids](Backend& be, std::vector<Mat>& m) {
            const View<const int32_t> tokens(ids.data(), {int64_t(ids.size())});
            be.embedding_forward(m[0].t(), tokens, m[1].t());
            be.embedding_backward(m[2].t(), m[0].t(), tokens);
          });
    }
  }
}

TEST(Bf16Elementwise, copies_fills_scales_and_adds_give_the_bits_of_widening) {
  const DType b16 = DType::kBF16, f32 = DType::kF32;
  for (const RowShape& s : kShapes) {
    const std::string at = std::to_string(s.T) + "x" + std::to_string(s.C);
    expect_same_bits("copy, fill, scale " + at,
                     {Mat(s.T, s.C, b16, 51, 1.0f, s.pad), Mat(s.T, s.C, b16, 52, 1.0f, s.pad),
                      Mat(s.T, s.C, b16, 53), Mat(s.T, s.C, b16, 54)},
                     [](Backend& be, std::vector<Mat>& m) {
                       be.copy(m[0].t(), m[1].t());  // strided rows where pad > 0
                       be.scale(m[2].t(), 0.3f);
                       be.fill(m[3].t(), 1.0f / 3.0f);
                     });
    for (DType dst : {b16, f32})
      for (DType src : {b16, f32})
        expect_same_bits("add_into " + at, {Mat(s.T * s.C, 1, dst, 54), Mat(s.T * s.C, 1, src, 55)},
                         [](Backend& be, std::vector<Mat>& m) { be.add_into(m[0].v(), m[1].v()); });
  }
}

}  // namespace
}  // namespace memo
