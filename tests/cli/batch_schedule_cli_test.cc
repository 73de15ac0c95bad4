// memo train --batch-schedule noise end to end: the batch grows in micro-batches after the noise
// scale, every step's lr is the law's at its batch with warm-up and decay in tokens, each change is
// logged and printed, a run killed mid-schedule resumes with the uninterrupted run's steps bit for
// bit, and bad flags give one-line errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "memo/scaling/batch_schedule.h"
#include "memo/scaling/laws.h"
#include "test_util.h"

namespace memo {
namespace {

using test::random_words;
using test::write_text;

// A checkpoint's folder name: step-00000012.
std::string str_step_dir(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

std::vector<nlohmann::json> records(const std::string& log_path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(log_path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// step -> "loss batch lr" as printed (round-trip exact), the last record of each step winning.
std::map<int64_t, std::string> steps_run(const std::string& log_path) {
  std::map<int64_t, std::string> out;
  for (const nlohmann::json& j : records(log_path))
    out[j.at("step").get<int64_t>()] =
        j.at("loss").dump() + " " + j.at("batch").dump() + " " + j.at("lr").dump();
  return out;
}

class BatchScheduleCli : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir / "config.json", test::kTinyLlamaConfig);
    write_text(dir / "data.txt", random_words(40000));
  }
  // 4 sequences of 32 tokens to start, micro-batches of 2, a budget of 60 x 128 = 7680 tokens.
  // K = 20 puts K B_simple (~300-800 tokens) above the 128 tokens of the start: the batch grows
  // three times, at steps 4, 15 and 17, to the cap of 24 sequences (fixed by the seed and data).
  std::string cmd(const std::string& out, const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
           dir.str("data.txt") +
           " --seq 32 --batch 4 --micro-batch 2 --warmup 2 --steps 60 --out " + out + " " + extra;
  }
  std::string noise_cmd(const std::string& out, const std::string& extra) const {
    return cmd(out, kNoise + extra);
  }
  static constexpr const char* kNoise =
      "--batch-schedule noise --eps-max 1e-2 --b-noise 2048 --noise-multiple 20 "
      "--noise-min-steps 3 --noise-patience 2 --max-batch 24 ";
  test::TempDir dir;
};

TEST_F(BatchScheduleCli, batch_grows_in_micro_batches_with_the_law_lr_and_every_change_logged) {
  const test::CommandResult r =
      test::run_command(noise_cmd(dir / "run", "--log " + dir.str("run.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<nlohmann::json> log = records(dir.str("run.jsonl"));
  ASSERT_GE(log.size(), 2u);
  const scaling::TokenLrSchedule lr{2 * 4 * 32, 60 * 4 * 32, 0.1};
  int64_t tokens = 0, batch = 4, changes = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    const nlohmann::json& j = log[i];
    ASSERT_EQ(j.at("step").get<int64_t>(), int64_t(i) + 1);
    ASSERT_TRUE(j.contains("loss"));
    // the batch is the one the previous change set, in whole micro-batches, up to the cap
    ASSERT_EQ(j.at("batch").get<int64_t>(), batch) << j;
    EXPECT_EQ(j.at("micro_batches").get<int64_t>(), batch / 2);
    EXPECT_LE(batch, 24);
    tokens += batch * 32;
    EXPECT_EQ(j.at("tokens").get<int64_t>(), tokens);
    // the surge law's lr at this batch in tokens, warm-up and decay at the tokens seen
    EXPECT_EQ(
        j.at("lr").get<double>(),
        lr.lr(scaling::law_lr(scaling::Law::kSurge, {1e-2, 2048.0}, double(batch * 32)), tokens))
        << j;
    EXPECT_TRUE(j.at("gns_b_simple").is_number());
    if (j.contains("batch_change")) {
      const nlohmann::json& c = j.at("batch_change");
      EXPECT_EQ(c.at("event"), "batch_change");
      EXPECT_EQ(c.at("step"), j.at("step"));
      EXPECT_EQ(c.at("tokens"), j.at("tokens"));
      EXPECT_EQ(c.at("old_batch").get<int64_t>(), batch);
      EXPECT_GT(c.at("batch").get<int64_t>(), batch);  // monotone
      EXPECT_LE(c.at("batch").get<int64_t>() * 32, 20 * c.at("b_simple").get<double>());
      EXPECT_GE(j.at("step").get<int64_t>(), 3);  // --noise-min-steps
      batch = c.at("batch").get<int64_t>();
      ++changes;
      EXPECT_NE(r.output.find("memo: batch " + c.at("old_batch").dump() + " -> " +
                              c.at("batch").dump() + " sequences"),
                std::string::npos)
          << r.output;
    }
  }
  EXPECT_GE(changes, 2);
  // the run ends once the token budget is spent: fewer steps than a fixed batch takes
  EXPECT_GE(tokens, 60 * 4 * 32);
  EXPECT_LT(tokens - log.back().at("batch").get<int64_t>() * 32, 60 * 4 * 32);
  EXPECT_LT(log.size(), 60u);
  EXPECT_NE(r.output.find("memo: batch schedule noise: 4 sequences per step now"),
            std::string::npos)
      << r.output;
}

// --fit: the law's parameters fitted to a sweep, as memo lr --fit fits them (one code path); a
// sweep exactly on the surge law gives back its eps_max and B_noise up to the fit's tolerance.
TEST_F(BatchScheduleCli, law_fitted_to_a_sweep_sets_the_lr) {
  write_text(dir / "sweep.jsonl", test::surge_sweep(1e-2, 2048.0));
  const std::string sweep = dir.str("sweep.jsonl");
  const test::CommandResult fit =
      test::run_command(test::memo_bin() + " lr --batch 128 --fit " + sweep + " --json");
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  const nlohmann::json law = nlohmann::json::parse(fit.output);
  const double eps_max = law.at("eps_max").get<double>(), b_noise = law.at("b_noise").get<double>();
  EXPECT_NEAR(eps_max, 1e-2, 1e-6);
  EXPECT_NEAR(b_noise, 2048.0, 1e-2);
  // the sweep's optimiser and length are the run's: another is refused, its lrs are not this run's
  test::expect_clean_failure(cmd(dir / "adamw", "--steps 4 --batch-schedule noise --fit " + sweep),
                             "--fit " + sweep + " swept adam {}; this run trains adamw {");
  std::string at64;
  for (nlohmann::json line : test::records(sweep)) at64 += (line["seq"] = 64, line.dump()) + "\n";
  write_text(dir / "seq64.jsonl", at64);
  test::expect_clean_failure(
      cmd(dir / "seq",
          "--optimizer adam --steps 4 --batch-schedule noise --fit " + dir.str("seq64.jsonl")),
      "swept --seq 64; this run trains --seq 32");
  const test::CommandResult r = test::run_command(
      cmd(dir / "run", "--optimizer adam --steps 4 --batch-schedule noise --fit " + sweep +
                           " --log " + dir.str("run.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const scaling::TokenLrSchedule lr{2 * 4 * 32, 4 * 4 * 32, 0.1};
  const std::vector<nlohmann::json> log = records(dir.str("run.jsonl"));
  ASSERT_EQ(log.size(), 4u);  // no change before --noise-min-steps 50: the batch stays 4
  for (const nlohmann::json& j : log)
    EXPECT_EQ(j.at("lr").get<double>(),
              lr.lr(scaling::law_lr(scaling::Law::kSurge, {eps_max, b_noise}, 4.0 * 32),
                    j.at("tokens").get<int64_t>()));
}

TEST_F(BatchScheduleCli, killed_run_resumes_mid_schedule_with_identical_steps) {
  ASSERT_EQ(test::run_command(noise_cmd(dir / "full", "--log " + dir.str("full.jsonl"))).exit_code,
            0);
  const auto full = steps_run(dir.str("full.jsonl"));
  // SIGKILL once step 10 is logged (checkpoints every 3 steps): after the first change (step 4),
  // before the others (15, 17)
  const std::string run = noise_cmd(dir / "cut", "--save-every 3 --log " + dir.str("cut.jsonl"));
  const std::string kill_at_10 =
      "(" + run + " > /dev/null 2>&1 & pid=$!; " + "while ! grep -q '\"step\":10,' " +
      dir.str("cut.jsonl") + " 2>/dev/null; do sleep 0.01; done; kill -9 $pid; wait $pid; true)";
  ASSERT_EQ(test::run_command(kill_at_10).exit_code, 0);
  ASSERT_LT(steps_run(dir.str("cut.jsonl")).rbegin()->first, full.rbegin()->first)
      << "the run ended before it was killed";
  // resume with none of the schedule's flags: they come from the checkpoint
  const test::CommandResult r = test::run_command(
      test::memo_bin() + " train --data " + dir.str("data.txt") + " --steps 60 --resume " +
      dir.str("cut") + " --log " + dir.str("cut.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("resuming at step ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const int64_t resumed = std::stoll(r.output.substr(at + 17));
  // mid-schedule: the batch had grown, and grows again after the resume
  int64_t changes_before = 0, changes_after = 0;
  for (const nlohmann::json& j : records(dir.str("full.jsonl")))
    if (j.contains("batch_change"))
      ++(j.at("step").get<int64_t>() <= resumed ? changes_before : changes_after);
  EXPECT_GE(changes_before, 1) << "resumed at step " << resumed;
  EXPECT_GE(changes_after, 1) << "resumed at step " << resumed;
  EXPECT_NE(r.output.find("memo: batch "), std::string::npos) << r.output;
  EXPECT_EQ(steps_run(dir.str("cut.jsonl")), full);
}

// Note [Length stages] under the noise schedule: 32-token then 64-token sequences (the first
// 20 x 128 = 2560 tokens, then the rest of the 7680), the batch growing in micro-batches of 64
// tokens in both; stage 2 starts at the first step that begins past 2560 tokens, whatever the
// batch by then; resumed at the last step of stage 1 and mid-stage 2, the run continues bit for
// bit.
TEST_F(BatchScheduleCli, length_stages_are_spans_of_tokens_and_resume_bit_for_bit) {
  const std::string run = test::memo_bin() + " train --data " + dir.str("data.txt");
  const std::string fresh = run + " --config " + dir.str("config.json") +
                            " --seq-schedule 32:20,64:40 --batch 4 --micro-batch 2 --warmup 2 " +
                            kNoise + "--save-every 4 --keep-last 0";
  const test::CommandResult r =
      test::run_command(fresh + " --out " + dir.str("s") + " --log " + dir.str("s.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1: seq 32, tokens 0-2560, micro-batches of 2; 2: seq 64, tokens "
                          "2560-7680, micro-batches of 1"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("step 1 | 128/7680 tok | stage 1/2 seq 32 | batch 4 | loss"),
            std::string::npos)
      << r.output;
  const std::vector<nlohmann::json> log = records(dir.str("s.jsonl"));
  int64_t tokens = 0, batch_tokens = 4 * 32, changes = 0, first_of_2 = 0;
  for (const nlohmann::json& j : log) {
    const int64_t seq = j.at("seq"), step = j.at("step");
    EXPECT_EQ(seq, tokens < 2560 ? 32 : 64) << j;
    if (seq == 64 && first_of_2 == 0) first_of_2 = step;
    EXPECT_EQ(j.at("stage").get<int>(), seq == 32 ? 1 : 2) << j;
    EXPECT_EQ(j.at("batch").get<int64_t>() * seq, batch_tokens) << j;
    EXPECT_EQ(j.at("micro_batches").get<int64_t>(), batch_tokens / 64) << j;
    tokens += batch_tokens;
    EXPECT_EQ(j.at("tokens").get<int64_t>(), tokens) << j;
    if (j.contains("batch_change")) {
      ++changes;
      batch_tokens = j.at("batch_change").at("batch_tokens");
    }
  }
  EXPECT_GE(changes, 2);
  // the batch grew in stage 1, so stage 2 starts before step 21, the fixed batch's
  ASSERT_GT(first_of_2, 1);
  EXPECT_LT(first_of_2, 21);
  EXPECT_NE(
      r.output.find("memo: stage 2 of 2 from step " + std::to_string(first_of_2) + ": seq 64, " +
                    log.at(size_t(first_of_2 - 1)).at("batch").dump() + " sequences"),
      std::string::npos)
      << r.output;
  const auto full = steps_run(dir.str("s.jsonl"));
  // the checkpoint of the last step of stage 1 (or the one before it), and one mid-stage 2
  for (int64_t from : {(first_of_2 - 1) / 4 * 4, (first_of_2 + 7) / 4 * 4}) {
    const std::string step_dir = str_step_dir(from);
    const std::string name = "r" + std::to_string(from);
    std::filesystem::create_directories(dir / name);
    std::filesystem::copy(dir / "s" / step_dir, dir / name / step_dir,
                          std::filesystem::copy_options::recursive);
    const test::CommandResult rr = test::run_command(run + " --resume " + dir.str(name) +
                                                     " --log " + dir.str(name + ".jsonl"));
    ASSERT_EQ(rr.exit_code, 0) << rr.output;
    const auto resumed = steps_run(dir.str(name + ".jsonl"));
    ASSERT_EQ(resumed.begin()->first, from + 1) << name;
    for (const auto& [step, line] : resumed) EXPECT_EQ(line, full.at(step)) << name << " " << step;
    EXPECT_EQ(resumed.rbegin()->first, full.rbegin()->first) << name;
  }
}

TEST_F(BatchScheduleCli, fixed_batch_logs_its_batch_and_tokens) {
  ASSERT_EQ(
      test::run_command(cmd(dir / "run", "--steps 3 --log " + dir.str("run.jsonl"))).exit_code, 0);
  const std::vector<nlohmann::json> log = records(dir.str("run.jsonl"));
  ASSERT_EQ(log.size(), 3u);
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i].at("batch").get<int64_t>(), 4);
    EXPECT_EQ(log[i].at("micro_batches").get<int64_t>(), 2);
    EXPECT_EQ(log[i].at("tokens").get<int64_t>(), int64_t(i + 1) * 4 * 32);
    EXPECT_FALSE(log[i].contains("batch_change"));
  }
}

TEST_F(BatchScheduleCli, bad_flags_give_one_line_errors) {
  const std::string out = dir.str("out");
  test::expect_clean_failure(
      cmd(out, "--batch-schedule noise"),
      "--batch-schedule noise sets the lr by the surge law: give --eps-max X "
      "and --b-noise TOKENS, or --fit SWEEP.jsonl");
  test::expect_clean_failure(cmd(out, "--batch-schedule noise --eps-max 1e-2"), "--b-noise");
  test::expect_clean_failure(cmd(out, "--batch-schedule noise --optimizer sgd --b-noise 100"),
                             "the sgd law");
  test::expect_clean_failure(noise_cmd(out, "--fit " + dir.str("sweep.jsonl")),
                             "give --fit SWEEP.jsonl or --eps-max and --b-noise, not both");
  test::expect_clean_failure(cmd(out, "--batch-schedule noise --fit " + dir.str("nope.jsonl")),
                             "nope.jsonl");
  test::expect_clean_failure(noise_cmd(out, "--max-batch 25"),
                             "--max-batch 25 must be a multiple of --micro-batch 2");
  test::expect_clean_failure(noise_cmd(out, "--micro-batch 4"),
                             "--batch 4 must be a multiple of --micro-batch 4 and at least 2 "
                             "micro-batches (8) for --batch-schedule noise");
  test::expect_clean_failure(cmd(out, "--batch-schedule growing"),
                             "--batch-schedule growing is not fixed or noise");
  test::expect_clean_failure(noise_cmd(out, "--law adam"), "--law adam is not surge or sgd");
  test::expect_clean_failure(cmd(out, "--noise-multiple 2"),
                             "--noise-multiple applies to --batch-schedule noise only");
  test::expect_clean_failure(noise_cmd(out, "--lr 1e-3"), "--lr is set by the law");
  test::expect_clean_failure(noise_cmd(out, "--no-gns"), "drop --no-gns");
  test::expect_clean_failure(noise_cmd(out, "--noise-multiple 0"),
                             "--noise-multiple 0 is outside (0, 1e6]");
  test::expect_clean_failure(noise_cmd(out, "--warmup 61"), "--warmup of 7808 tokens");
  EXPECT_FALSE(std::filesystem::exists(out)) << "a refused run wrote its directory";
}

TEST_F(BatchScheduleCli, schedule_cannot_be_added_to_a_fixed_run_on_resume) {
  ASSERT_EQ(test::run_command(cmd(dir / "run", "--steps 2")).exit_code, 0);
  test::expect_clean_failure(test::memo_bin() + " train --data " + dir.str("data.txt") +
                                 " --steps 4 --resume " + dir.str("run") + " " + kNoise,
                             "ran a fixed batch: --batch-schedule cannot be added on --resume");
}

}  // namespace
}  // namespace memo
