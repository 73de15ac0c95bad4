// memo train --pp under mpirun (Note [Pipeline step] in train/pipeline_step.cc): the layers split
// into stages, 1F1B and interleaved, alone, with data parallelism, with tensor or context
// parallelism inside each stage, and over length stages. The first step's loss equals one
// process's bit for bit (LLaMA, untied: every kernel sees the same values in the same order),
// every later loss and every gradient norm within fp32 rounding (the norm's partial sums are
// grouped by stage, and clipping carries that into the weights); GPT-2's tied embedding sums its
// two halves of the gradient once; the noise probe measures what one process measures; the
// activation strategies give each other's bits; checkpoints are one process's files and resume
// on another layout; what a pipeline cannot run is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "../cli/cli_test_util.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/io/config_json.h"
#include "memo/io/hardware_json.h"
#include "memo/train/cluster_plan.h"
#include "mpi_launch.h"
#include "test_util.h"

namespace memo {
namespace {

using test::mpirun;
using test::records;
using test::relative;

constexpr const char* kPipeLlama =
    R"({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": false})";
constexpr const char* kPipeGpt2 =
    R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 4, "n_head": 4, "n_positions": 256,
  "vocab_size": 256, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true})";

// Tolerance against one process. The gradient norm's squares are summed per stage and the stages'
// sums added, where one process sums them in one pass: a few fp32 roundings of the norm (~1e-7
// relative), which clipping and AdamW carry into the next steps' losses at the same scale; a
// tied embedding's two gradient halves are added once instead of per micro-batch. Measured over
// 3 steps: below 1e-6. 1e-5 catches a chunk run twice, a lost micro-batch or a stage's gradient
// left out (each >= 1e-3).
constexpr double kPpTol = 1e-5;

class PipelineParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_text(dir / "llama.json", kPipeLlama);
    test::write_text(dir / "gpt2.json", kPipeGpt2);
    test::write_text(dir / "data.txt", test::corpus(40000));
  }
  // Four micro-batches a step; extra gives --steps.
  test::CommandResult train(int ranks, const std::string& config, const std::string& out,
                            const std::string& extra) const {
    return test::run_command(
        (ranks == 1 ? std::string("OMP_NUM_THREADS=1 ") : mpirun(ranks)) + test::memo_bin() +
        " train --config " + dir.str(config) + " --data " + dir.str("data.txt") +
        " --seq 64 --batch 4 --micro-batch 1 --lr 3e-3 --warmup 1 --val-batches 2 --out " + out +
        " --log " + out + ".jsonl " + extra);
  }
  test::TempDir dir;
};

// probed: the noise probe runs on the pipeline too (Note [Pipeline step]) and
// measures what one process measures (measured: ~1e-15 relative, ~1e-8 with two data-parallel
// ranks, whose loss sums differ by roundings).
void expect_close(const std::string& got, const std::string& want, int pp, bool first_exact,
                  bool probed = false) {
  const auto a = records(want + ".jsonl"), b = records(got + ".jsonl");
  ASSERT_EQ(a.size(), b.size()) << got;
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* field : {"gns_g2", "gns_trace"}) {
      ASSERT_FALSE(a[i][field].is_null()) << want << " step " << i + 1;
      if (!probed) {
        EXPECT_TRUE(b[i][field].is_null()) << got << " step " << i + 1;
        continue;
      }
      ASSERT_FALSE(b[i][field].is_null()) << got << " step " << i + 1;
      EXPECT_LT(relative(b[i][field], a[i][field]), kPpTol)
          << got << " " << field << " step " << i + 1;
    }
    EXPECT_LT(relative(b[i]["loss"], a[i]["loss"]), kPpTol) << got << " step " << i + 1;
    EXPECT_LT(relative(b[i]["grad_norm"], a[i]["grad_norm"]), kPpTol) << got << " step " << i + 1;
    EXPECT_EQ(b[i]["pp"], pp) << got;
    EXPECT_GT(b[i]["pp_comm_bytes"].get<int64_t>(), 0) << got;
  }
  // the validation batches through the pipeline
  EXPECT_LT(relative(b.back()["val_loss"], a.back()["val_loss"]), kPpTol) << got;
  if (first_exact) {
    EXPECT_EQ(b[0]["loss"].get<double>(), a[0]["loss"].get<double>()) << got;
  }
}

