#include "memo/memory/plan/validate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace memo::plan {
namespace {

std::string validate_message(const Problem& p, const Plan& plan) {
  try {
    validate(p, plan);
  } catch (const PlanError& e) {
    return e.what();
  }
  return "";
}

// q and k alive together on [2, 5): they must not share bytes.
const Problem kTwo{{{"q", 4096, 64, 0, 5}, {"k", 4096, 64, 2, 6}}, 0};

}  // namespace

TEST(PlanValidate, accepts_a_correct_plan) {
  EXPECT_NO_THROW(validate(kTwo, Plan{{0, 4096}, 8192}));
  // Buffers never alive together may share bytes.
  EXPECT_NO_THROW(
      validate(Problem{{{"a", 64, 64, 0, 1}, {"b", 64, 64, 1, 2}}, 0}, Plan{{0, 0}, 64}));
}

TEST(PlanValidate, overlap_names_both_buffers_ranges_and_lifetimes) {
  const std::string msg = validate_message(kTwo, Plan{{0, 2048}, 8192});
  EXPECT_NE(msg.find("buffer 0 'q' at bytes [0, 4096) alive [0, 5)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("buffer 1 'k' at bytes [2048, 6144) alive [2, 6)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("by 2048 bytes"), std::string::npos) << msg;
}

TEST(PlanValidate, rejects_misaligned_negative_and_past_peak_offsets) {
  EXPECT_NE(validate_message(kTwo, Plan{{0, 4100}, 9000}).find("not a multiple of align 64"),
            std::string::npos);
  EXPECT_NE(validate_message(kTwo, Plan{{-64, 4096}, 8192}).find("negative"), std::string::npos);
  EXPECT_NE(validate_message(kTwo, Plan{{0, 4096}, 8000}).find("past the plan peak 8000"),
            std::string::npos);
  EXPECT_NE(validate_message(kTwo, Plan{{0}, 8192}).find("1 offsets for 2 buffers"),
            std::string::npos);
}

TEST(PlanValidate, rejects_a_peak_over_capacity_with_the_shortfall) {
  Problem p = kTwo;
  p.capacity = 8000;
  const std::string msg = validate_message(p, Plan{{0, 4096}, 8192});
  EXPECT_NE(msg.find("exceeds capacity 8000 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("short 192 bytes"), std::string::npos) << msg;
}

TEST(PlanValidate, counts_the_aligned_size_not_the_requested_size) {
  // 100 B rounds up to 128 B: an offset of 100 for the second buffer is both misaligned and
  // overlapping; 64 overlaps [0, 128).
  Problem p{{{"a", 100, 64, 0, 2}, {"b", 100, 64, 0, 2}}, 0};
  EXPECT_NE(validate_message(p, Plan{{0, 64}, 192}).find("overlaps"), std::string::npos);
  EXPECT_NO_THROW(validate(p, Plan{{0, 128}, 256}));
}

// The sweep finds an overlap exactly when some pair of buffers alive together shares bytes: checked
// against every pair on random small plans (lifetimes touching end to begin; a buffer of size 0
// takes no bytes, so it overlaps nothing).
TEST(PlanValidate, the_sweep_agrees_with_every_pair_on_random_plans) {
  std::mt19937 rng(11);
  int overlapping = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Problem p;
    const int n = 2 + int(rng() % 7);
    for (int i = 0; i < n; ++i) {
      const int64_t begin = int64_t(rng() % 6);
      p.buffers.push_back({std::string(1, char('a' + i)), int64_t(rng() % 4) * 64, 64, begin,
                           begin + 1 + int64_t(rng() % 4)});
    }
    Plan plan{std::vector<Bytes>(size_t(n)), 0};
    for (int i = 0; i < n; ++i) {
      plan.offsets[size_t(i)] = int64_t(rng() % 5) * 64;
      plan.peak = std::max(plan.peak, plan.offsets[size_t(i)] + p.buffers[size_t(i)].size);
    }
    bool pair = false;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) {
        const Buffer &a = p.buffers[size_t(i)], &b = p.buffers[size_t(j)];
        const Bytes a_lo = plan.offsets[size_t(i)], b_lo = plan.offsets[size_t(j)];
        pair = pair || (a.size > 0 && b.size > 0 && a.begin < b.end && b.begin < a.end &&
                        a_lo < b_lo + b.size && b_lo < a_lo + a.size);
      }
    overlapping += pair;
    EXPECT_EQ(validate_message(p, plan).find("overlaps") != std::string::npos, pair)
        << "trial " << trial << ": " << validate_message(p, plan);
  }
  EXPECT_GT(overlapping, 300);
  EXPECT_LT(overlapping, 2700);
}

}  // namespace memo::plan
