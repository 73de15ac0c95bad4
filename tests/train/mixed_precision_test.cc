// Training in bf16 mixed precision (Note [Mixed precision] in model/model.h) on the CPU, through
// bf16 storage over its f32 kernels (Note [bf16 storage by conversion]) and its native bf16
// products where it has them (Note [bf16 products on the CPU]): the four activation
// strategies give the same losses bit for bit in bf16 too, for both architectures, with half the
// activation bytes; the first step's loss is within the derived tolerance of fp32's; checkpoints
// hold the f32 master weights and a bf16 run resumes bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../cli/cli_test_util.h"
#include "memo/backend/bf16_storage.h"
#include "memo/backend/caching_allocator.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/io/config_json.h"
#include "memo/memory/strategy.h"
#include "memo/meta/meta_backend.h"
#include "memo/train/device_plan.h"
#include "memo/train/trainer.h"
#include "test_util.h"
#include "train/train_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTinyGpt2Config =
    R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 256,
  "vocab_size": 256, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true})";

double first_loss(const std::string& log) { return std::stod(test::losses(log).at(1)); }

int64_t peak_bytes(const std::string& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  return nlohmann::json::parse(last).at("peak_bytes").get<int64_t>();
}

// Four rows of 128 tokens a micro-batch: memo's alpha 0.5 offloads the first 128-row panel of a
// micro-batch and rebuilds the second (Note [Reproducible rows]).
TrainOptions options(const fs::path& dir, bool gpt2) {
  TrainOptions o = test::tiny_train_options(dir);
  if (gpt2) test::write_text(o.config_path, kTinyGpt2Config);
  o.seq = 128;
  o.batch = 4;
  o.micro_batch = 2;
  o.steps = 2;
  o.device_memory_bytes = int64_t(1) << 30;
  return o;
}

// Both ways the CPU computes bf16: its native bf16 products where it has them (Note [bf16
// products on the CPU]) and every kernel in f32 (LLaMA only; on a CPU without native bf16 the
// first way is this one, run once).
TEST(MixedPrecision, the_four_strategies_give_the_same_bf16_losses_bit_for_bit) {
  std::ostringstream quiet;
  CpuBackend f32_kernels(
      CpuOptions{.bf16_products = false, .bf16_attention = false, .bf16_elementwise = false});
  for (CpuBackend* be : {&cpu_backend(), &f32_kernels})
    for (const bool gpt2 : {false, true}) {
      const bool native = be == &cpu_backend();
      if (!native && (gpt2 || !cpu_backend().bf16_products())) continue;
      SCOPED_TRACE(gpt2 ? "gpt2" : "llama");
      SCOPED_TRACE(be->bf16_products() ? "native bf16 products" : "f32 kernels");
      test::TempDir dir;
      std::map<int64_t, std::string> keep;
      int64_t keep_f32_peak = 0, keep_bf16_peak = 0;
      for (const char* kind : {"keep", "recompute", "offload", "memo"}) {
        TrainOptions o = options(dir.path(), gpt2);
        o.activations.kind = kind;
        if (o.activations.kind == "memo") o.activations.alpha = 0.5;
        o.out_dir = dir / kind;
        o.log_path = dir / (std::string(kind) + ".jsonl");
        test::train_on(o, quiet, *be, Precision::kBf16);
        if (keep.empty()) {
          keep = test::losses(o.log_path);
          keep_bf16_peak = peak_bytes(o.log_path);
          if (!native) continue;  // the f32 comparison below is the native pass's
          TrainOptions f = o;     // the same run in f32, for its activation bytes
          f.out_dir = dir / "f32";
          f.log_path = dir / "f32.jsonl";
          test::train_on(f, quiet);
          keep_f32_peak = peak_bytes(f.log_path);
          EXPECT_NE(test::losses(f.log_path), keep);
        }
        EXPECT_EQ(test::losses(o.log_path), keep) << kind;
      }
      if (!native) continue;
      // every activation but the f32 statistics, log-sum-exp, loss path and scratch is halved (at
      // hidden 32 the f32 logits of a 256-byte vocabulary, and beside them their bf16 gradient,
      // Note [bf16 loss gradient], are a large share of the peak)
      EXPECT_LT(double(keep_bf16_peak), 0.75 * double(keep_f32_peak));
      EXPECT_GT(double(keep_bf16_peak), 0.4 * double(keep_f32_peak));
    }
}