// --device-memory under --pp: each stage plans its whole step (Note [Planning on a shadow]) and
// runs in its arena, whose every byte the step uses (the planned allocator checks each request
// against the trace, so a step that left the plan would have stopped the run).
void expect_planned_stages(const std::string& run, int pp) {
  for (const nlohmann::json& rec : records(run + ".jsonl")) {
    ASSERT_EQ(rec["pp_stage_arena_bytes"].size(), size_t(pp)) << run;
    for (int p = 0; p < pp; ++p) {
      EXPECT_GT(rec["pp_stage_arena_bytes"][p].get<int64_t>(), 0) << run;
      EXPECT_EQ(rec["pp_stage_arena_used_bytes"][p], rec["pp_stage_arena_bytes"][p])
          << run << " stage " << p;
    }
  }
}

TEST_F(PipelineParallel, one_f_one_b_interleaved_and_data_parallel_match_one_process) {
  const std::string one = dir / "one";
  ASSERT_EQ(train(1, "llama.json", one, "--steps 3 --no-checkpoint").exit_code, 0);
  const struct {
    int ranks;
    const char* name;
    const char* flags;
    int pp;
  } layouts[] = {
      {2, "pp2", "--steps 3 --no-checkpoint --pp 2 --pp-layers 3,1 --device-memory 1GiB", 2},
      {2, "pp2v2", "--steps 3 --no-checkpoint --pp 2 --virtual-stages 2 --device-memory 1GiB", 2},
      {4, "pp4", "--steps 3 --no-checkpoint --pp 4 --pp-layers 1,1,1,1 --device-memory 1GiB", 4},
      {4, "dp2pp2", "--steps 3 --no-checkpoint --pp 2 --zero 1", 2}};
  for (const auto& l : layouts) {
    const test::CommandResult r = train(l.ranks, "llama.json", dir / l.name, l.flags);
    ASSERT_EQ(r.exit_code, 0) << l.name << "\n" << r.output;
    EXPECT_NE(r.output.find("memo: pipeline: " + std::to_string(l.pp) + " stages"),
              std::string::npos)
        << r.output;
    // the data-parallel ranks' loss sums are added in two halves: not bit for bit
    expect_close(dir / l.name, one, l.pp, l.ranks == l.pp, true);
    if (std::string(l.flags).find("--device-memory") == std::string::npos) continue;
    expect_planned_stages(dir / l.name, l.pp);
    // `memo plan --config --pp` plans each stage as the run did (one thread a rank: the
    // attention scratch is per thread), to the byte
    const std::string flags = l.flags;
    const bool interleaved = flags.find("--virtual-stages 2") != std::string::npos;
    const size_t split = flags.find("--pp-layers ");  // and its uneven split, as the run's
    const std::string layers =
        split == std::string::npos
            ? ""
            : " " + flags.substr(split, flags.find(" --", split + 2) - split);
    const test::CommandResult plan =
        test::run_command("OMP_NUM_THREADS=1 " + test::memo_bin() + " plan --config " +
                          dir.str("llama.json") + " --seq 64 --batch 1 --pp " +
                          std::to_string(l.pp) + (interleaved ? " --virtual-stages 2" : "") +
                          layers + " --micro-batches 4 --device-memory 1GiB --json");
    ASSERT_EQ(plan.exit_code, 0) << plan.output;
    const nlohmann::json planned = nlohmann::json::parse(plan.output);
    ASSERT_EQ(planned["stages"].size(), size_t(l.pp));
    for (int p = 0; p < l.pp; ++p)
      EXPECT_EQ(planned["stages"][p]["plan_peak_bytes"],
                records(dir / (std::string(l.name) + ".jsonl"))[0]["pp_stage_arena_bytes"][p])
          << l.name << " stage " << p;
  }
  EXPECT_NE(test::run_command("cat " + dir.str("pp2v2.jsonl")).output.find("\"pp\":2"),
            std::string::npos);
}

