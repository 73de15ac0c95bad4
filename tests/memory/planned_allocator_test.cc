// The planned arena: same numbers as the caching allocator, measured peak within the plan, and a
// request sequence that departs from the trace stopped with a message naming the request.
#include "memo/memory/planned_allocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "memo/backend/caching_allocator.h"
#include "memo/cpu/cpu_backend.h"
#include "memory_test_util.h"
#include "test_util.h"

namespace memo {
namespace {

struct StepResult {
  std::vector<double> losses;
  std::vector<float> grads;
};

// Two steps of two micro-batches each under `alloc`, from the same weights.
StepResult run_steps(Model& model, ActivationAllocator& alloc, int64_t batch, int64_t seq) {
  KeepStrategy strategy(skeletal_layout(model.config(), DType::kF32), alloc);
  StepResult r;
  for (int step = 0; step < 2; ++step) {
    model.zero_grads();
    for (int micro = 0; micro < 2; ++micro) {
      const auto in = testing::tokens(model.config(), batch * seq, 10 + step * 2 + micro);
      const auto tg = testing::tokens(model.config(), batch * seq, 50 + step * 2 + micro);
      r.losses.push_back(
          model.forward_backward(in.data(), tg.data(), batch, seq, 0.01f, strategy, alloc));
    }
  }
  r.grads.assign(model.grads(), model.grads() + model.params_numel());
  return r;
}

TEST(PlannedAllocator, gives_bitwise_the_same_losses_and_gradients_as_the_caching_allocator) {
  Model model(testing::tiny_config(), cpu_backend());
  model.init(7);
  CachingAllocator caching;
  const StepResult want = run_steps(model, caching, 2, 24);
  PlannedAllocator planned(plan_activations(testing::tiny_trace(model, 2, 24)));
  const StepResult got = run_steps(model, planned, 2, 24);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&got.losses[i], &want.losses[i], sizeof(double)), 0) << i;
  EXPECT_EQ(std::memcmp(got.grads.data(), want.grads.data(), want.grads.size() * sizeof(float)), 0);
}

TEST(PlannedAllocator, measured_peak_is_at_most_the_planned_peak_and_reaches_it) {
  Model model(testing::tiny_config(), cpu_backend());
  model.init(3);
  PlannedAllocator planned(plan_activations(testing::tiny_trace(model, 1, 40)));
  run_steps(model, planned, 1, 40);
  EXPECT_GT(planned.peak_live_bytes(), 0);
  EXPECT_LE(planned.peak_live_bytes(), planned.plan().arena_bytes);
  EXPECT_GE(planned.peak_live_bytes(), planned.plan().lower_bound_bytes);  // measured = traced
  EXPECT_EQ(planned.peak_top_bytes(), planned.plan().arena_bytes);
  EXPECT_EQ(planned.reserved_bytes(), planned.plan().arena_bytes);
  EXPECT_EQ(planned.live_bytes(), 0);
}

TEST(PlannedAllocator, planned_peak_is_within_the_budget_it_was_planned_for) {
  Model model(testing::tiny_config(), cpu_backend());
  const DevicePlan probe = plan_device_memory(model, 1, 32, 0);
  const int64_t budget = probe.need.total_bytes() + 4096;
  const DevicePlan dp = plan_device_memory(model, 1, 32, budget);
  ASSERT_TRUE(dp.fits());
  EXPECT_LE(dp.need.fixed_bytes() + dp.activations.arena_bytes, budget);
  std::ostringstream progress;
  const auto alloc =
      planned_allocator_within_budget(model, 1, 32, budget, DevicePlanOptions{}, progress);
  EXPECT_LE(alloc->reserved_bytes() + dp.need.fixed_bytes(), budget);
  EXPECT_NE(progress.str().find("device plan"), std::string::npos);
}

TEST(PlannedAllocator, another_sequence_length_is_stopped_at_the_first_request) {
  Model model(testing::tiny_config(), cpu_backend());
  PlannedAllocator planned(plan_activations(testing::tiny_trace(model, 1, 32)));
  const std::string msg =
      test::error_message<TraceMismatchError>([&] { run_steps(model, planned, 1, 16); });
  EXPECT_NE(msg.find("activation request 0 does not match the plan"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 'x' 4096 B f32 (saved), got 'x' 2048 B f32 (saved)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("trace and plan again"), std::string::npos) << msg;
}

TEST(PlannedAllocator, an_extra_request_is_stopped_naming_its_index) {
  Model model(testing::tiny_config(), cpu_backend());
  PlannedAllocator planned(plan_activations(testing::tiny_trace(model, 1, 16)));
  const std::string expected = planned.plan().trace.requests[20].name;
  bool added = false;
  planned.on_acquire = [&](int64_t request) {
    if (request != 20 || added) return;
    added = true;
    planned.acquire("test.extra", {8}, ActKind::kTransient, DType::kF32);
  };
  const std::string msg =
      test::error_message<TraceMismatchError>([&] { run_steps(model, planned, 1, 16); });
  EXPECT_NE(msg.find("activation request 20 does not match the plan: expected '" + expected + "'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("got 'test.extra' 32 B f32 (transient)"), std::string::npos) << msg;
}

TEST(PlannedAllocator, a_release_later_than_traced_is_stopped) {
  // traced: a [0,1), b [1,2): the plan may put b over a
  TraceRecorder rec;
  rec.release(rec.acquire("a", {64}, ActKind::kTransient, DType::kF32));
  rec.release(rec.acquire("b", {64}, ActKind::kTransient, DType::kF32));
  PlannedAllocator planned(plan_activations(rec.finish(1, 1)));
  const Tensor a = planned.acquire("a", {64}, ActKind::kTransient, DType::kF32);
  const std::string msg = test::error_message<TraceMismatchError>(
      [&] { planned.acquire("b", {64}, ActKind::kTransient, DType::kF32); });
  EXPECT_NE(msg.find("'a' (request 0) is still live at request 1"), std::string::npos) << msg;
  planned.release(a);
}

TEST(PlannedAllocator, a_request_beyond_the_step_is_stopped) {
  TraceRecorder rec;
  const Tensor t = rec.acquire("a", {64}, ActKind::kTransient, DType::kF32);
  rec.release(t);
  PlannedAllocator planned(plan_activations(rec.finish(1, 1)));
  const Tensor a = planned.acquire("a", {64}, ActKind::kTransient, DType::kF32);
  const std::string msg = test::error_message<TraceMismatchError>(
      [&] { planned.acquire("a", {64}, ActKind::kTransient, DType::kF32); });
  EXPECT_NE(msg.find("request 1 is beyond the 1 traced requests"), std::string::npos) << msg;
  planned.release(a);
  // with nothing live the sequence starts again
  planned.release(planned.acquire("a", {64}, ActKind::kTransient, DType::kF32));
}

}  // namespace
// The plan is keyed by dtype as well as bytes: the same bytes in another dtype are another request.
TEST(PlannedAllocator, another_dtype_of_the_same_bytes_is_stopped) {
  TraceRecorder rec;
  rec.release(rec.acquire("a", {64}, ActKind::kTransient, DType::kBF16));
  PlannedAllocator planned(plan_activations(rec.finish(1, 1)));
  const std::string msg = test::error_message<TraceMismatchError>(
      [&] { planned.acquire("a", {32}, ActKind::kTransient, DType::kF32); });
  EXPECT_NE(msg.find("expected 'a' 128 B bf16 (transient), got 'a' 128 B f32 (transient)"),
            std::string::npos)
      << msg;
  planned.release(planned.acquire("a", {64}, ActKind::kTransient, DType::kBF16));
}

}  // namespace memo
