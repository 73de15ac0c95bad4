// Note [Run files]: memo train --run FILE and --print-run. A run file and the flags it holds give
// the same bits, --print-run round-trips, the command line wins, bad files are one-line errors
// naming the key, and every run leaves its run file in its directory and checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_test_util.h"
#include "memo/io/checkpoint.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::write_text;

class RunFile : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir / "config.json", test::kTinyLlamaConfig);
    write_text(dir / "data.txt", test::corpus(20000));
  }
  // The flags of a short run writing into `out`.
  std::string flags(const std::string& out) const {
    return " --config " + dir.str("config.json") + " --data " + dir.str("data.txt") +
           " --seq 32 --batch 4 --micro-batch 2 --steps 4 --lr 3e-3 --warmup 1 --no-gns"
           " --spike-skip 2.5 --save-every 2 --activations memo --out " +
           dir.str(out) + " --log " + dir.str(out + ".jsonl");
  }
  test::TempDir dir;
};

TEST_F(RunFile, a_run_file_gives_the_bits_of_its_flags_and_print_run_round_trips) {
  const std::string memo = test::memo_bin() + " train";
  const test::CommandResult printed = test::run_command(memo + flags("b") + " --print-run");
  ASSERT_EQ(printed.exit_code, 0) << printed.output;
  for (const char* line : {"[step]\nseq = 32\nbatch = 4\nmicro-batch = 2\nsteps = 4\nlr = 0.003\n",
                           "\n[gradients]\ngns = false\n", "spike-skip = 2.5\n",
                           "activations = 'memo'\n", "# keep-last = 2\n"})
    EXPECT_NE(printed.output.find(line), std::string::npos) << line << "\n" << printed.output;
  write_text(dir / "b.toml", printed.output);
  const test::CommandResult again =
      test::run_command(memo + " --run " + dir.str("b.toml") + " --print-run");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output, printed.output);
  // trained from the flags (a) and from the file (b)
  const test::CommandResult a = test::run_command(memo + flags("a"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const test::CommandResult b = test::run_command(memo + " --run " + dir.str("b.toml"));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(test::losses(dir.str("b.jsonl")), test::losses(dir.str("a.jsonl")));
  for (const char* file : {kModelFile, kOptimizerFile, kTrainerStateFile})
    EXPECT_EQ(test::file_bytes(dir / "b" / "step-00000004" / file),
              test::file_bytes(dir / "a" / "step-00000004" / file))
        << file;
  // the run file of the run, in its directory and each checkpoint
  EXPECT_EQ(test::file_bytes(dir / "b" / kRunFile), printed.output);
  EXPECT_EQ(test::file_bytes(dir / "b" / "step-00000002" / kRunFile), printed.output);
  EXPECT_EQ(test::file_bytes(dir / "a" / "step-00000004" / kRunFile),
            test::run_command(memo + flags("a") + " --print-run").output);
}

TEST_F(RunFile, the_command_line_wins_over_the_file) {
  // the flags --print-run gives for run file `text` under the command line's `flags`
  auto printed = [&](const std::string& name, const std::string& text, const std::string& flags) {
    write_text(dir / name, text);
    const test::CommandResult r = test::run_command(
        test::memo_bin() + " train --run " + dir.str(name) + " " + flags + " --config " +
        dir.str("config.json") + " --data " + dir.str("data.txt") + " --print-run");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  const std::string r = printed(
      "r.toml", "[step]\nsteps = 9\nseq = 16\n\n[run]\nno-checkpoint = true\n", "--steps 2");
  EXPECT_NE(r.find("\nsteps = 2\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nseq = 16\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nno-checkpoint = true\n"), std::string::npos) << r;
  EXPECT_EQ(r.find("steps = 9"), std::string::npos) << r;
  // over the file's keys that a command-line flag excludes too: --no-checkpoint, save-every
  const std::string s =
      printed("s.toml", "[step]\nsteps = 9\n\n[run]\nsave-every = 3\n", "--no-checkpoint");
  EXPECT_NE(s.find("\nno-checkpoint = true\n"), std::string::npos) << s;
  EXPECT_EQ(s.find("save-every = 3"), std::string::npos) << s;
  // and over the keys that need a dropped one, and the checkpoint keys --no-checkpoint excludes
  const std::string n = printed("n.toml",
                                "[step]\nseq-schedule = '16:2,32:2'\nstage-batch = 'sequences'\n\n"
                                "[run]\nsave-every = 2\nasync-save = true\nsave-best = true\n",
                                "--seq 32 --no-checkpoint");
  for (const char* gone :
       {"seq-schedule = ", "stage-batch = 'sequences'", "async-save = true", "save-best = true"})
    EXPECT_EQ(n.find(gone), std::string::npos) << gone << "\n" << n;
}

// --run takes a run's folder for its run.toml; an empty path, or a folder without one, is refused.
TEST_F(RunFile, a_runs_folder_stands_for_its_run_file) {
  fs::create_directories(dir / "r");
  write_text(dir / "r" / kRunFile, "[step]\nsteps = 7\n");
  const std::string memo = test::memo_bin() + " train --config " + dir.str("config.json") +
                           " --data " + dir.str("data.txt") + " --print-run --run ";
  const test::CommandResult r = test::run_command(memo + dir.str("r"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\nsteps = 7\n"), std::string::npos) << r.output;
  test::expect_clean_failure(memo + "''", "--run '': give a run file");
  fs::create_directories(dir / "empty");
  test::expect_clean_failure(memo + dir.str("empty"), "empty: a folder without run.toml");
}

TEST_F(RunFile, bad_files_are_one_line_errors_naming_the_key) {
  const std::string cmd =
      test::memo_bin() + " train --data " + dir.str("data.txt") + " --run " + dir.str("bad.toml");
  const std::pair<const char*, const char*> cases[] = {
      {"[step]\nfrobnicate = 3\n",
       "line 2: [step] frobnicate: memo train has no flag --frobnicate"},
      {"[data]\nseq = 32\n", "line 2: [data] seq: --seq belongs in [step]"},
      {"[step]\nseq = '32'\n", "line 2: [step] seq is a string; it takes an integer"},
      {"[step]\n\nseq = 3.5\n", "line 3: [step] seq is a floating-point; it takes an integer"},
      {"[run]\nasync-save = 1\n", "[run] async-save is an integer; it takes true or false"},
      {"[step]\nlr = 'fast'\n", "[step] lr is a string; it takes a number"},
      {"seq = 4\n", "line 1: seq is outside every section; it goes under [step]"},
      {"[step\nseq = 3\n", "bad.toml: line 1, column 6: "},
      {"[run]\nrun = 'other.toml'\n", "[run] run: memo train has no flag --run"},
      {"[activations]\nactivations = 'memo2'\n", "--activations: memo2 not in"},
      {"[run]\nkeep-last = -1\n", "--keep-last: must be 0 or more, got -1"},
      {"[run]\nspike-skip = -0.5\n", "--spike-skip: must be 0 or more, got -0.5"},
      {"[data]\neval-tokens = 0\n", "--eval-tokens: must be above 0, got 0"},
      {"[step]\nseq = [16, 32]\n", "line 2: [step] seq: --seq takes one value, not a list"},
      {"[step]\nseq = []\n", "--seq takes one value, not a list"},
  };
  for (const auto& [text, needle] : cases) {
    write_text(dir / "bad.toml", text);
    test::expect_clean_failure(cmd, needle);
  }
  test::expect_clean_failure(test::memo_bin() + " train --data x --run " + dir.str("none.toml"),
                             "none.toml: File could not be opened for reading");
}

}  // namespace
}  // namespace memo
