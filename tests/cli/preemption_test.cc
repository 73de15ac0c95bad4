// Note [Stopping a run]: memo train stopped by a signal or by --time-limit finishes the step in
// flight, writes a checkpoint, exits 0 and says how to continue; the resumed run gives the
// uninterrupted run's losses bit for bit. --exit-signal none leaves a signal's default action.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
  // --keep-last 2 prunes the resumed step-10 checkpoint at step 40's save, before the resumed run
  // writes step 60 (which once read its tokenizer files from the pruned folder, and failed)
  const std::string every = " --save-every 20 --keep-last 2 --eval-every 20 --val-batches 2 ";
  ASSERT_EQ(
      test::run_command(train_cmd(dir / "full", steps, every + "--log " + dir.str("full.jsonl")))
          .exit_code,
      0);
  const test::CommandResult r =
      signal_at_step_10(train_cmd(dir / "cut", steps, every + "--log " + dir.str("cut.jsonl")),
                        dir.str("cut.jsonl"), "TERM");
  ASSERT_NE(r.output.find("exit 0"), std::string::npos) << r.output;
  const int stopped_at = losses(dir.str("cut.jsonl")).rbegin()->first;
  ASSERT_LT(stopped_at, steps) << "the run ended before the signal";
  const std::string said = "memo: stopped by SIGTERM after step " + std::to_string(stopped_at) +
                           "; continue with memo train --resume ";
  const size_t at = r.output.find(said);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(find_latest_checkpoint(dir / "cut").filename(),
            str("step-", std::string(8 - std::to_string(stopped_at).size(), '0'), stopped_at));
  // the command as said, nothing added: the checkpoint restores the run's --steps and --data, and
  // keeps its --log, --save-every and --eval-every (Note [Resume])
  const size_t from = at + said.size() - std::string("memo train --resume ").size();
  const std::string command = r.output.substr(from, r.output.find('\n', from) - from);
  const test::CommandResult resumed = test::run_command(test::memo_bin() + command.substr(4));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(dir.str("cut.jsonl")), losses(dir.str("full.jsonl")));
  // the resumed run's elapsed_s goes on from the stopped run's, never back to 0
  double elapsed = -1.0;
  for (const nlohmann::json& j : test::records(dir.str("cut.jsonl")))
    if (j.contains("elapsed_s")) {
      EXPECT_GE(j.at("elapsed_s").get<double>(), elapsed) << j.dump();
      elapsed = j.at("elapsed_s").get<double>();
    }
  auto validations = [](const std::string& log) {
    std::vector<nlohmann::json> v;
    for (const nlohmann::json& j : test::records(log))
      if (j.contains("val_loss")) v.push_back({j.at("step"), j.at("val_loss")});
    return v;
  };
  EXPECT_EQ(validations(dir.str("cut.jsonl")).size(), 3u);
  EXPECT_EQ(validations(dir.str("cut.jsonl")), validations(dir.str("full.jsonl")));
  EXPECT_FALSE(fs::exists(dir / "cut" / "step-00000020"));
  for (const char* step : {"step-00000040", "step-00000060"})
    EXPECT_EQ(test::file_bytes(dir / "cut" / step / "model.safetensors"),
              test::file_bytes(dir / "full" / step / "model.safetensors"))
        << step;
  // a run that has done its steps says how to go on; --steps moves its end, and says so
  test::expect_clean_failure(test::memo_bin() + " train --resume " + dir.str("cut"),
                             "has run its 60 steps: give --steps above 60 to continue it");
  const test::CommandResult longer = test::run_command(
      test::memo_bin() + " train --resume " + dir.str("cut") + " --steps 62 --no-checkpoint");
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_NE(longer.output.find("--steps moves the run's end from step 60 to step 62"),
            std::string::npos)
      << longer.output;
}

