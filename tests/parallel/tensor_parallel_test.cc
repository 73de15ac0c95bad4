// memo train --tp under mpirun (Note [Tensor-parallel activations] in model/parallel.h): the
// heads, MLP units and vocabulary split over T ranks, the sequence split between the layers. The
// same losses, gradient norms, validation loss and (gathered) weights as one process within fp32
// rounding, alone and with data and context parallelism, LLaMA and GPT-2; the activation
// strategies bit-identical to each other under it; checkpoints of whole tensors that resume on
// another layout; layouts that do not split refused on every rank with one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "../cli/cli_test_util.h"
#include "memo/io/checkpoint.h"
#include "memo/io/config_json.h"
#include "memo/io/safetensors.h"
#include "memo/parallel/communicator.h"
#include "mpi_launch.h"
#include "test_util.h"

namespace memo {
namespace {

using test::losses;
using test::mpirun;
using test::records;
using test::relative;
using test::weights_difference;

// Tolerance against one process. A rank's products sum over its part of the heads or units and
// the reduce-scatter adds the ranks' partial sums, so the outputs differ from one process's by a
// few fp32 ulps (~1e-7 relative); the vocabulary-parallel loss merges the parts' log-sum-exps in
// double. Measured on the loss over 4 AdamW steps: ~2e-9 relative. 1e-5 catches a wrong split,
// a missing reduction of the norms' gradients or a wrong vocabulary offset (each >= 1e-3).
constexpr double kTpTol = 1e-5;

class TensorParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_text(dir / "llama.json", test::kTinyLlamaConfig);
    test::write_text(dir / "data.txt", test::corpus(40000));
  }
  std::string train_cmd(const std::string& config, const std::string& out, int64_t seq,
                        const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str(config) + " --data " +
           dir.str("data.txt") + " --seq " + std::to_string(seq) +
           " --batch 4 --micro-batch 2 --lr 3e-3 --warmup 2 --val-batches 2 --out " + out +
           " --log " + out + ".jsonl " + extra;
  }
  // train_cmd in one process of one thread (ranks 1) or under mpirun.
  test::CommandResult train(int ranks, const std::string& config, const std::string& out,
                            int64_t seq, const std::string& extra) const {
    return test::run_command((ranks == 1 ? std::string("OMP_NUM_THREADS=1 ") : mpirun(ranks)) +
                             train_cmd(config, out, seq, extra));
  }
  // kTinyLlamaConfig with the given integer fields changed, written to `name` in dir.
  void write_config(const std::string& name,
                    std::initializer_list<std::pair<std::string, int>> fields) const {
    std::string config = test::kTinyLlamaConfig;
    for (const auto& [key, value] : fields) {
      const size_t at = config.find("\"" + key + "\": ") + key.size() + 4;
      config.replace(at, config.find_first_of(",}", at) - at, std::to_string(value));
    }
    test::write_text(dir / name, config);
  }
  // extra: flags every run takes
  void layouts_match_one_process(const std::string& config,
                                 const std::string& extra = "");  // below
  test::TempDir dir;
};

void expect_close_tp_runs(const std::string& got, const std::string& want, int tp, int ranks) {
  const auto a = records(want + ".jsonl"), b = records(got + ".jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LT(relative(b[i]["loss"], a[i]["loss"]), kTpTol) << got << " step " << i + 1;
    EXPECT_LT(relative(b[i]["grad_norm"], a[i]["grad_norm"]), kTpTol) << got << " step " << i + 1;
    // the noise scale from the micro-batches' whole gradients (each rank's parts and the whole
    // tensors once), as one process measures it
    if (!a[i]["gns_b_simple"].is_null()) {
      EXPECT_LT(relative(b[i]["gns_b_simple"], a[i]["gns_b_simple"]), kTpTol)
          << got << " step " << i + 1;
    }
    EXPECT_EQ(b[i]["tp"], tp);
    EXPECT_EQ(b[i]["ranks"], ranks);
    EXPECT_GT(b[i]["tp_comm_bytes"].get<int64_t>(), 0);
  }
  EXPECT_LT(relative(b.back()["val_loss"], a.back()["val_loss"]), kTpTol) << got;
  // the checkpoint holds whole tensors with one process's names and shapes
  EXPECT_LT(weights_difference(got, want), kTpTol) << got;
}

