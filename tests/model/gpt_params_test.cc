// GPT-2 parameters: the Hugging Face GPT2LMHeadModel names, order and Conv1D layouts, its init
// (N(0, std) weights, c_proj at std / sqrt(2 L), zero biases, unit LayerNorms), deterministic per
// seed, and a checkpoint save -> load that returns every tensor bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/io/checkpoint.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/model/params.h"
#include "test_util.h"

namespace memo {
namespace {

ModelConfig gpt(PositionEmbedding pos) {
  ModelConfig c;
  c.arch = Arch::kGpt2;
  c.position_embedding = pos;
  c.hidden_size = 64;
  c.intermediate_size = 256;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.vocab_size = 300;
  c.max_position_embeddings = 96;
  c.tie_word_embeddings = true;
  c.initializer_range = 0.02;
  return c;
}

TEST(GptParams, layout_has_the_hugging_face_names_and_shapes) {
  const ParamLayout learned(gpt(PositionEmbedding::kLearned));
  const std::vector<ParamInfo>& p = learned.params();
  ASSERT_EQ(p.size(), size_t(2 + 12 * 8 + 2));
  EXPECT_EQ(p[0].name, "transformer.wte.weight");
  EXPECT_EQ(p[1].name, "transformer.wpe.weight");
  EXPECT_EQ(p[1].shape, (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(learned.find("transformer.h.7.attn.c_attn.weight").shape,
            (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(learned.find("transformer.h.7.mlp.c_proj.weight").shape,
            (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(p.back().name, "transformer.ln_f.bias");
  EXPECT_THROW(learned.find("lm_head.weight"), ConfigError);
  // 12 L C^2 + 13 L C + V C + 2C, plus P C for the learned table
  const int64_t C = 64, L = 8, V = 300, P = 96;
  EXPECT_EQ(learned.count(), 12 * L * C * C + 13 * L * C + V * C + 2 * C + P * C);
  const ParamLayout rope(gpt(PositionEmbedding::kRope));
  EXPECT_EQ(rope.count(), learned.count() - P * C);
  EXPECT_THROW(rope.find("transformer.wpe.weight"), ConfigError);
}

TEST(GptParams, init_follows_gpt2_and_is_deterministic) {
  const ModelConfig c = gpt(PositionEmbedding::kLearned);
  Model a(c, cpu_backend()), b(c, cpu_backend());
  a.init(5);
  b.init(5);
  EXPECT_EQ(0, std::memcmp(a.params(), b.params(), size_t(a.params_numel()) * sizeof(float)));
  auto stats = [&](const std::string& name) {
    const ParamInfo& p = a.layout().find(name);
    double sum = 0.0, sq = 0.0;
    for (int64_t i = 0; i < p.numel; ++i) {
      sum += a.params()[p.offset + i];
      sq += double(a.params()[p.offset + i]) * a.params()[p.offset + i];
    }
    return std::pair<double, double>{sum / double(p.numel), std::sqrt(sq / double(p.numel))};
  };
  // rms of N(0, s) over >= 16K samples is s to within a few percent
  EXPECT_NEAR(stats("transformer.wte.weight").second, 0.02, 0.001);
  EXPECT_NEAR(stats("transformer.wpe.weight").second, 0.02, 0.001);
  EXPECT_NEAR(stats("transformer.h.3.attn.c_attn.weight").second, 0.02, 0.001);
  EXPECT_NEAR(stats("transformer.h.3.mlp.c_fc.weight").second, 0.02, 0.001);
  const double proj = 0.02 / std::sqrt(2.0 * 8);
  EXPECT_NEAR(stats("transformer.h.3.attn.c_proj.weight").second, proj, 0.05 * proj);
  EXPECT_NEAR(stats("transformer.h.3.mlp.c_proj.weight").second, proj, 0.05 * proj);
  for (const char* n :
       {"transformer.h.3.ln_1.weight", "transformer.h.3.ln_2.weight", "transformer.ln_f.weight"})
    EXPECT_EQ(stats(n), (std::pair<double, double>{1.0, 1.0})) << n;
  for (const char* n : {"transformer.h.3.ln_1.bias", "transformer.h.3.attn.c_attn.bias",
                        "transformer.h.3.attn.c_proj.bias", "transformer.h.3.mlp.c_fc.bias",
                        "transformer.ln_f.bias"})
    EXPECT_EQ(stats(n), (std::pair<double, double>{0.0, 0.0})) << n;
  EXPECT_EQ(a.weights().head.data(), a.weights().embed.data());  // tied
}

TEST(GptParams, checkpoint_save_and_load_round_trip_bit_for_bit) {
  const ModelConfig c = gpt(PositionEmbedding::kRope);
  Model a(c, cpu_backend()), b(c, cpu_backend());
  a.init(9);
  test::TempDir dir;
  CheckpointData data;
  data.config = c;
  for (const ParamInfo& p : a.layout().params())
    data.model.push_back({p.name, p.shape, a.params() + p.offset});
  save_checkpoint(dir.path() / "ckpt", data);
  LoadedCheckpoint ckpt = load_checkpoint(dir.path() / "ckpt");
  EXPECT_TRUE(ckpt.config.is_gpt2());
  EXPECT_FALSE(ckpt.config.position_embedding == PositionEmbedding::kLearned);
  for (const ParamInfo& p : b.layout().params())
    ckpt.model.read_into(p.name, b.params() + p.offset, p.shape);
  EXPECT_EQ(0, std::memcmp(a.params(), b.params(), size_t(a.params_numel()) * sizeof(float)));
}

TEST(GptConfig, validate_names_what_gpt2_does_not_have) {
  ModelConfig c = gpt(PositionEmbedding::kLearned);
  c.num_key_value_heads = 2;
  EXPECT_NE(test::error_message<ConfigError>([&] { c.validate(); }).find("multi-head attention"),
            std::string::npos);
  c = gpt(PositionEmbedding::kLearned);
  c.tie_word_embeddings = false;
  EXPECT_NE(test::error_message<ConfigError>([&] { c.validate(); }).find("tie_word_embeddings"),
            std::string::npos);
  c = gpt(PositionEmbedding::kLearned);
  c.hidden_size = 60;  // D = 15: odd, fine without rotary
  c.intermediate_size = 240;
  EXPECT_NO_THROW(c.validate());
  c.position_embedding = PositionEmbedding::kRope;
  EXPECT_NE(test::error_message<ConfigError>([&] { c.validate(); }).find("must be even"),
            std::string::npos);
  ModelConfig llama;
  llama.position_embedding = PositionEmbedding::kLearned;
  EXPECT_NE(test::error_message<ConfigError>([&] { llama.validate(); }).find("LLaMA"),
            std::string::npos);
}

TEST(GptConfig, model_refuses_a_sequence_longer_than_the_learned_table) {
  const ModelConfig c = gpt(PositionEmbedding::kLearned);  // 96 positions
  Model model(c, cpu_backend());
  model.init(1);
  CachingAllocator alloc;
  KeepStrategy keep(skeletal_layout(c, DType::kF32), alloc);
  const std::vector<int32_t> tokens(2 * 97 + 1, 3);
  const std::string msg = test::error_message<ConfigError>(
      [&] { model.forward_loss(tokens.data(), tokens.data() + 1, 2, 97, keep, alloc); });
  EXPECT_NE(msg.find("sequence of 97 tokens is longer than n_positions = 96"), std::string::npos)
      << msg;
  EXPECT_EQ(alloc.live_bytes(), 0);  // refused before anything was allocated
  EXPECT_GT(model.forward_loss(tokens.data(), tokens.data() + 1, 2, 96, keep, alloc), 0.0);
}

// memo eval and generate build the model for inference: no gradients (half the memory), the same
// losses as a training model's forward, and a backward refused.
TEST(Model, an_inference_model_holds_no_gradients_and_gives_the_training_models_loss) {
  for (PositionEmbedding pos : {PositionEmbedding::kLearned, PositionEmbedding::kRope}) {
    const ModelConfig c = gpt(pos);
    Model train(c, cpu_backend()), infer(c, cpu_backend(), ModelUse::kInference);
    train.init(5);
    infer.init(5);
    EXPECT_FALSE(train.grads_tensor().empty());
    EXPECT_TRUE(infer.grads_tensor().empty());
    CachingAllocator alloc;
    KeepStrategy keep(skeletal_layout(c, DType::kF32), alloc);
    std::vector<int32_t> tokens(2 * 64 + 1);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 7 % 50);
    EXPECT_EQ(infer.forward_loss(tokens.data(), tokens.data() + 1, 2, 64, keep, alloc),
              train.forward_loss(tokens.data(), tokens.data() + 1, 2, 64, keep, alloc));
    EXPECT_THROW(infer.forward_backward(tokens.data(), tokens.data() + 1, 2, 64, 1.0f, keep, alloc),
                 Error);
  }
}

}  // namespace
}  // namespace memo
