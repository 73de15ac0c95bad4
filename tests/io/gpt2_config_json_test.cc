// GPT-2 configs in Hugging Face GPT2Config names: defaults, round trip, memo's position field,
// and clear refusals of what memo does not implement.
#include <gtest/gtest.h>

#include "memo/core/error.h"
#include "memo/io/config_json.h"
#include "test_util.h"

namespace memo {
namespace {

using nlohmann::json;
using test::error_message;
using test::TempDir;

json tiny_gpt2() {
  return json{
      {"model_type", "gpt2"}, {"n_embd", 64}, {"n_layer", 2}, {"n_head", 4}, {"vocab_size", 300}};
}

TEST(Gpt2ConfigJson, defaults_follow_gpt2config) {
  const ModelConfig c = model_config_from_json(tiny_gpt2(), "cfg");
  EXPECT_TRUE(c.is_gpt2());
  EXPECT_EQ(c.position_embedding, PositionEmbedding::kLearned);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 256);  // n_inner null: 4 n_embd
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.vocab_size, 300);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.initializer_range, 0.02);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(Gpt2ConfigJson, round_trips_learned_and_rope) {
  for (PositionEmbedding pos : {PositionEmbedding::kLearned, PositionEmbedding::kRope}) {
    ModelConfig c;
    c.arch = Arch::kGpt2;
    c.position_embedding = pos;
    c.hidden_size = 96;
    c.intermediate_size = 200;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 6;
    c.vocab_size = 1000;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 500000.0;
    c.max_position_embeddings = 4096;
    c.tie_word_embeddings = true;
    c.initializer_range = 0.01;
    TempDir tmp;
    save_model_config(tmp / "config.json", c);
    const json j = model_config_to_json(c);
    EXPECT_EQ(j["model_type"], "gpt2");
    EXPECT_EQ(j["architectures"], json::array({"GPT2LMHeadModel"}));
    EXPECT_EQ(j["activation_function"], "gelu_new");
    EXPECT_EQ(j["n_ctx"], 4096);
    EXPECT_FALSE(j.contains("hidden_size"));
    const ModelConfig r = load_model_config(tmp / "config.json");
    EXPECT_TRUE(r.is_gpt2());
    EXPECT_EQ(r.position_embedding, pos);
    EXPECT_EQ(r.hidden_size, 96);
    EXPECT_EQ(r.intermediate_size, 200);
    EXPECT_EQ(r.num_hidden_layers, 3);
    EXPECT_EQ(r.num_attention_heads, 6);
    EXPECT_EQ(r.vocab_size, 1000);
    EXPECT_EQ(r.rms_norm_eps, 1e-6);
    EXPECT_EQ(r.rope_theta, pos == PositionEmbedding::kRope ? 500000.0 : 10000.0);
    EXPECT_EQ(r.max_position_embeddings, 4096);
    EXPECT_EQ(r.initializer_range, 0.01);
    EXPECT_EQ(model_config_to_json(r), j);
  }
}

TEST(Gpt2ConfigJson, llama_configs_keep_their_names) {
  const json j = model_config_to_json(ModelConfig{});
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_TRUE(j.contains("hidden_size"));
  EXPECT_FALSE(j.contains("n_embd"));
  EXPECT_FALSE(j.contains("memo_position_embedding_type"));
}

// --rope-theta and --max-position-embeddings on learned positions: refused by name (--rope-theta
// was once dropped without a word); on GPT-2 with rotary positions they apply.
TEST(Gpt2ConfigJson, position_flags_on_learned_positions_are_refused) {
  const ModelConfig learned = model_config_from_json(tiny_gpt2(), "cfg");
  PositionOverrides theta;
  theta.rope_theta = 50000.0;
  std::string msg = error_message<ConfigError>([&] { theta.applied_to(learned); });
  EXPECT_NE(msg.find("rope_theta: the model has learned positions"), std::string::npos) << msg;
  PositionOverrides longer;
  longer.max_position_embeddings = 1024;
  msg = error_message<ConfigError>([&] { longer.applied_to(learned); });
  EXPECT_NE(msg.find("max_position_embeddings: the model has learned positions"), std::string::npos)
      << msg;
  json j = tiny_gpt2();
  j["memo_position_embedding_type"] = "rope";
  const ModelConfig rotary = model_config_from_json(j, "cfg");
  EXPECT_EQ(theta.applied_to(rotary).rope_theta, 50000.0);
  EXPECT_EQ(longer.applied_to(rotary).max_position_embeddings, 1024);
}

TEST(Gpt2ConfigJson, unsupported_variants_are_rejected_with_the_field) {
  auto message = [](json j) {
    return error_message<ConfigError>([&] { model_config_from_json(j, "cfg"); });
  };
  json j = tiny_gpt2();
  j["activation_function"] = "relu";
  EXPECT_NE(message(j).find("activation_function = \"relu\" is not supported"), std::string::npos)
      << message(j);
  j = tiny_gpt2();
  j["activation_function"] = "gelu_pytorch_tanh";
  EXPECT_NO_THROW(model_config_from_json(j, "cfg"));
  for (const char* name : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    j = tiny_gpt2();
    j[name] = true;
    EXPECT_NE(message(j).find(str(name, " = true is not supported")), std::string::npos)
        << message(j);
  }
  j = tiny_gpt2();
  j["tie_word_embeddings"] = false;
  EXPECT_NE(message(j).find("tie_word_embeddings = false"), std::string::npos) << message(j);
  j = tiny_gpt2();
  j["n_ctx"] = 512;
  EXPECT_NE(message(j).find("n_ctx = 512 differs from n_positions = 1024"), std::string::npos)
      << message(j);
  j = tiny_gpt2();
  j["memo_position_embedding_type"] = "alibi";
  EXPECT_NE(message(j).find("\"alibi\" is not supported"), std::string::npos) << message(j);
  j = tiny_gpt2();
  j["model_type"] = "gemma";
  EXPECT_NE(message(j).find("model_type = \"gemma\" is not supported"), std::string::npos)
      << message(j);
  j = tiny_gpt2();
  j.erase("n_head");
  EXPECT_NE(message(j).find("required field n_head is missing"), std::string::npos) << message(j);
  j = tiny_gpt2();
  j["n_embd"] = 0;
  EXPECT_NE(message(j).find("n_embd = 0 must be positive"), std::string::npos) << message(j);
  // GPT-2's names in the head checks, and no head_dim, which GPT2Config would ignore
  j = tiny_gpt2();
  j["n_embd"] = j["n_head"].get<int64_t>() * 8 + 1;
  EXPECT_NE(message(j).find("n_embd = "), std::string::npos) << message(j);
  EXPECT_NE(message(j).find(" is not divisible by n_head = "), std::string::npos) << message(j);
  EXPECT_EQ(message(j).find("head_dim"), std::string::npos) << message(j);
  j = tiny_gpt2();
  j["head_dim"] = 16;
  EXPECT_NE(message(j).find("head_dim is not a GPT-2 field"), std::string::npos) << message(j);
}

TEST(Gpt2ConfigJson, hub_style_config_with_dropout_loads) {
  json j = tiny_gpt2();
  j["attn_pdrop"] = 0.1;  // memo trains without dropout; the rates are ignored
  j["resid_pdrop"] = 0.1;
  j["embd_pdrop"] = 0.1;
  j["n_inner"] = nullptr;
  j["summary_type"] = "cls_index";
  EXPECT_EQ(model_config_from_json(j, "cfg").intermediate_size, 256);
}

}  // namespace
}  // namespace memo