// A run of length stages resumes from any step without --steps (the stages' sum is the run's),
// from step 100 on too, where the default --steps once refused it; another --steps is refused.
TEST_F(Preemption, a_run_of_length_stages_resumes_past_step_100_with_its_own_steps) {
  const std::string stages =
      " --config " + dir.str("config.json") + " --data " + dir.str("data.txt") +
      " --batch 4 --micro-batch 2 --lr 3e-3 --warmup 2 --seq-schedule 16:70,32:40 --save-every 10";
  ASSERT_EQ(test::run_command(test::memo_bin() + " train" + stages + " --keep-last 0 --out " +
                              dir.str("full") + " --log " + dir.str("full.jsonl"))
                .exit_code,
            0);
  fs::create_directories(dir / "cut");
  fs::copy(dir / "full" / "step-00000100", dir / "cut" / "step-00000100",
           fs::copy_options::recursive);
  write_text(dir / "cut" / "latest", "step-00000100\n");
  const test::CommandResult resumed = test::run_command(
      test::memo_bin() + " train --resume " + dir.str("cut") + " --log " + dir.str("cut.jsonl"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto full = losses(dir.str("full.jsonl")), cut = losses(dir.str("cut.jsonl"));
  ASSERT_EQ(cut.size(), 10u);
  for (const auto& [step, loss] : cut) EXPECT_EQ(loss, full.at(step)) << step;
  test::expect_clean_failure(
      test::memo_bin() + " train --resume " + dir.str("cut") + "/step-00000100 --steps 120 --log " +
          dir.str("cut2.jsonl"),
      "runs length stages (--seq-schedule 16:70,32:40), whose steps are the run's (110); resume "
      "without --steps");
}

// Note [Resume]: the options a checkpoint pins, given again with the same values, pass (a script
// may repeat its flags); with other values they are refused, not silently dropped.
TEST_F(Preemption, a_resumed_run_refuses_other_values_of_the_options_it_keeps) {
  ASSERT_EQ(test::run_command(train_cmd(dir / "run", 2, "")).exit_code, 0);
  EXPECT_EQ(test::run_command(train_cmd(dir / "run", 3, "--resume " + dir.str("run"))).exit_code,
            0);
  const std::string resume =
      test::memo_bin() + " train --resume " + dir.str("run") + " --steps 5 --no-checkpoint ";
  test::expect_clean_failure(resume + "--seq 64",
                             "--seq 64: " + dir.str("run") +
                                 " was trained with 32, which a resumed run keeps; resume without "
                                 "--seq, or start a new run from its weights with --init-from");
  test::expect_clean_failure(resume + "--lr 0.5", "--lr 0.5: ");
  test::expect_clean_failure(resume + "--micro-batch 4", "--micro-batch 4: ");
  test::expect_clean_failure(resume + "--no-gns", "--gns false: ");
  // another model's --config is refused, not ignored
  nlohmann::json wider = nlohmann::json::parse(test::kTinyLlamaConfig);
  wider["intermediate_size"] = 96;
  write_text(dir / "wider.json", wider.dump());
  test::expect_clean_failure(resume + "--config " + dir.str("wider.json"),
                             "--config " + dir.str("wider.json") +
                                 " is not the model of --resume " + dir.str("run") +
                                 " (its config.json)");
  // a checkpoint folder is no run's --out: its `latest` would make it load the new run
  test::expect_clean_failure(
      train_cmd(dir.str("run/step-00000003"), 2, ""),
      "--out " + dir.str("run/step-00000003") + " is a checkpoint (it holds model.safetensors)");
  // --micro-batch 0 (the whole batch), as a run file records it, is the resolved value
  ASSERT_EQ(test::run_command(train_cmd(dir / "whole", 2, "--micro-batch 0")).exit_code, 0);
  EXPECT_EQ(
      test::run_command(train_cmd(dir / "whole", 3, "--micro-batch 0 --resume " + dir.str("whole")))
          .exit_code,
      0);
  const test::CommandResult from_file =
      test::run_command(test::memo_bin() + " train --run " + dir.str("whole/run.toml") +
                        " --resume " + dir.str("whole") + " --steps 4");
  EXPECT_EQ(from_file.exit_code, 0) << from_file.output;
}

// A run resumed from a checkpoint before its last step, into the same --log, holds each step
// once: the records past the checkpoint are replaced by the resumed run's (bit for bit the same).
TEST_F(Preemption, a_resumed_log_holds_each_step_once) {
  const std::string log = dir.str("run.jsonl");
  ASSERT_EQ(test::run_command(train_cmd(dir / "run", 4, "--save-every 2 --log " + log)).exit_code,
            0);
  const std::vector<nlohmann::json> first = test::records(log);
  std::ofstream(log, std::ios::app) << "{\"step\": 5, \"lo";  // a write a kill cut short
  ASSERT_EQ(
      test::run_command(
          train_cmd(dir / "run", 4, "--log " + log + " --resume " + dir.str("run/step-00000002")))
          .exit_code,
      0);
  const std::vector<nlohmann::json> again = test::records(log);
  std::vector<int64_t> steps;
  for (const nlohmann::json& r : again)
    if (r.contains("step")) steps.push_back(r.at("step"));
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4}));
  for (size_t i = 0; i < first.size() && i < again.size(); ++i)
    EXPECT_EQ(first[i].at("loss"), again[i].at("loss")) << i;
}

