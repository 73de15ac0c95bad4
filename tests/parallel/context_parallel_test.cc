// memo train --cp under mpirun (model/context_parallel.h): each sequence split over C ranks, keys
// and values round a ring. The same losses, gradient norms, validation loss and weights as one
// process within fp32 rounding; the activation strategies bit-identical to each other under it;
// data and context parallelism together, with ZeRO-1 and a planned arena; layouts that do not
// split refused on every rank with one line.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "../cli/cli_test_util.h"
#include "memo/io/checkpoint.h"
#include "memo/io/config_json.h"
#include "memo/io/safetensors.h"
#include "memo/model/params.h"
#include "memo/parallel/communicator.h"
#include "mpi_launch.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::losses;
using test::mpirun;
using test::records;
using test::relative;
using test::weights_difference;

const char* kGpt2 = R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4,
  "n_inner": 64, "vocab_size": 256, "n_positions": 256, "layer_norm_epsilon": 1e-5})";

// Tolerance of a context-parallel run against one process. Ring attention adds the same softmax
// terms grouped by key block: its outputs and gradients differ from one process's by ~1e-6
// relative (tests/parallel/mpi: RingAttention); the loss averages them over every token and a few
// AdamW steps carry them on, measured at ~1e-9 relative. 1e-5 leaves room for other shapes and
// still catches a wrong mask, position or reduction (each moves the loss by >= 1e-3).
constexpr double kTol = 1e-5;

class ContextParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_text(dir / "llama.json", test::kTinyLlamaConfig);
    test::write_text(dir / "gpt2.json", kGpt2);
    test::write_text(dir / "data.txt", test::corpus(40000));
  }
  // 4 sequences of `seq` tokens per step in micro-batches of 2.
  std::string train_cmd(const std::string& config, const std::string& out, int64_t seq,
                        const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str(config) + " --data " +
           dir.str("data.txt") + " --seq " + std::to_string(seq) +
           " --batch 4 --micro-batch 2 --lr 3e-3 --warmup 2 --val-batches 2 --out " + out +
           " --log " + out + ".jsonl " + extra;
  }
  // 3 steps of `config` at `seq` in one process and under --cp `ranks` on as many ranks agree
  // (expect_close_runs, below).
  void matches_one_process(const std::string& config, int64_t seq, int ranks);
  test::TempDir dir;
};

void expect_close_runs(const std::string& got, const std::string& want, int cp, int ranks) {
  const auto a = records(want + ".jsonl"), b = records(got + ".jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LT(relative(b[i]["loss"], a[i]["loss"]), kTol) << got << " step " << i + 1;
    EXPECT_LT(relative(b[i]["grad_norm"], a[i]["grad_norm"]), kTol) << got << " step " << i + 1;
    EXPECT_EQ(b[i]["cp"], cp);
    EXPECT_EQ(b[i]["ranks"], ranks);
    EXPECT_GT(b[i]["cp_comm_bytes"].get<int64_t>(), 0);  // the ring moved keys and values
  }
  EXPECT_LT(relative(b.back()["val_loss"], a.back()["val_loss"]), kTol) << got;
  EXPECT_LT(weights_difference(got, want), kTol) << got;
}

