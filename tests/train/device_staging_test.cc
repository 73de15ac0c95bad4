// What a device backend needs of the training loop, run on the CPU: a backend whose device space
// the host may not address (CpuBackend with host_can_access(kDevice) false) must train, write
// checkpoints and resume through the backend's copies, giving the same bytes and losses as the
// plain CPU backend: the optimiser state, the noise-scale side buffer and the parameters live in
// the device space, and every host read or write of them is staged; the same for incremental
// decoding.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "../cli/cli_test_util.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/model/kv_decoder.h"
#include "memo/train/trainer.h"
#include "test_util.h"
#include "train/train_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;

// The CPU backend as the CUDA backend behaves: the host cannot read its device space, and its
// matrix products want a workspace (Note [Matrix-product workspace]), which it checks every
// product has: one of the size it asked for, in its device space.
class HiddenDevice final : public CpuBackend {
 public:
  static constexpr int64_t kWorkspace = 4096;
  bool host_can_access(MemSpace space) const override {
    return space == MemSpace::kHost || space == MemSpace::kPinnedHost;
  }
  int64_t matmul_workspace_bytes() const override { return kWorkspace; }
  void set_matmul_workspace(Tensor w) override { workspace_ = w; }

 protected:
  void do_matmul(Tensor c, ConstTensor a, ConstTensor b, bool ta, bool tb, float alpha,
                 float beta) override {
    count();
    CpuBackend::do_matmul(c, a, b, ta, tb, alpha, beta);
  }
  void do_matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) override {
    count();
    CpuBackend::do_matmul_token_panels(c, a, b, beta);
  }
  void do_matmul_token_panels_kn(Tensor c, ConstTensor a, ConstTensor b, float beta) override {
    count();
    CpuBackend::do_matmul_token_panels_kn(c, a, b, beta);
  }

 public:
  int64_t products = 0, products_without_workspace = 0;

 private:
  void count() {
    ++products;
    if (workspace_.empty() || workspace_.bytes() < kWorkspace ||
        workspace_.space() != device_space())
      ++products_without_workspace;
  }
  Tensor workspace_;
};

TEST(DeviceStaging, checkpoints_and_resume_through_the_backend_copies_are_unchanged) {
  test::TempDir dir;
  TrainOptions o = test::tiny_train_options(dir.path());
  o.batch = 4;
  o.micro_batch = 2;  // two micro-batches: the noise-scale probe runs
  o.steps = 3;
  o.save_every = 2;
  o.val_batches = 1;
  o.optimizer.name = "adagrad";  // state initialised to a value, not zero
  std::ostringstream quiet;
  HiddenDevice hidden;
  ASSERT_FALSE(hidden.host_can_access(hidden.device_space()));

  TrainOptions plain = o, staged = o;
  plain.out_dir = dir / "plain";
  plain.log_path = dir / "plain.jsonl";
  staged.out_dir = dir / "staged";
  staged.log_path = dir / "staged.jsonl";
  test::train_on(plain, quiet);
  test::train_on(staged, quiet, hidden);
  EXPECT_EQ(test::losses(plain.log_path), test::losses(staged.log_path));
  // the static plan's arena in the hidden device space (what --device cuda runs by default)
  TrainOptions planned = staged;
  planned.out_dir = dir / "planned";
  planned.log_path = dir / "planned.jsonl";
  planned.device_memory_bytes = int64_t(1) << 30;
  test::train_on(planned, quiet, hidden);
  EXPECT_EQ(test::losses(plain.log_path), test::losses(planned.log_path));
  EXPECT_GT(hidden.products, 0);
  EXPECT_EQ(hidden.products_without_workspace, 0);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(test::file_bytes(fs::path(plain.out_dir) / "step-00000003" / f),
              test::file_bytes(fs::path(staged.out_dir) / "step-00000003" / f))
        << f;

  // resume the plain run's step-2 checkpoint on the hidden device: the same step 3
  TrainOptions resumed = o;
  resumed.resume_dir = (fs::path(plain.out_dir) / "step-00000002").string();
  resumed.out_dir = dir / "resumed";
  resumed.log_path = dir / "resumed.jsonl";
  test::train_on(resumed, quiet, hidden);
  const auto want = test::losses(plain.log_path), got = test::losses(resumed.log_path);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.at(3), want.at(3));
  EXPECT_EQ(
      test::file_bytes(fs::path(plain.out_dir) / "step-00000003" / "optimizer.safetensors"),
      test::file_bytes(fs::path(resumed.out_dir) / "step-00000003" / "optimizer.safetensors"));
}

// Incremental decoding with every cache and buffer in the device space: the logits of the CPU
// backend's decoder, bit for bit, for the prompt and the tokens after it.
TEST(DeviceStaging, the_kv_decoder_runs_in_the_device_space) {
  ModelConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.vocab_size = 50;
  c.max_position_embeddings = 64;
  c.initializer_range = 0.2;
  HiddenDevice hidden;
  Model plain(c, cpu_backend()), staged(c, hidden);
  plain.init(7);
  staged.init(7);
  KvDecoder a(plain, 32), b(staged, 32);
  std::vector<float> la(50), lb(50);
  const std::vector<int32_t> prompt = {3, 14, 15, 9, 26};
  a.forward(prompt, la);
  b.forward(prompt, lb);
  EXPECT_EQ(la, lb);
  for (int32_t t : {5, 35, 8}) {
    a.forward(std::span<const int32_t>(&t, 1), la);
    b.forward(std::span<const int32_t>(&t, 1), lb);
    EXPECT_EQ(la, lb) << "after token " << t;
  }
  EXPECT_GT(hidden.products, 0);
  EXPECT_EQ(hidden.products_without_workspace, 0);
}

}  // namespace
}  // namespace memo