// The tied embedding's two copies sum their gradients, and the checkpoint holds it once: the
// files of one process (names, order, shapes) within the tolerance; the noise probe adds the two
// halves' cross term (Note [Tied embedding probe]) and measures what one process measures, under
// 1F1B and interleaved (where the last rank's head copy lies apart from its last chunk's range).
// With document masks (learned positions restart at each document: each micro-batch in flight
// keeps its own) and the eod loss mask (the last stage counts what one process counts).
TEST_F(PipelineParallel, a_tied_embedding_sums_its_two_gradients_and_masks_hold) {
  const std::string one = dir / "one";
  const std::string masks = " --document-mask --eot-id 73 --eod-mask-loss";
  ASSERT_EQ(train(1, "gpt2.json", one, "--steps 3" + masks).exit_code, 0);
  for (const std::string layout : {" --pp 2", " --pp 2 --virtual-stages 2"}) {
    const std::string run = dir / (layout.size() > 8 ? "pp2v2" : "pp2");
    const test::CommandResult r = train(2, "gpt2.json", run, "--steps 3" + layout + masks);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_close(run, one, 2, false, true);
    EXPECT_LT(test::weights_difference(run, one), kPpTol) << run;
  }
}

// --pp with --tp or --cp (Note [Pipeline step]): each stage's two tensor-parallel ranks split
// its layers' heads and units and the head's vocabulary and pass their sequence-parallel rows of
// the hidden states to the same rank of the next stage; or its two context-parallel ranks run two
// chunks of each sequence each and pass those rows. LLaMA (interleaved under --tp) in each stage's
// planned arena, with the noise probe, and its plan from `memo plan --config --pp` to the byte;
// GPT-2's tied embedding (each copy split over the vocabulary under --tp) with document masks and
// the eod loss mask (learned positions over a rank's chunks under --cp). Each within the
// tolerance of one process (the ranks' partial sums and the ring's merged softmax: a few ulps, as
// kPpTol's), and its checkpoint one process's files.
TEST_F(PipelineParallel, tensor_and_context_parallelism_inside_each_stage_match_one_process) {
  const std::string masks = " --document-mask --eot-id 73 --eod-mask-loss";
  const std::string llama_one = dir / "llama-one", gpt2_one = dir / "gpt2-one";
  ASSERT_EQ(train(1, "llama.json", llama_one, "--steps 3").exit_code, 0);
  ASSERT_EQ(train(1, "gpt2.json", gpt2_one, "--steps 3" + masks).exit_code, 0);
  const struct {
    const char* config;
    const char* name;
    std::string flags;
    const char* plan_flags;  // memo plan's layout for a planned run, else null
  } layouts[] = {{"llama.json", "llama-pp2v2tp2", " --virtual-stages 2 --tp 2 --device-memory 1GiB",
                  " --virtual-stages 2 --tp 2"},
                 {"gpt2.json", "gpt2-pp2tp2", " --tp 2" + masks, nullptr},
                 {"llama.json", "llama-pp2cp2", " --cp 2 --device-memory 1GiB", " --cp 2"},
                 {"gpt2.json", "gpt2-pp2cp2", " --cp 2" + masks, nullptr}};
  for (const auto& l : layouts) {
    const std::string run = dir / l.name;
    const std::string one = std::string(l.config) == "llama.json" ? llama_one : gpt2_one;
    const bool tp = l.flags.find("--tp 2") != std::string::npos, planned = l.plan_flags;
    const test::CommandResult r = train(4, l.config, run, "--steps 3 --pp 2" + l.flags);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(tp ? "memo: tensor + sequence parallel over 2"
                               : "memo: context parallel over 2"),
              std::string::npos)
        << r.output;
    expect_close(run, one, 2, false, true);
    for (const nlohmann::json& rec : records(run + ".jsonl")) {
      EXPECT_EQ(rec[tp ? "tp" : "cp"], 2) << run;
      EXPECT_GT(rec[tp ? "tp_comm_bytes" : "cp_comm_bytes"].get<int64_t>(), 0) << run;
    }
    EXPECT_LT(test::weights_difference(run, one), kPpTol) << run;
    if (!planned) continue;
    expect_planned_stages(run, 2);
    // `memo plan --config --pp 2` with the layout plans each stage as the run did, to the byte
    const test::CommandResult plan =
        test::run_command("OMP_NUM_THREADS=1 " + test::memo_bin() + " plan --config " +
                          dir.str(l.config) + " --seq 64 --batch 1 --pp 2" + l.plan_flags +
                          " --micro-batches 4 --device-memory 1GiB --json");
    ASSERT_EQ(plan.exit_code, 0) << plan.output;
    const nlohmann::json stages = nlohmann::json::parse(plan.output)["stages"];
    ASSERT_EQ(stages.size(), 2u);
    for (int p = 0; p < 2; ++p)
      EXPECT_EQ(stages[p]["plan_peak_bytes"], records(run + ".jsonl")[0]["pp_stage_arena_bytes"][p])
          << l.name << " stage " << p;
  }
}

