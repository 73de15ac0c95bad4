// GradNoiseProbe: each micro-batch norm is exactly that of its gradient computed alone, the step's
// gradient is their sum, and the estimator gets one update per step.
#include "memo/train/grad_noise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/backend/space_array.h"
#include "memo/core/random.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/cpu/tensor_ops.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "test_util.h"

namespace memo {
namespace {

TEST(GradNoiseProbe, micro_norms_are_exact_and_the_step_gradient_is_their_sum) {
  ModelConfig c;
  c.hidden_size = 16, c.intermediate_size = 32, c.num_hidden_layers = 1, c.num_attention_heads = 2;
  c.num_key_value_heads = 1, c.max_position_embeddings = 16;
  Model model(c, cpu_backend());
  model.init(3);
  CachingAllocator alloc;
  KeepStrategy strategy(skeletal_layout(c, DType::kF32), alloc);
  const int64_t k = 3, rows = 2, seq = 8, n = model.params_numel();
  std::vector<int32_t> tokens(size_t(k * rows * seq + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(mix(5, i) % 256);
  const float scale = 1.0f / float(k * rows * seq);
  auto micro_in = [&](int64_t i) { return tokens.data() + i * rows * seq; };
  // reference: each micro-batch's gradient alone, and their sum in double
  std::vector<double> ref_sq(k, 0.0), ref_sum(size_t(n), 0.0);
  for (int64_t i = 0; i < k; ++i) {
    model.zero_grads();
    model.forward_backward(micro_in(i), micro_in(i) + 1, rows, seq, scale, strategy, alloc);
    for (int64_t j = 0; j < n; ++j) {
      ref_sq[size_t(i)] += double(k * k) * double(model.grads()[j]) * model.grads()[j];
      ref_sum[size_t(j)] += model.grads()[j];
    }
  }
  GradNoiseProbe probe(n, k, rows * seq, {}, cpu_backend());
  model.zero_grads();
  for (int64_t i = 0; i < k; ++i) {
    model.forward_backward(micro_in(i), micro_in(i) + 1, rows, seq, scale, strategy, alloc);
    probe.after_micro(model.grads_tensor(), i);
  }
  // the same fp32 gradients squared and summed in double, in another order: ~1e-15 relative
  for (int64_t i = 0; i < k; ++i)
    EXPECT_NEAR(probe.micro_sq_norms()[size_t(i)], ref_sq[size_t(i)], 1e-12 * ref_sq[size_t(i)])
        << i;
  double max_err = 0.0;
  for (int64_t j = 0; j < n; ++j)
    max_err = std::max(max_err, std::abs(model.grads()[j] - ref_sum[size_t(j)]));
  EXPECT_LT(max_err, 1e-7);  // fp32 sums of three terms of size <= ~1e-2: a few ulps
  EXPECT_FALSE(probe.estimator().b_simple().has_value());
  probe.end_step(cpu::sum_squares(View<const float>(model.grads(), {n})));
  EXPECT_EQ(probe.estimator().state().updates, 1);
  EXPECT_TRUE(probe.log_fields().at("gns_g2").is_number());
}

// With a loss mask micro-batch i writes (n_i / N) g_i: the probe rescales each norm by
// (N / n_i)^2, leaves out the micro-batch that counts nothing, and estimates with the harmonic mean
// of the n_i as the small batch and N as the big one (Note [Noise-scale accounting]).
TEST(GradNoiseProbe, micro_batches_that_count_different_tokens_are_weighed_by_their_counts) {
  const int64_t n = 3;
  SpaceArray<float> buffer(cpu_backend(), n, "grads");
  const std::vector<std::vector<float>> g = {{1, 2, 3}, {0, 0, 0}, {2, 0, 1}};
  const std::vector<int64_t> counts = {4, 0, 12};
  GradNoiseProbe probe(n, 3, 8, {}, cpu_backend());
  probe.set_micro_steps(3);
  probe.set_counts(counts, 16);
  std::vector<float> step(n, 0.0f);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      buffer.data()[j] = float(counts[size_t(i)]) / 16.0f * g[size_t(i)][size_t(j)];
      step[size_t(j)] += buffer.data()[j];
    }
    probe.after_micro(buffer.tensor({n}), i);
  }
  EXPECT_NEAR(probe.micro_sq_norms()[0], 14.0, 1e-9);
  EXPECT_EQ(probe.micro_sq_norms()[1], 0.0);
  EXPECT_NEAR(probe.micro_sq_norms()[2], 5.0, 1e-9);
  double big = 0.0;
  for (float v : step) big += double(v) * v;
  probe.end_step(big);
  scaling::NoiseScaleEstimator want;
  want.update({14.0, 5.0}, big, 2.0 / (1.0 / 4 + 1.0 / 12), 16.0);  // harmonic mean 6, N 16
  EXPECT_NEAR(*probe.estimator().g2(), *want.g2(), 1e-9);
  EXPECT_NEAR(*probe.estimator().trace(), *want.trace(), 1e-9);
  EXPECT_NEAR(*probe.estimator().g2(), (16 * big - 6 * 9.5) / 10, 1e-9);
  // a step with one micro-batch that counts anything has nothing to compare: no update
  probe.set_micro_steps(3);
  probe.set_counts(std::vector<int64_t>{0, 16, 0}, 16);
  for (int64_t i = 0; i < 3; ++i) probe.after_micro(buffer.tensor({n}), i);
  probe.end_step(big);
  EXPECT_EQ(probe.estimator().state().updates, 1);
}

TEST(GradNoiseProbe, micro_batch_count_changes_within_its_capacity_only) {
  GradNoiseProbe probe(10, 4, 8, {}, cpu_backend());
  EXPECT_EQ(probe.micro_steps(), 4);
  probe.set_micro_steps(2);
  EXPECT_EQ(probe.micro_sq_norms().size(), 2u);
  probe.set_micro_steps(4);
  EXPECT_EQ(probe.micro_sq_norms().size(), 4u);
  EXPECT_NE(
      test::error_message<Error>([&] { probe.set_micro_steps(5); }).find("at most 4 per rank"),
      std::string::npos);
  EXPECT_NE(test::error_message<Error>([&] { probe.set_micro_steps(1); }).find("need >= 2 in all"),
            std::string::npos);
  probe.set_micro_steps(1, 2);  // one micro-batch on each of two data-parallel ranks
  EXPECT_EQ(probe.micro_sq_norms().size(), 1u);
}

}  // namespace
}  // namespace memo
