// The memo command end to end: determinism, kill-and-resume, and every bad-input path giving a
// one-line error that names the value, a non-zero exit, and no overwritten files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "io/hf_files.h"
#include "memo/backend/caching_allocator.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/data/token_data.h"
#include "memo/io/checkpoint.h"
#include "memo/io/crc32c.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::corpus;
using test::losses;
using test::write_text;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir / "config.json", test::kTinyLlamaConfig);
    write_text(dir / "data.txt", corpus(20000));
  }
  std::string train_cmd(const std::string& out, const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
           dir.str("data.txt") + " --seq 32 --batch 4 --micro-batch 2 --lr 3e-3 --warmup 2 --out " +
           out + " " + extra;
  }
  test::TempDir dir;
};

// memo bench times the trainer's step and prints one JSON object; flags that would time nothing
// are refused.
TEST_F(Cli, bench_prints_one_json_object_and_refuses_what_times_nothing) {
  const test::CommandResult r =
      test::run_command(test::memo_bin() + " bench --config " + dir.str("config.json") +
                        " --seq 32 --batch 2 --steps 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j.at("seq"), 32);
  EXPECT_EQ(j.at("batch"), 2);
  EXPECT_GT(j.at("step_seconds").get<double>(), 0.0);
  EXPECT_GT(j.at("tokens_per_s").get<double>(), 0.0);
  EXPECT_GT(j.at("activation_peak_bytes").get<double>(), 0.0);
  const std::string bench = test::memo_bin() + " bench --config " + dir.str("config.json");
  test::expect_clean_failure(bench + " --steps 0", "--steps: must be above 0, got 0");
  test::expect_clean_failure(bench + " --seq -1", "--seq: must be above 0, got -1");
  test::expect_clean_failure(bench + " --batch 0", "--batch: must be above 0, got 0");
  test::expect_clean_failure(bench + " --seq 1000",
                             "--seq 1000 exceeds max_position_embeddings = 512");
  test::expect_clean_failure(bench + " --seq 512 --batch 9007199254740993",
                             "memo runs micro-batches of at most 2^32");
}

// A step or micro-batch of more tokens than any run holds is refused before a product of them
// wraps (--batch 2^52 + 1 at --seq 4096 once crashed), and a --seq-schedule stage's too; an
// --eval-tokens of INT64_MAX means all of the validation data (it once wrapped and failed the run
// after its last step).
TEST_F(Cli, steps_of_more_tokens_than_a_run_holds_are_refused_and_eval_tokens_may_say_all) {
  test::expect_clean_failure(
      train_cmd(dir / "t", "--steps 1 --seq 4096 --batch 4503599627370497 --micro-batch 1"),
      "--batch 4503599627370497 x --seq 4096 tokens a step: memo runs steps of at most 2^40");
  test::expect_clean_failure(
      train_cmd(dir / "t", "--steps 1 --seq 64 --batch 134217730 --micro-batch 67108865"),
      "--micro-batch 67108865 x --seq 64 tokens a micro-batch: memo runs micro-batches of at "
      "most 2^32");
  test::expect_clean_failure(
      test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
          dir.str("data.txt") +
          " --seq-schedule 16:1,64:1 --stage-batch sequences --batch 34359738368 "
          "--micro-batch 4096",
      "--seq-schedule stage 2: --batch 34359738368 x --seq 64 tokens a step");
  // so is a step of more micro-batches than the noise probe keeps norms for, and a noise
  // schedule's largest step (2^30 micro-batches once ended in std::bad_alloc)
  test::expect_clean_failure(
      train_cmd(dir / "t", "--steps 1 --seq 1 --batch 33554432 --micro-batch 1"),
      "--batch 33554432 in micro-batches of 1 sequences: memo runs at most 2^24 (16777216) "
      "micro-batches a step; give a larger --micro-batch");
  const std::string noise = test::memo_bin() + " train --config " + dir.str("config.json") +
                            " --data " + dir.str("data.txt") + " --out " + dir.str("t") +
                            " --steps 3 --seq 64 --batch 8 --micro-batch 4 --warmup 0 "
                            "--batch-schedule noise --eps-max 1e-3 --b-noise 1000 ";
  test::expect_clean_failure(noise + "--max-batch 9000000000000",
                             "--max-batch 9000000000000 x --seq 64 tokens a step: memo runs steps "
                             "of at most 2^40");
  test::expect_clean_failure(
      noise + "--max-batch 134217728",
      "--max-batch 134217728 in micro-batches of 4 sequences: memo runs at most 2^24");
  test::expect_clean_failure(train_cmd(dir / "t", "--steps 4611686018427387904 --seq 32 --batch 4"),
                             "a run of more than 2^62 tokens");
  const test::CommandResult all = test::run_command(
      train_cmd(dir / "t", "--steps 2 --no-checkpoint --eval-tokens 9223372036854775807"));
  ASSERT_EQ(all.exit_code, 0) << all.output;
  EXPECT_NE(all.output.find("validation loss"), std::string::npos) << all.output;
  // a validation split shorter than a window: refused, unless nothing validates
  const std::string short_val =
      train_cmd(dir / "v",
                "--steps 1 --no-checkpoint --seq 512 --batch 1 --micro-batch 1 "
                "--val-fraction 0.01");
  test::expect_clean_failure(short_val, "or --val-batches 0 (no validation)");
  const test::CommandResult none = test::run_command(short_val + " --val-batches 0");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_EQ(none.output.find("validation loss"), std::string::npos) << none.output;
  test::expect_clean_failure(short_val + " --val-batches 0 --eval-every 1",
                             "--eval-every 1 needs validation points, and --val-batches 0 asks "
                             "for none");
  test::expect_clean_failure(short_val + " --eval-tokens 100",
                             "or no --eval-tokens and "
                             "--val-batches 0 (no validation)");
}

// --gns-decay is checked whether or not the run has the micro-batches a probe needs; a bad
// --batch is named alone, not as a multiple of the --micro-batch it defaults.
TEST_F(Cli, gns_decay_outside_its_range_is_refused_with_one_micro_batch_too) {
  test::expect_clean_failure(train_cmd(dir / "g", "--steps 1 --micro-batch 4 --gns-decay 1"),
                             "--gns-decay 1 is outside [0, 1)");
  test::expect_clean_failure(train_cmd(dir / "g", "--steps 1 --batch -1 --micro-batch 0"),
                             "--batch -1 must be positive");
  test::expect_clean_failure(train_cmd(dir / "g", "--steps 1 --val-fraction 0"),
                             "--val-fraction 0 for ");
}

// CLI11 reads an empty value as the type's default; a number flag refuses one instead of running
// with alpha 0 or lr 0.
TEST_F(Cli, an_empty_or_too_large_value_of_a_number_flag_is_refused) {
  test::expect_clean_failure(train_cmd(dir / "e", "--steps 1 --activations memo --alpha ''"),
                             "--alpha: a number is needed, got ''");
  test::expect_clean_failure(
      test::memo_bin() + " plan --config " + dir.str("config.json") + " --seq ''",
      "--seq: a number is needed, got ''");
  test::expect_clean_failure(train_cmd(dir / "e", "--steps 99999999999999999999"),
                             "--steps: must fit in 64 bits, got 99999999999999999999");
  test::expect_clean_failure(train_cmd(dir / "e", "--seed 0xFFFFFFFFFFFFFFFFFFFF"),
                             "--seed: must fit in 64 bits, got 0xFFFFFFFFFFFFFFFFFFFF");
  // a long decimal that fits (a seed from date +%s%N) is no hex number
  const test::CommandResult seeded = test::run_command(
      train_cmd(dir / "s", "--steps 1 --no-checkpoint --seed 1733552345123456789"));
  EXPECT_EQ(seeded.exit_code, 0) << seeded.output;
}

TEST_F(Cli, same_command_gives_bitwise_identical_losses) {
  ASSERT_EQ(
      test::run_command(train_cmd(dir / "a", "--steps 6 --log " + dir.str("a.jsonl"))).exit_code,
      0);
  ASSERT_EQ(
      test::run_command(train_cmd(dir / "b", "--steps 6 --log " + dir.str("b.jsonl"))).exit_code,
      0);
  const auto a = losses(dir.str("a.jsonl")), b = losses(dir.str("b.jsonl"));
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);
}

