// Note [Stopping a run]: memo train stopped by a signal or by --time-limit finishes the step in
// flight, writes a checkpoint, exits 0 and says how to continue; the resumed run gives the
// uninterrupted run's losses bit for bit. --exit-signal none leaves a signal's default action.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_test_util.h"
#include "memo/io/checkpoint.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::losses;
using test::write_text;

class Preemption : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir / "config.json", test::kTinyLlamaConfig);
    write_text(dir / "data.txt", test::corpus(20000));
  }
  std::string train_cmd(const std::string& out, int steps, const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
           dir.str("data.txt") + " --seq 32 --batch 4 --micro-batch 2 --lr 3e-3 --warmup 2 --out " +
           out + " --steps " + std::to_string(steps) + " " + extra;
  }
  // Runs `run` in the background, sends `signal` once step 10 is in `log`, and returns the
  // run's output and exit status.
  test::CommandResult signal_at_step_10(const std::string& run, const std::string& log,
                                        const char* signal) const {
    return test::run_command("(" + run + " > " + dir.str("out.txt") + " 2>&1 & pid=$!; " +
                             "while ! grep -q '\"step\":10,' " + log +
                             " 2>/dev/null; do sleep 0.01; done; kill -" + signal +
                             " $pid; wait $pid; echo \"exit $?\"; cat " + dir.str("out.txt") + ")");
  }
  test::TempDir dir;
};

TEST_F(Preemption, sigterm_stops_after_the_step_with_a_checkpoint_and_the_resumed_run_is_exact) {
  const int steps = 60;
  ASSERT_EQ(
      test::run_command(train_cmd(dir / "full", steps, "--log " + dir.str("full.jsonl"))).exit_code,
      0);
  const test::CommandResult r = signal_at_step_10(
      train_cmd(dir / "cut", steps, "--log " + dir.str("cut.jsonl")), dir.str("cut.jsonl"), "TERM");
  ASSERT_NE(r.output.find("exit 0"), std::string::npos) << r.output;
  const int stopped_at = losses(dir.str("cut.jsonl")).rbegin()->first;
  ASSERT_LT(stopped_at, steps) << "the run ended before the signal";
  EXPECT_NE(r.output.find("memo: stopped by SIGTERM after step " + std::to_string(stopped_at) +
                          "; continue with memo train --resume "),
            std::string::npos)
      << r.output;
  EXPECT_EQ(find_latest_checkpoint(dir / "cut").filename(),
            str("step-", std::string(8 - std::to_string(stopped_at).size(), '0'), stopped_at));
  const test::CommandResult resumed = test::run_command(
      test::memo_bin() + " train --data " + dir.str("data.txt") + " --steps " +
      std::to_string(steps) + " --resume " + dir.str("cut") + " --log " + dir.str("cut.jsonl"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(dir.str("cut.jsonl")), losses(dir.str("full.jsonl")));
}

TEST_F(Preemption, usr1_stops_too_and_exit_signal_none_leaves_the_default_action) {
  const test::CommandResult usr1 = signal_at_step_10(
      train_cmd(dir / "a", 100000, "--log " + dir.str("a.jsonl")), dir.str("a.jsonl"), "USR1");
  EXPECT_NE(usr1.output.find("exit 0"), std::string::npos) << usr1.output;
  EXPECT_NE(usr1.output.find("memo: stopped by SIGUSR1"), std::string::npos) << usr1.output;
  const test::CommandResult killed = signal_at_step_10(
      train_cmd(dir / "b", 100000, "--exit-signal none --log " + dir.str("b.jsonl")),
      dir.str("b.jsonl"), "TERM");
  EXPECT_NE(killed.output.find("exit 143"), std::string::npos) << killed.output;  // 128 + TERM
  EXPECT_EQ(killed.output.find("memo: stopped by"), std::string::npos) << killed.output;
}

TEST_F(Preemption, time_limit_stops_before_the_limit_with_a_checkpoint) {
  const test::CommandResult r = test::run_command(
      train_cmd(dir / "t", 1000000, "--time-limit 2s --log " + dir.str("t.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memo: stopped by --time-limit after step"), std::string::npos)
      << r.output;
  const int last = losses(dir.str("t.jsonl")).rbegin()->first;
  EXPECT_LT(last, 1000000);
  EXPECT_EQ(find_latest_checkpoint(dir / "t").filename(),
            str("step-", std::string(8 - std::to_string(last).size(), '0'), last));
}

TEST_F(Preemption, bad_values_are_refused_by_name) {
  test::expect_clean_failure(train_cmd(dir / "x", 2, "--exit-signal KILL"),
                             "--exit-signal 'KILL': 'KILL' is not one of TERM, INT, USR1");
  test::expect_clean_failure(train_cmd(dir / "x", 2, "--time-limit 3d"),
                             "--time-limit '3d': write a duration");
}

}  // namespace
}  // namespace memo
