// memo lr --from-log: a learning rate from a run's own logged noise scale (the last gns_b_simple,
// the estimator's smoothed value) and the surge or SGD law, with eps_max given or from a sweep by
// Eq. 23 / 24; on a real `memo train --log` file; and the error paths, each one line naming the
// value and what to change.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "memo/scaling/laws.h"
#include "test_util.h"

namespace memo {
namespace {

using test::surge_sweep;
using test::write_text;

// A log as memo train writes it: null noise scale first (too few updates), then values.
std::string log_text(const std::vector<std::optional<double>>& b_simple) {
  std::string out;
  for (size_t i = 0; i < b_simple.size(); ++i) {
    nlohmann::json j{{"step", int64_t(i) + 1},
                     {"loss", 5.0 - 0.1 * double(i)},
                     {"lr", 1e-3},
                     {"gns_g2", nullptr},
                     {"gns_trace", nullptr}};
    j["gns_b_simple"] = b_simple[i] ? nlohmann::json(*b_simple[i]) : nlohmann::json();
    out += j.dump() + "\n";
  }
  return out;
}

nlohmann::json run_json(const std::string& args) {
  const test::CommandResult r = test::run_command(test::memo_bin() + " lr " + args + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.exit_code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json::object();
}

TEST(LrFromLog, uses_the_last_logged_b_simple_times_the_multiple) {
  test::TempDir dir;
  write_text(dir / "run.jsonl", log_text({std::nullopt, 900.0, 1100.0, 1500.0, std::nullopt}));
  const std::string log = " --from-log " + dir.str("run.jsonl");
  nlohmann::json j = run_json("--batch 1000 --eps-max 1e-3" + log);
  EXPECT_EQ(j.at("b_simple").get<double>(), 1500.0);
  EXPECT_EQ(j.at("b_simple_step").get<int64_t>(), 4);
  EXPECT_EQ(j.at("b_noise").get<double>(), 1500.0);
  EXPECT_NEAR(j.at("lr").get<double>(), scaling::lr_surge(1000.0, 1e-3, 1500.0), 1e-15);
  EXPECT_EQ(j.at("eps_max_from"), "given");
  j = run_json("--batch 1000 --eps-max 1e-3 --noise-multiple 2 --law sgd" + log);
  EXPECT_EQ(j.at("b_noise").get<double>(), 3000.0);
  EXPECT_NEAR(j.at("lr").get<double>(), 1e-3 / (1.0 + 3.0), 1e-15);
  EXPECT_TRUE(j.at("peak_batch").is_null());
  // the text form says which value it used
  const test::CommandResult r =
      test::run_command(test::memo_bin() + " lr --batch 1000 --eps-max 1e-3" + log);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("B_simple 1500 tokens: the estimator's smoothed value (ratio of EMAs) "
                          "at step 4"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the last of 3 logged"), std::string::npos) << r.output;
}

// eps_max from a sweep at the log's B_noise: Eq. 23 averages eps_k / shape(B_k) over the sweep's
// optimal lrs; the sweep's optima are exactly on the law, so at its own B_noise it gives its
// eps_max back (to the parabola vertex's clamping: none here), and at another B_noise the mean of
// eps_k 0.5 (sqrt(B_n/B_k) + sqrt(B_k/B_n)) computed here.
TEST(LrFromLog, eps_max_from_a_sweep_by_eq_23_at_the_logged_b_noise) {
  test::TempDir dir;
  write_text(dir / "sweep.jsonl", surge_sweep(1e-3, 2000.0));
  write_text(dir / "same.jsonl", log_text({2000.0}));
  write_text(dir / "other.jsonl", log_text({4000.0}));
  const std::string fit = " --fit " + dir.str("sweep.jsonl");
  nlohmann::json j = run_json("--batch 2000" + fit + " --from-log " + dir.str("same.jsonl"));
  EXPECT_NEAR(j.at("eps_max").get<double>(), 1e-3, 1e-9);
  EXPECT_NEAR(j.at("lr").get<double>(), 1e-3, 1e-9);
  EXPECT_EQ(j.at("eps_max_from"), "fit");
  j = run_json("--batch 2000" + fit + " --from-log " + dir.str("other.jsonl"));
  double expect = 0.0;
  const double bs[] = {256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0};
  for (double b : bs)
    expect += scaling::lr_surge(b, 1e-3, 2000.0) * 0.5 *
              (std::sqrt(4000.0 / b) + std::sqrt(b / 4000.0)) / 6.0;
  EXPECT_NEAR(j.at("eps_max").get<double>() / expect, 1.0, 1e-9);
  EXPECT_EQ(j.at("b_noise").get<double>(), 4000.0);
}

// The log of a real run: 4 micro-batches per step give a noise scale from step 1.
TEST(LrFromLog, reads_the_log_of_a_real_training_run) {
  test::TempDir dir;
  write_text(dir / "config.json", R"({"hidden_size": 16, "intermediate_size": 32,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 256,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 64,
    "tie_word_embeddings": false})");
  write_text(dir / "data.txt", test::corpus(20000));
  const test::CommandResult t = test::run_command(
      test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
      dir.str("data.txt") + " --seq 16 --batch 4 --micro-batch 1 --steps 3 --out " +
      dir.str("run") + " --log " + dir.str("run.jsonl"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  std::ifstream in(dir.str("run.jsonl"));
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const nlohmann::json rec = nlohmann::json::parse(last);
  ASSERT_TRUE(rec.at("gns_b_simple").is_number()) << last;  // deterministic for this seed
  const nlohmann::json j = run_json("--batch 64 --eps-max 1e-3 --from-log " + dir.str("run.jsonl"));
  EXPECT_EQ(j.at("b_simple").get<double>(), rec.at("gns_b_simple").get<double>());
  EXPECT_EQ(j.at("b_simple_step").get<int64_t>(), 3);
}

TEST(LrFromLog, errors_are_one_line_and_name_the_value) {
  test::TempDir dir;
  write_text(dir / "none.jsonl", log_text({std::nullopt, std::nullopt, std::nullopt}));
  write_text(dir / "ok.jsonl", log_text({1000.0}));
  write_text(dir / "bad.jsonl", log_text({1000.0}) + "{\"step\": 2, \"loss\n" + log_text({1.0}));
  const std::string lr = test::memo_bin() + " lr ";
  test::expect_clean_failure(
      lr + "--batch 64 --eps-max 1e-3 --from-log " + dir.str("missing.jsonl"),
      "cannot read training log " + dir.str("missing.jsonl"));
  test::expect_clean_failure(
      lr + "--batch 64 --eps-max 1e-3 --from-log " + dir.str("none.jsonl"),
      "has no gns_b_simple values in its 3 records: that run measured no noise scale; train with "
      "--batch at least 2 x --micro-batch and without --no-gns");
  test::expect_clean_failure(lr + "--batch 0 --eps-max 1e-3 --from-log " + dir.str("ok.jsonl"),
                             "--batch 0 must be a positive number of tokens");
  test::expect_clean_failure(lr + "--batch -5 --eps-max 1e-3 --from-log " + dir.str("ok.jsonl"),
                             "--batch -5 must be a positive number of tokens");
  test::expect_clean_failure(lr + "--batch 64 --eps-max 1e-3 --from-log " + dir.str("bad.jsonl"),
                             "bad.jsonl line 2: not a JSON object");
  test::expect_clean_failure(lr + "--batch 64 --from-log " + dir.str("ok.jsonl"),
                             "--from-log gives B_noise; give --eps-max X, or --fit SWEEP.jsonl");
  test::expect_clean_failure(
      lr + "--batch 64 --eps-max 1e-3 --noise-multiple 0 --from-log " + dir.str("ok.jsonl"),
      "--noise-multiple 0 must be positive");
  test::expect_clean_failure(
      lr + "--batch 64 --eps-max 1e-3 --b-noise 10 --from-log " + dir.str("ok.jsonl"), "excludes");
}

}  // namespace
}  // namespace memo