void ContextParallel::matches_one_process(const std::string& config, int64_t seq, int ranks) {
  const std::string one = dir / (config + ".one"), cp = dir / (config + ".cp");
  ASSERT_EQ(
      test::run_command("OMP_NUM_THREADS=1 " + train_cmd(config, one, seq, "--steps 3")).exit_code,
      0);
  const test::CommandResult r = test::run_command(
      mpirun(ranks) + train_cmd(config, cp, seq, "--steps 3 --cp " + std::to_string(ranks)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_close_runs(cp, one, ranks, ranks);
}

TEST_F(ContextParallel, two_and_four_ranks_match_one_process) {
  const std::string one = dir / "one";
  ASSERT_EQ(test::run_command("OMP_NUM_THREADS=1 " + train_cmd("llama.json", one, 64, "--steps 4"))
                .exit_code,
            0);
  const std::string cp2 = dir / "cp2", cp4 = dir / "cp4", dp2cp2 = dir / "dp2cp2";
  const test::CommandResult r2 =
      test::run_command(mpirun(2) + train_cmd("llama.json", cp2, 64, "--steps 4 --cp 2"));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_NE(r2.output.find("context parallel over 2 processes: each sequence in 4 chunks of 16"),
            std::string::npos)
      << r2.output;
  const test::CommandResult r4 =
      test::run_command(mpirun(4) + train_cmd("llama.json", cp4, 64, "--steps 4 --cp 4"));
  ASSERT_EQ(r4.exit_code, 0) << r4.output;
  // data parallel over 2 groups of 2 context-parallel ranks, the optimiser sharded over the 2
  const test::CommandResult r22 = test::run_command(
      mpirun(4) + train_cmd("llama.json", dp2cp2, 64, "--steps 4 --cp 2 --zero 1"));
  ASSERT_EQ(r22.exit_code, 0) << r22.output;
  EXPECT_NE(r22.output.find("data parallel over 2 processes"), std::string::npos) << r22.output;
  expect_close_runs(cp2, one, 2, 2);
  expect_close_runs(cp4, one, 4, 4);
  expect_close_runs(dp2cp2, one, 2, 4);
  // What rank 0 sent in step 1, to the byte: the ring of Note [Context parallel layout], the loss
  // of each micro-batch, and the gradients summed over the group after each micro-batch (the
  // noise-scale probe reads them); a data-parallel group of one sends nothing.
  const int64_t grads = ParamLayout(load_model_config(dir / "llama.json")).total_numel();
  auto cp_bytes = [grads](int64_t C, int64_t micro) {
    const int64_t block = 2 * 64 / C * 16 * 4;  // [T/C, Hkv D] floats: B 2, S 64, Hkv D 16
    const int64_t ring = 2 * micro * ((C - 1) * 2 * block + (C - 1) * 4 * block + 2 * block);
    return ring + micro * 8 * (C - 1) + micro * (2 * grads * 4 * (C - 1) / C);
  };
  EXPECT_EQ(records(cp2 + ".jsonl")[0]["cp_comm_bytes"].get<int64_t>(), cp_bytes(2, 2));
  EXPECT_EQ(records(cp4 + ".jsonl")[0]["cp_comm_bytes"].get<int64_t>(), cp_bytes(4, 2));
  EXPECT_EQ(records(dp2cp2 + ".jsonl")[0]["cp_comm_bytes"].get<int64_t>(), cp_bytes(2, 1));
  // the last step's too: the validation after it is not the step's
  ASSERT_TRUE(records(cp2 + ".jsonl").back().contains("val_loss"));
  EXPECT_EQ(records(cp2 + ".jsonl").back()["cp_comm_bytes"].get<int64_t>(), cp_bytes(2, 2));
  EXPECT_EQ(records(cp2 + ".jsonl")[0]["comm_bytes"].get<int64_t>(), 0);
  EXPECT_GT(records(dp2cp2 + ".jsonl")[0]["comm_bytes"].get<int64_t>(), 0);
}

// An odd group: 3 ranks, each sequence in 6 chunks, rank 1 holding chunks 1 and 4.
TEST_F(ContextParallel, an_odd_group_of_three_matches_one_process) {
  matches_one_process("llama.json", 96, 3);
}

// Scaled RoPE: each rank rotates its chunks with the whole sequence's tables (yarn with its
// attention factor; longrope, whose factors are chosen by the whole length, 64 > 32).
TEST_F(ContextParallel, scaled_rope_matches_one_process) {
  nlohmann::json yarn = nlohmann::json::parse(test::kTinyLlamaConfig);
  yarn["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}};
  nlohmann::json longrope = nlohmann::json::parse(test::kTinyLlamaConfig);
  longrope["rope_scaling"] = {{"rope_type", "longrope"},
                              {"short_factor", {1.0, 1.1, 1.2, 1.3}},
                              {"long_factor", {1.0, 2.0, 4.0, 8.0}},
                              {"original_max_position_embeddings", 32}};
  test::write_text(dir / "yarn.json", yarn.dump());
  test::write_text(dir / "longrope.json", longrope.dump());
  matches_one_process("yarn.json", 64, 2);
  matches_one_process("longrope.json", 64, 2);
}

// GPT-2's learned positions are added at each rank's true positions.
TEST_F(ContextParallel, gpt2_matches_one_process) { matches_one_process("gpt2.json", 64, 2); }

// keep, recompute (which re-runs the ring in the backward), offload and memo (token-wise
// recompute from row 128 of 512, across the boundary of the rank's two chunks at row 256) give
// the same bits under context parallelism, as in one process; with a planned arena too.
TEST_F(ContextParallel, activation_strategies_are_bit_identical) {
  const std::string base = "--steps 3 --cp 2 --device-memory 64MiB --activations ";
  std::map<int64_t, std::string> want;
  for (const auto& [name, flags] : {std::pair<const char*, const char*>{"keep", "keep"},
                                    {"recompute", "recompute"},
                                    {"offload", "offload"},
                                    {"memo", "memo --alpha 0.25"}}) {
    const std::string out = dir / name;
    const test::CommandResult r =
        test::run_command(mpirun(2) + train_cmd("llama.json", out, 512, base + std::string(flags)));
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    if (want.empty())
      want = losses(out + ".jsonl");
    else
      EXPECT_EQ(losses(out + ".jsonl"), want) << name;
  }
  EXPECT_EQ(want.size(), 3u);
}

// Every rank holds the whole weights and optimiser state, so a checkpoint saved under --cp resumes
// in one process and one saved by one process resumes under --cp 4, continuing the uninterrupted
// run's losses within kTol.
TEST_F(ContextParallel, resumes_on_another_layout) {
  const std::string one = dir / "one", cp2 = dir / "cp2";
  const std::string steps = "--steps 4 --save-every 2";
  ASSERT_EQ(
      test::run_command("OMP_NUM_THREADS=1 " + train_cmd("llama.json", one, 64, steps)).exit_code,
      0);
  ASSERT_EQ(
      test::run_command(mpirun(2) + train_cmd("llama.json", cp2, 64, steps + " --cp 2")).exit_code,
      0);
  const auto want = losses(one + ".jsonl");
  ASSERT_EQ(want.size(), 4u);
  for (const auto& [launch, from] :
       {std::pair{std::string("OMP_NUM_THREADS=1 "), cp2}, {mpirun(4) + "", one}}) {
    const std::string out = dir / ("resumed-" + fs::path(from).filename().string());
    const std::string cp = from == one ? " --cp 4" : "";
    const test::CommandResult r = test::run_command(
        launch + test::memo_bin() + " train --data " + dir.str("data.txt") + " --resume " + from +
        "/step-00000002 --steps 4 --val-batches 2 --out " + out + " --log " + out + ".jsonl" + cp);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto got = losses(out + ".jsonl");
    ASSERT_EQ(got.size(), 2u) << r.output;
    for (const auto& [step, loss] : got)
      EXPECT_LT(relative(std::stod(loss), std::stod(want.at(step))), kTol) << out << " " << step;
  }
}

// memo plan --config --cp C traces one rank with shapes only (a group that moves nothing); a real
// job's rank traces itself with values over MPI. The two plans are the same: the arena memo plan
// prints is the arena each rank runs in, its lower bound the rank's measured peak, and the ring's
// bytes per micro-batch times the micro-batches, plus the gradients summed over the group after
// each, are what rank 0 measured sending in step 1 (the last step adds validation). (Attention
// scratch grows with the OpenMP
// threads, so both run with one.)
TEST_F(ContextParallel, memo_plan_predicts_each_ranks_arena_and_bytes) {
  const int64_t grads = ParamLayout(load_model_config(dir / "llama.json")).total_numel();
  for (const auto& [ranks, strategy] :
       {std::pair<int, const char*>{2, "keep"}, {2, "recompute"}, {4, "keep"}}) {
    SCOPED_TRACE(std::to_string(ranks) + " " + strategy);
    const std::string out = dir / (std::string(strategy) + std::to_string(ranks));
    const std::string flags = " --seq 64 --cp " + std::to_string(ranks) + " --activations " +
                              strategy + " --device-memory 64MiB";
    const test::CommandResult plan = test::run_command(
        "OMP_NUM_THREADS=1 " + test::memo_bin() + " plan --config " + dir.str("llama.json") +
        " --batch 2 --json" + flags + " > " + out + ".plan.json");
    ASSERT_EQ(plan.exit_code, 0) << plan.output;
    const nlohmann::json predicted = nlohmann::json::parse(std::ifstream(out + ".plan.json"));
    const test::CommandResult run = test::run_command(
        mpirun(ranks) + test::memo_bin() + " train --config " + dir.str("llama.json") + " --data " +
        dir.str("data.txt") + " --batch 4 --micro-batch 2 --steps 2 --out " + out + " --log " +
        out + ".jsonl" + flags);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const nlohmann::json measured = records(out + ".jsonl").at(0);
    EXPECT_EQ(predicted["plan_peak_bytes"], measured["reserved_bytes"]);
    EXPECT_EQ(predicted["lower_bound_bytes"], measured["peak_bytes"]);
    const int64_t micro = 2;  // 4 sequences in micro-batches of 2, every rank runs both
    EXPECT_EQ(measured["cp_comm_bytes"].get<int64_t>(),
              micro * predicted["cp_bytes_per_micro_batch"].get<int64_t>() +
                  micro * all_reduce_bytes(grads * 4, ranks));
  }
}

// A rank that stops inside the ring takes the job down within seconds: its peer's send_recv
// times out with the collective's name; a rank killed mid-run ends the job, and the last
// checkpoint resumes to the losses of an uninterrupted run.
TEST_F(ContextParallel, a_hung_or_killed_rank_ends_the_job_and_the_run_resumes) {
  const std::string hung = dir / "hung";
  const auto [h, h_seconds] = test::signal_rank_one(
      "MEMO_COMM_TIMEOUT=2 " + mpirun(2) +
          train_cmd("llama.json", hung, 64, "--steps 100000 --save-every 1 --cp 2"),
      fs::path(hung) / "latest", hung, SIGSTOP);
  EXPECT_NE(h.exit_code, 0);
  EXPECT_NE(h.output.find("did not complete within 2 s"), std::string::npos) << h.output;
  EXPECT_LT(h_seconds, 30.0);
  const std::string full = dir / "full", cut = dir / "cut";
  ASSERT_EQ(test::run_command(mpirun(2) + train_cmd("llama.json", full, 64, "--steps 300 --cp 2"))
                .exit_code,
            0);
  const auto [k, k_seconds] = test::signal_rank_one(
      mpirun(2) + train_cmd("llama.json", cut, 64, "--steps 300 --save-every 2 --cp 2"),
      fs::path(cut) / "step-00000002", cut, SIGKILL);
  EXPECT_NE(k.exit_code, 0);
  EXPECT_LT(k_seconds, 30.0);
  const test::CommandResult resumed = test::run_command(
      mpirun(2) + test::memo_bin() + " train --data " + dir.str("data.txt") + " --resume " + cut +
      " --steps 300 --val-batches 2 --cp 2 --log " + cut + ".resumed.jsonl");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto want = losses(full + ".jsonl"), got = losses(cut + ".resumed.jsonl");
  ASSERT_FALSE(got.empty());
  for (const auto& [step, loss] : got) EXPECT_EQ(loss, want.at(step)) << "step " << step;
}

TEST_F(ContextParallel, layouts_that_do_not_split_are_refused) {
  const test::CommandResult odd =
      test::run_command(mpirun(2) + train_cmd("llama.json", dir / "x", 64, "--steps 2 --cp 3"));
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.output.find("--cp 3 does not divide the job's 2 processes"), std::string::npos)
      << odd.output;
  const test::CommandResult seq =
      test::run_command(mpirun(2) + train_cmd("llama.json", dir / "y", 30, "--steps 2 --cp 2"));
  EXPECT_NE(seq.exit_code, 0);
  EXPECT_NE(seq.output.find("--seq 30 does not split into 4 equal chunks"), std::string::npos)
      << seq.output;
  // a budget too small: refused before step 1 by every rank, the sequence it suggests splitting
  const test::CommandResult budget = test::run_command(
      mpirun(2) + train_cmd("llama.json", dir / "z", 256, "--steps 2 --cp 2 --device-memory 1MiB"));
  EXPECT_NE(budget.exit_code, 0);
  for (const char* rank : {"rank 0 of 2: device memory: needs", "rank 1 of 2: device memory"})
    EXPECT_NE(budget.output.find(rank), std::string::npos) << budget.output;
  const size_t at = budget.output.find("; --seq ");
  ASSERT_NE(at, std::string::npos) << budget.output;
  EXPECT_EQ(std::stoll(budget.output.substr(at + 8)) % 4, 0) << budget.output;
}

}  // namespace
}  // namespace memo
