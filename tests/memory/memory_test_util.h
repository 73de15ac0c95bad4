// Shared by the memory tests: a tiny model config and its traced step.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "memo/core/random.h"
#include "memo/model/model.h"
#include "memo/train/device_plan.h"

namespace memo::testing {

// Three layers so a layer's sub-trace is compared against two others; grouped-query heads.
inline ModelConfig tiny_config() {
  ModelConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;  // D = 8
  c.num_key_value_heads = 2;
  c.vocab_size = 64;
  c.max_position_embeddings = 256;
  c.initializer_range = 0.2;
  return c;
}

// Bitwise: memcmp on the losses and on each step's gradient buffers (NaN-safe, unlike ==). Run has
// `losses` (doubles) and `grads` (one float vector per step).
template <class Run>
void expect_identical(const Run& want, const Run& got, const std::string& what) {
  ASSERT_EQ(want.losses.size(), got.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got.losses[i])) << what << " loss " << i;
    EXPECT_EQ(0, std::memcmp(&want.losses[i], &got.losses[i], sizeof(double)))
        << what << " loss " << i << ": " << want.losses[i] << " vs " << got.losses[i];
  }
  for (size_t s = 0; s < want.grads.size(); ++s)
    EXPECT_EQ(0, std::memcmp(want.grads[s].data(), got.grads[s].data(),
                             want.grads[s].size() * sizeof(float)))
        << what << " gradients of step " << s;
}

inline Trace tiny_trace(Model& model, int64_t batch, int64_t seq) {
  return trace_model_step(model, batch, seq, keep_strategy_factory());
}

// Token ids in [0, V), deterministic in seed.
inline std::vector<int32_t> tokens(const ModelConfig& c, int64_t n, uint64_t seed) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) out[i] = int32_t(mix(seed, i) % uint64_t(c.vocab_size));
  return out;
}

}  // namespace memo::testing