// The run's --data and --log given as relative paths name the same files to a resume started
// from another working directory, one that holds other data under the same name.
TEST_F(Preemption, a_resume_from_another_directory_reads_the_runs_data_and_writes_its_log) {
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  write_text(dir / "a" / "data.txt", test::corpus(20000));
  write_text(dir / "b" / "data.txt", test::corpus(20000).substr(7000));
  const std::string memo = fs::absolute(test::memo_bin()).string();
  const std::string tail = " --config " + dir.str("config.json") +
                           " --data data.txt --seq 32 --batch 4 --lr 3e-3 --warmup 2";
  ASSERT_EQ(test::run_command("cd " + dir.str("a") + " && " + memo + " train" + tail +
                              " --steps 6 --no-checkpoint --log straight.jsonl")
                .exit_code,
            0);
  ASSERT_EQ(test::run_command("cd " + dir.str("a") + " && " + memo + " train" + tail +
                              " --steps 6 --save-every 3 --keep-last 0 --out run --log run.jsonl")
                .exit_code,
            0);
  fs::remove_all(dir / "a" / "run" / "step-00000006");
  write_text(dir / "a" / "run" / "latest", "step-00000003");
  const test::CommandResult r =
      test::run_command("cd " + dir.str("b") + " && " + memo + " train --resume ../a/run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir / "b" / "run.jsonl"));
  EXPECT_EQ(losses(dir.str("a/run.jsonl")), losses(dir.str("a/straight.jsonl")));
  // "link/.." is where the link leads, then up: the recorded path names the file trained on
  fs::create_directories(dir / "other" / "sub");
  write_text(dir / "other" / "data.txt", test::corpus(20000).substr(3000));
  fs::create_directory_symlink(dir / "other" / "sub", dir / "a" / "link");
  ASSERT_EQ(test::run_command("cd " + dir.str("a") + " && " + memo + " train" + tail +
                              " --data link/../data.txt --steps 1 --out linked")
                .exit_code,
            0);
  const nlohmann::json state = nlohmann::json::parse(
      test::file_bytes(dir / "a" / "linked" / "step-00000001" / "trainer_state.json"));
  EXPECT_TRUE(
      fs::equivalent(state.at("options").at("data").get<std::string>(), dir / "other" / "data.txt"))
      << state.at("options").dump();
}

// A trainer_state.json edited by hand or damaged: one line naming the file and the field.
TEST_F(Preemption, a_damaged_trainer_state_is_refused_naming_the_file_and_the_field) {
  ASSERT_EQ(test::run_command(train_cmd(dir / "run", 2, "")).exit_code, 0);
  const fs::path state = dir / "run" / "step-00000002" / "trainer_state.json";
  const nlohmann::json good = nlohmann::json::parse(test::file_bytes(state));
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string says;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& j) { j["options"]["seq"] = "32"; },
       "field 'seq' = \"32\" is not an integer"},
      {[](nlohmann::json& j) { j["options"].erase("lr"); }, "field 'lr' is missing"},
      {[](nlohmann::json& j) { j["step"] = -3; }, "field 'step' = -3 is not a step (>= 1)"},
      {[](nlohmann::json& j) { j["precision"] = 5; }, "field 'precision' = 5 is not a string"},
      {[](nlohmann::json& j) { j["options"] = nlohmann::json::array(); },
       "field 'options' = [] is not an object"},
      {[](nlohmann::json& j) {
         j["gns"] = {{"ema_g2", "1"}, {"ema_trace", 1.0}, {"updates", 2}, {"skipped", 0}};
       },
       "field 'gns.ema_g2' = \"1\" is not a number"},
      {[](nlohmann::json& j) { j["bad_steps"] = 7; }, "field 'bad_steps' = 7 is not an object"},
      {[](nlohmann::json& j) {
         j["bad_steps"] = {{"window", {1.0}},
                           {"nonfinite_in_a_row", 0},
                           {"spikes_in_a_row", -1},
                           {"nonfinite_skipped", 0},
                           {"spikes_skipped", 0}};
       },
       "field 'bad_steps.spikes_in_a_row' = -1 is negative"},
      {[](nlohmann::json& j) { j["options"]["seq"] = -128; },
       "field 'options.seq' = -128 must be positive"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    c.edit(j);
    write_text(state, j.dump());
    test::expect_clean_failure(
        test::memo_bin() + " train --resume " + dir.str("run") + " --steps 3 --no-checkpoint",
        state.string() + ": " + c.says);
  }
  write_text(state, good.dump());
  // run_options.json's values as its fields, not as flags the user did not type
  const fs::path options = dir / "run" / "step-00000002" / "run_options.json";
  const nlohmann::json run = nlohmann::json::parse(test::file_bytes(options));
  for (const auto& [key, value, says] :
       {std::tuple<const char*, nlohmann::json, const char*>{
            "activations", "bogus", "field 'activations' = \"bogus\" is not one of keep"},
        {"zero", 5, "field 'zero' = 5 is not a stage memo runs (0 or 1)"}}) {
    nlohmann::json j = run;
    j[key] = value;
    write_text(options, j.dump());
    test::expect_clean_failure(
        test::memo_bin() + " train --resume " + dir.str("run") + " --steps 3 --no-checkpoint",
        options.string() + ": " + says);
  }
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

