#include "memo/memory/plan/validate.h"

#include <gtest/gtest.h>

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

}  // namespace memo::plan
