// What keeps a long run going (issue 29): spikes skipped by the rule of Note [Bad steps],
// checkpoints written in the background (Note [Asynchronous checkpoints]) as the same bytes,
// the best validation's checkpoint kept, validation by tokens, and what a failed write or a kill
// during one leaves behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.h"
#include "memo/io/checkpoint.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::write_text;

class RunSurvival : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir / "config.json", test::kTinyLlamaConfig);
    write_text(dir / "data.txt", test::random_words(40000));
  }
  std::string train_cmd(const std::string& out, const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
           dir.str("data.txt") + " --seq 32 --batch 4 --micro-batch 2 --lr 3e-3 --warmup 2" +
           " --val-batches 2 --out " + dir.str(out) + " --log " + dir.str(out + ".jsonl") + " " +
           extra;
  }
  // Every file under a run directory but the run files, by relative path, with its bytes.
  std::vector<std::pair<std::string, std::string>> tree(const std::string& out) const {
    std::vector<std::pair<std::string, std::string>> files;
    for (const auto& e : fs::recursive_directory_iterator(dir / out))
      if (e.is_regular_file() && e.path().filename() != kRunFile &&
          e.path().filename() != kRunOptionsFile)  // the flags differ
        files.emplace_back(fs::relative(e.path(), dir / out).string(), test::file_bytes(e.path()));
    std::sort(files.begin(), files.end());
    return files;
  }
  test::TempDir dir;
};

// The median rule of Note [Bad steps], written out again over the log's gradient norms.
std::vector<bool> spikes_by_the_rule(const std::vector<nlohmann::json>& log, double factor) {
  std::vector<double> window;
  std::vector<bool> spikes;
  for (const nlohmann::json& r : log) {
    const double norm = r.at("grad_norm");
    std::vector<double> sorted = window;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n == 0  ? 0.0
                          : n % 2 ? sorted[n / 2]
                                  : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    const bool spike = n >= 8 && norm > factor * median;
    spikes.push_back(spike);
    if (!spike) {
      window.push_back(norm);
      if (window.size() > 32) window.erase(window.begin());
    }
  }
  return spikes;
}

// --spike-skip 1.05 on noisy text: the logged verdicts are the rule's, a skipped step leaves the
// model byte for byte as it was, and a run resumed from a checkpoint between skips skips the same
// steps and ends with the same bytes.
TEST_F(RunSurvival, spikes_are_skipped_by_the_median_rule_and_a_resumed_run_skips_the_same) {
  const std::string flags = "--steps 30 --spike-skip 1.05 --save-every 1 --keep-last 0";
  const test::CommandResult full = test::run_command(train_cmd("full", flags));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::vector<nlohmann::json> log = test::records(dir.str("full.jsonl"));
  ASSERT_EQ(log.size(), 30u);
  const std::vector<bool> rule = spikes_by_the_rule(log, 1.05);
  int skipped = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i].contains("skipped"), rule[i]) << "step " << i + 1;
    if (!rule[i]) continue;
    ++skipped;
    EXPECT_EQ(log[i].at("skipped"), "spike");
    EXPECT_EQ(test::file_bytes(dir / "full" / checkpoint_dir_name(int64_t(i) + 1) / kModelFile),
              test::file_bytes(dir / "full" / checkpoint_dir_name(int64_t(i)) / kModelFile))
        << "step " << i + 1 << " was skipped but changed the model";
  }
  ASSERT_GE(skipped, 2) << full.output;
  EXPECT_NE(full.output.find(str(skipped, " steps skipped in the whole run (0 non-finite, ",
                                 skipped, " spikes)")),
            std::string::npos)
      << full.output;
  const test::CommandResult resumed = test::run_command(
      train_cmd("resumed", "--resume " + (dir / "full" / checkpoint_dir_name(15)).string()));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::vector<nlohmann::json> rest = test::records(dir.str("resumed.jsonl"));
  ASSERT_EQ(rest.size(), 15u);
  int skipped_after = 0;
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].at("loss").dump(), log[i + 15].at("loss").dump()) << "step " << i + 16;
    EXPECT_EQ(rest[i].contains("skipped"), log[i + 15].contains("skipped")) << "step " << i + 16;
    skipped_after += rest[i].contains("skipped");
  }
  EXPECT_GE(skipped_after, 1);  // the resumed run's window and counts were the full run's
  EXPECT_EQ(test::file_bytes(dir / "resumed" / "step-00000030" / kOptimizerFile),
            test::file_bytes(dir / "full" / "step-00000030" / kOptimizerFile));
}

