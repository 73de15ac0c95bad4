// Architecture::recompute_tokens rebuilds every per-token field of a panel-aligned token range bit
// for bit as the architecture's forward wrote it (across sequence boundaries, with a partial last
// panel), writes nothing outside the range, and refuses a range that does not start on a panel
// boundary. For LLaMA and for GPT-2 layers (learned and rotary positions).
#include "memo/model/architecture.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/backend/backend.h"
#include "memo/backend/caching_allocator.h"
#include "memo/core/random.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/cpu/kernels.h"
#include "memo/cpu/tensor_ops.h"
#include "memo/model/model.h"
#include "model/torch_compare_util.h"

namespace memo {
namespace {

void check_rebuild(const ModelConfig& cfg) {
  Model model(cfg, cpu_backend());
  model.init(3);
  test::perturb_biases_and_norms(model, 11);  // so that the rebuild reads them too
  const int64_t B = 3, S = 111, T = B * S, C = cfg.hidden_size, half = cfg.head_dim() / 2;
  std::vector<float> cos(size_t(S * half)), sin(cos.size());
  cpu::rope_table(View<float>(cos.data(), {S, half}), View<float>(sin.data(), {S, half}),
                  rope_inv_freq(cfg.head_dim(), cfg.rope_theta), 1.0, 0);
  CachingAllocator alloc;
  LayerContext ctx{&cfg,
                   B,
                   S,
                   View<const float>(cos.data(), {S, half}),
                   View<const float>(sin.data(), {S, half}),
                   &alloc,
                   &cpu_backend(),
                   Parallel{},
                   DType::kF32,
                   nullptr};
  if (!cfg.uses_rope()) ctx.rope_cos = ctx.rope_sin = View<const float>();
  const Architecture& arch = architecture(cfg.arch);
  const std::vector<SkeletalField> fields = arch.skeletal_fields(cfg, DType::kF32, 1);
  SavedActs fwd, re;
  for (size_t i = 0; i < fields.size(); ++i) {
    fwd[int(i)] =
        alloc.acquire(fields[i].name, fields[i].shape(B, S), ActKind::kSaved, DType::kF32);
    re[int(i)] = alloc.acquire(fields[i].name, fields[i].shape(B, S), ActKind::kSaved, DType::kF32);
  }
  const std::vector<float> x = test::random_floats(T * C, 8);
  std::memcpy(fwd.x().data(), x.data(), x.size() * sizeof(float));
  std::vector<float> y(size_t(T * C));
  arch.forward(View<float>(y.data(), {T, C}), fwd, model.weights().layers[0], ctx);

  // Rows below r0 hold a sentinel no kernel computes, so a write there shows; rows from r0 start
  // as NaN, so a row left unrebuilt shows.
  constexpr float kSentinel = -12345.5f;
  for (int64_t r0 : {int64_t(0), cpu::kTokenPanelRows, 2 * cpu::kTokenPanelRows}) {
    // what memo moves whole (x, attn, lse) is copied; per-token fields are rebuilt from row r0
    for (size_t i = 0; i < fields.size(); ++i) {
      const View<float>& dst = re[int(i)];
      const View<float>& src = fwd[int(i)];
      if (fields[i].per_token) {
        cpu::fill(dst, std::numeric_limits<float>::quiet_NaN());
        if (r0 > 0) cpu::fill(dst.slice_rows(0, r0), kSentinel);
      } else {
        cpu::copy(dst, src);
      }
    }
    arch.recompute_tokens(re, r0, T, model.weights().layers[0], ctx);
    for (size_t i = 0; i < fields.size(); ++i) {
      const SkeletalField& f = fields[i];
      const View<float>& a = fwd[int(i)];
      const View<float>& b = re[int(i)];
      if (!f.per_token) {
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), size_t(a.bytes()))) << f.name;
        continue;
      }
      const View<float> a_rebuilt = a.slice_rows(r0, T), b_rebuilt = b.slice_rows(r0, T);
      EXPECT_EQ(0, std::memcmp(a_rebuilt.data(), b_rebuilt.data(), size_t(a_rebuilt.bytes())))
          << f.name << " from row " << r0;
      const View<float> kept = b.slice_rows(0, r0);
      for (int64_t i = 0; i < kept.numel(); ++i)
        ASSERT_EQ(kept.data()[i], kSentinel)
            << f.name << ": element " << i << " below row " << r0 << " was written";
    }
  }
  EXPECT_THROW(arch.recompute_tokens(re, 5, T, model.weights().layers[0], ctx), Error);
  for (int i = int(fields.size()) - 1; i >= 0; --i) {
    alloc.release(re[i]);
    alloc.release(fwd[i]);
  }
}

ModelConfig llama_layer_config(Arch arch) {
  ModelConfig cfg;
  cfg.arch = arch;
  cfg.hidden_size = 48;
  cfg.intermediate_size = 80;
  cfg.num_hidden_layers = 1;
  cfg.num_attention_heads = 6;
  cfg.num_key_value_heads = 2;
  cfg.vocab_size = 31;
  cfg.initializer_range = 0.2;
  return cfg;
}

TEST(LayerRecomputeTokens, rebuilt_rows_equal_the_forward_bitwise) {
  check_rebuild(llama_layer_config(Arch::kLlama));
}

// Qwen2's layer: LLaMA's with q, k and v biases, added per row before RoPE.
TEST(LayerRecomputeTokens, qwen2_rebuilt_rows_equal_the_forward_bitwise) {
  check_rebuild(llama_layer_config(Arch::kQwen2));
}

// Qwen3's layer: q_norm and k_norm per head (their inputs and statistics rebuilt too), head_dim 16
// (H*D = 96 over C = 48), with and without attention_bias.
TEST(LayerRecomputeTokens, qwen3_rebuilt_rows_equal_the_forward_bitwise) {
  for (bool bias : {false, true}) {
    ModelConfig cfg = llama_layer_config(Arch::kQwen3);
    cfg.explicit_head_dim = 16;
    cfg.attention_bias = bias;
    check_rebuild(cfg);
  }
}

// LLaMA's attention_bias (q, k, v, o) and mlp_bias (gate, up; down is never rebuilt).
TEST(LayerRecomputeTokens, llama_biases_rebuilt_rows_equal_the_forward_bitwise) {
  ModelConfig cfg = llama_layer_config(Arch::kLlama);
  cfg.attention_bias = true;
  cfg.mlp_bias = true;
  check_rebuild(cfg);
}

ModelConfig gpt_layer_config(PositionEmbedding pos) {
  ModelConfig cfg;
  cfg.arch = Arch::kGpt2;
  cfg.position_embedding = pos;
  cfg.hidden_size = 48;
  cfg.intermediate_size = 4 * 48;
  cfg.num_hidden_layers = 1;
  cfg.num_attention_heads = 6;
  cfg.num_key_value_heads = 6;
  cfg.vocab_size = 31;
  cfg.max_position_embeddings = 128;
  cfg.tie_word_embeddings = true;
  cfg.initializer_range = 0.2;
  return cfg;
}

TEST(GptLayerRecomputeTokens, rebuilt_rows_equal_the_forward_bitwise_learned_positions) {
  check_rebuild(gpt_layer_config(PositionEmbedding::kLearned));
}

TEST(GptLayerRecomputeTokens, rebuilt_rows_equal_the_forward_bitwise_rotary_positions) {
  check_rebuild(gpt_layer_config(PositionEmbedding::kRope));
}

}  // namespace
}  // namespace memo
