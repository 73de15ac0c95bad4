// memo sweep, fit and lr end to end, and the optimiser flags of memo train: sweeps resume by
// skipping finished runs, fits recover B_noise from sweep files written from a known surge law,
// lr prints one JSON object, a non-Adam run resumes exactly, and the error paths name the value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_test_util.h"
#include "memo/scaling/laws.h"
#include "svg_check.h"
#include "test_util.h"

namespace memo {
namespace {

using test::write_text;

const char* kTinyScalingConfig =
    R"({"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
  "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 256, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "max_position_embeddings": 64, "tie_word_embeddings": false})";

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A sweep file from the surge law: per batch B the "loss" is a parabola in log lr around
// lr_surge(B), so the optimum is exact; with `target`, also steps to a target loss from
// (S/S_min - 1)(E/E_min - 1) = 1 (surge Eq. 20) and the loss reduction as the criterion.
std::string synthetic_sweep(double eps_max, double b_noise, bool target) {
  std::string out;
  const double s_min = 100.0;
  for (double b : {256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0}) {
    const double opt = scaling::lr_surge(b, eps_max, b_noise);
    for (int k = -4; k <= 4; ++k) {
      const double lr = eps_max * std::pow(2.0, 0.5 * k);
      const double d = std::log(lr / opt);
      nlohmann::json j{{"optimizer", "adam"},
                       {"hyperparameters", {{"beta1", 0.0}}},
                       {"lr", lr},
                       {"batch_tokens", b},
                       {"val_loss", 2.0 + d * d}};
      if (target) {
        const double steps = std::round(s_min * (1.0 + b_noise / b));
        j["target_loss"] = 2.5;
        j["target_steps"] = steps;
        j["target_tokens"] = steps * b;
        j["loss_reduction"] = 0.5 - d * d;
      }
      out += j.dump() + "\n";
    }
  }
  return out;
}

class ScalingCli : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir / "config.json", kTinyScalingConfig);
    std::string text;
    while (text.size() < 20000) text += "In the beginning God created the heaven and the earth. ";
    write_text(dir / "data.txt", text);
  }
  std::string sweep_cmd(const std::string& lrs, const std::string& extra = "") const {
    return test::memo_bin() + " sweep --config " + dir.str("config.json") + " --data " +
           dir.str("data.txt") +
           " --seq 16 --micro-batch 1 --batches 32,64 --steps 3 --val-windows 4 --optimizer adam "
           "--lrs " +
           lrs + " --out " + dir.str("sweep.jsonl") + " " + extra;
  }
  test::TempDir dir;
};

TEST_F(ScalingCli, sweep_appends_one_line_per_run_and_resume_skips_finished_runs) {
  test::CommandResult r = test::run_command(sweep_cmd("1e-3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto lines = read_lines(dir.str("sweep.jsonl"));
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& j : lines) {
    EXPECT_EQ(j.at("optimizer"), "adam");
    EXPECT_EQ(j.at("steps"), 3);
    EXPECT_EQ(j.at("tokens"), 3 * j.at("batch_tokens").get<int64_t>());
    EXPECT_TRUE(j.at("val_loss").is_number());
    EXPECT_TRUE(j.at("gns_b_simple").is_number() || j.at("gns_b_simple").is_null());
    EXPECT_FALSE(j.at("curve").empty());
  }
  // a cut-short last line (a kill mid-write) is dropped, finished runs are skipped
  std::ofstream(dir.str("sweep.jsonl"), std::ios::app)
      << R"({"optimizer": "adam", "lr": 2e-3, "ba)";
  r = test::run_command(sweep_cmd("1e-3,2e-3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("run 1/4: lr 0.001 batch 32 tokens seed 1234: already in"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("run 3/4: lr 0.001 batch 64 tokens seed 1234: already in"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("dropped an incomplete last line"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 runs done, 2 skipped"), std::string::npos) << r.output;
  lines = read_lines(dir.str("sweep.jsonl"));
  ASSERT_EQ(lines.size(), 4u);
}