TEST_F(TensorParallel, alone_and_with_data_and_context_parallelism_matches_one_process) {
  const std::string one = dir / "one", tp2 = dir / "tp2", tp2cp2 = dir / "tp2cp2",
                    dp2tp2 = dir / "dp2tp2";
  ASSERT_EQ(train(1, "llama.json", one, 64, "--steps 4").exit_code, 0);
  const test::CommandResult r2 = train(2, "llama.json", tp2, 64, "--steps 4 --tp 2");
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_NE(r2.output.find("tensor + sequence parallel over 2 processes"), std::string::npos)
      << r2.output;
  const test::CommandResult r22 = train(4, "llama.json", tp2cp2, 64, "--steps 4 --tp 2 --cp 2");
  ASSERT_EQ(r22.exit_code, 0) << r22.output;
  // data parallel over 2 groups of 2 tensor-parallel ranks, the optimiser sharded over the 2
  const test::CommandResult d22 = train(4, "llama.json", dp2tp2, 64, "--steps 4 --tp 2 --zero 1");
  ASSERT_EQ(d22.exit_code, 0) << d22.output;
  EXPECT_NE(d22.output.find("data parallel over 2 processes"), std::string::npos) << d22.output;
  expect_close_tp_runs(tp2, one, 2, 2);
  expect_close_tp_runs(tp2cp2, one, 2, 4);
  expect_close_tp_runs(dp2tp2, one, 2, 4);
  EXPECT_EQ(records(tp2cp2 + ".jsonl")[0]["cp"], 2);
}

// keep, recompute, offload and memo (token-wise rebuild of rows 128.. of each rank's 512, in both
// row groups of the heads' tensors) give the same bits under tensor parallelism, in a planned
// arena; memo without --alpha too (its warm-up chooses, the ranks agree on the least).
TEST_F(TensorParallel, activation_strategies_are_bit_identical) {
  write_config("llama4.json", {{"num_hidden_layers", 4}});
  const std::string base = "--steps 2 --tp 2 --device-memory 64MiB --activations ";
  std::map<int64_t, std::string> want;
  for (const auto& [name, flags] : {std::pair<const char*, const char*>{"keep", "keep"},
                                    {"recompute", "recompute"},
                                    {"offload", "offload --host-memory 1GiB"},
                                    {"memo", "memo --alpha 0.25 --host-memory 1GiB"},
                                    {"memo-chosen", "memo --host-memory 1GiB"}}) {
    const std::string out = dir / name;
    const test::CommandResult r = train(2, "llama4.json", out, 512, base + std::string(flags));
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    if (want.empty())
      want = losses(out + ".jsonl");
    else
      EXPECT_EQ(losses(out + ".jsonl"), want) << name;
  }
  EXPECT_EQ(want.size(), 2u);
}

// A checkpoint holds whole tensors, weights and optimiser state: one saved under --tp 2 resumes
// in one process, and one saved by one process resumes under --tp 2 --cp 2, both continuing the
// uninterrupted run's losses within kTpTol.
TEST_F(TensorParallel, resumes_on_another_layout) {
  const std::string one = dir / "one", tp2 = dir / "tp2";
  const std::string steps = "--steps 4 --save-every 2";
  ASSERT_EQ(train(1, "llama.json", one, 64, steps).exit_code, 0);
  const test::CommandResult saved = train(2, "llama.json", tp2, 64, steps + " --tp 2");
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const auto want = losses(one + ".jsonl");
  ASSERT_EQ(want.size(), 4u);
  for (const auto& [launch, from, layout] :
       {std::tuple{std::string("OMP_NUM_THREADS=1 "), tp2, std::string()},
        {mpirun(4), one, std::string(" --tp 2 --cp 2")}}) {
    const std::string out = dir / ("resumed-" + std::filesystem::path(from).filename().string());
    const test::CommandResult r =
        test::run_command(launch + test::memo_bin() + " train --data " + dir.str("data.txt") +
                          " --resume " + from + "/step-00000002 --steps 4 --val-batches 2 --out " +
                          out + " --log " + out + ".jsonl" + layout);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto got = losses(out + ".jsonl");
    ASSERT_EQ(got.size(), 2u) << out;
    for (int64_t step : {3, 4})
      EXPECT_LT(relative(std::stod(got.at(step)), std::stod(want.at(step))), kTpTol)
          << out << " step " << step;
  }
}

