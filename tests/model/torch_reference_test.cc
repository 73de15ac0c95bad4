// The whole model against an independent PyTorch implementation (scripts/torch_reference.py,
// float64, written for this test from the Hugging Face Llama semantics): same weights, same
// tokens, for tiny configs with grouped-query heads. Checks the loss, every parameter gradient
// and the weights after three AdamW steps.
#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

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

struct Case {
  const char* name;
  ModelConfig config;
  int64_t seq, batch;
};

ModelConfig tiny(bool tied) {
  ModelConfig c;
  c.hidden_size = 48;
  c.intermediate_size = 72;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;  // D = 8
  c.num_key_value_heads = 2;  // grouped-query: 3 query heads per kv head
  c.vocab_size = 61;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  c.initializer_range = 0.2;  // larger than HF's 0.02 so that every path carries signal
  return c;
}

void check_against_torch(const ModelConfig& config, int64_t seq, int64_t batch) {
  test::TempDir dir;
  Model model(config);
  model.init(42);
  // the checkpoint the reference reads: config.json + model.safetensors
  CheckpointData data;
  data.config = config;
  for (const ParamInfo& p : model.layout().params())
    data.model.push_back({p.name, p.shape, model.params() + p.offset});
  save_checkpoint(dir.path() / "ckpt", data);
  // batch windows in order from the start of the token file
  std::vector<int32_t> tokens(size_t(batch * seq + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(mix(99, i) % uint64_t(config.vocab_size));
  write_llmc_tokens(dir / "tokens.bin", tokens);
  std::vector<int32_t> inputs, targets;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      inputs.push_back(tokens[size_t(b * seq + s)]);
      targets.push_back(tokens[size_t(b * seq + s + 1)]);
    }
  // lr 1e-3, a usual AdamW rate for LLMs. eps 1e-6 rather than 1e-8: Adam's first update is lr * g / (|g| + eps), which flips sign for
  // gradient entries whose size is at the fp32 rounding level of the gradient; eps damps those.
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-6, wd = 0.1;
  const int steps = 3;
  const std::string cmd = "/usr/bin/python3 " + test::source_dir() + "/scripts/torch_reference.py" +
                          " --checkpoint " + dir.str("ckpt") + " --tokens " + dir.str("tokens.bin") +
                          " --seq " + std::to_string(seq) + " --batch " + std::to_string(batch) +
                          " --steps " + std::to_string(steps) + " --lr " + std::to_string(lr) + " --beta1 0.9 --beta2 0.95" +
                          " --eps " + std::to_string(eps) + " --weight-decay 0.1 --out " + dir.str("ref.safetensors");
  const test::CommandResult r = test::run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
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
    EXPECT_NEAR(loss, ref_loss[size_t(step)], 1e-5 * std::fabs(ref_loss[size_t(step)])) << "step " << step;
    if (step == 0) {
      for (const ParamInfo& p : model.layout().params()) {
        // 1e-4 relative to the tensor's largest entry: fp32 accumulation through two layers
        EXPECT_LT(rel_error(model.grads() + p.offset, read(ref, "grad." + p.name)), 1e-4) << p.name;
      }
    }
    opt.step(model.params(), model.grads(), lr);
  }
  EXPECT_EQ(alloc.live_bytes(), 0);
  // Norm-wise: Adam divides each gradient entry by its own magnitude, so an entry whose gradient
  // is small moves by ~lr whatever its size, and its fp32 rounding (about 1e-6 of the largest
  // gradient entry) becomes a visible relative error of that one weight; across the whole tensor
  // the error stays at the fp32 level.
  for (const ParamInfo& p : model.layout().params())
    EXPECT_LT(rel_error_l2(model.params() + p.offset, read(ref, "final." + p.name)), 1e-5) << p.name;
}

TEST(ModelVsTorch, untied_gqa_loss_gradients_and_adamw_steps_match) {
  check_against_torch(tiny(false), 16, 2);
}

TEST(ModelVsTorch, tied_embeddings_match) { check_against_torch(tiny(true), 13, 3); }

TEST(ModelVsTorch, sequence_longer_than_one_attention_tile_matches) {
  ModelConfig c = tiny(false);
  c.num_hidden_layers = 1;
  c.max_position_embeddings = 256;
  check_against_torch(c, 150, 1);
}

}  // namespace
}  // namespace memo