TEST_F(ScalingCli, several_seeds_run_the_grid_once_each_and_fit_shows_their_spread) {
  const std::string cmd = sweep_cmd("1e-3,4e-3,1.6e-2", "--seed 7,8");
  test::CommandResult r = test::run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto lines = read_lines(dir.str("sweep.jsonl"));
  ASSERT_EQ(lines.size(), 12u);
  std::map<int64_t, int> per_seed;
  for (const auto& j : lines) ++per_seed[j.at("seed").get<int64_t>()];
  EXPECT_EQ(per_seed, (std::map<int64_t, int>{{7, 6}, {8, 6}}));
  // seeds differ in weights and data: the same (lr, batch) gives another loss
  EXPECT_NE(lines[0].at("val_loss").dump(), lines[6].at("val_loss").dump());
  r = test::run_command(cmd);  // everything is done: all skipped
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("0 runs done, 12 skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("seed 8: already in"), std::string::npos) << r.output;
}

TEST_F(ScalingCli, fit_averages_seeds_and_reports_each_seeds_optimum) {
  // two seeds whose optima lie a factor 2^0.25 either side of the law; steps to the target differ
  // by 2 between them, so Eq. 22 sees their mean
  const std::string text = synthetic_sweep(1e-3, 2000.0, true);
  std::string both;
  for (int seed : {1, 2}) {
    std::istringstream in(text);
    std::string l;
    while (std::getline(in, l)) {
      nlohmann::json j = nlohmann::json::parse(l);
      const double opt = scaling::lr_surge(j.at("batch_tokens").get<double>(), 1e-3, 2000.0) *
                         std::pow(2.0, seed == 1 ? 0.25 : -0.25);
      const double d = std::log(j.at("lr").get<double>() / opt);
      j["seed"] = seed;
      j["loss_reduction"] = 0.5 - d * d;
      j["target_steps"] = j.at("target_steps").get<double>() + (seed == 1 ? 0 : 2);
      j["target_tokens"] = j.at("target_steps").get<double>() * j.at("batch_tokens").get<double>();
      both += j.dump() + "\n";
    }
  }
  write_text(dir / "t.jsonl", both);
  const test::CommandResult r =
      test::run_command(test::memo_bin() + " fit " + dir.str("t.jsonl") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("seeds"), 2);
  for (const auto& b : j.at("batches")) {
    const auto& seeds = b.at("seed_lrs");
    ASSERT_EQ(seeds.size(), 2u);
    const double law = scaling::lr_surge(b.at("batch_tokens").get<double>(), 1e-3, 2000.0);
    // each seed's own parabola vertex (grid 2^0.5 apart, clamped at the neighbours)
    EXPECT_LT(seeds.at(0).get<double>(), law);
    EXPECT_GT(seeds.at(1).get<double>(), law);
    const double s1 = std::round(100.0 * (1.0 + 2000.0 / b.at("batch_tokens").get<double>()));
    EXPECT_DOUBLE_EQ(b.at("target_steps").get<double>(), s1 + 1.0);
  }
}

TEST_F(ScalingCli, several_target_levels_record_what_single_target_runs_would) {
  // the data repeat one sentence, so the loss falls fast: levels 5 and 4 are reached in a few steps
  const std::string base = test::memo_bin() + " sweep --config " + dir.str("config.json") +
                           " --data " + dir.str("data.txt") +
                           " --seq 16 --micro-batch 1 --batches 32,64 --steps 400 --val-windows 0 "
                           "--optimizer adam --lrs 1e-2 --loss-window 3 --extra-steps 4 ";
  ASSERT_EQ(test::run_command(base + "--target-loss 4,5 --out " + dir.str("both.jsonl")).exit_code,
            0);
  ASSERT_EQ(test::run_command(base + "--target-loss 5 --out " + dir.str("five.jsonl")).exit_code,
            0);
  ASSERT_EQ(test::run_command(base + "--target-loss 4 --out " + dir.str("four.jsonl")).exit_code,
            0);
  const nlohmann::json both = read_lines(dir.str("both.jsonl")).at(0);
  const nlohmann::json five = read_lines(dir.str("five.jsonl")).at(0);
  const nlohmann::json four = read_lines(dir.str("four.jsonl")).at(0);
  EXPECT_EQ(both.at("target_loss"), nlohmann::json({5.0, 4.0}));  // sorted, highest first
  const auto& levels = both.at("targets");
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(read_lines(dir.str("both.jsonl")).size(), 2u);
  ASSERT_TRUE(five.at("target_steps").is_number()) << five.dump();
  ASSERT_TRUE(four.at("target_steps").is_number()) << four.dump();
  EXPECT_LT(five.at("target_steps").get<int64_t>(), four.at("target_steps").get<int64_t>());
  EXPECT_EQ(levels.at(0).at("steps"), five.at("target_steps"));
  EXPECT_EQ(levels.at(0).at("loss_reduction").dump(), five.at("loss_reduction").dump());
  EXPECT_EQ(levels.at(1).at("steps"), four.at("target_steps"));
  EXPECT_EQ(levels.at(1).at("loss_reduction").dump(), four.at("loss_reduction").dump());
  // the run ends at the lowest level: the same run as the single-target one
  EXPECT_EQ(both.at("steps"), four.at("steps"));
  EXPECT_EQ(both.at("loss_reduction").dump(), four.at("loss_reduction").dump());
  EXPECT_EQ(both.at("final_loss").dump(), four.at("final_loss").dump());

  // memo fit picks a level; one the runs lack is named with the ones they have
  test::CommandResult r = test::run_command(test::memo_bin() + " fit " + dir.str("both.jsonl") +
                                            " --target-loss 5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json fit = nlohmann::json::parse(r.output);
  EXPECT_EQ(fit.at("target_level"), 5.0);
  EXPECT_EQ(fit.at("batches").at(0).at("target_steps").get<double>(),
            five.at("target_steps").get<double>());
  r = test::run_command(test::memo_bin() + " fit " + dir.str("both.jsonl") +
                        " --target-loss 3.5 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("line 1: no target level 3.5 (the run has 5, 4)"), std::string::npos)
      << r.output;
  r = test::run_command(base + "--target-loss 4,4 --out " + dir.str("dup.jsonl") + " 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--target-loss 4 is given twice"), std::string::npos) << r.output;
}

TEST_F(ScalingCli, fit_recovers_b_noise_from_a_surge_law_sweep) {
  write_text(dir / "s.jsonl", synthetic_sweep(1e-3, 2000.0, false));
  const test::CommandResult r = test::run_command(test::memo_bin() + " fit " + dir.str("s.jsonl") +
                                                  " --json --plot " + dir.str("s.svg") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  const auto& surge = j.at("laws").at("surge").at("params");
  // the parabola's vertex is exact, so only the lr grid's clamping and LM tolerance remain
  EXPECT_NEAR(surge.at(1).get<double>(), 2000.0, 0.05 * 2000.0);
  EXPECT_NEAR(surge.at(0).get<double>(), 1e-3, 0.05 * 1e-3);
  EXPECT_EQ(j.at("best_law"), "surge");
  EXPECT_TRUE(j.at("target").is_null());
  std::ifstream svg(dir.str("s.svg"));
  const std::string text((std::istreambuf_iterator<char>(svg)), {});
  const test::SvgSummary plot = test::check_svg(text);
  ASSERT_TRUE(plot.ok) << plot.error;
  // one optimum per batch size of the sweep (7), plus the legend's marker
  EXPECT_EQ(plot.elements.at("circle"), 7 + 1);
  // the surge and the SGD law's curves (the power law is fitted, not drawn)
  ASSERT_TRUE(j.at("laws").contains("power"));
  EXPECT_EQ(plot.elements.at("path"), 2);
  EXPECT_NE(
      std::find_if(plot.texts.begin(), plot.texts.end(),
                   [](const std::string& t) { return t.find("surge law") != std::string::npos; }),
      plot.texts.end());
}

TEST_F(ScalingCli, fit_of_a_target_loss_sweep_recovers_b_noise_from_steps_and_tokens) {
  write_text(dir / "t.jsonl", synthetic_sweep(1e-3, 2000.0, true));
  const test::CommandResult r =
      test::run_command(test::memo_bin() + " fit " + dir.str("t.jsonl") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("metric"), "loss_reduction");
  // S is rounded to whole steps: B_noise to ~1%
  EXPECT_NEAR(j.at("target").at("b_noise").get<double>(), 2000.0, 0.02 * 2000.0);
  EXPECT_NEAR(j.at("target").at("eps_max_surge").get<double>(), 1e-3, 0.05 * 1e-3);
}

TEST_F(ScalingCli, lr_json_prints_lr_and_peak_batch) {
  const test::CommandResult r =
      test::run_command(test::memo_bin() + " lr --batch 1000 --b-noise 4000 --eps-max 1e-3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_NEAR(j.at("lr").get<double>(), 2e-3 * std::sqrt(1000.0 * 4000.0) / 5000.0, 1e-12);
  EXPECT_EQ(j.at("peak_batch").get<double>(), 4000.0);
  const nlohmann::json sgd = nlohmann::json::parse(
      test::run_command(test::memo_bin() +
                        " lr --batch 1000 --b-noise 4000 --eps-max 1e-3 --law sgd --json")
          .output);
  EXPECT_NEAR(sgd.at("lr").get<double>(), 1e-3 / 5.0, 1e-12);
  EXPECT_TRUE(sgd.at("peak_batch").is_null());
  // from a sweep file: the fitted surge law
  write_text(dir / "s.jsonl", synthetic_sweep(1e-3, 2000.0, false));
  const nlohmann::json f =
      nlohmann::json::parse(test::run_command(test::memo_bin() + " lr --batch 2000 --fit " +
                                              dir.str("s.jsonl") + " --json")
                                .output);
  EXPECT_NEAR(f.at("peak_batch").get<double>(), 2000.0, 100.0);
  // a sweep whose large batches' best lr lies at the grid's edge (their optimum is below it) is
  // fitted with a warning (the fit above gave none: its JSON parsed)
  write_text(dir / "low.jsonl", synthetic_sweep(1e-3, 40.0, false));
  const test::CommandResult low =
      test::run_command(test::memo_bin() + " lr --batch 2000 --fit " + dir.str("low.jsonl"));
  ASSERT_EQ(low.exit_code, 0) << low.output;
  EXPECT_NE(
      low.output.find("memo: warning: the fit of " + dir.str("low.jsonl") + " is uncertain: "),
      std::string::npos)
      << low.output;
  EXPECT_NE(low.output.find(" batch sizes have their best lr at the lr grid's edge (a bound, not "
                            "an optimum: widen --lrs)"),
            std::string::npos)
      << low.output;
}

TEST_F(ScalingCli, lion_run_resumes_with_identical_losses_and_noise_scale) {
  // constant lr: the schedule does not depend on --steps, so a 4-step run resumed to 8 must match
  const std::string base =
      test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
      dir.str("data.txt") + " --seq 16 --batch 4 --micro-batch 1 --warmup 0 " +
      "--min-lr-ratio 1 --optimizer lion --lr 1e-3 --beta2 0.98 --weight-decay 0.1 ";
  ASSERT_EQ(test::run_command(base + "--steps 8 --out " + dir.str("full") + " --log " +
                              dir.str("full.jsonl"))
                .exit_code,
            0);
  ASSERT_EQ(test::run_command(base + "--steps 4 --out " + dir.str("cut") + " --log " +
                              dir.str("cut.jsonl"))
                .exit_code,
            0);
  std::ifstream state_in(dir.str("cut") + "/step-00000004/trainer_state.json");
  const nlohmann::json state = nlohmann::json::parse(state_in);
  EXPECT_EQ(state.at("optimizer").at("name"), "lion");
  EXPECT_EQ(state.at("optimizer").at("hyperparameters").at("beta2"), 0.98);
  EXPECT_GT(state.at("gns").at("updates").get<int64_t>(), 0);
  const test::CommandResult r =
      test::run_command(test::memo_bin() + " train --data " + dir.str("data.txt") +
                        " --steps 8 --resume " + dir.str("cut") + " --log " + dir.str("cut.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("lion"), std::string::npos) << r.output;
  const auto full = read_lines(dir.str("full.jsonl")), cut = read_lines(dir.str("cut.jsonl"));
  ASSERT_EQ(full.size(), 8u);
  ASSERT_EQ(cut.size(), 8u);
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(full[i].at("loss").dump(), cut[i].at("loss").dump()) << "step " << i + 1;
    EXPECT_EQ(full[i].at("gns_b_simple").dump(), cut[i].at("gns_b_simple").dump())
        << "step " << i + 1;
    EXPECT_TRUE(full[i].contains("gns_g2") && full[i].contains("gns_trace"));
  }
}

TEST_F(ScalingCli, no_gns_and_single_micro_batch_log_null_noise_scale) {
  const std::string base = test::memo_bin() + " train --config " + dir.str("config.json") +
                           " --data " + dir.str("data.txt") + " --seq 16 --steps 2 --no-checkpoint";
  ASSERT_EQ(
      test::run_command(base + " --batch 2 --micro-batch 1 --no-gns --log " + dir.str("a.jsonl"))
          .exit_code,
      0);
  ASSERT_EQ(test::run_command(base + " --batch 2 --log " + dir.str("b.jsonl")).exit_code, 0);
  for (const char* f : {"a.jsonl", "b.jsonl"})
    for (const auto& j : read_lines(dir.str(f))) EXPECT_TRUE(j.at("gns_b_simple").is_null()) << f;
}

TEST_F(ScalingCli, unknown_optimizer_lists_the_valid_names) {
  test::expect_clean_failure(test::memo_bin() + " train --config " + dir.str("config.json") +
                                 " --data " + dir.str("data.txt") + " --optimizer adamx",
                             "unknown optimizer 'adamx'; valid: sgd, signsgd, adam, adamw, "
                             "adagrad, rmsprop, adafactor, lion");
}

TEST_F(ScalingCli, a_flag_the_optimizer_lacks_is_rejected) {
  test::expect_clean_failure(test::memo_bin() + " train --config " + dir.str("config.json") +
                                 " --data " + dir.str("data.txt") +
                                 " --optimizer adam --momentum 0.9",
                             "--momentum does not apply to --optimizer adam");
}

TEST_F(ScalingCli, malformed_sweep_line_is_named_by_number) {
  const std::string text = synthetic_sweep(1e-3, 2000.0, false);
  const size_t second = text.find('\n') + 1;
  write_text(dir / "bad.jsonl", text.substr(0, second) + "{not json}\n" + text.substr(second));
  test::expect_clean_failure(test::memo_bin() + " fit " + dir.str("bad.jsonl"), "bad.jsonl line 2");
  write_text(dir / "neg.jsonl", R"({"optimizer": "adam", "lr": -1, "batch_tokens": 64})"
                                "\n");
  test::expect_clean_failure(test::memo_bin() + " fit " + dir.str("neg.jsonl"),
                             "line 1: 'lr' must be a positive number");
  write_text(dir / "seed.jsonl",
             R"({"optimizer": "adam", "lr": 1, "batch_tokens": 64, "seed": "x"})"
             "\n");
  test::expect_clean_failure(test::memo_bin() + " fit " + dir.str("seed.jsonl"),
                             "line 1: 'seed' must be an integer of 0 or more, got \"x\"");
  write_text(dir / "curve.jsonl",
             R"({"optimizer": "adam", "lr": 1, "batch_tokens": 64, "curve": [[1]]})"
             "\n");
  test::expect_clean_failure(test::memo_bin() + " fit " + dir.str("curve.jsonl"),
                             "line 1: 'curve' point [1] is not [step, tokens, loss]");
  test::expect_clean_failure(test::memo_bin() + " fit " + dir.str(""), "is a directory");
  // --at-tokens judges the training loss: not a target-loss sweep's loss reduction, not at 0
  write_text(dir / "target.jsonl", synthetic_sweep(1e-3, 2000.0, true));
  test::expect_clean_failure(
      test::memo_bin() + " fit " + dir.str("target.jsonl") + " --at-tokens 1000",
      "give --metric final_loss (or best_loss) with it");
  test::expect_clean_failure(
      test::memo_bin() + " fit " + dir.str("target.jsonl") + " --at-tokens 0",
      "--at-tokens: must be above 0, got 0");
  // an empty --metric is refused like an unknown one (it once meant the default)
  test::expect_clean_failure(test::memo_bin() + " fit " + dir.str("target.jsonl") + " --metric ''",
                             "--metric: unknown metric ''; valid: val_loss");
}

// A sweep file holds one setup: a sweep of another model, data, budget or precision into it is
// refused (it used to skip those runs as "already in"), and memo fit refuses a file mixing them.
TEST_F(ScalingCli, a_sweep_file_holds_one_setup) {
  ASSERT_EQ(test::run_command(sweep_cmd("1e-3")).exit_code, 0);
  const nlohmann::json first = read_lines(dir.str("sweep.jsonl")).front();
  EXPECT_EQ(first.at("model").at("hidden_size"), 16);
  EXPECT_EQ(first.at("precision"), "fp32");
  EXPECT_EQ(first.at("data"), dir.str("data.txt"));
  nlohmann::json wider = nlohmann::json::parse(kTinyScalingConfig);
  wider["num_hidden_layers"] = 2;
  write_text(dir / "wider.json", wider.dump());
  std::string other = sweep_cmd("1e-3");
  other.replace(other.find(dir.str("config.json")), dir.str("config.json").size(),
                dir.str("wider.json"));
  test::expect_clean_failure(other, "'model.num_hidden_layers' = 1 there, 2 here");
  write_text(dir / "other.txt", std::string(20000, 'x'));
  test::expect_clean_failure(sweep_cmd("1e-3", "--data " + dir.str("other.txt")),
                             "holds runs of another setup (its run 1: 'data' = ");
  test::expect_clean_failure(sweep_cmd("1e-3", "--warmup 2"), "'warmup' = 0 there, 2 here");
  // a target-loss sweep is another setup than a fixed-budget one, and than another target
  test::expect_clean_failure(sweep_cmd("1e-3", "--target-loss 5"),
                             "'target_loss' = nothing there, 5.0 here");
  std::string target = sweep_cmd("1e-3", "--target-loss 5");
  target.replace(target.find(dir.str("sweep.jsonl")), dir.str("sweep.jsonl").size(),
                 dir.str("target.jsonl"));
  ASSERT_EQ(test::run_command(target).exit_code, 0);
  std::string other_target = target;
  other_target.replace(other_target.find("--target-loss 5"), 15, "--target-loss 4");
  test::expect_clean_failure(other_target, "'target_loss' = 5.0 there, 4.0 here");
  std::string plain = sweep_cmd("1e-3");
  plain.replace(plain.find(dir.str("sweep.jsonl")), dir.str("sweep.jsonl").size(),
                dir.str("target.jsonl"));
  test::expect_clean_failure(plain, "'target_loss' = 5.0 there, nothing here");
  // the same setup resumes: finished runs skipped, new lrs run
  const test::CommandResult r = test::run_command(sweep_cmd("1e-3,2e-3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 runs done, 2 skipped"), std::string::npos) << r.output;
  // fit: runs of two budgets in one file
  std::string mixed = test::file_bytes(dir / "sweep.jsonl");
  nlohmann::json longer = read_lines(dir.str("sweep.jsonl")).back();
  longer["budget"] = {{"steps", 40}};
  mixed += longer.dump() + "\n";
  write_text(dir / "mixed.jsonl", mixed);
  test::expect_clean_failure(test::memo_bin() + " fit " + dir.str("mixed.jsonl"),
                             "mixed.jsonl line 5: 'budget' = {\"steps\":40} differs from line 1's "
                             "{\"steps\":3}");
  // one setup in a fit: a file's runs and a copy of its last at another lr with `field` changed
  auto fits_with = [&](const std::string& file, const char* field, const nlohmann::json& value) {
    nlohmann::json run = read_lines(dir.str(file)).back();
    run[field] = value;
    run["lr"] = 5e-3;
    write_text(dir / "one_setup.jsonl", test::file_bytes(dir / file) + run.dump() + "\n");
    const test::CommandResult fit =
        test::run_command(test::memo_bin() + " fit " + dir.str("one_setup.jsonl"));
    EXPECT_EQ(fit.output.find("differs"), std::string::npos) << field << ": " << fit.output;
  };
  // larger micro-batches for the larger batches (bench/surge_study.sh's parts)
  fits_with("sweep.jsonl", "micro_batch",
            read_lines(dir.str("sweep.jsonl")).back().at("micro_batch").get<int64_t>() * 2 + 1);
  // target-loss runs of other caps (a study's small and large batch groups)
  fits_with("target.jsonl", "budget", nlohmann::json{{"steps", 40}});
}

// Options a run would refuse are refused before the first run, not hours into the sweep.
TEST_F(ScalingCli, every_run_is_checked_before_the_first_starts) {
  test::expect_clean_failure(sweep_cmd("1e-3,-1"), "lr -1 must be a positive number");
  test::expect_clean_failure(sweep_cmd("1e-3", "--micro-batch 3"),
                             "is not a multiple of --micro-batch 3");
  test::expect_clean_failure(sweep_cmd("1e-3", "--target-loss -3"),
                             "--target-loss -3 must be a positive number");
  test::expect_clean_failure(sweep_cmd("1e-3", "--val-windows -1"),
                             "--val-windows -1 must be 0 or more");
  test::expect_clean_failure(sweep_cmd("1e-3", "--seed -1"), "must be 0 or more, got -1");
  test::expect_clean_failure(sweep_cmd("1e-3", "--seq 0"), "must be above 0, got 0");
  test::expect_clean_failure(sweep_cmd("1e-3", "--tokens -5"), "must be above 0, got -5");
  test::expect_clean_failure(sweep_cmd("1e-3", "--warmup -1"), "--warmup -1 must be >= 0");
  test::expect_clean_failure(sweep_cmd("1e-3", "--clip -1"), "--clip -1 must be a finite number");
  test::expect_clean_failure(sweep_cmd("1e-3", "--min-lr-ratio 2"),
                             "--min-lr-ratio 2 is outside [0, 1]");
  test::expect_clean_failure(sweep_cmd("1e-3", "--extra-steps -1"),
                             "--extra-steps -1 must be >= 0");
  EXPECT_FALSE(std::filesystem::exists(dir / "sweep.jsonl"));
  // --tokens: every batch size spends the same budget
  std::string tokens = sweep_cmd("1e-3");
  tokens.replace(tokens.find("--steps 3"), 9, "--tokens 80");
  test::expect_clean_failure(tokens,
                             "--tokens 80 is not a multiple of --batches value 32: its runs would "
                             "see 64 tokens, not the others' budget; give a multiple of every "
                             "batch (the least is 64)");
  // Adafactor's relative step ignores the lr: a sweep over lrs, or --lr, would change nothing
  std::string adafactor = sweep_cmd("1e-3,1e-2");
  adafactor.replace(adafactor.find("--optimizer adam"), 16, "--optimizer adafactor");
  test::expect_clean_failure(adafactor, "every --lrs value would give the same run");
  test::expect_clean_failure(test::memo_bin() + " train --config " + dir.str("config.json") +
                                 " --data " + dir.str("data.txt") +
                                 " --optimizer adafactor --lr 0.5",
                             "--lr shapes the learning rate, which --optimizer adafactor ignores");
  EXPECT_EQ(test::run_command(adafactor + " --no-relative-step").exit_code, 0);
}

TEST_F(ScalingCli, too_few_batch_sizes_for_a_law_is_a_clear_error) {
  std::string one;
  for (double lr : {1e-3, 2e-3, 4e-3})
    one +=
        nlohmann::json{
            {"optimizer", "adam"}, {"lr", lr}, {"batch_tokens", 512}, {"val_loss", 2.0 + lr}}
            .dump() +
        "\n";
  write_text(dir / "one.jsonl", one);
  test::expect_clean_failure(test::memo_bin() + " fit " + dir.str("one.jsonl"),
                             "sweep at least 2 batch sizes");
  // two batch sizes for two parameters: a fit, and no interval (not [nan, nan])
  std::string two = one;
  for (double lr : {1e-3, 2e-3, 4e-3})
    two +=
        nlohmann::json{
            {"optimizer", "adam"}, {"lr", lr}, {"batch_tokens", 1024}, {"val_loss", 2.0 - lr}}
            .dump() +
        "\n";
  write_text(dir / "two.jsonl", two);
  const test::CommandResult fit =
      test::run_command(test::memo_bin() + " fit " + dir.str("two.jsonl"));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  EXPECT_EQ(fit.output.find("nan"), std::string::npos) << fit.output;
  EXPECT_NE(fit.output.find("(no intervals: 2 batch sizes for 2 parameters)"), std::string::npos)
      << fit.output;
}

// memo lr refuses what is no law's parameter, and values whose law gives no learning rate,
// before it prints anything.
TEST_F(ScalingCli, lr_refuses_infinite_parameters_and_degenerate_results) {
  const std::string lr = test::memo_bin() + " lr --batch ";
  test::expect_clean_failure(lr + "100 --b-noise inf --eps-max 0.01",
                             "--b-noise inf must be positive and finite");
  test::expect_clean_failure(lr + "100 --b-noise 500 --eps-max inf",
                             "--eps-max inf must be positive and finite");
  const test::CommandResult tiny = test::run_command(lr + "1e308 --b-noise 1e-308 --eps-max 0.01");
  EXPECT_NE(tiny.exit_code, 0);
  EXPECT_EQ(tiny.output.find("memo: error: "), 0u) << tiny.output;  // nothing printed before
  EXPECT_NE(tiny.output.find("gives lr 0 at batch 1e+308 tokens"), std::string::npos)
      << tiny.output;
}

}  // namespace
}  // namespace memo
