// MFU in the run log: against the matrix-product ceiling measured at start ("mfu"), and, given a
// datasheet peak (a GPU's, hardware/), against it too ("mfu_peak").
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../cli/cli_test_util.h"
#include "memo/model/model.h"
#include "memo/train/trainer.h"
#include "test_util.h"

namespace memo {
namespace {

std::vector<nlohmann::json> records(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(TrainerMfu, a_datasheet_peak_adds_mfu_against_it_beside_the_measured_one) {
  test::TempDir dir;
  test::write_text(dir / "config.json", R"({"hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 256, "max_position_embeddings": 256})");
  test::write_text(dir / "data.txt", test::corpus(20000));
  TrainOptions o;
  o.config_path = dir.str("config.json");
  o.data_path = dir.str("data.txt");
  o.seq = 32;
  o.batch = 2;
  o.steps = 2;
  o.val_batches = 0;
  o.out_dir = dir / "plain";
  o.log_path = dir / "plain.jsonl";
  std::ostringstream quiet;
  train(o, quiet);
  for (const nlohmann::json& r : records(o.log_path)) EXPECT_FALSE(r.contains("mfu_peak"));
  EXPECT_EQ(quiet.str().find("bf16 peak"), std::string::npos);

  o.out_dir = dir / "peak";
  o.log_path = dir / "peak.jsonl";
  o.device_peak_flops = 1e9;
  o.device_peak_name = "Test GPU";
  std::ostringstream progress;
  train(o, progress);
  ModelConfig config;
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.vocab_size = 256;
  config.max_position_embeddings = 256;
  const double flops_per_token = train_flops_per_token(config, o.seq);
  const auto recs = records(o.log_path);
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
