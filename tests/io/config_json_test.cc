#include "memo/io/config_json.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "memo/core/error.h"
#include "memo/io/atomic_file.h"
#include "memo/model/params.h"
#include "test_util.h"

namespace memo {
namespace {

using nlohmann::json;
using test::error_message;
using test::TempDir;

json tiny() {
  return json{{"hidden_size", 64},        {"intermediate_size", 172}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 256}};
}

TEST(ConfigJson, round_trips_every_field) {
  ModelConfig c;
  c.hidden_size = 96;
  c.intermediate_size = 260;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.vocab_size = 1000;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.max_position_embeddings = 4096;
  c.tie_word_embeddings = true;
  c.initializer_range = 0.01;
  TempDir tmp;
  save_model_config(tmp / "config.json", c);
  ModelConfig r = load_model_config(tmp / "config.json");
  EXPECT_EQ(r.hidden_size, 96);
  EXPECT_EQ(r.intermediate_size, 260);
  EXPECT_EQ(r.num_hidden_layers, 3);
  EXPECT_EQ(r.num_attention_heads, 6);
  EXPECT_EQ(r.num_key_value_heads, 2);
  EXPECT_EQ(r.vocab_size, 1000);
  EXPECT_EQ(r.rms_norm_eps, 1e-5);
  EXPECT_EQ(r.rope_theta, 500000.0);
  EXPECT_EQ(r.max_position_embeddings, 4096);
  EXPECT_TRUE(r.tie_word_embeddings);
  EXPECT_EQ(r.initializer_range, 0.01);
}

TEST(ConfigJson, writer_adds_hugging_face_fields) {
  json j = model_config_to_json(ModelConfig{});
  EXPECT_EQ(j["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["torch_dtype"], "float32");
}

// torch_dtype names the dtype the weights are written in, and reads back; the same config stored
// in another dtype is the same model. A value memo does not know is refused wherever it is read.
TEST(ConfigJson, torch_dtype_is_written_and_read_back) {
  const json bf16 = model_config_to_json(ModelConfig{}, DType::kBF16);
  EXPECT_EQ(bf16["torch_dtype"], "bfloat16");
  EXPECT_EQ(torch_dtype_from_json(bf16, "cfg"), DType::kBF16);
  EXPECT_EQ(model_config_to_json(model_config_from_json(bf16, "cfg")),
            model_config_to_json(ModelConfig{}));
  ModelConfig gpt2;
  gpt2.arch = Arch::kGpt2;
  EXPECT_EQ(model_config_to_json(gpt2, DType::kBF16)["torch_dtype"], "bfloat16");
  json j = tiny();
  EXPECT_EQ(torch_dtype_from_json(j, "cfg"), std::nullopt);
  j["dtype"] = "float16";  // transformers 5's name
  EXPECT_EQ(torch_dtype_from_json(j, "cfg"), DType::kF16);
  j["torch_dtype"] = "float64";
  const std::string msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg"); });
  EXPECT_NE(msg.find("cfg: torch_dtype = \"float64\" is not one memo reads"), std::string::npos)
      << msg;
}

TEST(ConfigJson, kv_heads_default_to_attention_heads_and_unknown_fields_are_ignored) {
  json j = tiny();
  j.erase("num_key_value_heads");
  j["bos_token_id"] = 1;
  j["rope_scaling"] = nullptr;
  j["transformers_version"] = "4.44.0";
  ModelConfig c = model_config_from_json(j, "cfg");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);  // the Hugging Face default, not memo's
}

TEST(ConfigJson, wrong_type_names_the_field) {
  json j = tiny();
  j["hidden_size"] = "64";
  std::string msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg.json"); });
  EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hidden_size = \"64\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
  j = tiny();
  j["tie_word_embeddings"] = 1;
  msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg.json"); });
  EXPECT_NE(msg.find("tie_word_embeddings = 1"), std::string::npos) << msg;
  j = tiny();
  j["num_hidden_layers"] = 2.5;
  msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg.json"); });
  EXPECT_NE(msg.find("num_hidden_layers = 2.5"), std::string::npos) << msg;
  j = tiny();
  j["vocab_size"] = UINT64_MAX;
  msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg.json"); });
  EXPECT_NE(msg.find("vocab_size = 18446744073709551615 is too large"), std::string::npos) << msg;
  j = tiny();
  j["rope_theta"] = "1e4";
  msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg.json"); });
  EXPECT_NE(msg.find("rope_theta = \"1e4\" is a string, expected a number"), std::string::npos)
      << msg;
}

TEST(ConfigJson, missing_required_field_names_it) {
  json j = tiny();
  j.erase("vocab_size");
  std::string msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg.json"); });
  EXPECT_NE(msg.find("vocab_size is missing"), std::string::npos) << msg;
  msg = error_message<ConfigError>([&] { model_config_from_json(json::array(), "cfg.json"); });
  EXPECT_NE(msg.find("JSON object"), std::string::npos) << msg;
}

TEST(ConfigJson, invalid_value_is_reported_with_source) {
  json j = tiny();
  j["num_key_value_heads"] = 3;
  std::string msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg.json"); });
  EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_key_value_heads = 3"), std::string::npos) << msg;
}

TEST(ConfigJson, unsupported_llama_variants_are_rejected) {
  json j = tiny();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};  // the rest of llama3's missing
  std::string msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg"); });
  EXPECT_NE(msg.find("cfg: rope_scaling: required field low_freq_factor is missing"),
            std::string::npos)
      << msg;
  j = tiny();
  j["hidden_act"] = "gelu";
  msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg"); });
  EXPECT_NE(msg.find("\"gelu\""), std::string::npos) << msg;
  j = tiny();
  j["head_dim"] = 33;
  msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg"); });
  EXPECT_NE(msg.find("cfg: head_dim = 33 must be even"), std::string::npos) << msg;
  j["head_dim"] = 0;
  msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg"); });
  EXPECT_NE(msg.find("cfg: head_dim = 0 must be positive"), std::string::npos) << msg;
  // the bias fields are LLaMA's (and attention_bias Qwen3's): elsewhere a true one is refused
  for (const char* type : {"qwen2", "mistral"})
    for (const char* name : {"attention_bias", "mlp_bias"}) {
      j = tiny();
      j["model_type"] = type;
      j[name] = true;
      msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg"); });
      EXPECT_NE(msg.find(std::string("cfg: ") + name + " = true is not supported for \"" + type),
                std::string::npos)
          << msg;
    }
}

// LLaMA's attention_bias, mlp_bias and head_dim are read, shape the tensors and are written back;
// absent, nothing changes (no head_dim written, the biases false).
TEST(ConfigJson, llama_biases_and_head_dim_read_and_write_back) {
  json j = tiny();
  ASSERT_FALSE(model_config_to_json(model_config_from_json(j, "cfg")).contains("head_dim"));
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  j["head_dim"] = 32;
  const ModelConfig c = model_config_from_json(j, "cfg");
  EXPECT_TRUE(c.attention_bias && c.mlp_bias);
  EXPECT_EQ(c.head_dim(), 32);
  const json back = model_config_to_json(c);
  EXPECT_EQ(back["attention_bias"], true);
  EXPECT_EQ(back["mlp_bias"], true);
  EXPECT_EQ(back["head_dim"], 32);
  const ModelConfig again = model_config_from_json(back, "back");
  EXPECT_EQ(again.explicit_head_dim, 32);
  EXPECT_TRUE(again.attention_bias && again.mlp_bias);
  const ParamLayout layout(c);
  const int64_t H = c.num_attention_heads, C = c.hidden_size, F = c.intermediate_size;
  EXPECT_EQ(layout.find("model.layers.0.self_attn.q_proj.weight").shape,
            (std::vector<int64_t>{H * 32, C}));
  EXPECT_EQ(layout.find("model.layers.0.self_attn.o_proj.weight").shape,
            (std::vector<int64_t>{C, H * 32}));
  EXPECT_EQ(layout.find("model.layers.0.self_attn.o_proj.bias").shape, (std::vector<int64_t>{C}));
  EXPECT_EQ(layout.find("model.layers.0.mlp.up_proj.bias").shape, (std::vector<int64_t>{F}));
  EXPECT_EQ(layout.find("model.layers.0.mlp.down_proj.bias").shape, (std::vector<int64_t>{C}));
}

// Qwen3-0.6B's config.json (its fields as published): head_dim 128 with 16 heads over a hidden
// size of 1024 (q_proj [2048, 1024], o_proj [1024, 2048]), q/k norms of 128, no biases, tied;
// written back as a Qwen3 config.
TEST(ConfigJson, qwen3_config_reads_and_writes_back) {
  const json q = json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
    "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
  const ModelConfig c = model_config_from_json(q, "qwen3.json");
  EXPECT_EQ(c.arch, Arch::kQwen3);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.kv_dim(), 1024);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  const ParamLayout layout(c);
  auto shape = [&](const std::string& name) { return layout.find(name).shape; };
  EXPECT_EQ(shape("model.layers.27.self_attn.q_proj.weight"), (std::vector<int64_t>{2048, 1024}));
  EXPECT_EQ(shape("model.layers.27.self_attn.k_proj.weight"), (std::vector<int64_t>{1024, 1024}));
  EXPECT_EQ(shape("model.layers.27.self_attn.o_proj.weight"), (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(shape("model.layers.0.self_attn.q_norm.weight"), (std::vector<int64_t>{128}));
  EXPECT_EQ(shape("model.layers.0.self_attn.k_norm.weight"), (std::vector<int64_t>{128}));
  EXPECT_THROW(layout.find("model.layers.0.self_attn.q_proj.bias"), ConfigError);
  EXPECT_THROW(layout.find("lm_head.weight"), ConfigError);
  // per layer: q, k, v, o, the two head norms, the two norms, the MLP; the tied embedding, the norm
  const int64_t layer =
      2048 * 1024 + 2 * 1024 * 1024 + 1024 * 2048 + 2 * 128 + 2 * 1024 + 3 * 3072 * 1024;
  EXPECT_EQ(layout.count(), 28 * layer + 151936 * 1024 + 1024);  // 596,049,920: "0.6B"
  const json back = model_config_to_json(c);
  EXPECT_EQ(back["model_type"], "qwen3");
  EXPECT_EQ(back["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(back["head_dim"], 128);
  EXPECT_EQ(back["attention_bias"], false);
  EXPECT_EQ(back["use_sliding_window"], false);
  EXPECT_FALSE(back.contains("mlp_bias"));
  const ModelConfig again = model_config_from_json(back, "back");
  EXPECT_EQ(again.arch, Arch::kQwen3);
  EXPECT_EQ(again.head_dim(), 128);
  // Qwen3Config's head_dim is 128 when absent, not hidden_size / num_attention_heads
  json absent = q;
  absent.erase("head_dim");
  EXPECT_EQ(model_config_from_json(absent, "qwen3.json").head_dim(), 128);
  EXPECT_EQ(again.sliding_window, 0);
  json mlp = q;
  mlp["mlp_bias"] = true;
  const std::string msg =
      error_message<ConfigError>([&] { model_config_from_json(mlp, "qwen3.json"); });
  EXPECT_NE(msg.find("qwen3.json: mlp_bias = true is not supported for \"qwen3\""),
            std::string::npos)
      << msg;
}

// Qwen2.5-0.5B's config.json (its fields as published): the LLaMA layer with q/k/v biases, a
// tied head, the sliding window off; written back as a Qwen2 config.
TEST(ConfigJson, qwen2_config_reads_and_writes_back) {
  const json q = json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
    "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
    "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
  const ModelConfig c = model_config_from_json(q, "qwen.json");
  EXPECT_EQ(c.arch, Arch::kQwen2);
  EXPECT_EQ(c.head_dim(), 64);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_TRUE(c.tie_word_embeddings);
  const json back = model_config_to_json(c);
  EXPECT_EQ(back["model_type"], "qwen2");
  EXPECT_EQ(back["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(back["use_sliding_window"], false);
  EXPECT_FALSE(back.contains("attention_bias"));
  EXPECT_EQ(model_config_from_json(back, "back").arch, Arch::kQwen2);
  EXPECT_EQ(c.sliding_window, 0);  // use_sliding_window false: sliding_window changes nothing
}

// Qwen2's and Qwen3's windows as transformers builds them (configuration_qwen2.py): sliding_window
// (default 4096) only under use_sliding_window, on the layers layer_types names
// "sliding_attention", by default those from max_window_layers on; written back with both
// spellings and read back the same.
TEST(ConfigJson, qwen_windows_follow_use_sliding_window_max_window_layers_and_layer_types) {
  for (const char* type : {"qwen2", "qwen3"}) {
    SCOPED_TRACE(type);
    const json base{{"model_type", type},       {"hidden_size", 64},
                    {"intermediate_size", 96},  {"num_hidden_layers", 4},
                    {"num_attention_heads", 4}, {"vocab_size", 100},
                    {"head_dim", 16},           {"use_sliding_window", true}};
    const auto read = [](json j) { return model_config_from_json(j, "q.json"); };
    const auto windows = [](const ModelConfig& c) {
      std::vector<int64_t> w;
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) w.push_back(c.layer_window(l));
      return w;
    };
    json j = base;
    j["sliding_window"] = 32;
    j["max_window_layers"] = 1;
    const ModelConfig top = read(j);
    EXPECT_EQ(windows(top), (std::vector<int64_t>{0, 32, 32, 32}));
    EXPECT_EQ(top.window_summary(), ", sliding window 32 on 3 of 4 layers");
    const json back = model_config_to_json(top);
    EXPECT_EQ(back["use_sliding_window"], true);
    EXPECT_EQ(back["sliding_window"], 32);
    EXPECT_EQ(back["max_window_layers"], 1);
    EXPECT_EQ(back["layer_types"], json({"full_attention", "sliding_attention", "sliding_attention",
                                         "sliding_attention"}));
    EXPECT_EQ(windows(read(back)), windows(top));
    json no_types = back;  // what a transformers without layer_types reads
    no_types.erase("layer_types");
    EXPECT_EQ(windows(read(no_types)), windows(top));
    // the defaults: a window of 4096 from layer 28 on (none of 4 layers), from 0 on: every layer
    j = base;
    EXPECT_EQ(read(j).sliding_window, 0);
    j["max_window_layers"] = 0;
    EXPECT_EQ(windows(read(j)), (std::vector<int64_t>(4, 4096)));
    EXPECT_TRUE(read(j).sliding_layers.empty());
    EXPECT_EQ(read(j).window_summary(), ", sliding window 4096 on every layer");
    j["sliding_window"] = nullptr;  // no window to slide
    EXPECT_EQ(read(j).sliding_window, 0);
    EXPECT_EQ(read(j).window_summary(), "");
    j = base;  // off: sliding_window and max_window_layers change nothing
    j["use_sliding_window"] = false;
    j["sliding_window"] = 32;
    j["max_window_layers"] = 0;
    EXPECT_EQ(read(j).sliding_window, 0);
    // layer_types wins over max_window_layers; all "full_attention" (what transformers 5 writes
    // for a model without a window) is no window
    j = base;
    j["sliding_window"] = 32;
    j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention",
                        "full_attention"};
    const ModelConfig alternate = read(j);
    EXPECT_EQ(windows(alternate), (std::vector<int64_t>{32, 0, 32, 0}));
    EXPECT_EQ(windows(read(model_config_to_json(alternate))), windows(alternate));
    j["use_sliding_window"] = false;
    j["layer_types"] = json(std::vector<std::string>(4, "full_attention"));
    EXPECT_EQ(read(j).sliding_window, 0);
    // refused by name
    const auto refuses = [&](const json& bad, const std::string& needle) {
      const std::string msg = error_message<ConfigError>([&] { read(bad); });
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    };
    j["layer_types"][2] = "sliding_attention";
    refuses(j,
            "q.json: layer_types[2] = \"sliding_attention\" has no window: use_sliding_window "
            "is false");
    j["layer_types"][2] = "chunked_attention";
    refuses(j, "q.json: layer_types[2] = \"chunked_attention\" is not supported");
    j["layer_types"] = {"full_attention"};
    refuses(j, "q.json: layer_types names 1 layers; num_hidden_layers is 4");
    j = base;
    j["sliding_window"] = 0;
    refuses(j, "q.json: sliding_window = 0 must be positive");
    j["sliding_window"] = 32;
    j["max_window_layers"] = -1;
    refuses(j, "q.json: max_window_layers = -1 must be 0 or more");
  }
}

// Mistral 7B v0.1 (a 4096-token window) and v0.3 (no window): LLaMA's fields under Mistral's
// names; written back as Mistral configs with their window.
TEST(ConfigJson, mistral_configs_read_and_write_back_with_their_window) {
  json m = json::parse(R"({"architectures": ["MistralForCausalLM"], "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
    "vocab_size": 32000})");
  const ModelConfig v1 = model_config_from_json(m, "m.json");
  EXPECT_EQ(v1.arch, Arch::kMistral);
  EXPECT_EQ(v1.sliding_window, 4096);
  const json back = model_config_to_json(v1);
  EXPECT_EQ(back["model_type"], "mistral");
  EXPECT_EQ(back["architectures"][0], "MistralForCausalLM");
  EXPECT_EQ(back["sliding_window"], 4096);
  EXPECT_EQ(model_config_from_json(back, "back").sliding_window, 4096);
  m["sliding_window"] = nullptr;
  m["rope_theta"] = 1000000.0;
  m["vocab_size"] = 32768;
  const ModelConfig v3 = model_config_from_json(m, "m.json");
  EXPECT_EQ(v3.sliding_window, 0);
  EXPECT_TRUE(model_config_to_json(v3)["sliding_window"].is_null());
  m.erase("sliding_window");  // MistralConfig's default window
  EXPECT_EQ(model_config_from_json(m, "m.json").sliding_window, 4096);
  m["sliding_window"] = 0;
  std::string msg = error_message<ConfigError>([&] { model_config_from_json(m, "m.json"); });
  EXPECT_NE(msg.find("m.json: sliding_window = 0 must be positive"), std::string::npos) << msg;
  // MistralForCausalLM windows every layer whatever layer_types says: one that says otherwise is
  // refused; one that agrees is read
  m["sliding_window"] = 4096;
  m["layer_types"] = json(std::vector<std::string>(32, "sliding_attention"));
  EXPECT_TRUE(model_config_from_json(m, "m.json").sliding_layers.empty());
  m["layer_types"][1] = "full_attention";
  msg = error_message<ConfigError>([&] { model_config_from_json(m, "m.json"); });
  EXPECT_NE(msg.find("m.json: layer_types[1] = \"full_attention\" is not supported: "
                     "MistralForCausalLM windows every layer"),
            std::string::npos)
      << msg;
}

TEST(ConfigJson, malformed_json_gives_path_and_byte) {
  TempDir tmp;
  write_file_atomic(tmp / "config.json", "{\"hidden_size\": 64,, }");
  std::string msg = error_message<ConfigError>([&] { load_model_config(tmp / "config.json"); });
  EXPECT_NE(msg.find((tmp / "config.json").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("at byte 20"), std::string::npos) << msg;
}

// Numbers past a double's range and values nested deep are one short line naming the file; a
// rope_theta of inf (given by a flag: JSON cannot hold it) is refused, as no config.json could
// carry it back.
TEST(ConfigJson, hostile_numbers_and_nesting_are_short_errors) {
  TempDir tmp;
  write_file_atomic(tmp / "config.json", R"({"hidden_size": 64, "rope_theta": 1e400})");
  std::string msg = error_message<ConfigError>([&] { load_model_config(tmp / "config.json"); });
  EXPECT_NE(msg.find((tmp / "config.json").string() + ": "), std::string::npos) << msg;
  EXPECT_NE(msg.find("number overflow parsing '1e400'"), std::string::npos) << msg;
  json j = tiny();
  j["hidden_size"] = json::parse(std::string(100000, '[') + std::string(100000, ']'));
  msg = error_message<ConfigError>([&] { model_config_from_json(j, "cfg.json"); });
  EXPECT_NE(msg.find("hidden_size = [[[[...]]]] is a array"), std::string::npos) << msg;
  for (const double bad :
       {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(), 0.0}) {
    ModelConfig c = model_config_from_json(tiny(), "cfg.json");
    c.rope_theta = bad;
    msg = error_message<ConfigError>([&] { c.validate(); });
    EXPECT_NE(msg.find("must be positive and finite"), std::string::npos) << msg;
  }
}

TEST(ConfigJson, missing_file_is_data_error) {
  TempDir tmp;
  std::string msg = error_message<DataError>([&] { load_model_config(tmp / "none.json"); });
  EXPECT_NE(msg.find("none.json"), std::string::npos) << msg;
}

// max_position_embeddings left out takes each architecture's Hugging Face default
// (LlamaConfig 2048, Qwen2Config and Qwen3Config 32768, MistralConfig 131072): it sets the
// longest --seq and YaRN's original context, and is written back.
TEST(ConfigJson, max_position_embeddings_defaults_follow_each_architecture) {
  for (const auto& [type, positions] : {std::pair<const char*, int64_t>{"llama", 2048},
                                        {"qwen2", 32768},
                                        {"qwen3", 32768},
                                        {"mistral", 131072}}) {
    SCOPED_TRACE(type);
    const json j{{"model_type", type},     {"hidden_size", 64}, {"intermediate_size", 96},
                 {"num_hidden_layers", 2}, {"head_dim", 16},    {"num_attention_heads", 4},
                 {"vocab_size", 100}};
    const ModelConfig c = model_config_from_json(j, "cfg.json");
    EXPECT_EQ(c.max_position_embeddings, positions);
    EXPECT_EQ(model_config_to_json(c)["max_position_embeddings"], positions);
  }
}

}  // namespace
}  // namespace memo
