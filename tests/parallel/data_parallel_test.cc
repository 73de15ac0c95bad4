// memo train over several processes (mpirun, parallel/mpi_communicator.h): the same losses as one
// process with the same global batch, bit for bit when each rank runs one micro-batch (the rank
// order of the sum is the one process's order of accumulation) and within rounding otherwise;
// runs that repeat bit for bit; a layout that does not split refused; a rank that hangs or dies
// taking the job down within seconds, and a resume that continues the uninterrupted run.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "../cli/cli_test_util.h"
#include "memo/memory/budget.h"
#include "mpi_launch.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::losses;
using test::mpirun;
using test::records;
using test::signal_rank_one;

class DataParallel : public ::testing::Test {
 public:
  void SetUp() override {
    test::write_text(dir / "config.json", test::kTinyLlamaConfig);
    test::write_text(dir / "data.txt", test::corpus(20000));
  }
  // 8 sequences of 32 tokens per step in micro-batches of 2: 4 micro-batches over the ranks.
  std::string train_cmd(const std::string& out, const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
           dir.str("data.txt") + " --seq 32 --batch 8 --micro-batch 2 --lr 3e-3 --warmup 2" +
           " --val-batches 2 --out " + out + " --log " + out + ".jsonl " + extra;
  }
  test::TempDir dir;
};

TEST_F(DataParallel, two_and_four_ranks_match_one_process) {
  const std::string one = dir / "one", two = dir / "two", four = dir / "four";
  ASSERT_EQ(test::run_command("OMP_NUM_THREADS=1 " + train_cmd(one, "--steps 4")).exit_code, 0);
  const test::CommandResult r2 = test::run_command(mpirun(2) + train_cmd(two, "--steps 4"));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const test::CommandResult r4 = test::run_command(mpirun(4) + train_cmd(four, "--steps 4"));
  ASSERT_EQ(r4.exit_code, 0) << r4.output;
  EXPECT_NE(r2.output.find("data parallel over 2 processes (mpi)"), std::string::npos) << r2.output;
  const auto a = records(one + ".jsonl"), b = records(two + ".jsonl"), c = records(four + ".jsonl");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  ASSERT_EQ(c.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i]["loss"], lb = b[i]["loss"];
    // 2 ranks add two micro-batches each, then the two sums: another rounding than 1 process's
    // running sum of four, so equal within fp32 accumulation error, not bitwise
    EXPECT_NEAR(lb, la, 1e-5 * std::abs(la)) << "step " << i + 1;
    // 4 ranks of one micro-batch each, summed in rank order: exactly the one process's order
    EXPECT_EQ(c[i]["loss"].dump(), a[i]["loss"].dump()) << "step " << i + 1;
    EXPECT_EQ(c[i]["grad_norm"].dump(), a[i]["grad_norm"].dump()) << "step " << i + 1;
    // the noise scale from every rank's micro-batch norms, as one process measures it
    if (!a[i]["gns_b_simple"].is_null()) {
      const double ga = a[i]["gns_b_simple"];
      EXPECT_NEAR(double(b[i]["gns_b_simple"]), ga, 1e-5 * std::abs(ga)) << "step " << i + 1;
      EXPECT_NEAR(double(c[i]["gns_b_simple"]), ga, 1e-5 * std::abs(ga)) << "step " << i + 1;
    }
    EXPECT_EQ(b[i]["ranks"], 2);
    EXPECT_EQ(b[i]["zero"], 0);
    EXPECT_EQ(c[i]["ranks"], 4);
    EXPECT_EQ(a[i]["comm_bytes"], 0);
    // the gradient all-reduce sends 2 (P - 1) / P of the gradients, plus a few statistics
    const int64_t grads = b[i]["comm_bytes"].get<int64_t>();
    EXPECT_GT(grads, 0);
    EXPECT_LT(c[i]["comm_bytes"].get<int64_t>(), 2 * grads);
  }
  // validation split over the ranks: the same windows, their sums added in another order
  EXPECT_NEAR(double(c.back()["val_loss"]), double(a.back()["val_loss"]), 1e-12);
  EXPECT_NEAR(double(b.back()["val_loss"]), double(a.back()["val_loss"]), 1e-5);
  // rank 0 alone wrote the checkpoint and the log
  EXPECT_TRUE(fs::exists(fs::path(two) / "latest"));
}