// Note [Mixed precision]'s tolerance. bf16 keeps 8 significant bits: every rounding moves a value
// by at most u = 2^-9 of itself. A token's loss is 1-Lipschitz in the max norm of its logits per
// unit of the largest logit move (|dL/dz|_1 <= 2, half of it on the target), and the logits of a
// freshly initialised model are O(0.1), so the roundings along a layer's path (x, the norm, each
// product's operands and result: under 20 for two layers) move each token's loss by well under
// u; the mean over the step's tokens averages them further. So the first step's mean loss must
// agree with fp32's to a relative u = 2^-9 ~ 2e-3 (measured: ~6e-5 for both architectures).
// Later steps follow different weights and are not bounded by it.
TEST(MixedPrecision, the_first_bf16_loss_is_within_the_derived_tolerance_of_fp32s) {
  std::ostringstream quiet;
  for (const bool gpt2 : {false, true}) {
    SCOPED_TRACE(gpt2 ? "gpt2" : "llama");
    test::TempDir dir;
    TrainOptions o = options(dir.path(), gpt2);
    o.steps = 1;
    TrainOptions b = o;
    o.log_path = dir / "f32.jsonl";
    o.out_dir = dir / "f32";
    b.log_path = dir / "bf16.jsonl";
    b.out_dir = dir / "bf16";
    test::train_on(o, quiet);
    test::train_on(b, quiet, cpu_backend(), Precision::kBf16);
    const double f32 = first_loss(o.log_path), low = first_loss(b.log_path);
    EXPECT_NE(f32, low);  // the roundings are there
    EXPECT_LT(std::abs(low - f32) / f32, std::ldexp(1.0, -9)) << f32 << " vs " << low;
  }
}

TEST(MixedPrecision, checkpoints_hold_f32_master_weights_and_a_bf16_run_resumes_bit_for_bit) {
  std::ostringstream quiet;
  test::TempDir dir;
  TrainOptions o = options(dir.path(), false);
  o.activations.kind = "memo";
  o.steps = 3;
  o.save_every = 2;
  o.out_dir = dir / "run";
  o.log_path = dir / "run.jsonl";
  test::train_on(o, quiet, cpu_backend(), Precision::kBf16);
  const fs::path step2 = fs::path(o.out_dir) / "step-00000002";
  const std::string weights = test::file_bytes(step2 / "model.safetensors");
  EXPECT_NE(weights.find("\"F32\""), std::string::npos);
  EXPECT_EQ(weights.find("\"BF16\""), std::string::npos);

  TrainOptions r = o;
  r.resume_dir = step2.string();
  r.out_dir = dir / "resumed";
  r.log_path = dir / "resumed.jsonl";
  test::train_on(r, quiet, cpu_backend(), Precision::kBf16);
  const auto want = test::losses(o.log_path), got = test::losses(r.log_path);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.at(3), want.at(3));
  EXPECT_EQ(test::file_bytes(fs::path(o.out_dir) / "step-00000003" / "model.safetensors"),
            test::file_bytes(fs::path(r.out_dir) / "step-00000003" / "model.safetensors"));

  // the checkpoint records its precision: resuming it in fp32 is refused with the flag that
  // continues it, before anything is written
  TrainOptions f = r;
  f.out_dir = dir / "fp32";
  f.log_path = dir / "fp32.jsonl";
  try {
    test::train_on(f, quiet);
    ADD_FAILURE() << "a bf16 checkpoint resumed in fp32";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("was trained in bf16 and this run is fp32: resume with "
                                         "--precision bf16"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(f.out_dir));
  EXPECT_FALSE(fs::exists(f.log_path));
}

