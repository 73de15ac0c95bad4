#include "memo/model/presets.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "memo/core/error.h"
#include "memo/model/flops.h"
#include "memo/model/model.h"
#include "memo/model/params.h"
#include "test_util.h"

namespace memo {
namespace {

using test::error_message;

TEST(Presets, gpt_shapes_follow_the_memo_paper_table) {
  const auto presets = gpt_presets();
  ASSERT_EQ(presets.size(), 4u);
  for (const GptPreset& p : presets) {
    EXPECT_EQ(p.ffn, 4 * p.hidden) << p.name;
    EXPECT_EQ(p.vocab, 50257) << p.name;
    EXPECT_EQ(p.hidden % p.heads, 0) << p.name;
  }
  GptPreset g30 = gpt_preset("GPT-30B");
  EXPECT_EQ(g30.layers, 48);
  EXPECT_EQ(g30.hidden, 7168);
  EXPECT_EQ(g30.heads, 56);
}

// 12 L C^2 + 13 L C + V C + 2C (see GptPreset::param_count); tied embedding, no positions.
TEST(Presets, gpt_parameter_counts) {
  EXPECT_EQ(gpt_preset("gpt-7b").param_count(), 6'650'015'744);
  EXPECT_EQ(gpt_preset("gpt-13b").param_count(), 12'842'900'480);
  EXPECT_EQ(gpt_preset("gpt-30b").param_count(), 29'959'738'368);
  EXPECT_EQ(gpt_preset("gpt-65b").param_count(), 64'844'750'848);
}

// The engine's GPT-2 layout with rotary positions has exactly the paper model's parameters, at
// the 1M-token length the paper plans for (a learned table would add 1M x C).
TEST(Presets, gpt_preset_configs_have_the_preset_parameter_counts) {
  for (const GptPreset& p : gpt_presets()) {
    const ModelConfig c = gpt_preset_config(p, int64_t(1) << 20);
    EXPECT_TRUE(c.is_gpt2() && c.uses_rope()) << p.name;
    EXPECT_EQ(ParamLayout(c).count(), p.param_count()) << p.name;
  }
}

// Per token, forward: L (2 (3C^2 + C^2 + 2 C F) + causal attention 2 C (S + 1)) + 2 C V; x3 to
// train.
TEST(Presets, gpt_train_flops_count_fused_qkv_and_a_two_matrix_mlp) {
  const GptPreset p = gpt_preset("gpt-7b");
  const int64_t seq = 4096;
  const double C = double(p.hidden), F = double(p.ffn), L = double(p.layers), V = double(p.vocab);
  const double forward =
      L * (2.0 * (4.0 * C * C + 2.0 * C * F) + 2.0 * C * double(seq + 1)) + 2.0 * C * V;
  EXPECT_DOUBLE_EQ(train_flops_per_token(gpt_preset_config(p, seq), seq), 3.0 * forward);
}

// A sliding window counts the keys each query sees, min(i + 1, W), by brute force here, averaged
// over the layers (Qwen2's window on one of two layers); the whole-matrix count takes W keys a
// query. A window as long as the sequence, or none, is the causal count, exactly.
TEST(ModelFlops, a_sliding_window_counts_the_keys_each_query_sees) {
  ModelConfig c = llama_preset("llama-7b");
  c.num_hidden_layers = 2;
  const int64_t S = 1000;
  const double qd = double(c.num_attention_heads * c.head_dim());
  const ModelFlops plain = model_flops(c, S);
  EXPECT_EQ(plain.attn_causal, 2.0 * qd * double(S + 1));
  EXPECT_EQ(plain.attn_full, 4.0 * qd * double(S));
  c.arch = Arch::kQwen2;
  c.sliding_window = 300;
  c.sliding_layers = {false, true};
  c.validate();
  double keys = 0.0;
  for (int64_t i = 0; i < S; ++i) keys += double(std::min<int64_t>(i + 1, 300));
  const ModelFlops windowed = model_flops(c, S);
  EXPECT_DOUBLE_EQ(windowed.attn_causal, (plain.attn_causal + 4.0 * qd * keys / double(S)) / 2.0);
  EXPECT_DOUBLE_EQ(windowed.attn_full, 4.0 * qd * double(S + 300) / 2.0);
  EXPECT_EQ(windowed.layer_matmul, plain.layer_matmul);
  c.sliding_window = S;
  EXPECT_EQ(model_flops(c, S).attn_causal, plain.attn_causal);
}

// The published totals of the Hugging Face LLaMA-1 checkpoints (6.7B, 13.0B, 32.5B, 65.2B).
TEST(Presets, llama_parameter_counts_match_the_published_totals) {
  EXPECT_EQ(ParamLayout(llama_preset("llama-7b")).count(), 6'738'415'616);
  EXPECT_EQ(ParamLayout(llama_preset("llama-13b")).count(), 13'015'864'320);
  EXPECT_EQ(ParamLayout(llama_preset("llama-30b")).count(), 32'528'943'616);
  EXPECT_EQ(ParamLayout(llama_preset("llama-65b")).count(), 65'285'660'672);
}

TEST(Presets, llama_presets_are_valid_configs_with_head_dim_128) {
  for (const std::string& name : llama_preset_names()) {
    ModelConfig c = llama_preset(name);
    EXPECT_NO_THROW(c.validate()) << name;
    EXPECT_EQ(c.head_dim(), 128) << name;
    EXPECT_EQ(c.vocab_size, 32000) << name;
    EXPECT_FALSE(c.tie_word_embeddings) << name;
  }
  EXPECT_EQ(llama_preset("LLaMA-30B").num_hidden_layers, 60);
}

TEST(Presets, unknown_name_lists_the_known_ones) {
  std::string msg = error_message<ConfigError>([] { llama_preset("llama-70b"); });
  EXPECT_NE(msg.find("unknown LLaMA preset 'llama-70b'; known: llama-7b, llama-13b, llama-30b, "
                     "llama-65b"),
            std::string::npos)
      << msg;
  msg = error_message<ConfigError>([] { gpt_preset("gpt-175b"); });
  EXPECT_NE(msg.find("known: gpt-7b, gpt-13b, gpt-30b, gpt-65b"), std::string::npos) << msg;
}

}  // namespace
}  // namespace memo
