// The one training step (train/step.h): its gradients are the mean over the step's micro-batches
// exactly as separate forward/backward calls accumulate them; the gradient-reduction hook runs
// once per step; clipping scales to the requested norm; the update is the optimiser's; and the
// evaluation loop (train/evaluate.h) sums the windows it covers.
#include "memo/train/step.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../memory/memory_test_util.h"
#include "memo/backend/caching_allocator.h"
#include "memo/core/random.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/optim/sgd.h"
#include "memo/parallel/self_communicator.h"
#include "memo/train/evaluate.h"
#include "test_util.h"

namespace memo {
namespace {

struct Fixture {
  ModelConfig config = testing::tiny_config();
  Model model{config, cpu_backend()};
  CachingAllocator alloc;
  KeepStrategy strategy{skeletal_layout(config, DType::kF32), alloc};
  SelfCommunicator dp{cpu_backend()};
  std::vector<int32_t> tokens;
  static constexpr int64_t kRows = 2, kSeq = 24, kMicro = 3;
  Fixture() {
    model.init(7);
    tokens.resize(size_t(kMicro * kRows * kSeq + 1));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(mix(11, i) % 64);
  }
  // Micro-batch m's rows: consecutive slices of one token stream, targets shifted by one.
  BatchSource source() {
    return [this](int64_t, int64_t micro, int32_t* in, int32_t* tgt, int64_t rows) {
      const int32_t* base = tokens.data() + micro * rows * kSeq;
      std::memcpy(in, base, size_t(rows * kSeq) * sizeof(int32_t));
      std::memcpy(tgt, base + 1, size_t(rows * kSeq) * sizeof(int32_t));
    };
  }
};

TEST(TrainStep, gradients_equal_the_micro_batches_accumulated_by_hand) {
  Fixture f;
  const int64_t n = f.model.params_numel();
  // by hand: three forward/backward calls into one gradient buffer, scaled to the step's mean
  f.model.zero_grads();
  double loss_sum = 0.0;
  const float scale = 1.0f / float(Fixture::kMicro * Fixture::kRows * Fixture::kSeq);
  std::vector<int32_t> in(size_t(Fixture::kRows * Fixture::kSeq)), tgt(in.size());
  for (int64_t m = 0; m < Fixture::kMicro; ++m) {
    f.source()(1, m, in.data(), tgt.data(), Fixture::kRows);
    loss_sum += f.model.forward_backward(in.data(), tgt.data(), Fixture::kRows, Fixture::kSeq,
                                         scale, f.strategy, f.alloc);
  }
  const std::vector<float> want(f.model.grads(), f.model.grads() + n);
  Sgd sgd(f.model.layout(), SgdOptions{}, decay_matrices_only(f.model.layout()), cpu_backend());
  TrainStep step(f.model, sgd, f.strategy, f.alloc,
                 StepShape{Fixture::kRows, Fixture::kSeq, Fixture::kMicro}, f.source(), nullptr,
                 f.dp);
  const StepGradients g = step.gradients(1);
  EXPECT_EQ(0, std::memcmp(want.data(), f.model.grads(), size_t(n) * sizeof(float)));
  EXPECT_EQ(g.loss, loss_sum / double(Fixture::kMicro * Fixture::kRows * Fixture::kSeq));
  double sq = 0.0;
  for (float v : want) sq += double(v) * v;
  EXPECT_NEAR(g.grad_sq, sq, 1e-12 * sq);
  EXPECT_EQ(f.dp.counters().calls, 1);  // the gradient-reduction hook, once per step
}

// Note [Overlapped gradient reduction]: with a data-parallel group and no noise probe, the last
// micro-batch's backward starts the reduction of each part of the gradients as it becomes final
// (the final norm and head, each layer from the top, the embedding), the parts tiling the buffer,
// and the step finishes them before it reads the gradients. A group of 2 ranks whose sums are the
// identity stands in for MPI (tests/parallel/data_parallel_test.cc runs the real one): the
// gradients are the one-rank step's bit for bit, halved (the mean over both ranks' tokens).
class RecordingGroup final : public Communicator {
 public:
  explicit RecordingGroup(const Model& model) : model_(model) {}
  const char* name() const override { return "recording"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void all_reduce_sum(Tensor) override { ++whole; }
  void start_all_reduce_sum(Tensor x) override {
    const int64_t begin = (static_cast<const float*>(x.data()) -
                           static_cast<const float*>(model_.grads_tensor().data()));
    parts.emplace_back(begin, begin + x.numel());
  }
  void finish_reductions() override { finished_after = int(parts.size()); }
  void reduce_scatter_sum(Tensor, ConstTensor) override {}
  void all_gather(Tensor, ConstTensor) override {}
  void all_reduce_sum(std::span<double> x) override {
    for (double& v : x) v *= 2.0;  // two ranks with the same loss
  }
  void all_gather(std::span<double>, std::span<const double>) override {}
  void broadcast(Tensor, int) override {}
  void send(ConstTensor, int) override {}
  void recv(Tensor, int) override {}
  void send_recv(ConstTensor, int, Tensor, int) override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return nullptr; }

