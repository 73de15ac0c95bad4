// Shared pieces of the optimiser tests: a tiny multi-tensor layout (matrices and vectors, awkward
// sizes), deterministic parameters and per-step gradients, and a float64 parameter copy for the
// plain reference implementations written in each test.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "memo/core/buffer.h"
#include "memo/core/random.h"
#include "memo/model/config.h"
#include "memo/model/params.h"
#include "memo/optim/optimizer.h"

namespace memo::test {

// 12 tensors: [7, 6] embedding and head, [6, 6], [3, 6], [10, 6], [6, 10] projections, [6] norms.
inline ModelConfig tiny_config() {
  ModelConfig c;
  c.hidden_size = 6;
  c.intermediate_size = 10;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.vocab_size = 7;
  return c;
}

// Parameters ~ N(0, 0.5) plus 1 on the norms; fills the padding with NaN so a read of it shows.
inline void fill_params(const ParamLayout& layout, float* p, uint64_t seed) {
  for (int64_t j = 0; j < layout.total_numel(); ++j) p[j] = NAN;
  for (size_t i = 0; i < layout.params().size(); ++i) {
    const ParamInfo& info = layout.params()[i];
    NormalStream rng(seed, i);
    for (int64_t j = 0; j < info.numel; ++j)
      p[info.offset + j] = float((info.is_matrix() ? 0.0 : 1.0) + 0.5 * rng.next());
  }
}

// Gradient of step t: N(0.1, 1) per element, scaled per tensor so magnitudes differ by tensor.
inline void fill_grads(const ParamLayout& layout, float* g, uint64_t seed, int64_t t) {
  for (int64_t j = 0; j < layout.total_numel(); ++j) g[j] = NAN;
  for (size_t i = 0; i < layout.params().size(); ++i) {
    const ParamInfo& info = layout.params()[i];
    NormalStream rng(mix(seed, uint64_t(t)), i);
    const double scale = 0.3 + 0.2 * double(i % 4);
    for (int64_t j = 0; j < info.numel; ++j) g[info.offset + j] = float(scale * (0.1 + rng.next()));
  }
}

// Per-tensor float64 copies (the reference's parameters), without padding.
inline std::vector<std::vector<double>> to_double(const ParamLayout& layout, const float* p) {
  std::vector<std::vector<double>> out;
  for (const ParamInfo& info : layout.params())
    out.emplace_back(p + info.offset, p + info.offset + info.numel);
  return out;
}

// |p - ref| <= atol + rtol |ref| for every element, reporting the first failure by tensor name.
inline void expect_close(const ParamLayout& layout, const float* p,
                         const std::vector<std::vector<double>>& ref, double atol, double rtol) {
  for (size_t i = 0; i < layout.params().size(); ++i) {
    const ParamInfo& info = layout.params()[i];
    for (int64_t j = 0; j < info.numel; ++j) {
      const double want = ref[i][size_t(j)], got = p[info.offset + j];
      if (!(std::abs(got - want) <= atol + rtol * std::abs(want))) {
        ADD_FAILURE() << info.name << "[" << j << "]: got " << got << ", want " << want << " (atol "
                      << atol << ", rtol " << rtol << ")";
        return;
      }
    }
  }
}

inline double sign_of(double x) { return double((x > 0.0) - (x < 0.0)); }

}  // namespace memo::test

namespace memo::test {

using Params64 = std::vector<std::vector<double>>;  // per tensor, float64, no padding

// Runs `steps` steps of opt and of reference(t, lr, p, g) (t counts from 1; p and g per tensor in
// float64) on the same parameters and gradients, comparing after every step. The learning rate
// changes each step, as under a schedule.
template <class Reference>
void run_against_reference(const ParamLayout& layout, Optimizer& opt, Reference reference,
                           int steps, double atol, double rtol) {
  AlignedBuffer<float> p(layout.total_numel()), g(layout.total_numel());
  fill_params(layout, p.data(), 11);
  Params64 p64 = to_double(layout, p.data());
  for (int t = 1; t <= steps; ++t) {
    const double lr = 0.01 * (1.0 + 0.25 * t);
    fill_grads(layout, g.data(), 22, t);
    opt.step(p.view(), g.view(), lr);
    reference(t, lr, p64, to_double(layout, g.data()));
    SCOPED_TRACE(::testing::Message() << opt.name() << " step " << t);
    expect_close(layout, p.data(), p64, atol, rtol);
  }
  EXPECT_EQ(opt.steps_done(), steps);
}

// Zeroed float64 state shaped like the parameters.
inline Params64 zeros_like(const ParamLayout& layout) {
  Params64 out;
  for (const ParamInfo& info : layout.params()) out.emplace_back(size_t(info.numel), 0.0);
  return out;
}

// fp32 storage rounds p and each state buffer every step (2^-24 relative); over 6 steps of
// O(1) parameters with O(0.01) updates the drift from float64 stays below 1e-6.
inline constexpr double kAtol = 2e-6, kRtol = 2e-6;
inline constexpr int kSteps = 6;

}  // namespace memo::test