TEST_F(Cli, killed_run_resumes_with_identical_losses) {
  const int steps = 60;
  const std::string full = train_cmd(
      dir / "full", "--steps " + std::to_string(steps) + " --log " + dir.str("full.jsonl"));
  ASSERT_EQ(test::run_command(full).exit_code, 0);
  // Start the same run, SIGKILL it once step 20 is logged (checkpoints every 3 steps), resume.
  const std::string run =
      train_cmd(dir / "cut", "--steps " + std::to_string(steps) + " --save-every 3 --log " +
                                 dir.str("cut.jsonl"));
  const std::string kill_at_20 =
      "(" + run + " > /dev/null 2>&1 & pid=$!; " + "while ! grep -q '\"step\":20,' " +
      dir.str("cut.jsonl") + " 2>/dev/null; do sleep 0.01; done; kill -9 $pid; wait $pid; true)";
  ASSERT_EQ(test::run_command(kill_at_20).exit_code, 0);
  const auto before = losses(dir.str("cut.jsonl"));
  ASSERT_LT(before.rbegin()->first, steps) << "the run ended before it was killed";
  const test::CommandResult r = test::run_command(
      test::memo_bin() + " train --data " + dir.str("data.txt") + " --steps " +
      std::to_string(steps) + " --resume " + dir.str("cut") + " --log " + dir.str("cut.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step"), std::string::npos) << r.output;
  EXPECT_EQ(losses(dir.str("cut.jsonl")), losses(dir.str("full.jsonl")));
}