// A run's --val-fraction is its own on resume without --data: the resumed steps train on the
// same split (the losses of the uninterrupted run) and validate on the same tail.
TEST_F(Preemption, a_resumed_run_keeps_its_val_fraction) {
  const std::string split = "--val-fraction 0.3 --eval-every 3 --val-batches 2 ";
  ASSERT_EQ(
      test::run_command(train_cmd(dir / "straight", 6,
                                  split + "--no-checkpoint --log " + dir.str("straight.jsonl")))
          .exit_code,
      0);
  ASSERT_EQ(test::run_command(
                train_cmd(dir / "run", 6,
                          split + "--save-every 3 --keep-last 0 --log " + dir.str("run.jsonl")))
                .exit_code,
            0);
  fs::remove_all(dir / "run" / "step-00000006");
  write_text(dir / "run" / "latest", "step-00000003");
  const test::CommandResult r =
      test::run_command(test::memo_bin() + " train --resume " + dir.str("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(losses(dir.str("run.jsonl")), losses(dir.str("straight.jsonl")));
  const auto last = [](const std::string& log) {
    return test::records(log).back().at("val_loss").get<double>();
  };
  EXPECT_EQ(last(dir.str("run.jsonl")), last(dir.str("straight.jsonl")));
}

}  // namespace
}  // namespace memo
