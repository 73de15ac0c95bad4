// `memo train --tensorboard DIR`: the event files, read back by the test's own reader
// (io/tfevents_reader.h), hold every step's JSON-log values as floats; a resumed run adds a file
// that restarts the session at its first step; a bad directory is a one-line error.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "io/tfevents_reader.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;

class TensorBoardCli : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_text(dir.str("config.json"), test::kTinyLlamaConfig);
    test::write_text(dir.str("data.txt"), test::corpus(20000));
  }
  // Two micro-batches a step, so the noise scale is measured and B_simple logged.
  std::string train(const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
           dir.str("data.txt") + " --seq 32 --batch 4 --micro-batch 2 --lr 3e-3 --warmup 2 " +
           extra;
  }
  test::TempDir dir;
};

// The summary events of one file against the JSON records of the same steps, field by field.
void expect_tensorboard_matches_log(const std::vector<test::TfEvent>& summaries,
                                    const std::vector<nlohmann::json>& records) {
  // (JSON field, tag): Note [TensorBoard tags] in train/step_logger.h
  const std::map<std::string, std::string> tags = {
      {"loss", "train/loss"},
      {"lr", "train/lr"},
      {"grad_norm", "train/grad_norm"},
      {"batch", "train/batch"},
      {"val_loss", "val/loss"},
      {"tokens_per_s", "perf/tokens_per_s"},
      {"mfu", "perf/mfu"},
      {"mfu_peak", "perf/mfu_peak"},
      {"device_peak_bytes", "memory/device_peak_bytes"},
      {"host_peak_bytes", "memory/host_peak_bytes"},
      {"gns_b_simple", "noise/b_simple"}};
  ASSERT_EQ(summaries.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    const nlohmann::json& r = records[i];
    EXPECT_EQ(summaries[i].step, r.at("step").get<int64_t>());
    std::map<std::string, float> got;
    for (const auto& [tag, value] : summaries[i].scalars) got[tag] = value;
    std::map<std::string, float> want;
    for (const auto& [field, tag] : tags)
      if (r.contains(field) && r.at(field).is_number())
        want[tag] = float(r.at(field).get<double>());
    EXPECT_EQ(got, want) << "step " << r.at("step");
  }
}

std::vector<test::TfEvent> tensorboard_cli_summaries(const std::vector<test::TfEvent>& events) {
  std::vector<test::TfEvent> out;
  for (const test::TfEvent& e : events)
    if (!e.scalars.empty()) out.push_back(e);
  return out;
}

TEST_F(TensorBoardCli, event_files_hold_the_json_logs_values_and_a_resume_adds_a_file) {
  const test::CommandResult r =
      test::run_command(train("--steps 5 --save-every 3 --keep-last 0 --out " + dir.str("run") +
                              " --log " + dir.str("a.jsonl") + " --tensorboard " + dir.str("tb")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<fs::path> files = test::tfevents_files(dir / "tb");
  ASSERT_EQ(files.size(), 1u);
  const std::vector<test::TfEvent> events = test::read_tfevents(files[0]);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  const std::vector<nlohmann::json> records = test::records(dir.str("a.jsonl"));
  ASSERT_EQ(records.size(), 5u);
  const std::vector<test::TfEvent> summaries = tensorboard_cli_summaries(events);
  expect_tensorboard_matches_log(summaries, records);
  EXPECT_EQ(events.size(), 1 + summaries.size());  // no session restart in a fresh run
  // the validation loss at the last step only; B_simple once the noise scale is measured
  ASSERT_EQ(summaries.size(), 5u);
  ASSERT_TRUE(records[4].contains("val_loss"));
  for (size_t i = 0; i < 5; ++i) {
    bool has_val = false, has_b_simple = false;
    for (const auto& [tag, value] : summaries[i].scalars) {
      has_val |= tag == "val/loss";
      has_b_simple |= tag == "noise/b_simple";
    }
    EXPECT_EQ(has_val, i == 4) << "step " << i + 1;
    if (i == 4) {
      EXPECT_TRUE(has_b_simple);
    }
  }

  // As after a crash past step 3: resume from its step-3 checkpoint into the same DIR.
  const test::CommandResult resumed =
      test::run_command(train("--steps 5 --resume " + dir.str("run/step-00000003") + " --log " +
                              dir.str("b.jsonl") + " --tensorboard " + dir.str("tb")));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::vector<fs::path> after = test::tfevents_files(dir / "tb");
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0], files[0]);  // the earlier file untouched, the new one after it in name order
  EXPECT_EQ(test::read_tfevents(after[0]).size(), events.size());
  const std::vector<test::TfEvent> events2 = test::read_tfevents(after[1]);
  ASSERT_GE(events2.size(), 2u);
  EXPECT_EQ(events2[0].file_version, "brain.Event:2");
  EXPECT_EQ(events2[1].session_status, 1);  // SessionLog.START: TensorBoard drops steps >= 4
  EXPECT_EQ(events2[1].step, 4);
  const std::vector<nlohmann::json> records2 = test::records(dir.str("b.jsonl"));
  ASSERT_EQ(records2.size(), 2u);
  expect_tensorboard_matches_log(tensorboard_cli_summaries(events2), records2);
}

TEST_F(TensorBoardCli, a_directory_that_cannot_be_made_is_a_one_line_error) {
  test::write_text(dir.str("file"), "x");
  test::expect_clean_failure(
      train("--steps 1 --out " + dir.str("run") + " --tensorboard " + dir.str("file/tb")),
      dir.str("file/tb"));
}

TEST_F(TensorBoardCli, tensorboard_without_a_directory_is_a_one_line_error) {
  test::expect_clean_failure(train("--steps 1 --out " + dir.str("run") + " --tensorboard"),
                             "--tensorboard");
  test::expect_clean_failure(train("--steps 1 --out " + dir.str("run") + " --tensorboard ''"),
                             "--tensorboard");
}

}  // namespace
}  // namespace memo