// Note [Pipeline checkpoints]: a pipeline's checkpoint is one process's files, and either
// resumes on the other layout (1F1B -> one process, one process -> interleaved, and -> 1F1B with
// tensor parallelism in each stage).
TEST_F(PipelineParallel, checkpoints_resume_on_another_layout) {
  const std::string one = dir / "one", pp2 = dir / "pp2";
  const std::string steps = "--steps 4 --save-every 2";
  ASSERT_EQ(train(1, "llama.json", one, steps).exit_code, 0);
  const test::CommandResult saved = train(2, "llama.json", pp2, steps + " --pp 2");
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  EXPECT_LT(test::weights_difference(pp2, one), kPpTol);
  const auto want = test::losses(one + ".jsonl");
  for (const auto& [launch, from, layout] :
       {std::tuple{std::string("OMP_NUM_THREADS=1 "), pp2, std::string()},
        {mpirun(2), one, std::string(" --pp 2 --virtual-stages 2")},
        {mpirun(4), one, std::string(" --pp 2 --tp 2")}}) {
    const std::string out = dir / ("resumed-" + std::filesystem::path(from).filename().string() +
                                   std::to_string(layout.size()));
    const test::CommandResult r =
        test::run_command(launch + test::memo_bin() + " train --data " + dir.str("data.txt") +
                          " --resume " + from + "/step-00000002 --steps 4 --val-batches 2 --out " +
                          out + " --log " + out + ".jsonl" + layout);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto got = test::losses(out + ".jsonl");
    ASSERT_EQ(got.size(), 2u) << out;
    for (int64_t step : {3, 4})
      EXPECT_LT(relative(std::stod(got.at(step)), std::stod(want.at(step))), kPpTol)
          << out << " step " << step;
  }
}

