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

using test::read;
using test::rel_error;
using test::rel_error_l2;

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

// Runs the reference on dir/ckpt and memo on the same weights; `torch_writes_weights`: the
// reference writes model.safetensors itself (F32, HF names, plus lm_head.weight) and memo loads it.
void check_against_torch(const ModelConfig& config, int64_t seq, int64_t batch,
                         bool torch_writes_weights = false) {
  test::TempDir dir;
  Model model(config);
  model.init(42);
  // Biases and LayerNorm parameters off their init (0 and 1), so that every bias takes part in
  // the forward and no tensor's final value is Adam's steps alone (see the key bias below).
  for (size_t i = 0; i < model.layout().params().size(); ++i) {
    const ParamInfo& p = model.layout().params()[i];
    if (p.init == ParamInit::kNormal) continue;
    NormalStream rng(7, i);
    for (int64_t j = 0; j < p.numel; ++j) model.params()[p.offset + j] += float(0.1 * rng.next());
  }
  CheckpointData data;
  data.config = config;
  for (const ParamInfo& p : model.layout().params())
    data.model.push_back({p.name, p.shape, model.params() + p.offset});
  save_checkpoint(dir.path() / "ckpt", data);
  std::vector<int32_t> tokens(size_t(batch * seq + 1));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = int32_t(mix(99, i) % uint64_t(config.vocab_size));
  write_llmc_tokens(dir / "tokens.bin", tokens);
  std::vector<int32_t> inputs, targets;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      inputs.push_back(tokens[size_t(b * seq + s)]);
      targets.push_back(tokens[size_t(b * seq + s + 1)]);
    }
  // as in torch_reference_test.cc: eps 1e-6 damps Adam's sign flips on rounding-level gradients
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-6, wd = 0.1;
  const int steps = 3;
  const std::string cmd =
      "/usr/bin/python3 " + test::source_dir() + "/scripts/torch_reference.py" + " --checkpoint " +
      dir.str("ckpt") + " --tokens " + dir.str("tokens.bin") + " --seq " + std::to_string(seq) +
      " --batch " + std::to_string(batch) + " --steps " + std::to_string(steps) + " --lr " +
      std::to_string(lr) + " --beta1 0.9 --beta2 0.95" + " --eps " + std::to_string(eps) +
      " --weight-decay 0.1 --out " + dir.str("ref.safetensors") +
      (torch_writes_weights ? " --write-gpt2-init 7" : "");
  const test::CommandResult r = test::run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  if (torch_writes_weights) {  // memo reads what PyTorch wrote, by the Hugging Face names
    LoadedCheckpoint ckpt = load_checkpoint(dir.path() / "ckpt");
    ASSERT_TRUE(ckpt.model.contains("lm_head.weight"));
    for (const ParamInfo& p : model.layout().params())
      ckpt.model.read_into(p.name, model.params() + p.offset, p.numel);
  }
  SafetensorsFile ref(dir / "ref.safetensors");
  const std::vector<float> ref_loss = read(ref, "loss");

  CachingAllocator alloc;
  KeepStrategy keep(config, alloc);
  // decay on every tensor: the reference uses one torch.optim.AdamW parameter group
  AdamW opt(model.layout(), AdamWOptions{beta1, beta2, eps, wd},
            std::vector<bool>(model.layout().params().size(), true));
  const float scale = 1.0f / float(batch * seq);
  for (int step = 0; step < steps; ++step) {
    model.zero_grads();
    const double loss =
        model.forward_backward(inputs.data(), targets.data(), batch, seq, scale, keep, alloc) /
        double(batch * seq);
    // 1e-5 relative: fp32 sums over 48-wide rows and 61-way softmaxes stay near 1e-6
    EXPECT_NEAR(loss, ref_loss[size_t(step)], 1e-5 * std::fabs(ref_loss[size_t(step)]))
        << "step " << step;
    if (step == 0) {
      for (const ParamInfo& p : model.layout().params()) {
        // 1e-4 relative to the tensor's largest entry: fp32 accumulation through two layers
        EXPECT_LT(rel_error(model.grads() + p.offset, read(ref, "grad." + p.name)), 1e-4) << p.name;
      }
    }
    opt.step(model.params(), model.grads(), lr);
  }
  EXPECT_EQ(alloc.live_bytes(), 0);
  // norm-wise, for the reason given in torch_reference_test.cc (Adam's per-entry scaling)
  const int64_t C = config.hidden_size;
  for (const ParamInfo& p : model.layout().params()) {
    const std::vector<float> want = read(ref, "final." + p.name);
    const float* got = model.params() + p.offset;
    if (p.name.find("attn.c_attn.bias") == std::string::npos) {
      EXPECT_LT(rel_error_l2(got, want), 1e-5) << p.name;
      continue;
    }
    // The key bias has a zero gradient in exact arithmetic (adding b_k to every key shifts a
    // query's scores by the same q.b_k, which the softmax ignores), so both sides hold rounding
    // noise there, and Adam turns noise into steps of about lr with arbitrary signs. Its entries
    // may differ by up to 2 lr per step; the q and v blocks must match as every other tensor does.
    for (int block : {0, 2}) {
      const std::vector<float> w(want.begin() + block * C, want.begin() + (block + 1) * C);
      EXPECT_LT(rel_error_l2(got + block * C, w), 1e-5) << p.name << " block " << block;
    }
    for (int64_t i = C; i < 2 * C; ++i)
      EXPECT_LE(std::fabs(double(got[i]) - double(want[size_t(i)])), 2.0 * lr * steps)
          << p.name << " key entry " << i - C;
  }
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
