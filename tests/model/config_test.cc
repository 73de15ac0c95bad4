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

}  // namespace
}  // namespace memo
