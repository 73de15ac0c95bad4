// MFU in the run log: against the matrix-product ceiling measured at start ("mfu"), and, given a
// datasheet peak (a GPU's, hardware/), against it too ("mfu_peak").
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../cli/cli_test_util.h"
#include "memo/io/config_json.h"
#include "memo/model/flops.h"
#include "memo/model/model.h"
#include "memo/train/trainer.h"
#include "test_util.h"
#include "train/train_util.h"

namespace memo {
namespace {

TEST(TrainerMfu, a_datasheet_peak_adds_mfu_against_it_beside_the_measured_one) {
  test::TempDir dir;
  TrainOptions o = test::tiny_train_options(dir.path());
  o.batch = 2;
  o.steps = 2;
  o.val_batches = 0;
  o.out_dir = dir / "plain";
  o.log_path = dir / "plain.jsonl";
  std::ostringstream quiet;
  test::train_on(o, quiet);
  for (const nlohmann::json& r : test::records(o.log_path)) EXPECT_FALSE(r.contains("mfu_peak"));
  EXPECT_EQ(quiet.str().find("bf16 peak"), std::string::npos);

  o.out_dir = dir / "peak";
  o.log_path = dir / "peak.jsonl";
  o.device_peak_flops = 1e9;
  o.device_peak_name = "Test GPU";
  std::ostringstream progress;
  test::train_on(o, progress);
  const double flops_per_token = train_flops_per_token(load_model_config(o.config_path), o.seq);
  const auto recs = test::records(o.log_path);
  ASSERT_EQ(recs.size(), 2u);
  for (const nlohmann::json& r : recs) {
    const double tokens_per_s = r.at("tokens_per_s"), peak = r.at("mfu_peak"), mfu = r.at("mfu");
    EXPECT_NEAR(peak, flops_per_token * tokens_per_s / 1e9, 1e-9 * peak);
    EXPECT_GT(mfu, 0.0);
  }
  EXPECT_NE(progress.str().find("Test GPU datasheet's dense bf16 peak (0.001 TFLOP/s)"),
            std::string::npos)
      << progress.str();
  EXPECT_NE(progress.str().find("% of bf16 peak)"), std::string::npos) << progress.str();
}

}  // namespace
}  // namespace memo
