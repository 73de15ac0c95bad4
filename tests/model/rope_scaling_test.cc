// RoPE scaling (model/rope_scaling.h): each rope_scaling type's inverse frequencies and attention
// factor against the float64 definitions of scripts/torch_reference.py (written apart from
// memo's, from transformers' modeling_rope_utils semantics), at several factors, head dims and
// lengths; the tables the CPU builds from them; the whole model with each type against the
// PyTorch reference at a sequence longer than the original context; config.json in and out.
#include "memo/model/rope_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/cpu/kernels.h"
#include "memo/io/atomic_file.h"
#include "memo/io/config_json.h"
#include "memo/model/config.h"
#include "model/torch_compare_util.h"
#include "test_util.h"

namespace memo {
namespace {

using nlohmann::json;

// A LlamaConfig of head_dim D (2 heads) with `rope_scaling` (null: none).
json llama_json(int64_t D, double theta, int64_t max_positions, const json& rope_scaling) {
  json j{{"model_type", "llama"},
         {"hidden_size", 2 * D},
         {"intermediate_size", 4 * D},
         {"num_hidden_layers", 1},
         {"num_attention_heads", 2},
         {"vocab_size", 61},
         {"rms_norm_eps", 1e-5},
         {"rope_theta", theta},
         {"max_position_embeddings", max_positions}};
  if (!rope_scaling.is_null()) j["rope_scaling"] = rope_scaling;
  return j;
}

std::vector<double> ramp(int64_t n, double from, double to) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = from + (to - from) * double(i) / double(n - 1);
  return v;
}

struct RopeCase {
  json config;
  int64_t seq;
};

// Every type at two head dims, with the optional fields on and off, and lengths on both sides
// of the original context where the type depends on length.
std::vector<RopeCase> cases() {
  std::vector<RopeCase> out;
  for (int64_t D : {16, 128}) {
    const double theta = D == 16 ? 10000.0 : 500000.0;
    const int64_t L = 8192;
    out.push_back({llama_json(D, theta, L, nullptr), 100});
    for (double f : {2.0, 8.0})
      out.push_back({llama_json(D, theta, L, {{"rope_type", "linear"}, {"factor", f}}), 100});
    for (int64_t seq : {4096, 8192, 20000})
      out.push_back({llama_json(D, theta, L, {{"rope_type", "dynamic"}, {"factor", 4.0}}), seq});
    out.push_back(
        {llama_json(
             D, theta, 4 * L,
             {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", L}}),
         100});
    out.push_back({llama_json(D, theta, L,
                              {{"type", "yarn"},
                               {"factor", 16.0},
                               {"beta_fast", 16.0},
                               {"beta_slow", 2.0},
                               {"truncate", false}}),
                   100});
    out.push_back({llama_json(D, theta, 4 * L,
                              {{"rope_type", "yarn"},
                               {"factor", 40.0},
                               {"mscale", 0.707},
                               {"mscale_all_dim", 1.0},
                               {"original_max_position_embeddings", 4096}}),
                   100});
    out.push_back({llama_json(D, theta, 4 * L,
                              {{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 1.25}}),
                   100});
    const json longrope{{"rope_type", "longrope"},
                        {"short_factor", ramp(D / 2, 1.0, 1.5)},
                        {"long_factor", ramp(D / 2, 1.0, 30.0)},
                        {"original_max_position_embeddings", 4096}};
    for (int64_t seq : {4096, 4097}) out.push_back({llama_json(D, theta, 131072, longrope), seq});
    json given = longrope;
    given["factor"] = 8.0;
    given["attention_factor"] = 1.1;
    out.push_back({llama_json(D, theta, 131072, given), 5000});
    for (double f : {8.0, 32.0})
      out.push_back({llama_json(D, theta, 131072,
                                {{"rope_type", "llama3"},
                                 {"factor", f},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 8192}}),
                     100});
  }
  return out;
}

TEST(RopeScaling, frequencies_and_attention_factor_equal_the_float64_definitions) {
  test::TempDir dir;
  const std::vector<RopeCase> all = cases();
  json list = json::array();
  for (const RopeCase& c : all) list.push_back({{"config", c.config}, {"seq", c.seq}});
  write_file_atomic(dir / "cases.json", list.dump());
  const test::CommandResult r =
      test::run_command("/usr/bin/python3 " + test::source_dir() +
                        "/scripts/torch_reference.py rope-frequencies " + dir.str("cases.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json want = json::parse(r.output);
  ASSERT_EQ(want.size(), all.size());
  for (size_t k = 0; k < all.size(); ++k) {
    const ModelConfig cfg = model_config_from_json(all[k].config, "case");
    const RopeFrequencies got = rope_frequencies(cfg.rope_scaling, cfg.head_dim(), cfg.rope_theta,
                                                 cfg.max_position_embeddings, all[k].seq);
    const std::vector<double> inv = want[k]["inv_freq"];
    ASSERT_EQ(got.inv_freq.size(), inv.size()) << all[k].config.dump();
    for (size_t i = 0; i < inv.size(); ++i)
      EXPECT_NEAR(got.inv_freq[i], inv[i], 1e-13 * inv[i])
          << "pair " << i << " of case " << k << ": " << all[k].config.dump();
    EXPECT_NEAR(got.attention_factor, want[k]["attention_factor"].get<double>(), 1e-14)
        << all[k].config.dump();

    // The CPU's table: float(cos(p w) a) at each position, to one float rounding of the angle's
    // cos (the angle p w itself is exact to double rounding, < 2^-40 radians at these lengths).
    const int64_t S = 64, first = all[k].seq - S, half = cfg.head_dim() / 2;
    std::vector<float> c(size_t(S * half)), s(size_t(S * half));
    cpu::rope_table(View<float>(c.data(), {S, half}), View<float>(s.data(), {S, half}),
                    got.inv_freq, got.attention_factor, first);
    const double a = want[k]["attention_factor"];
    for (int64_t p = 0; p < S; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(first + p) * inv[size_t(i)];
        EXPECT_NEAR(c[size_t(p * half + i)], std::cos(angle) * a, 1e-6 * a);
        EXPECT_NEAR(s[size_t(p * half + i)], std::sin(angle) * a, 1e-6 * a);
      }
  }
}

TEST(RopeScaling, plain_rope_and_dynamic_within_the_context_give_the_plain_tables_bit_for_bit) {
  for (int64_t D : {8, 64, 128}) {
    const std::vector<double> plain = rope_inv_freq(D, 10000.0);
    RopeScaling none, dynamic;
    dynamic.type = RopeType::kDynamic;
    dynamic.factor = 4.0;
    EXPECT_EQ(rope_frequencies(none, D, 10000.0, 2048, 4096).inv_freq, plain);
    EXPECT_EQ(rope_frequencies(dynamic, D, 10000.0, 2048, 2048).inv_freq, plain);
    EXPECT_NE(rope_frequencies(dynamic, D, 10000.0, 2048, 2049).inv_freq, plain);
    // linear by 1 is plain RoPE too, and llama3 keeps the high frequencies as they are
    RopeScaling linear;
    linear.type = RopeType::kLinear;
    EXPECT_EQ(rope_frequencies(linear, D, 10000.0, 2048, 16).inv_freq, plain);
  }
}

// The model with each scaling type against the PyTorch reference (loss, every gradient, three
// AdamW steps), at 96 tokens: past the original context of 32 for yarn, longrope and llama3
// (whose ramps then reach the pairs in play) and the factor 4 of linear; dynamic's model has 32
// positions, so its base grows (it runs up to factor 4 x 32 = 128).
ModelConfig scaled(const json& rope_scaling, int64_t positions = 128) {
  return model_config_from_json(
      {{"model_type", "llama"},
       {"hidden_size", 48},
       {"intermediate_size", 72},
       {"num_hidden_layers", 2},
       {"num_attention_heads", 6},  // D = 8
       {"num_key_value_heads", 2},
       {"vocab_size", 61},
       {"rms_norm_eps", 1e-5},
       {"rope_theta", 100.0},  // a small base, so that the 4 pairs span short and long wavelengths
       {"max_position_embeddings", positions},
       {"initializer_range", 0.2},
       {"rope_scaling", rope_scaling}},
      "test");
}

TEST(RopeScaling, the_model_with_each_type_matches_the_torch_reference_past_the_original_context) {
  const std::vector<json> types = {{{"rope_type", "linear"}, {"factor", 4.0}},
                                   {{"rope_type", "dynamic"}, {"factor", 4.0}},
                                   {{"rope_type", "yarn"},
                                    {"factor", 4.0},
                                    {"original_max_position_embeddings", 32},
                                    {"beta_fast", 8.0},
                                    {"beta_slow", 0.5}},
                                   {{"rope_type", "longrope"},
                                    {"short_factor", {1.0, 1.1, 1.3, 1.6}},
                                    {"long_factor", {1.0, 2.0, 5.0, 9.0}},
                                    {"original_max_position_embeddings", 32}},
                                   {{"rope_type", "llama3"},
                                    {"factor", 8.0},
                                    {"low_freq_factor", 1.0},
                                    {"high_freq_factor", 4.0},
                                    {"original_max_position_embeddings", 32}}};
  for (const json& t : types) {
    SCOPED_TRACE(t.dump());
    test::check_against_torch(scaled(t, t["rope_type"] == "dynamic" ? 32 : 128), 96, 1);
  }
  EXPECT_EQ(scaled({{"rope_type", "dynamic"}, {"factor", 4.0}}, 32).max_positions(), 128);
  // yarn: factor x its original context, and never below max_position_embeddings
  EXPECT_EQ(scaled({{"rope_type", "yarn"}, {"factor", 4.0}}, 32).max_positions(), 128);
  const ModelConfig qwen = scaled(
      {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}}, 32);
  EXPECT_EQ(qwen.max_positions(), 128);
  EXPECT_EQ(qwen.positions_limit(),
            "128 positions (rope_scaling yarn: factor 4 x original_max_position_embeddings = 32)");
  EXPECT_EQ(
      scaled({{"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 16}},
             128)
          .max_positions(),
      128);
  EXPECT_EQ(scaled({{"rope_type", "linear"}, {"factor", 4.0}}, 32).max_positions(), 32);
  for (const double factor : {1e12, 1e300})  // past 2^40 positions, or past a double's int64
    EXPECT_NE(test::error_message<Error>([&] {
                scaled({{"rope_type", "yarn"}, {"factor", factor}}, 32);
              }).find("positions is over 2^40 tokens"),
              std::string::npos)
        << factor;
}

TEST(RopeScaling, config_json_round_trips_each_type) {
  for (const RopeCase& c : cases()) {
    const ModelConfig a = model_config_from_json(c.config, "case");
    const ModelConfig b = model_config_from_json(model_config_to_json(a), "written");
    EXPECT_EQ(a.rope_scaling, b.rope_scaling) << c.config.dump();
  }
  // longrope's original context at the top level too, where transformers 4 reads it
  int longropes = 0;
  for (const RopeCase& c : cases())
    if (c.config.contains("rope_scaling") && c.config.at("rope_scaling").is_object() &&
        c.config.at("rope_scaling").value("rope_type", "") == "longrope") {
      const json written = model_config_to_json(model_config_from_json(c.config, "case"));
      EXPECT_EQ(written.at("original_max_position_embeddings"),
                written.at("rope_scaling").at("original_max_position_embeddings"));
      ++longropes;
    }
  EXPECT_GT(longropes, 0);
  // plain RoPE writes no rope_scaling at all, as before
  EXPECT_FALSE(model_config_to_json(model_config_from_json(llama_json(8, 1e4, 64, nullptr), "c"))
                   .contains("rope_scaling"));
}

// transformers 5 writes rope_theta and rope_scaling as one rope_parameters object.
json as_rope_parameters(json config) {
  json p =
      config.contains("rope_scaling") ? config["rope_scaling"] : json{{"rope_type", "default"}};
  p["rope_theta"] = config["rope_theta"];
  config.erase("rope_scaling");
  config.erase("rope_theta");
  config["rope_parameters"] = p;
  return config;
}

TEST(RopeScaling, transformers_5_rope_parameters_read_as_rope_theta_and_rope_scaling) {
  for (const RopeCase& c : cases()) {
    const ModelConfig old = model_config_from_json(c.config, "4.x");
    const json v5 = as_rope_parameters(c.config);
    const ModelConfig now = model_config_from_json(v5, "5.x");
    EXPECT_EQ(now.rope_theta, old.rope_theta) << v5.dump();
    EXPECT_EQ(now.rope_scaling, old.rope_scaling) << v5.dump();
    // both spellings at once, saying the same: accepted
    json both = v5;
    both["rope_theta"] = c.config["rope_theta"];
    if (c.config.contains("rope_scaling")) both["rope_scaling"] = c.config["rope_scaling"];
    EXPECT_EQ(model_config_from_json(both, "both").rope_scaling, old.rope_scaling) << both.dump();
  }
  // theta in neither: LlamaConfig's default; the top-level theta where rope_parameters has none
  json bare = llama_json(8, 5e5, 64, nullptr);
  bare.erase("rope_theta");
  bare["rope_parameters"] = {{"rope_type", "default"}};
  EXPECT_EQ(model_config_from_json(bare, "c").rope_theta, 10000.0);
  bare["rope_theta"] = 5e5;
  EXPECT_EQ(model_config_from_json(bare, "c").rope_theta, 5e5);
  // no rope_type: "default"; transformers 5 reads a Qwen2 config the same way
  json qwen = as_rope_parameters(llama_json(8, 1e6, 64, nullptr));
  qwen["model_type"] = "qwen2";
  qwen["rope_parameters"].erase("rope_type");
  const ModelConfig q = model_config_from_json(qwen, "qwen2.json");
  EXPECT_EQ(q.rope_theta, 1e6);
  EXPECT_TRUE(q.rope_scaling.is_default());
  // memo writes the older spelling, which transformers 4 and 5 both read
  const json written = model_config_to_json(model_config_from_json(
      as_rope_parameters(llama_json(
          8, 5e5, 64, {{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 1.25}})),
      "c"));
  EXPECT_FALSE(written.contains("rope_parameters"));
  EXPECT_EQ(written["rope_theta"], 5e5);
  ASSERT_TRUE(written.contains("rope_scaling"));
  EXPECT_EQ(written["rope_scaling"]["rope_type"], "yarn");
}

TEST(RopeScaling, a_config_memo_cannot_compute_is_refused_by_name) {
  const auto refuses = [](const json& config, const std::string& needle) {
    try {
      model_config_from_json(config, "cfg.json");
      ADD_FAILURE() << "accepted " << config.dump();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  const auto with = [](const json& rope) { return llama_json(8, 1e4, 64, rope); };
  refuses(with({{"rope_type", "ntk-by-parts"}, {"factor", 2.0}}),
          "cfg.json: rope_scaling: rope_type \"ntk-by-parts\" is not supported");
  refuses(with({{"rope_type", "linear"}}), "cfg.json: rope_scaling: required field factor");
  refuses(with({{"factor", 2.0}}), "required field rope_type is missing");
  refuses(with({{"rope_type", "linear"}, {"type", "yarn"}, {"factor", 2.0}}), "disagree");
  refuses(with({{"rope_type", "linear"}, {"factor", 2.0}, {"beta_fast", 32}}),
          "field beta_fast = 32 is not one linear takes");
  refuses(with({{"rope_type", "yarn"}, {"factor", -1.0}}), "factor = -1 must be a positive");
  refuses(with({{"rope_type", "linear"}, {"factor", "2"}}), "field factor = \"2\" is a string");
  refuses(with({{"rope_type", "longrope"}, {"short_factor", {1.0, 1.0}}, {"long_factor", {1.0}}}),
          "longrope: short_factor has 2 entries; head_dim 8 needs 4");
  refuses(with({{"rope_type", "llama3"},
                {"factor", 8.0},
                {"low_freq_factor", 4.0},
                {"high_freq_factor", 1.0},
                {"original_max_position_embeddings", 32}}),
          "need 0 < low_freq_factor < high_freq_factor");
  json partial = with(nullptr);
  partial["partial_rotary_factor"] = 0.5;
  refuses(partial, "partial_rotary_factor = 0.5 is not supported");
  json quantised = with(nullptr);  // not a rope field, but refused by name like one
  quantised["quantization_config"] = {{"quant_method", "fp8"}};
  refuses(quantised, "quantization_config is not supported (fp8)");
  json top = with({{"rope_type", "linear"}, {"factor", 2.0}});
  top["original_max_position_embeddings"] = 32;
  refuses(top, "at the top level is longrope's");
  // transformers 5's rope_parameters
  const json v5 = as_rope_parameters(with({{"rope_type", "linear"}, {"factor", 2.0}}));
  json bad = v5;
  bad["rope_parameters"]["beta_fast"] = 32;
  refuses(bad, "cfg.json: rope_parameters: field beta_fast = 32 is not one linear takes");
  bad = v5;
  bad["rope_parameters"]["partial_rotary_factor"] = 0.5;
  refuses(bad, "cfg.json: rope_parameters: partial_rotary_factor = 0.5 is not supported");
  bad = v5;
  bad["rope_theta"] = 5e5;
  refuses(bad, "cfg.json: rope_theta = 500000 and rope_parameters' 10000 disagree");
  bad = v5;
  bad["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  refuses(bad, "cfg.json: rope_scaling and rope_parameters give different scalings");
  bad = v5;
  bad["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}},
                            {"sliding_attention", {{"rope_type", "default"}}}};
  refuses(bad, "field full_attention holds an object: rotary settings per layer type are not");
  bad["rope_parameters"] = "linear";
  refuses(bad, "cfg.json: field rope_parameters = \"linear\" is a string");
  bad["rope_parameters"] = {{"rope_type", "ntk"}};
  refuses(bad, "rope_type \"ntk\" is not supported");
  refuses({{"model_type", "gpt2"},
           {"n_embd", 16},
           {"n_layer", 1},
           {"n_head", 2},
           {"vocab_size", 50},
           {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e4}}}},
          "rope_parameters = {\"rope_theta\":10000.0,\"rope_type\":\"default\"} is not supported "
          "for GPT-2");
  refuses({{"model_type", "gpt2"},
           {"n_embd", 16},
           {"n_layer", 1},
           {"n_head", 2},
           {"vocab_size", 50},
           {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}},
          "rope_scaling = {\"factor\":2.0,\"rope_type\":\"linear\"} is not supported for GPT-2");
}

}  // namespace
}  // namespace memo