// A poisoned batch: 1,500 random bytes amid the repeated verse. Once the verse is half learnt
// (step 30 on: losses below 1.5), a step whose windows cover the poison has a loss above 2 (about
// 3) and a gradient norm several times the others': --spike-skip 3 skips every such step, by the
// rule of the log's norms, and the run goes on learning the verse.
TEST_F(RunSurvival, a_poisoned_batch_is_skipped_as_a_spike) {
  std::string data = test::corpus(20000);
  uint32_t state = 12345;
  for (int i = 0; i < 1500; ++i) {
    state = state * 1664525u + 1013904223u;  // Numerical Recipes' LCG
    data += char(state >> 24);
  }
  data += test::corpus(20000);
  write_text(dir / "poisoned.txt", data);
  const test::CommandResult r =
      test::run_command(train_cmd("p", "--steps 60 --lr 1e-2 --spike-skip 3 --no-checkpoint") +
                        " --data " + dir.str("poisoned.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<nlohmann::json> log = test::records(dir.str("p.jsonl"));
  ASSERT_EQ(log.size(), 60u);
  const std::vector<bool> rule = spikes_by_the_rule(log, 3.0);
  int poisoned = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i].contains("skipped"), rule[i]) << "step " << i + 1;
    if (i + 1 < 30 || double(log[i].at("loss")) < 2.0) continue;
    ++poisoned;
    EXPECT_EQ(log[i].value("skipped", ""), "spike") << "poisoned step " << i + 1 << " applied";
  }
  EXPECT_GE(poisoned, 3) << r.output;
  EXPECT_LT(double(log.back().at("loss")), 1.2) << r.output;
}

// --async-save writes the bytes of synchronous saves, every file of the run directory alike;
// --save-best checkpoints each new lowest validation loss, names it in best, and --keep-last 1
// keeps it beside the newest.
TEST_F(RunSurvival, background_saves_write_the_same_bytes_and_the_best_is_kept) {
  const std::string flags = "--steps 12 --save-every 3 --eval-every 2 --save-best --keep-last 1";
  const test::CommandResult sync = test::run_command(train_cmd("sync", flags));
  ASSERT_EQ(sync.exit_code, 0) << sync.output;
  const test::CommandResult async = test::run_command(train_cmd("async", flags + " --async-save"));
  ASSERT_EQ(async.exit_code, 0) << async.output;
  EXPECT_EQ(tree("async"), tree("sync"));
  // the best: the step of the lowest validation loss in the log
  int64_t best_step = 0;
  double best_loss = 1e300;
  for (const nlohmann::json& r : test::records(dir.str("sync.jsonl")))
    if (r.contains("val_loss") && double(r.at("val_loss")) < best_loss)
      best_loss = r.at("val_loss"), best_step = r.at("step");
  ASSERT_GT(best_step, 0);
  EXPECT_EQ(test::file_bytes(dir / "sync" / kBestFile), checkpoint_dir_name(best_step) + "\n");
  std::vector<std::string> kept;
  for (const auto& e : fs::directory_iterator(dir / "sync"))
    if (e.is_directory()) kept.push_back(e.path().filename().string());
  std::sort(kept.begin(), kept.end());
  std::vector<std::string> want{checkpoint_dir_name(12)};
  if (best_step != 12) want.insert(want.begin(), checkpoint_dir_name(best_step));
  EXPECT_EQ(kept, want);
  EXPECT_NE(sync.output.find("best: " + (dir / "sync" / checkpoint_dir_name(best_step)).string()),
            std::string::npos)
      << sync.output;
}