// The device need counts the bf16 working copy beside the f32 parameters, and the model computes
// with it: bf16 weights that follow every write of the master weights.
TEST(MixedPrecision, the_working_weights_are_bf16_counted_and_follow_the_master_weights) {
  // the CPU with its kernels widened, so that there are widened copies to count
  CpuBackend widening(
      CpuOptions{.bf16_products = false, .bf16_attention = false, .bf16_elementwise = false});
  Bf16StorageBackend mixed(widening);
  test::TempDir dir;
  const TrainOptions o = options(dir.path(), false);
  Model model(load_model_config(o.config_path), mixed);
  ASSERT_TRUE(model.mixed_precision());
  model.init(1);
  EXPECT_EQ(model.params_tensor().dtype(), DType::kF32);
  EXPECT_EQ(model.grads_tensor().dtype(), DType::kF32);
  const Tensor wq = model.weights().layers[0][0];
  ASSERT_EQ(wq.dtype(), DType::kBF16);
  const int64_t at = model.layout().params()[size_t(1)].offset;  // the first layer tensor's
  model.params()[at] = 1.00390625f;  // 1 + 2^-8: a tie, rounds to even (1.0)
  const bf16 first = *static_cast<const bf16*>(model.weights().layers[0][0].data());
  EXPECT_EQ(model.layout().params()[1].layer, 0);
  EXPECT_EQ(first.bits, float_to_bf16(1.0f).bits);
  model.params()[at] = 1.01171875f;  // 1 + 3 * 2^-8: a tie, rounds to even (1 + 2^-6)
  EXPECT_EQ(static_cast<const bf16*>(model.weights().layers[0][0].data())->bits,
            float_to_bf16(1.015625f).bits);

  const DevicePlan plan = plan_device_memory(model, 2, 128, int64_t(1) << 30, DevicePlanOptions{});
  EXPECT_EQ(plan.need.working_weight_bytes, 2 * model.params_numel());
  // the widened copies, counted before step 1 from the shadow's trace (Note [Planning on a
  // shadow]): what a real micro-batch of that shape then grows them to
  EXPECT_GT(plan.need.conversion_scratch_bytes, 0);
  EXPECT_EQ(mixed.scratch_bytes(), 0);
  {
    CachingAllocator alloc(0, mixed.allocator(mixed.device_space()));
    KeepStrategy keep(model.skeletal(), alloc);
    const std::vector<int32_t> tokens(2 * 128, 7);
    model.forward_backward(tokens.data(), tokens.data(), 2, 128, 1.0f, keep, alloc);
  }
  EXPECT_EQ(plan.need.conversion_scratch_bytes, mixed.scratch_bytes());
  EXPECT_EQ(plan.need.total_bytes(), plan.need.weight_bytes + plan.need.working_weight_bytes +
                                         plan.need.conversion_scratch_bytes +
                                         plan.need.gradient_bytes + plan.need.optimizer_bytes +
                                         plan.need.activation_arena_bytes);
  Model f32(load_model_config(o.config_path), cpu_backend());
  EXPECT_EQ(plan_device_memory(f32, 2, 128, int64_t(1) << 30, DevicePlanOptions{})
                .need.working_weight_bytes,
            0);
}

// A backend with native bf16 kernels (CUDA: products, attention, the layers' row and elementwise
// kernels) is handed bf16 tensors as they are, so its plan counts widened copies only for what
// it does not take natively (the loss path's products with an f32 operand): a fraction of what
// bf16 storage over f32 kernels widens. Planned on meta models of both, which trace themselves.
TEST(MixedPrecision, native_bf16_kernels_shrink_the_planned_conversion_scratch) {
  struct Native final : CpuBackend {
    bool bf16_products() const override { return true; }
    bool bf16_attention() const override { return true; }
    bool bf16_elementwise() const override { return true; }
  } native;
  CpuBackend f32_kernels(
      CpuOptions{.bf16_products = false, .bf16_attention = false, .bf16_elementwise = false});
  test::TempDir dir;
  const ModelConfig config = load_model_config(options(dir.path(), false).config_path);
  int64_t scratch[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    MetaBackend meta(i == 0 ? static_cast<Backend&>(f32_kernels) : native, DType::kF32);
    Bf16StorageBackend mixed(meta);
    Model model(config, mixed);
    const DevicePlan plan = plan_device_memory(model, 2, 128, 0, DevicePlanOptions{});
    scratch[i] = plan.need.conversion_scratch_bytes;
  }
  EXPECT_GT(scratch[0], 0);
  EXPECT_LT(scratch[1], scratch[0] / 2) << scratch[1] << " against " << scratch[0];
}

}  // namespace
}  // namespace memo