// memo plan --config --tp T traces rank 0 with shapes only (groups that move nothing); a real job's
// rank traces itself with values over MPI. The two plans are the same: the arena memo plan prints
// is the arena each rank runs in, its lower bound the rank's measured peak, and the collectives'
// bytes per micro-batch times the micro-batches, plus the norms' gradients summed over the group
// and the gradient norm's partial sums once a step, are what rank 0 measured sending in step 1.
// (Attention scratch grows with the OpenMP threads, so both run with one.)
TEST_F(TensorParallel, memo_plan_predicts_each_ranks_arena_and_bytes) {
  const ModelConfig config = load_model_config(dir / "llama.json");
  const int64_t C = config.hidden_size, norms = 2 * config.num_hidden_layers + 1;
  for (const auto& [layout, strategy] : {std::pair<const char*, const char*>{"--tp 2", "keep"},
                                         {"--tp 2", "recompute"},
                                         {"--tp 2 --cp 2", "keep"}}) {
    SCOPED_TRACE(std::string(layout) + " " + strategy);
    const int ranks = std::string(layout).find("--cp") != std::string::npos ? 4 : 2;
    const std::string out = dir / (std::string(strategy) + std::to_string(ranks));
    const std::string flags = " --seq 64 " + std::string(layout) + " --activations " + strategy +
                              " --device-memory 64MiB";
    const test::CommandResult plan = test::run_command(
        "OMP_NUM_THREADS=1 " + test::memo_bin() + " plan --config " + dir.str("llama.json") +
        " --batch 2 --json" + flags + " > " + out + ".plan.json");
    ASSERT_EQ(plan.exit_code, 0) << plan.output;
    const nlohmann::json predicted = nlohmann::json::parse(std::ifstream(out + ".plan.json"));
    // without the noise probe, whose sums of the whole tensors after each micro-batch add bytes
    const test::CommandResult run =
        train(ranks, "llama.json", out, 64, "--steps 2 --no-gns" + flags);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const nlohmann::json measured = records(out + ".jsonl").at(0);
    EXPECT_EQ(predicted["plan_peak_bytes"], measured["reserved_bytes"]);
    EXPECT_EQ(predicted["lower_bound_bytes"], measured["peak_bytes"]);
    const int64_t micro = 2;  // 4 sequences in micro-batches of 2, every rank runs both
    EXPECT_EQ(measured["tp_comm_bytes"].get<int64_t>(),
              micro * predicted["tp_bytes_per_micro_batch"].get<int64_t>() +
                  norms * all_reduce_bytes(C * 4, 2) + all_gather_bytes(8, 2));
  }
}

// A vocabulary of 250 over 4 ranks: parts of 63 rows, the last one's 61 and 2 rows of padding
// that no lookup, logit or gradient sees; the checkpoint holds the 250 rows.
TEST_F(TensorParallel, a_vocabulary_that_does_not_split_is_padded) {
  write_config("v250.json", {{"vocab_size", 250}, {"num_key_value_heads", 4}});
  const std::string one = dir / "v1", tp4 = dir / "v4";
  ASSERT_EQ(train(1, "v250.json", one, 64, "--steps 3").exit_code, 0);
  const test::CommandResult r = train(4, "v250.json", tp4, 64, "--steps 3 --tp 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_close_tp_runs(tp4, one, 4, 4);
}

// Refused before step 1, on every rank, with what would split.
TEST_F(TensorParallel, layouts_that_do_not_split_are_refused) {
  write_config("mqa.json", {{"num_key_value_heads", 1}});
  const test::CommandResult mqa = train(2, "mqa.json", dir / "mqa", 64, "--steps 1 --tp 2");
  EXPECT_NE(mqa.exit_code, 0);
  EXPECT_NE(mqa.output.find("tensor parallel 2: the model's 1 key-value heads (grouped-query "
                            "attention) do not split into 2 equal parts"),
            std::string::npos)
      << mqa.output;
  const test::CommandResult odd = train(2, "llama.json", dir / "odd", 64, "--steps 1 --tp 3");
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.output.find("--tp 3 x --cp 1 does not divide the job's 2 processes"),
            std::string::npos)
      << odd.output;
  const test::CommandResult kv = train(4, "llama.json", dir / "heads", 64, "--steps 1 --tp 4");
  EXPECT_NE(kv.exit_code, 0);
  EXPECT_NE(kv.output.find("tensor parallel 4: the model's 2 key-value heads"), std::string::npos)
      << kv.output;
  // a later length stage whose micro-batch does not split: refused before the first trains
  const test::CommandResult stage = test::run_command(
      mpirun(2) + test::memo_bin() + " train --config " + dir.str("llama.json") + " --data " +
      dir.str("data.txt") + " --seq-schedule 32:1,63:1 --stage-batch sequences --batch 4 " +
      "--micro-batch 1 --tp 2 --no-checkpoint");
  EXPECT_NE(stage.exit_code, 0);
  EXPECT_NE(stage.output.find("--tp 2: length stage 2's micro-batch of 1 x 63 = 63 tokens does "
                              "not split into 2 equal parts"),
            std::string::npos)
      << stage.output;
  EXPECT_EQ(stage.output.find("step 1/"), std::string::npos) << stage.output;
}

