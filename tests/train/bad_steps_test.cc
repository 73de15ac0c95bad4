// Note [Bad steps]: the verdicts of BadSteps on given losses and norms, against the rule written
// out here.
#include "memo/train/bad_steps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "memo/core/error.h"

namespace memo {
namespace {

using StepVerdict = BadSteps::Verdict;
constexpr double kInfNorm = std::numeric_limits<double>::infinity();

TEST(BadSteps, the_median_of_odd_and_even_windows) {
  BadSteps bad(0, 0.0);
  EXPECT_EQ(bad.median(), 0.0);
  for (double norm : {5.0, 1.0, 3.0}) EXPECT_EQ(bad.judge(1, 1.0, norm, ""), StepVerdict::kApply);
  EXPECT_EQ(bad.median(), 3.0);
  EXPECT_EQ(bad.judge(4, 1.0, 4.0, ""), StepVerdict::kApply);
  EXPECT_EQ(bad.median(), 3.5);  // (3 + 4) / 2
}

TEST(BadSteps, a_spike_is_judged_against_the_last_32_applied_norms_from_the_8th_on) {
  BadSteps bad(0, 2.0);
  // before 8 applied steps nothing is a spike, however large
  for (int64_t step = 1; step <= BadSteps::kSpikeMinSteps; ++step)
    EXPECT_EQ(bad.judge(step, 1.0, step == 3 ? 100.0 : 1.0, ""), StepVerdict::kApply) << step;
  // the window: 1 x 7 and 100: median 1
  EXPECT_EQ(bad.judge(9, 1.0, 2.0, ""), StepVerdict::kApply);  // not above 2 x 1
  EXPECT_EQ(bad.judge(10, 1.0, 2.01, ""), StepVerdict::kSpike);
  EXPECT_EQ(bad.spikes_skipped(), 1);
  EXPECT_EQ(bad.state()["window"].size(), 9u);  // a spike does not join the window
  EXPECT_EQ(bad.judge(11, 1.0, 1.0, ""), StepVerdict::kApply);
  // the window keeps the last 32: after 30 norms of 1 and 20 of 5, 12 ones and 20 fives (all 50
  // would have the median 1)
  BadSteps wide(0, 100.0);
  for (int64_t step = 1; step <= 50; ++step) wide.judge(step, 1.0, step <= 30 ? 1.0 : 5.0, "");
  EXPECT_EQ(wide.state()["window"].size(), size_t(BadSteps::kSpikeWindow));
  EXPECT_EQ(wide.median(), 5.0);
}

TEST(BadSteps, too_many_spikes_in_a_row_stop_with_the_step_and_the_advice) {
  BadSteps bad(0, 1.5);
  for (int64_t step = 1; step <= 8; ++step) bad.judge(step, 1.0, 1.0, "");
  for (int64_t step = 9; step < 9 + BadSteps::kMaxSpikesInARow; ++step)
    EXPECT_EQ(bad.judge(step, 1.0, 2.0, ""), StepVerdict::kSpike);
  try {
    bad.judge(17, 1.0, 2.0, "lower --lr (now 0.001)");
    FAIL() << "the ninth spike in a row did not stop the run";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "gradient norm 2 at step 17 is above --spike-skip 1.5 times the median 1 for the "
                 "9th step in a row: the norm has moved for good; raise --spike-skip, or lower "
                 "--lr (now 0.001)");
  }
}

TEST(BadSteps, nonfinite_steps_are_skipped_k_in_a_row_and_stop_the_run_without_k) {
  // without --skip-nonfinite the first step whose loss or gradient norm is not finite stops the
  // run before its update: a finite loss over an infinite norm would write NaN into the weights
  EXPECT_THROW(BadSteps(0, 0.0).judge(1, 1.0, kInfNorm, ""), Error);
  EXPECT_THROW(BadSteps(0, 0.0).judge(1, 1.0, NAN, ""), Error);
  EXPECT_THROW(BadSteps(0, 0.0).judge(2, NAN, 1.0, ""), Error);
  BadSteps bad(2, 0.0);
  EXPECT_EQ(bad.judge(1, 1.0, kInfNorm, ""), StepVerdict::kNonfinite);
  EXPECT_EQ(bad.judge(2, NAN, 1.0, ""), StepVerdict::kNonfinite);
  EXPECT_EQ(bad.judge(3, 1.0, 1.0, ""), StepVerdict::kApply);  // the count starts again
  EXPECT_EQ(bad.judge(4, kInfNorm, 1.0, ""), StepVerdict::kNonfinite);
  EXPECT_EQ(bad.judge(5, kInfNorm, 1.0, ""), StepVerdict::kNonfinite);
  try {
    bad.judge(6, kInfNorm, 1.0, "lower --lr (now 1)");
    FAIL() << "the third non-finite step in a row did not stop the run";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "loss is inf at step 6 (3 steps in a row); lower --lr (now 1)");
  }
  EXPECT_EQ(bad.nonfinite_skipped(), 4);
}

TEST(BadSteps, the_state_restores_the_same_verdicts) {
  BadSteps a(1, 1.2);
  for (int64_t step = 1; step <= 20; ++step) a.judge(step, 1.0, 1.0 + 0.05 * double(step % 7), "");
  const nlohmann::json saved = nlohmann::json::parse(a.state().dump());
  BadSteps b(1, 1.2);
  b.restore(saved);
  EXPECT_EQ(b.state(), a.state());
  for (int64_t step = 21; step <= 40; ++step) {
    const double norm = step % 5 == 0 ? 3.0 : 1.0 + 0.05 * double(step % 7);
    EXPECT_EQ(b.judge(step, 1.0, norm, ""), a.judge(step, 1.0, norm, "")) << step;
  }
  BadSteps fresh(1, 1.2);
  fresh.restore(nlohmann::json());  // a checkpoint without the field
  EXPECT_EQ(fresh.median(), 0.0);
}

}  // namespace
}  // namespace memo