// Length stages (Note [Length stages]) and --eod-mask-loss over two ranks: each stage's
// micro-batches split over the ranks (the second stage's 4 sequences of 64 tokens as 4
// micro-batches, 2 a rank), and the counted targets are summed over them (Note [Counted tokens]),
// so the losses are one process's within fp32 accumulation order.
TEST_F(DataParallel, length_stages_and_a_loss_mask_split_over_the_ranks) {
  auto cmd = [this](const std::string& out) {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
           dir.str("data.txt") + " --seq-schedule 32:2,64:2 --batch 8 --micro-batch 2" +
           " --eod-mask-loss --document-mask --eot-id 73 --lr 3e-3 --warmup 2 --no-checkpoint" +
           " --val-batches 2 --log " + out + ".jsonl";
  };
  const std::string one = dir / "one", two = dir / "two";
  ASSERT_EQ(test::run_command("OMP_NUM_THREADS=1 " + cmd(one)).exit_code, 0);
  const test::CommandResult r2 = test::run_command(mpirun(2) + cmd(two));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const auto a = records(one + ".jsonl"), b = records(two + ".jsonl");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]["seq"], i < 2 ? 32 : 64);
    const double la = a[i]["loss"], lb = b[i]["loss"];
    EXPECT_NEAR(lb, la, 1e-5 * std::abs(la)) << "step " << i + 1;
  }
}

TEST_F(DataParallel, repeats_bit_for_bit) {
  const std::string a = dir / "a", b = dir / "b";
  ASSERT_EQ(test::run_command(mpirun(2) + train_cmd(a, "--steps 3")).exit_code, 0);
  ASSERT_EQ(test::run_command(mpirun(2) + train_cmd(b, "--steps 3")).exit_code, 0);
  EXPECT_EQ(losses(a + ".jsonl"), losses(b + ".jsonl"));
  EXPECT_EQ(losses(a + ".jsonl").size(), 3u);
}

TEST_F(DataParallel, micro_batches_that_do_not_split_are_refused) {
  const test::CommandResult r = test::run_command(mpirun(3) + train_cmd(dir / "x", "--steps 2"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("4 micro-batches per step do not split over 3 processes"),
            std::string::npos)
      << r.output;
}

// Commands other than memo train would run whole on every rank: refused, once, with the count.
TEST_F(DataParallel, commands_that_do_not_share_their_work_are_refused_under_mpirun) {
  const test::CommandResult r = test::run_command(mpirun(2) + test::memo_bin() + " plan --config " +
                                                  dir.str("config.json") + " --seq 64 --batch 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("memo: error: memo plan runs as one process; of the commands only memo "
                          "train runs under mpirun (2 ranks here)"),
            std::string::npos)
      << r.output;
}