// GPT-2: c_attn's q | k | v blocks split block by block, the row-parallel biases and the learned
// positions added to each rank's rows once; alone and with context parallelism (positions at each
// token's true place), and memo's rebuild bit-identical to keeping everything.
// `config` for 3 steps of 256 tokens under --tp 2 and --tp 2 --cp 2 against one process, and
// memo's token-wise strategy under --tp 2 bitwise equal to keep.
void TensorParallel::layouts_match_one_process(const std::string& config,
                                               const std::string& extra) {
  const std::string one = dir / (config + ".1"), tp2 = dir / (config + ".2"),
                    tp2cp2 = dir / (config + ".22"), memo = dir / (config + ".memo");
  ASSERT_EQ(train(1, config, one, 256, "--steps 3 " + extra).exit_code, 0);
  const test::CommandResult r2 = train(2, config, tp2, 256, "--steps 3 --tp 2 " + extra);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const test::CommandResult r22 = train(4, config, tp2cp2, 256, "--steps 3 --tp 2 --cp 2 " + extra);
  ASSERT_EQ(r22.exit_code, 0) << r22.output;
  expect_close_tp_runs(tp2, one, 2, 2);
  expect_close_tp_runs(tp2cp2, one, 2, 4);
  const test::CommandResult m = train(2, config, memo, 256,
                                      "--steps 3 --tp 2 --device-memory 64MiB --host-memory 1GiB "
                                      "--activations memo --alpha 0.25 " +
                                          extra);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_EQ(losses(memo + ".jsonl"), losses(tp2 + ".jsonl"));
}

// Qwen2 (q/k/v biases, split with their heads) with YaRN-scaled RoPE.
TEST_F(TensorParallel, qwen2_with_yarn_matches_one_process) {
  test::write_text(dir / "qwen2.json", R"({"model_type": "qwen2", "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "use_sliding_window": false,
    "sliding_window": 4096, "max_window_layers": 2,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}})");
  layouts_match_one_process("qwen2.json");
}

// Qwen3: q_norm and k_norm (whole on every rank, over each rank's heads; their gradients summed
// over the group), head_dim 16 (H*D = 64 over C = 32), attention_bias (q, k, v split with their
// heads, o's added once on each rank's rows), YaRN-scaled RoPE.
TEST_F(TensorParallel, qwen3_with_biases_and_yarn_matches_one_process) {
  test::write_text(dir / "qwen3.json", R"({"model_type": "qwen3", "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "attention_bias": true,
    "use_sliding_window": false,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}})");
  layouts_match_one_process("qwen3.json");
}

// LLaMA's attention_bias and mlp_bias: gate's and up's biases split with their units, down's and
// o's added once on each rank's rows.
TEST_F(TensorParallel, llama_biases_match_one_process) {
  test::write_text(dir / "biases.json", R"({"model_type": "llama", "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6, "attention_bias": true, "mlp_bias": true})");
  layouts_match_one_process("biases.json");
}

// Mistral's sliding window (48) shorter than a context-parallel chunk (64 of 256): under --cp 2
// the ring skips the chunk pairs wholly outside it and cuts the others. Then Qwen2's window on its
// top layer only, with document masks too: a document starts at each 'I' (73) of the corpus,
// every 56 bytes, so documents cross the chunks' edges and some chunk pairs see nothing.
TEST_F(TensorParallel, sliding_windows_match_one_process) {
  test::write_text(dir / "mistral.json", R"({"model_type": "mistral", "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6, "sliding_window": 48})");
  layouts_match_one_process("mistral.json");
  test::write_text(dir / "qwen2_window.json", R"({"model_type": "qwen2", "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6, "use_sliding_window": true, "sliding_window": 48,
    "max_window_layers": 1})");
  layouts_match_one_process("qwen2_window.json", "--document-mask --eot-id 73");
}

// GPT-2's learned positions restart at each document on each rank's rows, and --eod-mask-loss
// leaves the same predictions out of every layout's loss (ids the vocabulary-parallel loss keeps
// as ignored, whichever rank's rows hold the target; Note [Counted tokens]). Without the noise
// scale: B_simple is a difference of squared norms over their difference, which here amplifies the
// layouts' fp32 rounding to 2e-5 (measured), past kTpTol; loss, gradient norm and weights are
// compared as everywhere.
TEST_F(TensorParallel, gpt2_with_document_masks_matches_one_process) {
  test::write_text(dir / "gpt2.json", R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2,
    "n_head": 4, "n_inner": 64, "vocab_size": 256, "n_positions": 512})");
  layouts_match_one_process("gpt2.json", "--document-mask --eot-id 73 --eod-mask-loss --no-gns");
}

TEST_F(TensorParallel, gpt2_matches_one_process) {
  test::write_text(dir / "gpt2.json", R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 4,
    "n_head": 4, "n_inner": 64, "vocab_size": 256, "n_positions": 512})");
  layouts_match_one_process("gpt2.json");
}

}  // namespace
}  // namespace memo