TEST_F(PipelineParallel, activation_strategies_give_the_same_bits) {
  std::vector<std::vector<nlohmann::json>> runs;
  // keep and memo in a static plan of each stage's step, recompute and offload without; memo's
  // cost model within a host budget (Note [Pipeline alpha] in train/session.cc)
  const char* const cost_model = "memo --host-memory 200KiB";
  for (const char* kind : {"keep --device-memory 1GiB", "recompute", "offload",
                           "memo --alpha 0.5 --device-memory 1GiB", cost_model}) {
    const std::string out = dir / ("s" + std::to_string(runs.size()));
    const test::CommandResult r =
        train(2, "llama.json", out,
              std::string("--steps 3 --no-checkpoint --pp 2 --activations ") + kind);
    ASSERT_EQ(r.exit_code, 0) << kind << "\n" << r.output;
    runs.push_back(records(out + ".jsonl"));
    if (std::string_view(kind).find("--device-memory") != std::string_view::npos)
      expect_planned_stages(out, 2);
    if (kind == cost_model) {
      // each stage's cost model chose an alpha, and the stage's passes in flight (2 on stage 0,
      // whose record this is) held no more than the budget between them
      for (const nlohmann::json& rec : runs.back()) {
        ASSERT_EQ(rec["pp_stage_alpha"].size(), 2u) << r.output;
        for (const nlohmann::json& a : rec["pp_stage_alpha"]) {
          EXPECT_GE(a.get<double>(), 0.0);
          EXPECT_LE(a.get<double>(), 1.0);
        }
        EXPECT_LE(rec["host_peak_bytes"].get<int64_t>(), 200 * 1024);
      }
      continue;
    }
    // Note [Pipeline host memory]: stage 0 (rank 0, whose record this is) holds 2 micro-batches
    // of 2 layers; the last stage none. Its pool peaks at the figure printed at the start.
    const size_t at = r.output.find(" micro-batches in flight x ");
    if (kind[0] == 'k' || kind[0] == 'r') {
      EXPECT_EQ(at, std::string::npos) << kind;
      continue;
    }
    ASSERT_NE(at, std::string::npos) << kind << "\n" << r.output;
    EXPECT_EQ(r.output.substr(at - 21, 21), "stage 0 holds up to 2") << kind;
    const size_t open = r.output.find(" (", at) + 2;
    const int64_t planned = std::stoll(r.output.substr(open, r.output.find(" bytes)", at) - open));
    for (const nlohmann::json& rec : runs.back())
      EXPECT_EQ(rec["host_peak_bytes"].get<int64_t>(), planned) << kind;
  }
  // the stage transfers `memo plan --pp` predicts: rank 0 sends each of the 4 micro-batches'
  // hidden states once, of the plan's bytes per micro-batch (bf16) in fp32 here
  ClusterOptions o;  // memo plan --model llama.json --gpus 2 --gpu h200 --pp 2 --micro-batches 4
  o.gpu = find_gpu("h200", test::source_dir() + "/hardware");
  o.gpus = 2;
  o.pp = 2;
  o.micro_batches = 4;
  o.search_max_seq = false;
  const int64_t planned =
      plan_cluster(cpu_backend(), load_model_config(dir / "llama.json"), 64, "keep", o)
          .pp_bytes_per_micro_batch;
  EXPECT_EQ(planned, 64 * 32 * 2);
  for (const auto& run : runs)
    for (const nlohmann::json& rec : run) {
      EXPECT_EQ(rec["pp_send_bytes"], 4 * planned * 2);
      // rank 0 sends micro-batch i's hidden state in its forward, and the gradient of micro-batch
      // i that its backward receives vouches for it (Note [Pipeline send completion]): at most
      // two sent and one received, 3 buffers of [64, 32] fp32, not 1 + 4 (measured both ways)
      EXPECT_EQ(rec["pp_hidden_bytes"].get<int64_t>(), 3 * 64 * 32 * 4);
    }
  for (size_t k = 1; k < runs.size(); ++k)
    for (size_t i = 0; i < runs[0].size(); ++i) {
      EXPECT_EQ(runs[k][i]["loss"].get<double>(), runs[0][i]["loss"].get<double>()) << k;
      EXPECT_EQ(runs[k][i]["grad_norm"].get<double>(), runs[0][i]["grad_norm"].get<double>()) << k;
    }
}

// --batch-schedule noise on a pipeline (1F1B), each stage in its static plan: the noise probe's
// B_simple is one process's, so the batch grows at the same steps to the same sizes, and each
// stage plans its step again for the new batch.
TEST_F(PipelineParallel, the_noise_batch_schedule_grows_as_in_one_process) {
  auto cmd = [&](const std::string& out) {
    return test::memo_bin() + " train --config " + dir.str("llama.json") + " --data " +
           dir.str("data.txt") +
           " --seq 32 --batch 8 --micro-batch 2 --warmup 2 --steps 30 --no-checkpoint --out " +
           out + " --log " + out + ".jsonl --val-batches 1" + test::kQuickNoiseSchedule;
  };
  const std::string one = dir / "one", pp2 = dir / "pp2";
  ASSERT_EQ(test::run_command("OMP_NUM_THREADS=1 " + cmd(one)).exit_code, 0);
  // in each stage's static plan, made again at each batch change (Note [Pipeline plans per
  // batch]): the same steps
  const test::CommandResult r =
      test::run_command(mpirun(2) + cmd(pp2) + " --pp 2 --device-memory 1GiB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("each pipeline stage planned again for"), std::string::npos) << r.output;
  expect_planned_stages(pp2, 2);
  const auto a = records(one + ".jsonl"), b = records(pp2 + ".jsonl");
  ASSERT_EQ(a.size(), b.size());
  int changes = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]["batch"], a[i]["batch"]) << "step " << i + 1;
    changes += b[i].contains("batch_change");
    if (!a[i]["gns_b_simple"].is_null()) {
      EXPECT_LT(relative(b[i]["gns_b_simple"], a[i]["gns_b_simple"]), kPpTol) << "step " << i + 1;
    }
  }
  EXPECT_GE(changes, 1);
}