  const Model& model_;
  std::vector<std::pair<int64_t, int64_t>> parts;
  int whole = 0, finished_after = -1;
};

TEST(TrainStep, the_last_backward_starts_each_parts_reduction_and_the_step_finishes_them) {
  Fixture f;
  const int64_t n = f.model.params_numel();
  Sgd sgd(f.model.layout(), SgdOptions{}, decay_matrices_only(f.model.layout()), cpu_backend());
  const StepShape shape{Fixture::kRows, Fixture::kSeq, Fixture::kMicro};
  TrainStep one(f.model, sgd, f.strategy, f.alloc, shape, f.source(), nullptr, f.dp);
  one.gradients(1);
  const std::vector<float> want(f.model.grads(), f.model.grads() + n);
  RecordingGroup group(f.model);
  TrainStep two(f.model, sgd, f.strategy, f.alloc, shape, f.source(), nullptr, group);
  two.gradients(1, Fixture::kMicro);
  // the mean over twice the tokens (the other rank's are counted): exactly half of each
  std::vector<float> half(want);
  for (float& g : half) g *= 0.5f;
  EXPECT_EQ(0, std::memcmp(half.data(), f.model.grads(), size_t(n) * sizeof(float)));
  EXPECT_EQ(group.whole, 0);  // no reduction of the whole buffer
  // the final norm and head, layers 2, 1, 0, the embedding: consecutive parts, top down
  const int64_t L = f.config.num_hidden_layers;
  ASSERT_EQ(group.parts.size(), size_t(L + 2));
  EXPECT_EQ(group.parts.front().second, n);
  EXPECT_EQ(group.parts.back().first, 0);
  for (size_t i = 0; i + 1 < group.parts.size(); ++i)
    EXPECT_EQ(group.parts[i + 1].second, group.parts[i].first) << i;
  EXPECT_EQ(group.parts[1].first,
            f.model.layout().find("model.layers.2.input_layernorm.weight").offset);
  EXPECT_EQ(group.finished_after, L + 2);
}

// A growing batch (--batch-schedule noise) runs more or fewer micro-batches of the same shape: two
// of the shape's three give exactly the two accumulated by hand at scale 1 / (2 rows seq), and a
// probe sized for three measures this step's two.
TEST(TrainStep, a_step_of_fewer_micro_batches_is_their_mean_and_the_probe_follows) {
  Fixture f;
  const int64_t n = f.model.params_numel(), k = 2;
  f.model.zero_grads();
  double loss_sum = 0.0;
  const float scale = 1.0f / float(k * Fixture::kRows * Fixture::kSeq);
  std::vector<int32_t> in(size_t(Fixture::kRows * Fixture::kSeq)), tgt(in.size());
  std::vector<double> micro_sq;
  for (int64_t m = 0; m < k; ++m) {
    f.source()(1, m, in.data(), tgt.data(), Fixture::kRows);
    std::vector<float> before(f.model.grads(), f.model.grads() + n);
    loss_sum += f.model.forward_backward(in.data(), tgt.data(), Fixture::kRows, Fixture::kSeq,
                                         scale, f.strategy, f.alloc);
    double sq = 0.0;  // micro-batch m's per-token-mean gradient is k times its share
    for (int64_t i = 0; i < n; ++i)
      sq += std::pow(double(k) * (double(f.model.grads()[i]) - before[size_t(i)]), 2);
    micro_sq.push_back(sq);
  }
  const std::vector<float> want(f.model.grads(), f.model.grads() + n);
  Sgd sgd(f.model.layout(), SgdOptions{}, decay_matrices_only(f.model.layout()), cpu_backend());
  const StepShape shape{Fixture::kRows, Fixture::kSeq, Fixture::kMicro};
  TrainStep plain(f.model, sgd, f.strategy, f.alloc, shape, f.source(), nullptr, f.dp);
  const StepGradients g = plain.gradients(1, k);
  EXPECT_EQ(0, std::memcmp(want.data(), f.model.grads(), size_t(n) * sizeof(float)));
  EXPECT_EQ(g.loss, loss_sum / double(k * Fixture::kRows * Fixture::kSeq));

  GradNoiseProbe probe(n, Fixture::kMicro, Fixture::kRows * Fixture::kSeq, {}, cpu_backend());
  TrainStep probed(f.model, sgd, f.strategy, f.alloc, shape, f.source(), &probe, f.dp);
  const StepGradients gp = probed.gradients(1, k);
  EXPECT_EQ(gp.loss, g.loss);
  EXPECT_EQ(probe.micro_steps(), k);
  ASSERT_EQ(probe.micro_sq_norms().size(), size_t(k));
  // the micro-batch gradients by difference above carry the fp32 rounding of the running sum:
  // a few ulp of the larger term, ~1e-6 relative
  for (int64_t m = 0; m < k; ++m)
    EXPECT_NEAR(probe.micro_sq_norms()[size_t(m)], micro_sq[size_t(m)], 1e-5 * micro_sq[size_t(m)]);
  EXPECT_EQ(probe.estimator().state().updates, 1);
  // the step's gradient summed through the side buffer: the same up to fp32 reordering
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(f.model.grads()[i], want[size_t(i)], 1e-6f * (1.0f + std::abs(want[size_t(i)])));
  probed.gradients(2);  // the shape's own count again
  EXPECT_EQ(probe.micro_steps(), Fixture::kMicro);
  EXPECT_EQ(probe.micro_sq_norms().size(), size_t(Fixture::kMicro));
}

// Note [Counted tokens]: with a loss mask (an eod mask on the model, kIgnoredTarget targets from
// the source) the step's loss is the mean over the targets it counts, computed here independently
// from every token's unmasked loss; the gradients are the same whether the step's 6 rows run as
// three micro-batches of 2 or one of 6; a second data-parallel rank's count halves them exactly;
// and a step whose every target is masked is refused by name.
TEST(TrainStep, a_masked_step_is_the_mean_over_the_counted_targets_whatever_the_split) {
  Fixture f;
  const int64_t n = f.model.params_numel(), rows = Fixture::kMicro * Fixture::kRows;
  const int32_t eot = f.tokens[5];
  f.model.set_eod_loss_mask(eot);
  // the source leaves out every 7th target as well
  auto masked = [&f](int64_t step, int64_t micro, int32_t* in, int32_t* tgt, int64_t r) {
    f.source()(step, micro, in, tgt, r);
    for (int64_t i = 0; i < r * Fixture::kSeq; ++i)
      if ((micro * r * Fixture::kSeq + i) % 7 == 3) tgt[i] = kIgnoredTarget;
  };
  // independently: each token's loss without any mask, summed over the counted ones
  std::vector<int32_t> in(size_t(rows * Fixture::kSeq)), tgt(in.size());
  std::vector<float> token_losses(in.size());
  f.source()(1, 0, in.data(), tgt.data(), rows);
  Model plain(f.config, cpu_backend());
  std::memcpy(plain.params(), f.model.params(), size_t(n) * sizeof(float));
  plain.forward_loss(in.data(), tgt.data(), rows, Fixture::kSeq, f.strategy, f.alloc, token_losses);
  double want_sum = 0.0;
  int64_t counted = 0, eots = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    eots += in[i] == eot;
    if (in[i] == eot || i % 7 == 3) continue;
    want_sum += token_losses[i];
    ++counted;
  }
  ASSERT_GT(eots, 0);  // the test has eod predictions to leave out
  Sgd sgd(f.model.layout(), SgdOptions{}, decay_matrices_only(f.model.layout()), cpu_backend());
  TrainStep three(f.model, sgd, f.strategy, f.alloc,
                  StepShape{Fixture::kRows, Fixture::kSeq, Fixture::kMicro}, masked, nullptr, f.dp);
  three.set_masked_targets(true);
  const StepGradients g3 = three.gradients(1);
  EXPECT_NEAR(g3.loss, want_sum / double(counted), 1e-6 * g3.loss);
  const std::vector<float> want(f.model.grads(), f.model.grads() + n);
  TrainStep one(f.model, sgd, f.strategy, f.alloc, StepShape{rows, Fixture::kSeq, 1}, masked,
                nullptr, f.dp);
  one.set_masked_targets(true);
  const StepGradients g1 = one.gradients(1);
  EXPECT_NEAR(g1.loss, g3.loss, 1e-6 * g3.loss);
  double scale = 0.0;
  for (float v : want) scale = std::max(scale, double(std::abs(v)));
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(f.model.grads()[i], want[size_t(i)], 1e-5 * scale);
  // two ranks with the same counts: the mean over twice the counted tokens, exactly half
  RecordingGroup group(f.model);
  TrainStep two(f.model, sgd, f.strategy, f.alloc,
                StepShape{Fixture::kRows, Fixture::kSeq, Fixture::kMicro}, masked, nullptr, group);
  two.set_masked_targets(true);
  two.gradients(1);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(f.model.grads()[i], 0.5f * want[size_t(i)]) << i;
  // nothing to count
  TrainStep none(
      f.model, sgd, f.strategy, f.alloc, StepShape{Fixture::kRows, Fixture::kSeq, 1},
      [](int64_t, int64_t, int32_t* in, int32_t* tgt, int64_t r) {
        std::fill_n(in, r * Fixture::kSeq, 1);
        std::fill_n(tgt, r * Fixture::kSeq, kIgnoredTarget);
      },
      nullptr, f.dp);
  none.set_masked_targets(true);
  const std::string msg = test::error_message<DataError>([&] { none.gradients(4); });
  EXPECT_NE(msg.find("step 4: the loss counts none of its 48 targets"), std::string::npos) << msg;
}

TEST(TrainStep, update_clips_to_the_requested_norm_then_steps_the_optimizer) {
  Fixture f;
  const int64_t n = f.model.params_numel();
  Sgd sgd(f.model.layout(), SgdOptions{},
          std::vector<bool>(f.model.layout().params().size(), false), cpu_backend());
  TrainStep step(f.model, sgd, f.strategy, f.alloc,
                 StepShape{Fixture::kRows, Fixture::kSeq, Fixture::kMicro}, f.source(), nullptr,
                 f.dp);
  const std::vector<float> before(f.model.params(), f.model.params() + n);
  const StepGradients g = step.gradients(1);
  ASSERT_GT(g.grad_norm(), 0.01);
  const double clip = g.grad_norm() / 4;
  step.update(g, 0.5, clip);
  // plain SGD: p -= lr * clipped g, so the step's length is lr * clip (up to the 1e-6 guard)
  double moved_sq = 0.0, grad_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    moved_sq += std::pow(double(before[size_t(i)]) - f.model.params()[i], 2);
    grad_sq += double(f.model.grads()[i]) * f.model.grads()[i];
  }
  EXPECT_NEAR(std::sqrt(grad_sq), clip, 1e-5 * clip);
  EXPECT_NEAR(std::sqrt(moved_sq), 0.5 * clip, 1e-4 * clip);
  EXPECT_EQ(sgd.steps_done(), 1);
}