// ZeRO-1 shards the optimiser over the ranks and changes no value; its checkpoint holds the whole
// state, so it resumes on another layout (here: ZeRO-0 on 2 and on 4 ranks, and one process).
TEST_F(DataParallel, zero_one_equals_zero_zero_and_resumes_on_another_layout) {
  for (const std::string optimizer : {"adamw", "adafactor"}) {
    SCOPED_TRACE(optimizer);
    const std::string z0 = dir / (optimizer + "-z0"), z1 = dir / (optimizer + "-z1");
    // (Adafactor's relative step would ignore the fixture's --lr, which memo refuses)
    const std::string extra = "--steps 6 --save-every 3 --optimizer " + optimizer +
                              (optimizer == "adafactor" ? " --no-relative-step" : "");
    ASSERT_EQ(test::run_command(mpirun(2) + train_cmd(z0, extra + " --zero 0")).exit_code, 0);
    const test::CommandResult r = test::run_command(mpirun(2) + train_cmd(z1, extra + " --zero 1"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ZeRO-1"), std::string::npos) << r.output;
    const auto want = losses(z0 + ".jsonl");
    ASSERT_EQ(want.size(), 6u);
    EXPECT_EQ(losses(z1 + ".jsonl"), want);
    if (optimizer != "adamw") continue;
    // from ZeRO-1's step-3 checkpoint: ZeRO-0 on 2 ranks continues bit for bit, 4 ranks and one
    // process within the rounding of another summation order
    const std::string from = z1 + "/step-00000003";
    int n = 0;
    for (const std::string& launch : {mpirun(2), mpirun(4), std::string("OMP_NUM_THREADS=1 ")}) {
      const std::string out = dir / ("resumed" + std::to_string(++n));
      const test::CommandResult resumed = test::run_command(
          launch + test::memo_bin() + " train --data " + dir.str("data.txt") + " --resume " + from +
          " --steps 6 --val-batches 2 --zero 0 --out " + out + " --log " + out + ".jsonl");
      ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
      const auto got = losses(out + ".jsonl");
      ASSERT_EQ(got.size(), 3u);
      for (const auto& [step, loss] : got) {
        if (launch == mpirun(2))
          EXPECT_EQ(loss, want.at(step)) << "step " << step;
        else
          EXPECT_NEAR(std::stod(loss), std::stod(want.at(step)), 1e-5 * std::stod(loss))
              << launch << "step " << step;
      }
    }
  }
}

// --device-memory is per process: under ZeRO-1 it counts this rank's shard of the optimiser
// state, without ZeRO the whole of it, as one process does.
TEST_F(DataParallel, the_device_budget_counts_this_ranks_optimizer_shard) {
  // "needs 853.75 KiB (874240 B)", after `from` ("rank 1 of 2: device memory: ")
  auto need = [](const std::string& output, const std::string& from = "") -> int64_t {
    const size_t at = output.find("needs ", output.find(from));
    const size_t open = output.find('(', at), close = output.find(" B)", at);
    if (at == std::string::npos || open == std::string::npos || close == std::string::npos)
      return -1;
    return std::stoll(output.substr(open + 1, close - open - 1));
  };
  const std::string budget = "--steps 2 --device-memory 1KiB";
  const test::CommandResult one =
      test::run_command("OMP_NUM_THREADS=1 " + train_cmd(dir / "one", budget));
  const test::CommandResult z0 = test::run_command(mpirun(2) + train_cmd(dir / "z0", budget));
  const test::CommandResult z1 =
      test::run_command(mpirun(2) + train_cmd(dir / "z1", budget + " --zero 1"));
  EXPECT_NE(one.exit_code, 0);
  EXPECT_NE(z0.exit_code, 0);
  EXPECT_NE(z1.exit_code, 0);
  ASSERT_GT(need(one.output), 0) << one.output;
  EXPECT_EQ(need(z0.output), need(one.output)) << z0.output;
  EXPECT_LT(need(z1.output), need(one.output)) << z1.output;
  EXPECT_GT(need(z1.output), 0) << z1.output;
  // Every rank reports its own shortfall before the job ends: the shards differ, so the ranks'
  // needs do. A budget between them stops both ranks, the one that fits saying which did not.
  const std::string r0 = "rank 0 of 2: device memory: ", r1 = "rank 1 of 2: device memory: ";
  ASSERT_NE(z1.output.find(r0), std::string::npos) << z1.output;
  ASSERT_NE(z1.output.find(r1), std::string::npos) << z1.output;
  const int64_t n0 = need(z1.output, r0), n1 = need(z1.output, r1);
  ASSERT_NE(n0, n1) << z1.output;
  // each rank's own advice, then what fits them all (the larger need) where the two read apart
  const std::string every =
      "; for every rank: --device-memory " + budget_flag_value(std::max(n0, n1)) + " fits\n";
  const bool apart = budget_flag_value(n0) != budget_flag_value(n1);
  for (const std::string& r : {r0, r1}) {
    const size_t at = z1.output.find(r), end = z1.output.find('\n', at) + 1;
    const std::string line = z1.output.substr(at, end - at);
    EXPECT_EQ(line.size() > every.size() && line.substr(line.size() - every.size()) == every, apart)
        << z1.output;
  }
  const bool zero_fits = n0 < n1;
  const test::CommandResult between = test::run_command(
      mpirun(2) + train_cmd(dir / "between", "--steps 2 --zero 1 --device-memory " +
                                                 std::to_string(std::min(n0, n1))));
  EXPECT_NE(between.exit_code, 0);
  EXPECT_EQ(need(between.output, zero_fits ? r1 : r0), std::max(n0, n1)) << between.output;
  const std::string fitting_says = (zero_fits ? r0 : r1) +
                                   "the plan fits on this rank but not on rank(s) " +
                                   (zero_fits ? "1" : "0");
  EXPECT_NE(between.output.find(fitting_says), std::string::npos) << between.output;
  EXPECT_NE(between.output.find("for every rank: "), std::string::npos) << between.output;
  EXPECT_NE(
      between.output.find("--device-memory " + budget_flag_value(std::max(n0, n1)) + " fits\n"),
      std::string::npos)
      << between.output;
  EXPECT_EQ(between.output.find("device plan: needs"), std::string::npos) << between.output;
}

// --batch-schedule noise over 2 ranks: the batch grows in steps of --micro-batch x 2 sequences,
// so every step splits over the ranks; B_simple comes from every rank's micro-batch norms, as one
// process measures it on the same windows (compared while the batches are equal); the lr is the
// law's at each batch. The checkpoint resumes in one process (steps of 4 split into micro-batches
// of 2) but not on 4 ranks (they would need steps of 8), which is refused with the reason.
TEST_F(DataParallel, the_noise_batch_schedule_grows_in_steps_that_split_over_the_ranks) {
  test::write_text(dir / "words.txt", test::random_words(40000));
  auto cmd = [&](const std::string& out) {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
           dir.str("words.txt") +
           " --seq 32 --batch 8 --micro-batch 2 --warmup 2 --steps 40 --save-every 10 --out " +
           out + " --log " + out + ".jsonl" + test::kQuickNoiseSchedule;
  };
  const std::string one = dir / "one", two = dir / "two";
  ASSERT_EQ(test::run_command("OMP_NUM_THREADS=1 " + cmd(one)).exit_code, 0);
  const test::CommandResult r = test::run_command(mpirun(2) + cmd(two));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("growing in steps of 4 sequences"), std::string::npos) << r.output;
  const auto a = records(one + ".jsonl"), b = records(two + ".jsonl");
  int changes = 0;
  bool same_batches = true;
  for (size_t i = 0; i < b.size(); ++i) {
    const int64_t batch = b[i]["batch"];
    EXPECT_EQ(batch % 4, 0) << b[i];
    EXPECT_EQ(b[i]["micro_batches"].get<int64_t>(), batch / 2);
    EXPECT_EQ(b[i]["lr"].get<double>() > 0.0, true);
    changes += b[i].contains("batch_change");
    same_batches = same_batches && i < a.size() && a[i]["batch"] == b[i]["batch"];
    if (same_batches && !a[i]["gns_b_simple"].is_null()) {
      EXPECT_NEAR(double(b[i]["gns_b_simple"]), double(a[i]["gns_b_simple"]),
                  1e-5 * double(a[i]["gns_b_simple"]))
          << "step " << i + 1;
    }
  }
  EXPECT_GE(changes, 1);
  const std::string from = two + "/step-00000010";
  const test::CommandResult on_one = test::run_command(
      "OMP_NUM_THREADS=1 " + test::memo_bin() + " train --data " + dir.str("words.txt") +
      " --resume " + from + " --steps 40 --val-batches 2 --out " + dir.str("r1") + " --log " +
      dir.str("r1.jsonl"));
  EXPECT_EQ(on_one.exit_code, 0) << on_one.output;
  const test::CommandResult on_four = test::run_command(
      mpirun(4) + test::memo_bin() + " train --data " + dir.str("words.txt") + " --resume " + from +
      " --steps 40 --out " + dir.str("r4") + " --log " + dir.str("r4.jsonl"));
  EXPECT_NE(on_four.exit_code, 0);
  EXPECT_NE(on_four.output.find("batch schedule grows in steps of 4 sequences"), std::string::npos)
      << on_four.output;
}

TEST_F(DataParallel, a_hung_rank_times_out_with_a_clear_error) {
  const std::string out = dir / "hung";
  const auto [r, seconds] = signal_rank_one(
      "MEMO_COMM_TIMEOUT=2 " + mpirun(2) + train_cmd(out, "--steps 100000 --save-every 1"),
      fs::path(out) / "latest", out, SIGSTOP);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("did not complete within 2 s"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 30.0);
}

// Without the noise probe the last micro-batch's backward starts each part's reduction as soon as
// the part is final (Note [Overlapped gradient reduction]); with it the whole buffer is reduced
// after the backward. With one micro-batch per rank the probe leaves the gradients as they are,
// so the two give the same bits: the overlap changes when the sums run, not what they are.
TEST_F(DataParallel, the_reduction_overlapped_with_the_backward_keeps_the_bits) {
  const std::string after = dir / "after", overlapped = dir / "overlapped";
  const test::CommandResult r1 = test::run_command(mpirun(4) + train_cmd(after, "--steps 3"));
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  const test::CommandResult r2 =
      test::run_command(mpirun(4) + train_cmd(overlapped, "--steps 3 --no-gns"));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const auto a = records(after + ".jsonl"), c = records(overlapped + ".jsonl");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(c.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(c[i]["loss"].dump(), a[i]["loss"].dump()) << "step " << i + 1;
    EXPECT_EQ(c[i]["grad_norm"].dump(), a[i]["grad_norm"].dump()) << "step " << i + 1;
    EXPECT_TRUE(c[i]["gns_b_simple"].is_null());
  }
}

TEST_F(DataParallel, a_killed_rank_stops_the_job_and_the_run_resumes_where_it_was) {
  const std::string full = dir / "full", cut = dir / "cut";
  ASSERT_EQ(test::run_command(mpirun(2) + train_cmd(full, "--steps 400")).exit_code, 0);
  const auto [r, seconds] =
      signal_rank_one(mpirun(2) + train_cmd(cut, "--steps 400 --save-every 2"),
                      fs::path(cut) / "step-00000002", cut, SIGKILL);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(seconds, 30.0);
  ASSERT_TRUE(fs::exists(fs::path(cut) / "latest"));
  // resume the last complete checkpoint, for 400 steps in all
  const test::CommandResult resumed = test::run_command(
      mpirun(2) + test::memo_bin() + " train --data " + dir.str("data.txt") + " --resume " + cut +
      " --steps 400 --val-batches 2 --log " + cut + ".resumed.jsonl");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto want = losses(full + ".jsonl"), got = losses(cut + ".resumed.jsonl");
  ASSERT_FALSE(got.empty());
  for (const auto& [step, loss] : got) EXPECT_EQ(loss, want.at(step)) << "step " << step;
  EXPECT_EQ(got.rbegin()->first, 400);
}

// Note [Stopping a run]: SIGTERM to one rank of a 2-rank job laid out by `layout` stops every
// rank after the same step, with a checkpoint and exit status 0; resumed, the run gives the
// uninterrupted run's losses bit for bit. The line it prints names the job's layout (`said`); the
// resumed run takes its --steps and --data from the checkpoint.
void expect_signal_stops_every_rank(const DataParallel& t, const std::string& layout,
                                    const std::string& said) {
  const std::string full = t.dir / "full", cut = t.dir / "cut";
  ASSERT_EQ(test::run_command(mpirun(2) + t.train_cmd(full, "--steps 60 " + layout)).exit_code, 0);
  const auto [r, seconds] = signal_rank_one(mpirun(2) + t.train_cmd(cut, "--steps 60 " + layout),
                                            fs::path(cut + ".jsonl"), cut, SIGTERM);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const int64_t stopped = losses(cut + ".jsonl").rbegin()->first;
  ASSERT_LT(stopped, 60) << "the run ended before the signal";
  EXPECT_NE(r.output.find(str("memo: stopped by another rank's request after step ", stopped)),
            std::string::npos)
      << r.output;
  EXPECT_EQ(find_latest_checkpoint(cut).filename().string(),
            str("step-", std::string(8 - std::to_string(stopped).size(), '0'), stopped));
  EXPECT_NE(r.output.find(str("; continue with memo train --resume ",
                              find_latest_checkpoint(cut).string(), said,
                              " in a job of 2 processes as this one\n")),
            std::string::npos)
      << r.output;
  const test::CommandResult resumed =
      test::run_command(mpirun(2) + test::memo_bin() + " train --resume " + cut +
                        " --val-batches 2 --log " + cut + ".jsonl " + layout);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(cut + ".jsonl"), losses(full + ".jsonl"));
}

TEST_F(DataParallel, a_signal_to_one_rank_stops_every_rank_after_the_same_step) {
  expect_signal_stops_every_rank(*this, "", "");
}
// The same under tensor parallelism, the checkpoints written in the background (the stop waits
// for the write: Note [Asynchronous checkpoints]), and under context parallelism.
TEST_F(DataParallel, a_signal_stops_a_tensor_parallel_job_with_a_background_checkpoint) {
  expect_signal_stops_every_rank(*this, "--tp 2 --async-save --save-every 5", " --tp 2");
}
TEST_F(DataParallel, a_signal_stops_a_context_parallel_job_after_the_same_step) {
  expect_signal_stops_every_rank(*this, "--cp 2", " --cp 2");
}

}  // namespace
}  // namespace memo