// --eval-tokens N validates on the ceil(N / seq) windows from the start of the validation data.
TEST_F(RunSurvival, eval_tokens_sets_how_much_is_validated) {
  const test::CommandResult r = test::run_command(
      train_cmd("e", "--steps 2 --eval-every 1 --eval-tokens 100") + " --val-batches 16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--val-batches excludes --eval-tokens"), std::string::npos) << r.output;
  std::string cmd = train_cmd("e", "--steps 2 --eval-every 1 --eval-tokens 100");
  cmd.replace(cmd.find(" --val-batches 2"), 16, "");
  const test::CommandResult ok = test::run_command(cmd);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  for (const nlohmann::json& rec : test::records(dir.str("e.jsonl")))
    EXPECT_EQ(rec.at("val_tokens"), 4 * 32);  // 100 tokens: 4 windows of 32
}

// A write that fails (the file-size limit of `ulimit -f` makes write() fail with EFBIG, as a full
// disk fails it with ENOSPC: memo ignores SIGXFSZ, which would kill it) stops the run with one line
// that names the checkpoint and the one that still loads; latest is untouched, and the run resumes
// from it. Synchronous and background writes alike.
TEST_F(RunSurvival, a_failed_write_stops_the_run_and_leaves_the_previous_checkpoint) {
  ASSERT_EQ(test::run_command(train_cmd("f", "--steps 2")).exit_code, 0);
  for (const std::string mode : {"", " --async-save"}) {
    const test::CommandResult r = test::run_command(
        "bash -c \"ulimit -f 64; exec " +
        train_cmd("f", "--steps 6 --save-every 2 --resume " + dir.str("f") + mode) + "\"");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("memo: error: checkpoint step-00000004 could not be written (cannot "
                            "write "),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("File too large); the run stops: " +
                            (dir / "f" / "step-00000002").string() + " still loads\n"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(find_latest_checkpoint(dir / "f"), dir / "f" / "step-00000002");
    EXPECT_FALSE(fs::exists(dir / "f" / "step-00000004")) << mode;
  }
  const test::CommandResult resumed =
      test::run_command(train_cmd("f", "--steps 4 --resume " + dir.str("f")));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
}

// SIGKILL while a background write is in flight (its temporary directory is there): latest names
// the checkpoint before, which loads and resumes. A model of 1.1M parameters, so that a write
// (13 MB) lasts long enough to be caught.
TEST_F(RunSurvival, a_kill_during_a_background_write_leaves_latest_on_a_complete_checkpoint) {
  write_text(dir / "config.json",
             R"({"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": false})");
  const std::string cmd =
      "exec " + train_cmd("k", "--steps 100000 --save-every 1 --keep-last 0 --async-save") + " > " +
      dir.str("k.out") + " 2>&1";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // the third write or later, caught in flight: the first two leave a complete one before it
  bool caught = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!caught && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir / "k", ec)) {
      const std::string n = e.path().filename().string();
      if (n.find(".tmp-") != std::string::npos && n.rfind("step-", 0) == 0 &&
          n >= "step-00000003") {
        ::kill(pid, SIGKILL);
        caught = true;
        break;
      }
    }
  }
  if (!caught) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(caught) << "no background write was seen in 120 s: "
                      << test::file_bytes(dir / "k.out");
  bool leftover = false;  // the kill landed mid-write: its temporary directory stays
  for (const auto& e : fs::directory_iterator(dir / "k"))
    leftover |= e.path().filename().string().find(".tmp-") != std::string::npos;
  EXPECT_TRUE(leftover);
  const fs::path latest = find_latest_checkpoint(dir / "k");
  const LoadedCheckpoint c = load_checkpoint(latest);
  EXPECT_TRUE(c.optimizer.has_value());
  const int64_t step = c.trainer_state.at("step");
  const test::CommandResult resumed =
      test::run_command(train_cmd("k", str("--steps ", step + 1, " --resume ", dir.str("k"))));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
}

}  // namespace
}  // namespace memo
