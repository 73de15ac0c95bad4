// The parameters' parts under tensor parallelism (Note [Tensor-parallel parameters]): which
// dimension each tensor splits, c_attn's q | k | v split block by block, a vocabulary that does
// not divide padded on the last rank, the ranks' parts that put back together give the whole
// tensor, and each rank's init equal to its part of one process's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../memory/memory_test_util.h"
#include "memo/core/error.h"
#include "memo/model/params.h"
#include "test_util.h"

namespace memo {
namespace {

ModelConfig gpt2_config() {
  ModelConfig c = testing::tiny_config();
  c.arch = Arch::kGpt2;
  c.num_key_value_heads = c.num_attention_heads;
  c.position_embedding = PositionEmbedding::kLearned;
  return c;
}

// Every tensor of `config` over t ranks: the parts, laid side by side, are the whole.
void parts_make_the_whole(const ModelConfig& config, int t) {
  const ParamLayout one(config);
  std::vector<float> whole(static_cast<size_t>(one.total_numel()));
  init_weights(one, whole.data(), 0.02, 5);
  std::vector<float> rebuilt(whole.size(), -7.0f);
  for (int r = 0; r < t; ++r) {
    const ParamLayout mine(config, TensorShard{r, t});
    std::vector<float> base(static_cast<size_t>(mine.total_numel()), 0.0f);
    init_weights(mine, base.data(), 0.02, 5);  // the rank's own init
    for (size_t i = 0; i < mine.params().size(); ++i) {
      const ParamInfo& p = mine.params()[i];
      const ParamInfo& w = one.params()[i];
      ASSERT_EQ(p.name, w.name);
      EXPECT_EQ(p.full_shape, w.shape) << p.name;
      std::vector<float> part(static_cast<size_t>(p.numel));
      extract_shard(p, mine.shard(), whole.data() + w.offset, part.data());
      for (int64_t j = 0; j < p.numel; ++j)
        ASSERT_EQ(part[size_t(j)], base[size_t(p.offset + j)])
            << p.name << " rank " << r << " " << j;
      insert_shard(p, mine.shard(), part.data(), rebuilt.data() + w.offset);
    }
  }
  for (const ParamInfo& w : one.params())
    for (int64_t j = 0; j < w.numel; ++j)
      ASSERT_EQ(rebuilt[size_t(w.offset + j)], whole[size_t(w.offset + j)]) << w.name << " " << j;
}

TEST(TensorShard, the_ranks_parts_make_the_whole_and_init_as_one_process) {
  for (int t : {2, 4}) {
    SCOPED_TRACE(t);
    ModelConfig llama = testing::tiny_config();
    llama.num_key_value_heads = llama.num_attention_heads;
    parts_make_the_whole(llama, t);
    parts_make_the_whole(gpt2_config(), t);
    llama.vocab_size = 253;  // parts of 64 (t 4) or 127 (t 2) rows, the last one padded
    parts_make_the_whole(llama, t);
  }
}

TEST(TensorShard, splits_rows_columns_and_blocks_as_megatron) {
  const ModelConfig llama = testing::tiny_config();
  const ParamLayout l(llama, TensorShard{1, 2});
  const int64_t C = llama.hidden_size, F = llama.intermediate_size;
  EXPECT_EQ(l.find("model.layers.0.mlp.gate_proj.weight").shape, (std::vector<int64_t>{F / 2, C}));
  EXPECT_EQ(l.find("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{C, F / 2}));
  EXPECT_EQ(l.find("model.layers.0.input_layernorm.weight").shape, (std::vector<int64_t>{C}));
  const ModelConfig g = gpt2_config();
  const ParamLayout gl(g, TensorShard{1, 2});
  const ParamInfo& qkv = gl.find("transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(qkv.shape, (std::vector<int64_t>{C, 3 * C / 2}));
  // row 0 of rank 1's part: the second half of each of q, k and v
  std::vector<float> whole(static_cast<size_t>(C * 3 * C)), part(static_cast<size_t>(qkv.numel));
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = float(i);
  extract_shard(qkv, gl.shard(), whole.data(), part.data());
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t j = 0; j < C / 2; ++j)
      EXPECT_EQ(part[size_t(b * C / 2 + j)], float(b * C + C / 2 + j)) << b << " " << j;
  EXPECT_EQ(gl.find("transformer.h.0.attn.c_proj.bias").shape, (std::vector<int64_t>{C}));
  EXPECT_EQ(gl.find("transformer.wpe.weight").shape,
            (std::vector<int64_t>{g.max_position_embeddings, C}));
}

TEST(TensorShard, refuses_dimensions_that_do_not_split) {
  ModelConfig c = testing::tiny_config();
  c.intermediate_size = 66;
  const std::string msg = test::error_message<ConfigError>([&] {
    ParamLayout(c, TensorShard{0, 4});
  });
  EXPECT_NE(msg.find("gate_proj.weight has 66 rows, which do not split into 4 equal parts"),
            std::string::npos)
      << msg;
  c = testing::tiny_config();
  c.vocab_size = 4;
  EXPECT_NO_THROW(ParamLayout(c, TensorShard{0, 4}));
  c.vocab_size = 5;  // parts of 2 rows: the fourth rank would hold none
  EXPECT_THROW(ParamLayout(c, TensorShard{0, 4}), ConfigError);
}

}  // namespace
}  // namespace memo