// Length stages on a pipeline (Note [Length stages]): each stage of the schedule runs its own
// pipeline step and static plan, the layer split the first stage's for the whole run, memo's
// cost model profiling each length again; a run resumed in the second stage on another layout
// continues it. Within the tolerance of one process.
TEST_F(PipelineParallel, length_stages_run_through_the_pipeline_and_resume) {
  const std::string one = dir / "one", pp2 = dir / "pp2";
  auto staged = [&](const std::string& launch, const std::string& out, const std::string& extra) {
    return test::run_command(launch + test::memo_bin() + " train --config " +
                             dir.str("llama.json") + " --data " + dir.str("data.txt") +
                             " --seq-schedule 32:2,64:2 --save-every 3 --batch 4 "
                             "--micro-batch 1 --lr 3e-3 --warmup 1 --val-batches 2 --out " +
                             out + " --log " + out + ".jsonl" + extra);
  };
  ASSERT_EQ(staged("OMP_NUM_THREADS=1 ", one, "").exit_code, 0);
  const test::CommandResult r =
      staged(mpirun(2), pp2, " --pp 2 --activations memo --host-memory 1MiB --device-memory 1GiB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_close(pp2, one, 2, false, true);
  expect_planned_stages(pp2, 2);
  const auto seqs = records(pp2 + ".jsonl");
  EXPECT_EQ(seqs[0]["seq"], 32);
  EXPECT_EQ(seqs[3]["seq"], 64);
  const std::string resumed = dir / "resumed";
  const test::CommandResult again = test::run_command(
      mpirun(2) + test::memo_bin() + " train --data " + dir.str("data.txt") + " --resume " + pp2 +
      "/step-00000003 --steps 4 --val-batches 2 --pp 2 --virtual-stages 2 --out " + resumed +
      " --log " + resumed + ".jsonl");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const auto want = test::losses(one + ".jsonl"), got = test::losses(resumed + ".jsonl");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LT(relative(std::stod(got.at(4)), std::stod(want.at(4))), kPpTol);
}

TEST_F(PipelineParallel, what_a_pipeline_does_not_run_is_refused_by_name) {
  const std::string run = test::memo_bin() + " train --config " + dir.str("llama.json") +
                          " --data " + dir.str("data.txt") + " --seq 64 --steps 1 --out " +
                          dir.str("x") + " ";
  const std::string quiet = " --no-checkpoint";
  for (const auto& [ranks, flags, says] : std::vector<std::tuple<int, std::string, std::string>>{
           {2, "--pp 3", "--pp 3 does not divide the job's 2 processes"},
           {2, "--pp 2 --tp 2", "--pp 2 x --tp 2 x --cp 1 does not divide the job's 2"},
           {2, "--pp 2 --virtual-stages 2 --batch 1" + quiet,
            "1 micro-batches per step is not a multiple of --pp 2"},
           {2, "--pp 2 --pp-layers 3,2" + quiet, "the counts add up to 5, the model has 4 layers"},
           {1, "--virtual-stages 2", "--virtual-stages splits a pipeline: give --pp 2 or more"},
           {2, "--pp 2 --device-memory 100KiB" + quiet,
            "pipeline stage 0 of 2: device memory: needs"},
           {2, "--pp 2 --activations memo --host-memory 4KiB" + quiet,
            "at alpha 0 of host memory, over --host-memory 4.00 KiB"},
           {2, "--pp 2 --activations offload --host-memory 4KiB" + quiet,
            "over --host-memory 4.00 KiB; give --host-memory"}}) {
    const test::CommandResult r =
        test::run_command((ranks == 1 ? std::string() : mpirun(ranks)) + run + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.output.find(says), std::string::npos) << flags << "\n" << r.output;
  }
}

}  // namespace
}  // namespace memo
