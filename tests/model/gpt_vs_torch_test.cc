// The GPT-2 model against an independent PyTorch implementation (scripts/torch_reference.py,
// float64, its GPT-2 path written from the Hugging Face GPT-2 semantics): same weights, same
// tokens, for tiny configs with learned and with rotary positions. Checks the loss, every
// parameter gradient and the weights after three AdamW steps; and that a model.safetensors which
// PyTorch wrote under the Hugging Face GPT-2 names (with a tied lm_head.weight) loads into memo.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/core/random.h"
#include "memo/data/token_data.h"
#include "memo/io/checkpoint.h"
#include "memo/io/safetensors.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/optim/adamw.h"
#include "test_util.h"
#include "torch_compare_util.h"

namespace memo {
namespace {

using test::check_against_torch;

ModelConfig tiny_gpt(PositionEmbedding pos) {
  ModelConfig c;
  c.arch = Arch::kGpt2;
  c.position_embedding = pos;
  c.hidden_size = 48;
  c.intermediate_size = 4 * 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;  // D = 8
  c.num_key_value_heads = 6;
  c.vocab_size = 61;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = true;
  c.initializer_range = 0.2;  // larger than HF's 0.02 so that every path carries signal
  return c;
}

TEST(GptVsTorch, learned_positions_loss_gradients_and_adamw_steps_match) {
  check_against_torch(tiny_gpt(PositionEmbedding::kLearned), 16, 2);
}

TEST(GptVsTorch, rotary_positions_longer_than_one_attention_tile_match) {
  ModelConfig c = tiny_gpt(PositionEmbedding::kRope);
  c.num_hidden_layers = 1;
  c.max_position_embeddings = 256;
  check_against_torch(c, 150, 1);
}

TEST(GptVsTorch, learned_positions_longer_than_one_attention_tile_match) {
  ModelConfig c = tiny_gpt(PositionEmbedding::kLearned);
  c.num_hidden_layers = 1;
  c.intermediate_size = 100;  // n_inner other than 4C
  c.max_position_embeddings = 160;
  check_against_torch(c, 150, 1);
}

TEST(GptVsTorch, weights_pytorch_wrote_under_gpt2_names_load_and_match) {
  check_against_torch(tiny_gpt(PositionEmbedding::kLearned), 13, 3, true);
}

}  // namespace
}  // namespace memo