TEST(Evaluate, sums_the_sequential_windows_it_covers) {
  Fixture f;
  const TokenData data(f.tokens, "test tokens", 64);
  const WindowSampler sampler(data, Fixture::kSeq, 0);
  const int64_t all = sampler.num_sequential_windows();
  ASSERT_GE(all, 5);
  const EvalSum some = evaluate_windows(f.model, f.strategy, f.alloc, sampler, 2, 5);
  EXPECT_EQ(some.windows, 5);
  EXPECT_EQ(some.tokens, 5 * Fixture::kSeq);
  double want = 0.0;  // window by window, in the loop's batches of 2, 2, 1
  std::vector<int32_t> in(size_t(2 * Fixture::kSeq)), tgt(in.size());
  for (int64_t w = 0; w < 5; w += 2) {
    const int64_t rows = std::min<int64_t>(2, 5 - w);
    sampler.fill_sequential(w, in.data(), tgt.data(), rows);
    want += f.model.forward_loss(in.data(), tgt.data(), rows, Fixture::kSeq, f.strategy, f.alloc);
  }
  EXPECT_EQ(some.loss_sum, want);
  EXPECT_EQ(evaluate_windows(f.model, f.strategy, f.alloc, sampler, 4, 1000).windows, all);
  // --eod-mask-loss: the predictions from the eot inputs leave the sums and the buckets, and
  // the hook sees them as kIgnoredTarget
  const int32_t eot = f.tokens[5];
  f.model.set_eod_loss_mask(eot);
  int64_t ignored = 0, eots = 0;
  const EvalSum masked = evaluate_windows(
      f.model, f.strategy, f.alloc, sampler, 2, 5,
      [&](const int32_t* t, int64_t r, const EvalSum&) {
        for (int64_t i = 0; i < r * Fixture::kSeq; ++i) ignored += t[i] == kIgnoredTarget;
      },
      nullptr, Fixture::kSeq / 2);
  for (int64_t i = 0; i < 5 * Fixture::kSeq; ++i) eots += f.tokens[size_t(i)] == eot;
  ASSERT_GT(eots, 0);
  EXPECT_EQ(ignored, eots);
  EXPECT_EQ(masked.tokens, 5 * Fixture::kSeq - eots);
  EXPECT_EQ(masked.bucket_tokens[0] + masked.bucket_tokens[1], masked.tokens);
  EXPECT_NEAR(masked.bucket_loss[0] + masked.bucket_loss[1], masked.loss_sum,
              1e-9 * masked.loss_sum);
  EXPECT_LT(masked.loss_sum, some.loss_sum);
}

}  // namespace
}  // namespace memo