TEST_F(Cli, every_strategy_in_a_planned_arena_gives_the_losses_of_keep_with_a_lower_peak) {
  // four layers: offload and memo keep the top two on the device, so two would save nothing
  std::string four = test::kTinyLlamaConfig;
  four.replace(four.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 4");
  write_text(dir.str("config.json"), four);
  std::map<std::string, std::map<int64_t, std::string>> runs;
  std::map<std::string, int64_t> peaks;
  for (const std::string a : {"keep", "recompute", "offload", "memo"}) {
    const test::CommandResult r = test::run_command(train_cmd(
        dir.str("out-" + a),
        "--steps 3 --activations " + a + " --device-memory 256MiB --log " + dir.str(a + ".jsonl")));
    ASSERT_EQ(r.exit_code, 0) << a << ": " << r.output;
    runs[a] = losses(dir.str(a + ".jsonl"));
    std::ifstream in(dir.str(a + ".jsonl"));
    std::string line;
    std::getline(in, line);
    peaks[a] = nlohmann::json::parse(line).at("peak_bytes").get<int64_t>();
  }
  ASSERT_EQ(runs["keep"].size(), 3u);
  for (const std::string a : {"recompute", "offload", "memo"}) {
    EXPECT_EQ(runs[a], runs["keep"]) << a;
    EXPECT_LT(peaks[a], peaks["keep"]) << a;
  }
}

TEST_F(Cli, data_of_exactly_seq_plus_one_tokens_trains) {
  write_text(dir / "tiny.txt", corpus(33));
  const test::CommandResult r =
      test::run_command(train_cmd(dir / "out", "--steps 2 --val-data " + dir.str("tiny.txt")) +
                        " --data " + dir.str("tiny.txt"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// A vocabulary over uint16 (ids up to 69999) on llm.c's uint32 token files: the model trains.
TEST_F(Cli, vocabulary_over_65536_trains_on_uint32_tokens) {
  write_text(dir / "big_vocab.json",
             R"({"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
  "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 70000, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "max_position_embeddings": 64, "tie_word_embeddings": false})");
  std::vector<uint32_t> ids(400);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = uint32_t((i * 7919) % 70000);
  ids[5] = 69999;
  std::vector<int32_t> header(kLlmcHeaderInts, 0);
  header[0] = kLlmcMagicLlama3;
  header[1] = kLlmcVersionLlama3;
  header[2] = int32_t(ids.size());
  write_text(dir / "tokens.bin",
             std::string(reinterpret_cast<const char*>(header.data()), header.size() * 4) +
                 std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
  const test::CommandResult r = test::run_command(
      test::memo_bin() + " train --config " + dir.str("big_vocab.json") + " --data " +
      dir.str("tokens.bin") + " --seq 16 --batch 2 --micro-batch 1 --steps 1 --out " +
      dir.str("out") + " --log " + dir.str("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto l = losses(dir.str("log.jsonl"));
  ASSERT_EQ(l.size(), 1u) << r.output;
  const double loss = std::stod(l.begin()->second);
  EXPECT_NEAR(loss, std::log(70000.0), 0.5) << "a fresh model's loss is about ln V";
}

TEST_F(Cli, eval_prints_one_json_object_with_the_mean_loss) {
  ASSERT_EQ(test::run_command(train_cmd(dir / "run", "--steps 2")).exit_code, 0);
  const test::CommandResult r =
      test::run_command(test::memo_bin() + " eval --checkpoint " + dir.str("run") + " --data " +
                        dir.str("data.txt") + " --split all --seq 32 --batches 2 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("tokens").get<int64_t>(), 2 * 8 * 32);
  // The same mean computed here from the checkpoint's tensors: the first 16 windows of 32 tokens
  // of the file, targets shifted by one, forward only, summed batch by batch in order.
  const LoadedCheckpoint ckpt = load_checkpoint(find_latest_checkpoint(dir / "run"));
  Model model(ckpt.config, cpu_backend());
  for (const ParamInfo& p : model.layout().params())
    ckpt.model.read_into(p.name, model.params() + p.offset, p.shape);
  const TokenData data = TokenData::load(dir / "data.txt", 256);
  CachingAllocator alloc;
  KeepStrategy keep(skeletal_layout(ckpt.config, DType::kF32), alloc);
  double sum = 0.0;
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<int32_t> in, tgt;
    for (int64_t w = b * 8; w < (b + 1) * 8; ++w)
      for (int64_t t = 0; t < 32; ++t) {
        in.push_back(data[w * 32 + t]);
        tgt.push_back(data[w * 32 + t + 1]);
      }
    sum += model.forward_loss(in.data(), tgt.data(), 8, 32, keep, alloc);
  }
  EXPECT_EQ(j.at("loss").get<double>(), sum / double(2 * 8 * 32));

  // in bf16 (the default with --device cuda): the same windows within bf16 rounding of fp32's
  // (tests/train/mixed_precision_test.cc derives 2^-9 for a step's loss), and generation runs
  const test::CommandResult r16 = test::run_command(
      test::memo_bin() + " eval --checkpoint " + dir.str("run") + " --data " + dir.str("data.txt") +
      " --split all --seq 32 --batches 2 --precision bf16 2>/dev/null");
  ASSERT_EQ(r16.exit_code, 0) << r16.output;
  const double low = nlohmann::json::parse(r16.output).at("loss").get<double>();
  EXPECT_NE(low, j.at("loss").get<double>());
  EXPECT_LT(std::abs(low - j.at("loss").get<double>()) / j.at("loss").get<double>(),
            std::ldexp(1.0, -9));
  const test::CommandResult g16 =
      test::run_command(test::memo_bin() + " generate --checkpoint " + dir.str("run") +
                        " --prompt ab --max-new-tokens 4 --precision bf16");
  EXPECT_EQ(g16.exit_code, 0) << g16.output;
  // --document-mask: the byte tokenizer names no end-of-text, so --eot-id must
  const std::string gen = test::memo_bin() + " generate --checkpoint " + dir.str("run") +
                          " --prompt 'ab. cd' --max-new-tokens 4 --temperature 0 --document-mask";
  const test::CommandResult none = test::run_command(gen);
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("'s tokenizer has no end-of-text token; give the token that starts "
                             "each document with --eot-id N"),
            std::string::npos)
      << none.output;
  // an id past the vocabulary, 2^32 + 46 too (it once wrapped to 46)
  for (const char* id : {"256", "4294967342", "2147483648"})
    test::expect_clean_failure(gen + " --eot-id " + id,
                               str("--eot-id ", id, " lies outside the vocabulary of 256 ids"));
  const test::CommandResult dot = test::run_command(gen + " --eot-id 46");  // '.': ". cd"
  ASSERT_EQ(dot.exit_code, 0) << dot.output;
  EXPECT_NE(dot.output.find("generate: 4 prompt tokens"), std::string::npos) << dot.output;
}

// A trained model's weights rounded to bf16, saved twice: as one f32 model.safetensors and as a
// Hugging Face folder of two shards (bf16 and f32) with an index. eval, generate and --init-from
// see the same model in both.
TEST_F(Cli, sharded_hugging_face_folder_loads_like_one_file) {
  ASSERT_EQ(test::run_command(train_cmd(dir / "run", "--steps 2")).exit_code, 0);
  const fs::path ckpt = find_latest_checkpoint(dir / "run");
  const SafetensorsFile trained(ckpt / kModelFile);
  std::vector<std::vector<float>> values;
  std::vector<NamedTensor> one;
  std::vector<test::HfTensor> shard[2];
  std::vector<std::pair<std::string, std::string>> weight_map;
  const std::vector<std::string> names = trained.names();
  values.reserve(names.size());  // `one` points into it
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<float> v(size_t(trained.numel(names[i])));
    trained.read_into(names[i], v.data(), trained.shape(names[i]));
    for (float& x : v) {  // to bf16 by truncation: exact in both files
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      bits &= 0xffff0000u;
      std::memcpy(&x, &bits, 4);
    }
    values.push_back(v);
    one.push_back({names[i], trained.shape(names[i]), values.back().data()});
    const std::string file = "model-0000" + std::to_string(i % 2 + 1) + "-of-00002.safetensors";
    shard[i % 2].push_back({names[i], trained.shape(names[i]), v, i % 2 ? "F32" : "BF16"});
    weight_map.push_back({names[i], file});
  }
  for (const char* d : {"one", "hf"}) {
    fs::create_directories(dir / d);
    fs::copy_file(ckpt / kConfigFile, dir / d / kConfigFile);
  }
  write_safetensors(dir / "one" / kModelFile, one);
  test::write_hf_safetensors(dir / "hf" / "model-00001-of-00002.safetensors", shard[0]);
  test::write_hf_safetensors(dir / "hf" / "model-00002-of-00002.safetensors", shard[1]);
  test::write_hf_index(dir / "hf" / kModelIndexFile, weight_map);

  std::map<std::string, std::string> eval, gen;
  for (const char* d : {"one", "hf"}) {
    const test::CommandResult e =
        test::run_command(test::memo_bin() + " eval --checkpoint " + dir.str(d) + " --data " +
                          dir.str("data.txt") + " --split all --seq 32 --batches 2 2>/dev/null");
    ASSERT_EQ(e.exit_code, 0) << d << ": " << e.output;
    eval[d] = e.output;
    const test::CommandResult g =  // the text alone: stderr carries the timings
        test::run_command("(" + test::memo_bin() + " generate --checkpoint " + dir.str(d) +
                          " --prompt ab --max-new-tokens 4 2>/dev/null)");
    ASSERT_EQ(g.exit_code, 0) << d << ": " << g.output;
    gen[d] = g.output;
    const test::CommandResult t = test::run_command(
        test::memo_bin() + " train --config " + dir.str(std::string(d) + "/config.json") +
        " --init-from " + dir.str(d) + " --data " + dir.str("data.txt") +
        " --seq 32 --batch 4 --micro-batch 2 --lr 3e-3 --warmup 2 --steps 2 --out " +
        dir.str(std::string("init-") + d) + " --log " + dir.str(std::string(d) + ".jsonl"));
    ASSERT_EQ(t.exit_code, 0) << d << ": " << t.output;
  }
  EXPECT_EQ(eval["hf"], eval["one"]);
  EXPECT_EQ(gen["hf"], gen["one"]);
  EXPECT_EQ(losses(dir.str("hf.jsonl")), losses(dir.str("one.jsonl")));
  EXPECT_EQ(losses(dir.str("hf.jsonl")).size(), 2u);

  // A shard gone: one line naming it, and no run directory.
  fs::remove(dir / "hf" / "model-00002-of-00002.safetensors");
  test::expect_clean_failure(test::memo_bin() + " train --config " + dir.str("hf/config.json") +
                                 " --init-from " + dir.str("hf") + " --data " +
                                 dir.str("data.txt") + " --seq 32 --batch 4 --steps 1 --out " +
                                 dir.str("init-bad"),
                             "model-00002-of-00002.safetensors");
  EXPECT_FALSE(fs::exists(dir / "init-bad"));
}

// Context extension: --init-from a trained model with a new RoPE base, YaRN scaling and more
// positions trains past the old context; the run's config.json carries the changes, so eval and
// a config file with the same fields see the same model; a resumed run keeps what it was.
TEST_F(Cli, position_flags_extend_a_loaded_models_context_and_are_saved) {
  ASSERT_EQ(test::run_command(train_cmd(dir / "base", "--steps 2")).exit_code, 0);
  const std::string yarn =
      R"({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 512})";
  const std::string tail = " --data " + dir.str("data.txt") +
                           " --seq 600 --batch 2 --micro-batch 1 --lr 1e-3 --warmup 1 --steps 2";
  const std::string flags =
      " --rope-theta 40000 --rope-scaling '" + yarn + "' --max-position-embeddings 1024";
  const test::CommandResult r =
      test::run_command(test::memo_bin() + " train --init-from " + dir.str("base") + flags + tail +
                        " --out " + dir.str("ext") + " --log " + dir.str("ext.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json saved =
      nlohmann::json::parse(test::file_bytes(find_latest_checkpoint(dir / "ext") / kConfigFile));
  EXPECT_EQ(saved["rope_theta"], 40000.0);
  EXPECT_EQ(saved["max_position_embeddings"], 1024);
  EXPECT_EQ(saved["rope_scaling"]["rope_type"], "yarn");
  EXPECT_EQ(saved["rope_scaling"]["factor"], 2.0);
  EXPECT_EQ(saved["rope_scaling"]["original_max_position_embeddings"], 512);

  // the same model given as a config file, with the same weights: the same losses
  nlohmann::json cfg = nlohmann::json::parse(test::kTinyLlamaConfig);
  cfg["rope_theta"] = 40000.0;
  cfg["max_position_embeddings"] = 1024;
  cfg["rope_scaling"] = nlohmann::json::parse(yarn);
  write_text(dir.str("ext.json"), cfg.dump());
  ASSERT_EQ(test::run_command(test::memo_bin() + " train --config " + dir.str("ext.json") +
                              " --init-from " + dir.str("base") + flags + tail + " --out " +
                              dir.str("ext2") + " --log " + dir.str("ext2.jsonl"))
                .exit_code,
            0);
  EXPECT_EQ(losses(dir.str("ext.jsonl")), losses(dir.str("ext2.jsonl")));
  EXPECT_EQ(losses(dir.str("ext.jsonl")).size(), 2u);
  const test::CommandResult e =
      test::run_command(test::memo_bin() + " eval --checkpoint " + dir.str("ext") + " --data " +
                        dir.str("data.txt") + " --split all --seq 600 --batches 1 2>&1");
  EXPECT_EQ(e.exit_code, 0) << e.output;

  // refusals: one line each
  const std::string init = test::memo_bin() + " train --init-from " + dir.str("base") + tail +
                           " --out " + dir.str("bad");
  test::expect_clean_failure(init, "--seq 600 exceeds max_position_embeddings = 512");
  test::expect_clean_failure(init + " --max-position-embeddings 1024 --rope-scaling '{bad'",
                             "--rope-scaling {bad: malformed JSON at byte 2");
  test::expect_clean_failure(
      init + " --max-position-embeddings 1024 --rope-scaling '{\"rope_type\": \"yarn\"}'",
      "--rope-scaling: rope_scaling: required field factor is missing");
  test::expect_clean_failure(test::memo_bin() + " train --resume " + dir.str("ext") +
                                 " --rope-theta 1e6 --data " + dir.str("data.txt") +
                                 " --seq 600 --batch 2 --micro-batch 1 --steps 4",
                             "continues as it was trained");
  // said first, before the run's finished steps (a resume that tries to extend, without --steps)
  test::expect_clean_failure(
      test::memo_bin() + " train --resume " + dir.str("ext") + " --rope-theta 1e6",
      "continues as it was trained");
  EXPECT_FALSE(fs::exists(dir / "bad"));
}

// A Hugging Face folder's tokenizer and generation files travel with a run started from it: every
// checkpoint carries them (a resumed run's too), so transformers loads the result whole.
TEST_F(Cli, a_model_folders_tokenizer_and_generation_files_are_carried_into_each_checkpoint) {
  ASSERT_EQ(test::run_command(train_cmd(dir / "base", "--steps 1")).exit_code, 0);
  const fs::path base = find_latest_checkpoint(dir / "base");
  fs::create_directories(dir / "hf");
  for (const char* f : {kConfigFile, kModelFile}) fs::copy_file(base / f, dir / "hf" / f);
  const std::map<std::string, std::string> side = {
      {"tokenizer_config.json", R"({"add_bos_token": true, "model_max_length": 512})"},
      {"special_tokens_map.json", R"({"bos_token": "<s>"})"},
      {"generation_config.json", R"({"bos_token_id": 1, "do_sample": true, "temperature": 0.6})"}};
  for (const auto& [name, text] : side) write_text(dir.str("hf/" + name), text);
  const std::string run = test::memo_bin() + " train --data " + dir.str("data.txt") +
                          " --seq 32 --batch 4 --micro-batch 2 --warmup 1 --out " + dir.str("run");
  ASSERT_EQ(test::run_command(run + " --init-from " + dir.str("hf") + " --steps 2").exit_code, 0);
  ASSERT_EQ(test::run_command(run + " --resume " + dir.str("run") + " --steps 3").exit_code, 0);
  const fs::path last = find_latest_checkpoint(dir / "run");
  EXPECT_EQ(last.filename(), "step-00000003");
  for (const auto& [name, text] : side) EXPECT_EQ(test::file_bytes(last / name), text) << name;
  EXPECT_FALSE(fs::exists(last / kTokenizerFile));  // the folder had none
  // a folder without generation_config.json: config.json's token ids, which transformers makes
  // its generation defaults from, in one of the checkpoint's own
  fs::remove(dir / "hf" / "generation_config.json");
  nlohmann::json config = nlohmann::json::parse(test::file_bytes(dir / "hf" / kConfigFile));
  config["bos_token_id"] = 1;
  config["eos_token_id"] = nlohmann::json::array({2, 7});
  write_text(dir / "hf" / kConfigFile, config.dump());
  ASSERT_EQ(test::run_command(run + "2 --init-from " + dir.str("hf") + " --steps 1").exit_code, 0);
  const nlohmann::json generation = nlohmann::json::parse(
      test::file_bytes(find_latest_checkpoint(dir / "run2") / "generation_config.json"));
  EXPECT_EQ(generation, (nlohmann::json{{"bos_token_id", 1}, {"eos_token_id", {2, 7}}}));
}

TEST_F(Cli, the_last_log_record_carries_the_validation_loss) {
  const test::CommandResult r =
      test::run_command(train_cmd(dir / "run", "--steps 3 --log " + dir.str("run.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir.str("run.jsonl"));
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_FALSE(records[0].contains("val_loss"));
  EXPECT_FALSE(records[1].contains("val_loss"));
  const double val = records[2].at("val_loss").get<double>();
  EXPECT_GT(records[2].at("val_tokens").get<int64_t>(), 0);
  char printed[64];
  std::snprintf(printed, sizeof printed, "validation loss %.4f over %lld tokens", val,
                static_cast<long long>(records[2].at("val_tokens").get<int64_t>()));
  EXPECT_NE(r.output.find(printed), std::string::npos) << printed << "\n" << r.output;
}

// --eval-every N validates after steps N, 2N, ... and the last, on the same windows each time;
// the training losses are those of a run without it, bit for bit.
TEST_F(Cli, eval_every_validates_periodically_without_changing_the_training_bits) {
  ASSERT_EQ(test::run_command(train_cmd(dir / "plain", "--steps 7 --log " + dir.str("plain.jsonl")))
                .exit_code,
            0);
  const test::CommandResult r = test::run_command(
      train_cmd(dir / "every", "--steps 7 --eval-every 3 --log " + dir.str("every.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> plain, every;
  for (auto [path, out] : {std::pair{"plain.jsonl", &plain}, std::pair{"every.jsonl", &every}}) {
    std::ifstream in(dir.str(path));
    for (std::string line; std::getline(in, line);) out->push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(every.size(), 7u);
  for (size_t i = 0; i < every.size(); ++i) {
    EXPECT_EQ(every[i].at("loss").dump(), plain[i].at("loss").dump()) << "step " << i + 1;
    const bool due = (i + 1) % 3 == 0 || i + 1 == 7;
    EXPECT_EQ(every[i].contains("val_loss"), due) << "step " << i + 1;
  }
  EXPECT_EQ(every[6].at("val_loss").dump(), plain[6].at("val_loss").dump());
  EXPECT_EQ(every[2].at("val_tokens"), every[6].at("val_tokens"));
  size_t lines = 0;
  for (size_t p = r.output.find("validation loss"); p != std::string::npos;
       p = r.output.find("validation loss", p + 1))
    ++lines;
  EXPECT_EQ(lines, 3u) << r.output;  // steps 3, 6 and 7
  test::expect_clean_failure(train_cmd(dir / "bad", "--steps 2 --eval-every -1"), "--eval-every");
}

// --keep-last N keeps the newest N checkpoints of the run directory (two by default; 0: all).
TEST_F(Cli, keep_last_keeps_the_newest_checkpoints) {
  const auto kept = [&](const std::string& name, const std::string& flag) {
    const test::CommandResult r =
        test::run_command(train_cmd(dir / name, "--steps 5 --save-every 1 " + flag));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir / name))
      if (e.path().filename().string().rfind("step-", 0) == 0)
        out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(kept("two", ""), (std::vector<std::string>{"step-00000004", "step-00000005"}));
  EXPECT_EQ(kept("three", "--keep-last 3"),
            (std::vector<std::string>{"step-00000003", "step-00000004", "step-00000005"}));
  EXPECT_EQ(kept("one", "--keep-last 1"), (std::vector<std::string>{"step-00000005"}));
  EXPECT_EQ(kept("all", "--keep-last 0").size(), 5u);
  EXPECT_EQ(find_latest_checkpoint(dir / "one").filename(), "step-00000005");
  // the period flags' bounds, on the command line and in a checkpoint's run_options.json
  test::expect_clean_failure(train_cmd(dir / "x", "--steps 2 --log-every 0"),
                             "--log-every: must be above 0, got 0");
  test::expect_clean_failure(train_cmd(dir / "x", "--steps 2 --save-every -3"),
                             "--save-every: must be 0 or more, got -3");
  test::expect_clean_failure(train_cmd(dir / "x", "--steps 2 --val-batches -3"),
                             "--val-batches: must be 0 or more, got -3");
  const fs::path options = dir / "one" / "step-00000005" / kRunOptionsFile;
  nlohmann::json j = nlohmann::json::parse(read_file(options));
  j["keep_last"] = -1;
  write_file_atomic(options, j.dump());
  test::expect_clean_failure(
      test::memo_bin() + " train --resume " + (dir / "one").string() + " --steps 6",
      "field 'keep_last' = -1 must be 0 or more (as its flag --keep-last)");
  // weights holding a NaN (a diverged run's save) are refused by eval, generate and --init-from
  const fs::path weights = dir / "two" / "step-00000005" / "model.safetensors";
  std::string bytes = read_file(weights);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const float nan = std::nanf("");
  std::memcpy(bytes.data() + 8 + header + 4, &nan, 4);  // the second value of the first tensor
  // its checksum made to match, as a file written with the NaN would have it
  const size_t at = bytes.find("crc32c:");
  ASSERT_LT(at, 8 + header);
  char crc[16];
  std::snprintf(crc, sizeof crc, "crc32c:%08x",
                crc32c(0, std::string_view(bytes).substr(8 + header)));
  bytes.replace(at, 15, crc);
  write_file_atomic(weights, bytes);
  test::expect_clean_failure(test::memo_bin() + " eval --checkpoint " + (dir / "two").string() +
                                 " --data " + dir.str("data.txt"),
                             "holds NaN or infinite values (the run diverged before this save?)");
  // so is optimiser state that no run could have written: a NaN moment, a negative second moment
  const fs::path state = dir / "three" / "step-00000005" / kOptimizerFile;
  const std::string saved = read_file(state);
  auto resume_with = [&](const std::string& prefix, float value) {
    std::string b = saved;
    uint64_t h = 0;
    std::memcpy(&h, b.data(), 8);
    const nlohmann::json index = nlohmann::json::parse(b.substr(8, h));
    for (const auto& [name, entry] : index.items())
      if (name.rfind(prefix, 0) == 0) {
        const size_t offset = entry.at("data_offsets").at(0).get<size_t>();
        std::memcpy(b.data() + 8 + h + offset, &value, 4);
        break;
      }
    const size_t crc_at = b.find("crc32c:");
    ASSERT_LT(crc_at, 8 + h);
    char c[16];
    std::snprintf(c, sizeof c, "crc32c:%08x", crc32c(0, std::string_view(b).substr(8 + h)));
    b.replace(crc_at, 15, c);
    write_file_atomic(state, b);
    test::expect_clean_failure(
        test::memo_bin() + " train --resume " + (dir / "three").string() + " --steps 6",
        str(" state tensor ", prefix));
  };
  resume_with("exp_avg_sq.", -1.0f);
  resume_with("exp_avg.", std::nanf(""));
}

// Note [Resume]: flags a resumed run cannot honour are refused by name; a branch into another
// --out leaves the first run's log alone; the run file stays the run's, with the resume's flags
// after it as comments; a checkpoint named with a trailing slash resumes; a log that cannot be
// written stops the run.
TEST_F(Cli, a_resumed_run_refuses_what_it_cannot_honour_and_leaves_the_first_runs_files) {
  const std::string a = dir / "a", log = dir / "a.jsonl";
  ASSERT_EQ(test::run_command(train_cmd(a, "--steps 4 --save-every 2 --keep-last 0 --log " + log))
                .exit_code,
            0);
  const std::string first_log = read_file(log), first_run = read_file(fs::path(a) / kRunFile);
  const std::string resume = test::memo_bin() + " train --resume " + a;
  test::expect_clean_failure(resume + " --beta2 0.9",
                             "--beta2 0.9: " + a + " was trained with adamw {");
  test::expect_clean_failure(resume + " --optimizer lion",
                             "--optimizer lion: " + a + " was trained with adamw, which");
  test::expect_clean_failure(resume + " --val-fraction 0.2",
                             "--val-fraction: " + a + " holds its data and validation split");
  // a hyperparameter flag is read against the checkpoint's optimiser, not the default adamw
  const std::string l = dir / "lion";
  ASSERT_EQ(test::run_command(train_cmd(l, "--steps 2 --optimizer lion --beta2 0.98")).exit_code,
            0);
  const std::string resume_lion = test::memo_bin() + " train --resume " + l + " --steps 3";
  test::expect_clean_failure(resume_lion + " --momentum 0.9",
                             "--momentum does not apply to --optimizer lion; its flags:");
  const test::CommandResult lion = test::run_command(resume_lion + " --beta2 0.98");
  EXPECT_EQ(lion.exit_code, 0) << lion.output;
  test::expect_clean_failure(resume + " --init-from " + a, "give one of the two");
  const std::string step2 = a + "/step-00000002/";
  test::expect_clean_failure(
      test::memo_bin() + " train --resume " + step2 + " --out " + dir.str("b") + " --steps 3",
      "a branch must not rewrite that; give this run its own --log");
  // a copy of a checkpoint is a branch too: its run's log is still the first run's
  fs::create_directories(dir / "copy");
  fs::copy(a + "/step-00000002", dir / "copy" / "step-00000002", fs::copy_options::recursive);
  test::expect_clean_failure(
      test::memo_bin() + " train --resume " + dir.str("copy") + "/step-00000002 --steps 3",
      "a branch must not rewrite that");
  // an optimiser flag that repeats the checkpoint's (a requeued job's own command) is fine
  const test::CommandResult branch =
      test::run_command(test::memo_bin() + " train --resume " + step2 + " --out " + dir.str("b") +
                        " --steps 3 --log " + dir.str("b.jsonl") + " --optimizer adamw");
  ASSERT_EQ(branch.exit_code, 0) << branch.output;
  EXPECT_EQ(read_file(log), first_log);
  const std::string branch_run = read_file(dir / "b" / kRunFile);
  EXPECT_EQ(branch_run.substr(0, first_run.size()), first_run);
  EXPECT_NE(branch_run.find("\n# resumed from " + a + "/step-00000002 with:\n"), std::string::npos)
      << branch_run;
  EXPECT_NE(branch_run.find("\n#   steps = 3\n"), std::string::npos) << branch_run;
  // a log the disk (here: the file-size limit) will not take stops the run, naming the file
  const test::CommandResult full =
      test::run_command("ulimit -f 4; " + train_cmd(dir / "c", "--steps 40 --no-checkpoint --log " +
                                                                   dir.str("c.jsonl")));
  EXPECT_EQ(full.exit_code, 1) << full.output;
  EXPECT_NE(full.output.find("memo: error: cannot write the log " + dir.str("c.jsonl") +
                             ": File too large\n"),
            std::string::npos)
      << full.output;
}

// memo's start-up line names the rows it offloads after the pool's 64-byte rounding has trimmed
// them, as the step log counts them (a budget a byte short of alpha 1's: 602 rows said, 512 sent).
TEST_F(Cli, memo_says_the_rows_it_offloads_after_the_pools_rounding) {
  const std::string deep =
      R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
      "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512})";
  write_text(dir / "deep4.json", deep);
  const std::string run = test::memo_bin() + " train --config " + dir.str("deep4.json") +
                          " --data " + dir.str("data.txt") +
                          " --seq 301 --batch 2 --steps 1 --no-checkpoint --activations memo ";
  const test::CommandResult r =
      test::run_command(run + "--host-memory 4035967 --log " + dir.str("m.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("; offloading ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const int64_t said = std::stoll(r.output.substr(at + 13));
  const nlohmann::json step = test::records(dir.str("m.jsonl")).back();
  EXPECT_EQ(said, std::llround(step.at("alpha").get<double>() * 602.0)) << r.output;
  EXPECT_LE(step.at("host_peak_bytes").get<int64_t>(), 4035967);
  // two layers: both stay on the device, so nothing is offloaded whatever --alpha says
  const test::CommandResult two = test::run_command(train_cmd(
      dir / "two",
      "--steps 1 --no-checkpoint --activations memo --alpha 0.5 --log " + dir.str("two.jsonl")));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const nlohmann::json last = test::records(dir.str("two.jsonl")).back();
  EXPECT_EQ(last.at("alpha"), 0.0);
  EXPECT_EQ(last.at("host_peak_bytes"), 0);
}

// Note [Resume]: a resumed run keeps where and in how much memory it ran (the device,
// --device-memory, the activation strategy with its alpha and host budget) unless given; a new
// --activations takes none of the old strategy's fields.
TEST_F(Cli, a_resumed_run_keeps_its_device_budget_and_activation_strategy) {
  const std::string a = dir / "a";
  const test::CommandResult first =
      test::run_command(train_cmd(a,
                                  "--steps 2 --activations memo --alpha 0.5 --host-memory 8MiB "
                                  "--device-memory 64MiB --zero 1"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto plan_line = [](const std::string& out) {
    const size_t at = out.find("memo: device plan: needs");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  const std::string memo_line = "memo: activations: memo: alpha 0.5 (given";
  ASSERT_NE(first.output.find(memo_line), std::string::npos) << first.output;
  const test::CommandResult resumed =
      test::run_command(test::memo_bin() + " train --resume " + a + " --steps 3");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find(memo_line), std::string::npos) << resumed.output;
  EXPECT_EQ(plan_line(resumed.output), plan_line(first.output)) << resumed.output;
  EXPECT_NE(plan_line(first.output), "");
  const fs::path options = find_latest_checkpoint(a) / kRunOptionsFile;
  EXPECT_EQ(nlohmann::json::parse(read_file(options)).at("zero"), 1);
  // --activations repeating the run's keeps its fields (a requeue script's own command)
  const test::CommandResult again = test::run_command(test::memo_bin() + " train --resume " + a +
                                                      " --steps 4 --activations memo");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find(memo_line), std::string::npos) << again.output;
  const test::CommandResult keep = test::run_command(test::memo_bin() + " train --resume " + a +
                                                     " --steps 5 --activations keep");
  ASSERT_EQ(keep.exit_code, 0) << keep.output;
  EXPECT_NE(keep.output.find("memo: activations: keep"), std::string::npos) << keep.output;
  EXPECT_NE(keep.output.find(" of 64.00 MiB"), std::string::npos) << keep.output;
  // the device too: a run of --device cuda resumes on cuda (here: refused, no GPU) unless given
  nlohmann::json j = nlohmann::json::parse(read_file(find_latest_checkpoint(a) / kRunOptionsFile));
  EXPECT_EQ(j.at("device"), "cpu");
  j["device"] = "cuda";
  write_file_atomic(find_latest_checkpoint(a) / kRunOptionsFile, j.dump());
  const test::CommandResult cuda =
      test::run_command(test::memo_bin() + " train --resume " + a + " --steps 6 --no-checkpoint");
  if (cuda.exit_code != 0) {  // without a GPU, or without the CUDA backend
    EXPECT_NE(cuda.output.find("memo: error: --device cuda: "), std::string::npos) << cuda.output;
    EXPECT_NE(cuda.output.find("(--device cuda is the run's, from " + a +
                               "; give --device cpu to resume it on this CPU)"),
              std::string::npos)
        << cuda.output;
  }
  const test::CommandResult cpu =
      test::run_command(test::memo_bin() + " train --resume " + a + " --steps 6 --device cpu");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
}

// Note [One run a directory]: a new run refuses an --out that holds another run's checkpoints
// (before any output), resuming that run into it is fine, --overwrite removes the other run's
// checkpoints and writes its own, and --init-from may not name what --overwrite would remove.
TEST_F(Cli, a_new_run_refuses_a_folder_holding_another_runs_checkpoints) {
  const std::string a = dir / "a";
  ASSERT_EQ(test::run_command(train_cmd(a, "--steps 3 --save-every 1 --keep-last 0")).exit_code, 0);
  const test::CommandResult again = test::run_command(train_cmd(a, "--steps 2"));
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("memo: error: --out " + a +
                              " holds another run's checkpoints (newest step-00000003): continue "
                              "that run with --resume " +
                              a),
            std::string::npos)
      << again.output;
  EXPECT_EQ(again.output.find("step 1/"), std::string::npos) << again.output;
  EXPECT_EQ(find_latest_checkpoint(a).filename(), "step-00000003");  // untouched
  // what a killed save left (a dead process's temporary) is no run: the folder is free again
  const std::string killed = dir / "killed";
  fs::create_directories(fs::path(killed) / "step-00000002.tmp-999999999");
  ASSERT_EQ(test::run_command(train_cmd(killed, "--steps 1")).exit_code, 0);
  EXPECT_FALSE(fs::exists(fs::path(killed) / "step-00000002.tmp-999999999"));
  // into another folder holding a run, a resumed run is a new run there too
  const std::string b = dir / "b";
  ASSERT_EQ(test::run_command(train_cmd(b, "--steps 1")).exit_code, 0);
  EXPECT_EQ(test::run_command(test::memo_bin() + " train --data " + dir.str("data.txt") +
                              " --resume " + a + " --steps 4 --out " + b)
                .exit_code,
            1);
  // resuming a run into its own folder, named as the run or as one of its checkpoints
  ASSERT_EQ(test::run_command(test::memo_bin() + " train --data " + dir.str("data.txt") +
                              " --resume " + a + "/step-00000002 --steps 4")
                .exit_code,
            0);
  EXPECT_EQ(find_latest_checkpoint(a).filename(), "step-00000004");
  const test::CommandResult init =
      test::run_command(test::memo_bin() + " train --data " + dir.str("data.txt") +
                        " --init-from " + a + " --out " + a + " --overwrite --steps 1");
  EXPECT_EQ(init.exit_code, 1) << init.output;
  EXPECT_NE(init.output.find("--overwrite would remove --init-from"), std::string::npos)
      << init.output;
  auto steps_in = [](const std::string& folder) {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(folder))
      if (e.path().filename().string().rfind("step-", 0) == 0)
        found.push_back(e.path().filename().string());
    std::sort(found.begin(), found.end());
    return found;
  };
  // the resumed run kept the run's --save-every 1 --keep-last 0 (Note [Resume])
  ASSERT_EQ(steps_in(a), (std::vector<std::string>{"step-00000001", "step-00000002",
                                                   "step-00000003", "step-00000004"}));
  const test::CommandResult over = test::run_command(train_cmd(a, "--steps 2 --overwrite"));
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_NE(over.output.find("memo: --overwrite: removed 4 checkpoints of another run from " + a),
            std::string::npos)
      << over.output;
  EXPECT_EQ(steps_in(a), std::vector<std::string>{"step-00000002"});
  EXPECT_EQ(find_latest_checkpoint(a).filename(), "step-00000002");
}

// --skip-nonfinite K: a step whose loss is not finite (SGD at lr 1e30 after one step) is skipped,
// logged and printed, with no update (the skipped steps' checkpoints hold the model of the last
// step applied, byte for byte); the (K+1)-th in a row stops the run, naming the step and the lr.
TEST_F(Cli, skip_nonfinite_skips_without_updating_then_stops) {
  const std::string run =
      train_cmd(dir / "nf", "--optimizer sgd --lr 1e30 --warmup 0 --log " + dir.str("nf.jsonl") +
                                " --save-every 1 --keep-last 0 ");
  const test::CommandResult r = test::run_command(run + "--steps 3 --skip-nonfinite 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memo: step 2 skipped: loss"), std::string::npos) << r.output;
  std::ifstream in(dir.str("nf.jsonl"));
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_FALSE(records[0].contains("skipped"));
  EXPECT_EQ(records[1].at("skipped"), "nonfinite");
  EXPECT_EQ(records[2].at("skipped"), "nonfinite");
  const std::string model = kModelFile;
  EXPECT_EQ(test::file_bytes(dir / "nf" / "step-00000003" / model),
            test::file_bytes(dir / "nf" / "step-00000001" / model));
  // resumed without the flag, the run skips as before (Note [Resume]: run_options)
  const test::CommandResult resumed =
      test::run_command(test::memo_bin() + " train --resume " + dir.str("nf/step-00000001") +
                        " --out " + dir.str("nf3") + " --log " + dir.str("nf3.jsonl"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("memo: step 2 skipped: loss"), std::string::npos) << resumed.output;
  const test::CommandResult stop = test::run_command(
      train_cmd(dir / "nf2", "--optimizer sgd --lr 1e30 --warmup 0 --steps 6 --skip-nonfinite 2"));
  EXPECT_NE(stop.exit_code, 0);
  EXPECT_NE(stop.output.find("at step 4 (3 steps in a row); lower --lr (now 1e+30)"),
            std::string::npos)
      << stop.output;
}

TEST_F(Cli, unknown_flag_is_rejected) {
  test::expect_clean_failure(train_cmd(dir / "out", "--steps 1 --frobnicate 3"), "--frobnicate");
}

// A damaged file's bytes quoted in a message come out as \xNN: the line stays printable UTF-8.
TEST_F(Cli, bytes_that_are_not_utf8_in_an_error_are_shown_escaped) {
  const std::string header = "{\"a\xFF\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header + std::string(4, '\0');
  fs::create_directories(dir / "damaged");
  write_text(dir / "damaged" / "model.safetensors", file);
  write_text(dir / "damaged" / "config.json", read_file(dir.str("config.json")));
  const test::CommandResult r =
      test::run_command(test::memo_bin() + " eval --checkpoint " + dir.str("damaged") + " --data " +
                        dir.str("data.txt"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("last read: '\"a\\xFF'"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\xFF'), std::string::npos) << r.output;
}

TEST_F(Cli, missing_data_file_names_the_path) {
  test::expect_clean_failure(test::memo_bin() + " train --config " + dir.str("config.json") +
                                 " --data " + dir.str("nope.txt"),
                             "nope.txt");
}

TEST_F(Cli, empty_data_file_is_rejected) {
  write_text(dir / "empty.txt", "");
  test::expect_clean_failure(
      train_cmd(dir / "out", "--steps 1") + " --data " + dir.str("empty.txt"), "empty");
}

TEST_F(Cli, data_shorter_than_seq_plus_one_names_both) {
  write_text(dir / "short.txt", corpus(32));
  test::expect_clean_failure(
      train_cmd(dir / "out", "--steps 1 --val-data " + dir.str("short.txt")) + " --data " +
          dir.str("short.txt"),
      "33");
}

TEST_F(Cli, token_id_outside_vocabulary_names_the_position) {
  std::vector<int32_t> tokens(200, 5);
  tokens[137] = 300;
  write_llmc_tokens(dir / "tokens.bin", tokens);
  test::expect_clean_failure(
      train_cmd(dir / "out", "--steps 1") + " --data " + dir.str("tokens.bin"), "137");
}

TEST_F(Cli, hidden_size_not_divisible_by_heads_is_rejected) {
  write_text(dir / "bad.json",
             R"({"hidden_size": 30, "intermediate_size": 64, "num_hidden_layers": 1,
    "num_attention_heads": 4, "vocab_size": 256})");
  test::expect_clean_failure(test::memo_bin() + " train --config " + dir.str("bad.json") +
                                 " --data " + dir.str("data.txt"),
                             "hidden_size = 30");
}

TEST_F(Cli, truncated_and_corrupted_checkpoints_are_rejected_and_left_alone) {
  ASSERT_EQ(test::run_command(train_cmd(dir / "run", "--steps 2")).exit_code, 0);
  const std::string st = (dir.path() / "run" / "step-00000002" / "model.safetensors").string();
  std::string bytes;
  {
    std::ifstream in(st, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string eval =
      test::memo_bin() + " eval --checkpoint " + dir.str("run") + " --data " + dir.str("data.txt");
  write_text(st, bytes.substr(0, bytes.size() - 100));  // truncated
  test::expect_clean_failure(eval, "model.safetensors");
  std::string flipped = bytes;
  flipped[flipped.size() - 10] ^= 0x40;  // one bit of one weight
  write_text(st, flipped);
  test::expect_clean_failure(eval, "model.safetensors");
  // resuming from it fails before writing anything: the run directory is unchanged
  const auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path() / "run"))
      names.push_back(e.path().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto before = listing();
  test::expect_clean_failure(test::memo_bin() + " train --data " + dir.str("data.txt") +
                                 " --steps 4 --resume " + dir.str("run"),
                             "model.safetensors");
  EXPECT_EQ(listing(), before);
}

// --activations memo (a 4-layer model, so two layers leave the "device") and keep give the same
// log losses to the last digit; the log carries device and host peaks, and memo's device peak is
// below keep's.
TEST_F(Cli, memo_and_keep_activations_give_identical_log_losses) {
  write_text(dir / "deep.json",
             R"({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512})");
  auto cmd = [&](const std::string& name, const std::string& flags) {
    return test::memo_bin() + " train --config " + dir.str("deep.json") + " --data " +
           dir.str("data.txt") +
           " --seq 100 --batch 4 --micro-batch 2 --steps 3 --warmup 1 --out " + dir.str(name) +
           " --log " + dir.str(name + ".jsonl") + " " + flags;
  };
  const test::CommandResult keep = test::run_command(cmd("keep", "--activations keep"));
  ASSERT_EQ(keep.exit_code, 0) << keep.output;
  const test::CommandResult memo =
      test::run_command(cmd("memo", "--activations memo --host-memory 1GiB --copy-bandwidth 50"));
  ASSERT_EQ(memo.exit_code, 0) << memo.output;
  EXPECT_NE(memo.output.find("memo: activations: memo: alpha"), std::string::npos) << memo.output;
  const test::CommandResult fixed =
      test::run_command(cmd("fixed", "--activations memo --alpha 0.7"));
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  const auto a = losses(dir.str("keep.jsonl"));
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a, losses(dir.str("memo.jsonl")));
  EXPECT_EQ(a, losses(dir.str("fixed.jsonl")));
  auto last = [](const std::string& path) {
    std::ifstream in(path);
    std::string line, prev;
    while (std::getline(in, line)) prev = line;
    return nlohmann::json::parse(prev);
  };
  const nlohmann::json k = last(dir.str("keep.jsonl")), m = last(dir.str("fixed.jsonl"));
  // the alpha the step ran: 0.7 of the 200 token rows, rounded down to whole panels
  EXPECT_NE(fixed.output.find("memo: activations: memo: alpha 0.7 (given"), std::string::npos)
      << fixed.output;
  EXPECT_FALSE(k.contains("alpha"));
  EXPECT_GT(m.at("alpha").get<double>(), 0.0);
  EXPECT_LE(m.at("alpha").get<double>(), 0.7);
  EXPECT_TRUE(last(dir.str("memo.jsonl")).at("alpha").is_number());
  EXPECT_EQ(k.at("host_peak_bytes").get<int64_t>(), 0);
  EXPECT_GT(m.at("host_peak_bytes").get<int64_t>(), 0);
  EXPECT_LT(m.at("device_peak_bytes").get<int64_t>(), k.at("device_peak_bytes").get<int64_t>());
  // the offload's copy time and the fraction compute hid: none for keep; for a link throttled to
  // 10 MB/s (every copy far slower than a layer of this model) the compute stream waits
  EXPECT_FALSE(k.contains("copy_hidden")) << k.dump();
  for (const nlohmann::json& r :
       {m, [&] {
          EXPECT_EQ(test::run_command(cmd("slow", "--activations offload --copy-bandwidth 0.01"))
                        .exit_code,
                    0);
          return last(dir.str("slow.jsonl"));
        }()}) {
    const double copy = r.at("copy_s"), wait = r.at("copy_wait_s"), hidden = r.at("copy_hidden");
    EXPECT_GT(copy, 0.0) << r.dump();
    EXPECT_GE(wait, 0.0) << r.dump();
    EXPECT_EQ(hidden, std::clamp(1.0 - wait / copy, 0.0, 1.0)) << r.dump();
  }
  EXPECT_GT(last(dir.str("slow.jsonl")).at("copy_wait_s").get<double>(), 0.0);
}

// Note [Host memory before step 1]: offload and memo runs whose host memory does not hold a
// micro-batch's layers are refused before step 1 (no device budget given), each length stage
// too, with the budget that would do and the longest --seq that fits, which does.
TEST_F(Cli, a_run_that_overflows_host_memory_is_refused_before_step_1_with_what_fits) {
  write_text(dir / "deep.json",
             R"({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512})");
  auto cmd = [&](const std::string& flags) {
    return test::memo_bin() + " train --config " + dir.str("deep.json") + " --data " +
           dir.str("data.txt") + " --batch 4 --micro-batch 2 --steps 1 --no-checkpoint " + flags;
  };
  const test::CommandResult r =
      test::run_command(cmd("--seq 64 --activations offload --host-memory 60KiB"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << r.output;
  const std::string said = "--activations offload: each micro-batch sends 2 layers x ";
  ASSERT_NE(r.output.find(said), std::string::npos) << r.output;
  // memo plan --config says the same of the run, and what a memo run given --alpha sends
  const std::string plan = test::memo_bin() + " plan --config " + dir.str("deep.json") +
                           " --seq 64 --batch 2 --host-memory 60KiB --activations ";
  const test::CommandResult planned = test::run_command(plan + "offload");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const std::string from = r.output.substr(r.output.find(said));
  const std::string refusal = from.substr(0, from.find('\n'));
  EXPECT_NE(planned.output.find("fits: no: " + refusal), std::string::npos)
      << planned.output << "\n"
      << refusal;
  const test::CommandResult half = test::run_command(plan + "memo --alpha 0.5 --json");
  ASSERT_EQ(half.exit_code, 0) << half.output;
  const nlohmann::json j = nlohmann::json::parse(half.output);
  EXPECT_EQ(j.at("alpha"), 0.5);
  const test::CommandResult ran =
      test::run_command(cmd("--seq 64 --activations memo --alpha 0.5 --host-memory 60KiB"));
  EXPECT_EQ(j.at("host_fits").get<bool>(), ran.exit_code == 0) << j.dump() << ran.output;
  test::expect_clean_failure(plan + "keep",
                             "--host-memory applies to --activations offload or memo, not keep");
  test::expect_clean_failure(plan + "offload --efficiency 0.5",
                             "--efficiency applies to plans on hardware we do not have");
  const size_t at = r.output.find("or --seq ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const int64_t fits = std::stoll(r.output.substr(at + 9));
  ASSERT_GT(fits, 0);
  EXPECT_EQ(
      test::run_command(cmd(str("--seq ", fits, " --activations offload --host-memory 60KiB")))
          .exit_code,
      0);
  EXPECT_NE(
      test::run_command(cmd(str("--seq ", fits + 1, " --activations offload --host-memory 60KiB")))
          .output.find(said),
      std::string::npos);
  // the budget it names holds the run
  const size_t give = r.output.find("give --host-memory ");
  ASSERT_NE(give, std::string::npos);
  const std::string bytes = std::to_string(std::stoll(r.output.substr(give + 19)));
  EXPECT_EQ(
      test::run_command(cmd("--seq 64 --activations offload --host-memory " + bytes)).exit_code, 0);
  // a later length stage that would overflow stops the run before stage 1 trains
  const test::CommandResult stages = test::run_command(
      test::memo_bin() + " train --config " + dir.str("deep.json") + " --data " +
      dir.str("data.txt") + " --batch 2 --seq-schedule 32:2,256:2 --stage-batch sequences " +
      "--activations memo --host-memory 100KiB --out " + dir.str("stages"));
  EXPECT_EQ(stages.exit_code, 1) << stages.output;
  EXPECT_EQ(stages.output.find("step 1/"), std::string::npos) << stages.output;
  EXPECT_NE(stages.output.find("--seq-schedule stage 2 (seq 256): --activations memo: each "
                               "micro-batch sends 2 layers"),
            std::string::npos)
      << stages.output;
  // a first stage over budget names the budget of the run's hungriest stage too
  const test::CommandResult first = test::run_command(
      test::memo_bin() + " train --config " + dir.str("deep.json") + " --data " +
      dir.str("data.txt") + " --batch 2 --seq-schedule 32:2,256:2 --stage-batch sequences " +
      "--activations memo --host-memory 1KiB --out " + dir.str("stages1"));
  EXPECT_EQ(first.exit_code, 1) << first.output;
  const size_t every = first.output.find("; every stage fits --host-memory ");
  ASSERT_NE(every, std::string::npos) << first.output;
  EXPECT_NE(first.output.find("--seq-schedule stage 1 (seq 32)"), std::string::npos)
      << first.output;
  const std::string most = std::to_string(std::stoll(first.output.substr(every + 33)));
  const test::CommandResult runs = test::run_command(
      test::memo_bin() + " train --config " + dir.str("deep.json") + " --data " +
      dir.str("data.txt") + " --batch 2 --seq-schedule 32:1,256:1 --stage-batch sequences " +
      "--activations memo --no-checkpoint --host-memory " + most);
  EXPECT_EQ(runs.exit_code, 0) << runs.output;
}

TEST_F(Cli, bad_host_memory_size_names_the_flag_and_units) {
  test::expect_clean_failure(train_cmd(dir / "run", "--activations memo --host-memory 1.5GX"),
                             "--host-memory '1.5GX'");
}

TEST_F(Cli, alpha_with_keep_is_rejected) {
  test::expect_clean_failure(train_cmd(dir / "run", "--alpha 0.5"),
                             "--alpha applies to --activations memo only");
}

// Without a GPU (CI, this build machine) --device cuda is one clear line in train, eval and
// generate, never a crash; where a GPU can be used the runs succeed and the test says it skipped.
TEST_F(Cli, device_cuda_without_a_gpu_fails_with_one_line) {
  const std::string out = dir.str("run");
  ASSERT_EQ(test::run_command(train_cmd(out, "--steps 1 --val-batches 1")).exit_code, 0);
  const test::CommandResult bf16 =
      test::run_command(train_cmd(dir.str("bf16"), "--steps 1 --precision bf16"));
  EXPECT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_NE(bf16.output.find("bf16 weights and activations"), std::string::npos) << bf16.output;
  test::expect_clean_failure(train_cmd(dir.str("nccl"), "--steps 1 --nccl"),
                             "--nccl needs --device cuda");
  test::expect_clean_failure(train_cmd(dir.str("gpu-spec"), "--steps 1 --gpu h200"),
                             "--gpu names the GPU of --device cuda");
  const std::string ckpt = " --checkpoint " + out + " --data " + dir.str("data.txt");
  const std::vector<std::string> cmds = {
      train_cmd(dir.str("gpu"), "--steps 1 --val-batches 1 --device cuda"),
      train_cmd(dir.str("gpu"), "--steps 1 --val-batches 1 --device cuda --nccl"),
      test::memo_bin() + " eval --seq 32 --batch 2 --device cuda" + ckpt,
      test::memo_bin() + " generate --max-new-tokens 4 --device cuda --prompt In" +
          " --checkpoint " + out};
  for (const std::string& cmd : cmds) {
    const test::CommandResult r = test::run_command(cmd);
    if (r.exit_code == 0) GTEST_SKIP() << "a CUDA GPU is usable here: " << cmd << " ran";
    test::expect_clean_failure(cmd, "--device cuda: ");
  }
}

// --batches N over windows that end in a partial batch: N batches of --batch windows, the partial
// one only past them (--batches N + 1 is every window).
TEST_F(Cli, eval_batches_stops_after_that_many_batches_before_a_partial_one) {
  ASSERT_EQ(test::run_command(train_cmd(dir / "run", "--steps 1")).exit_code, 0);
  write_text(dir / "small.txt", corpus(2000));
  auto windows = [&](int64_t batch, int64_t batches) {
    const test::CommandResult r = test::run_command(
        test::memo_bin() + " eval --checkpoint " + dir.str("run") + " --data " +
        dir.str("small.txt") + " --split all --seq 32 --batch " + std::to_string(batch) +
        " --batches " + std::to_string(batches) + " --json 2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output).at("windows").get<int64_t>();
  };
  const int64_t all = windows(1, 0);
  int64_t batch = 8;
  while (all % batch == 0) ++batch;
  ASSERT_GE(all / batch, 1);
  EXPECT_EQ(windows(batch, all / batch), all / batch * batch);
  EXPECT_EQ(windows(batch, all / batch + 1), all);
}

}  // namespace
}  // namespace memo
