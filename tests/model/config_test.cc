// ModelConfig::validate: the bounds it keeps and the ones it no longer has.
#include "memo/model/config.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "memo/core/error.h"
#include "test_util.h"

namespace memo {
namespace {

ModelConfig tiny_llama() {
  ModelConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  return c;
}

// Llama 3's 128256 ids and Qwen2's 151936 are over uint16: token ids are int32 throughout and
// token files carry their own width, so the config does not cap the vocabulary at 65536.
TEST(ModelConfig, vocabularies_over_65536_validate) {
  ModelConfig c = tiny_llama();
  for (int64_t v : {65537, 128256, 151936}) {
    c.vocab_size = v;
    EXPECT_NO_THROW(c.validate()) << v;
  }
}

TEST(ModelConfig, vocabulary_past_int32_ids_is_refused) {
  ModelConfig c = tiny_llama();
  c.vocab_size = int64_t(std::numeric_limits<int32_t>::max()) + 1;
  const std::string msg = test::error_message<ConfigError>([&] { c.validate(); });
  EXPECT_NE(msg.find("vocab_size = 2147483648 is over 2147483647"), std::string::npos) << msg;
}

// Note [Sizes a config may ask for]: sizes whose counts would overflow int64 or whose per-layer
// structures would fill the host are refused by field before anything is sized from them.
TEST(ModelConfig, sizes_past_what_counts_hold_are_refused_by_field) {
  struct Case {
    void (*set)(ModelConfig&);
    const char* want;
  };
  for (const Case& k : std::initializer_list<Case>{
           {[](ModelConfig& c) { c.num_hidden_layers = int64_t(1) << 40; },
            "num_hidden_layers = 1099511627776 is over 65536"},
           {[](ModelConfig& c) { c.hidden_size = c.num_attention_heads * (int64_t(1) << 38); },
            "hidden_size = 1099511627776 is over 2147483647"},
           {[](ModelConfig& c) { c.intermediate_size = int64_t(1) << 60; },
            "intermediate_size = 1152921504606846976 is over"},
           {[](ModelConfig& c) { c.max_position_embeddings = int64_t(1) << 41; },
            "max_position_embeddings = 2199023255552 is over"},
           {[](ModelConfig& c) {
              c.rope_scaling.type = RopeType::kDynamic;
              c.rope_scaling.factor = 1e19;
            },
            "factor 1e+19 x max_position_embeddings"},
           {[](ModelConfig& c) {
              c.num_hidden_layers = 60000;
              c.hidden_size = 1 << 20;
              c.intermediate_size = 1 << 22;
            },
            "parameters, over 2^50"}}) {
    ModelConfig c = tiny_llama();
    k.set(c);
    const std::string msg = test::error_message<ConfigError>([&] { c.validate(); });
    EXPECT_NE(msg.find(k.want), std::string::npos) << msg;
  }
  ModelConfig big = tiny_llama();  // a 405B-class shape passes
  big.hidden_size = 16384;
  big.intermediate_size = 53248;
  big.num_hidden_layers = 126;
  big.num_attention_heads = 128;
  big.num_key_value_heads = 8;
  big.vocab_size = 128256;
  big.max_position_embeddings = 131072;
  EXPECT_NO_THROW(big.validate());
}

}  // namespace
}  // namespace memo
