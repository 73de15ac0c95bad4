// The device budget: need by part, the refusal message and its advice, checked against real plans.
#include "memo/memory/budget.h"

#include <gtest/gtest.h>

#include <sstream>

#include "memo/backend/bf16_storage.h"
#include "memo/core/units.h"
#include "memo/cpu/cpu_backend.h"
#include "memory_test_util.h"

namespace memo {
namespace {

TEST(Budget, need_adds_weights_gradients_the_optimizers_state_and_the_arena) {
  const DeviceNeed n = device_need(1000, "lion", 4000, 6400);
  EXPECT_EQ(n.weight_bytes, 4000);
  EXPECT_EQ(n.gradient_bytes, 4000);
  EXPECT_EQ(n.optimizer_bytes, 4000);
  EXPECT_EQ(n.fixed_bytes(), 12000);
  EXPECT_EQ(n.total_bytes(), 18400);
  const std::string b = need_breakdown(n);
  for (const char* part :
       {"weights", "gradients", "optimizer (lion)", "activation arena", "total", "18400 B"})
    EXPECT_NE(b.find(part), std::string::npos) << part << "\n" << b;
  const std::string msg = over_budget_message(n, 10000, 1, 16, FitAdvice{18400, std::nullopt});
  EXPECT_NE(msg.find("lion state 3.91 KiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("short"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("bf16"), std::string::npos) << msg;
  // a bf16 run's parts are named too: the terms add up to the need
  DeviceNeed m = n;
  m.working_weight_bytes = int64_t(1) << 30;
  m.conversion_scratch_bytes = int64_t(3) << 30;
  const std::string mixed = over_budget_message(m, 10000, 1, 16, FitAdvice{m.total_bytes(), {}});
  EXPECT_NE(mixed.find("+ bf16 working weights 1.00 GiB + bf16 conversion 3.00 GiB +"),
            std::string::npos)
      << mixed;
}

TEST(Budget, flag_value_rounds_up_and_parses_back_to_at_least_the_need) {
  EXPECT_EQ(budget_flag_value(int64_t(1) << 20), "1MiB");
  EXPECT_EQ(budget_flag_value((int64_t(1) << 20) + 1), "2MiB");
  EXPECT_EQ(budget_flag_value(int64_t(3) << 30), "3.00GiB");
  for (int64_t b : {int64_t(123456789), int64_t(5) << 30, (int64_t(5) << 30) + 1})
    EXPECT_GE(parse_bytes(budget_flag_value(b)), b) << b;
}

TEST(Budget, over_budget_refusal_names_need_budget_shortfall_and_what_fits) {
  Model model(testing::tiny_config(), cpu_backend());
  const int64_t seq = 128;
  const DevicePlan full = plan_device_memory(model, 2, seq, 0);
  // a budget between the fixed part and the need: a shorter sequence fits
  const int64_t budget = full.need.fixed_bytes() + full.activations.arena_bytes / 2;
  const DevicePlan dp = plan_device_memory(model, 2, seq, budget);
  ASSERT_FALSE(dp.fits());
  ASSERT_TRUE(dp.advice.longest_seq.has_value());
  EXPECT_LT(*dp.advice.longest_seq, seq);
  EXPECT_GT(*dp.advice.longest_seq, 1);
  EXPECT_EQ(dp.advice.smallest_budget_bytes, dp.need.total_bytes());
  const std::string msg = dp.over_budget_message();
  for (const std::string& part :
       {str("needs ", gib(double(dp.need.total_bytes())), " (", dp.need.total_bytes(), " B)"),
        str("budget is ", gib(double(budget)), " (", budget, " B)"), std::string("(short "),
        std::string("activation arena"), str("--seq ", *dp.advice.longest_seq, " fits"),
        str("--device-memory ", budget_flag_value(dp.need.total_bytes()), " fits"),
        str("batch 2 x seq ", seq)})
    EXPECT_NE(msg.find(part), std::string::npos) << part << "\n" << msg;
  // the estimate holds for real: a traced plan at that length fits, one token more does not
  EXPECT_TRUE(plan_device_memory(model, 2, *dp.advice.longest_seq, budget).fits());
  EXPECT_FALSE(plan_device_memory(model, 2, *dp.advice.longest_seq + 1, budget).fits());
}

// bf16 storage's widened copies grow with the sequence too: the advice measures them at the short
// length as well, so a budget that a shorter sequence fits gets that length, and it fits for real
// (the scratch at the traced length, counted as fixed, once left none).
TEST(Budget, bf16_advice_counts_the_conversion_scratch_as_growing_with_the_sequence) {
  // the CPU with its kernels widened, so that there are widened copies to count
  CpuBackend widening(
      CpuOptions{.bf16_products = false, .bf16_attention = false, .bf16_elementwise = false});
  Bf16StorageBackend mixed(widening);
  Model model(testing::tiny_config(), mixed);
  const int64_t seq = 256;
  const DevicePlan full = plan_device_memory(model, 2, seq, 0);
  ASSERT_GT(full.need.conversion_scratch_bytes, 0);
  const DevicePlan quarter = plan_device_memory(model, 2, seq / 4, 0);
  ASSERT_LT(quarter.need.conversion_scratch_bytes, full.need.conversion_scratch_bytes);
  // what a quarter of the length needs, less than the fixed part and the full length's scratch
  const int64_t budget = quarter.need.total_bytes();
  const DevicePlan dp = plan_device_memory(model, 2, seq, budget);
  ASSERT_FALSE(dp.fits());
  ASSERT_TRUE(dp.advice.longest_seq.has_value()) << dp.over_budget_message();
  EXPECT_GE(*dp.advice.longest_seq, seq / 4);
  EXPECT_TRUE(plan_device_memory(model, 2, *dp.advice.longest_seq, budget).fits());
}

TEST(Budget, budget_below_the_model_state_says_no_sequence_fits) {
  Model model(testing::tiny_config(), cpu_backend());
  const DevicePlan dp = plan_device_memory(model, 1, 16, 1024);
  ASSERT_FALSE(dp.fits());
  EXPECT_FALSE(dp.advice.longest_seq.has_value());
  const std::string msg = dp.over_budget_message();
  EXPECT_NE(msg.find("no sequence length fits this budget"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--device-memory 1MiB fits"), std::string::npos) << msg;
}

TEST(Budget, trainer_entry_refuses_with_budget_error) {
  Model model(testing::tiny_config(), cpu_backend());
  std::ostringstream progress;
  EXPECT_THROW(planned_allocator_within_budget(model, 1, 16, 1024, DevicePlanOptions{}, progress),
               BudgetError);
  EXPECT_TRUE(progress.str().empty());
}

TEST(Budget, unknown_strategy_names_the_available_ones) {
  try {
    StrategyOptions options;
    options.kind = "memo2";
    make_strategy_factory(options);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("available: keep, recompute, offload, memo"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace memo
