// memo train's checkpoints out: --save-dtype bf16 (the fp32 master weights beside, so a killed run
// resumes bit for bit), bf16 by default for a model loaded in bf16, --max-shard-size shards with an
// index, eval and generate reading a bf16 save's own weights, and the flags' refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "memo/core/dtype.h"
#include "memo/io/checkpoint.h"
#include "memo/io/config_json.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::losses;
using test::write_text;

class CheckpointsOut : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir / "config.json", test::kTinyLlamaConfig);
    write_text(dir / "data.txt", test::corpus(20000));
  }
  std::string train_cmd(const std::string& out, const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
           dir.str("data.txt") + " --seq 32 --batch 4 --micro-batch 2 --lr 3e-3 --warmup 2 --out " +
           out + " " + extra;
  }
  // memo eval's JSON line and memo generate's text for the checkpoint in `ckpt`.
  std::pair<std::string, std::string> eval_and_generate(const std::string& ckpt) const {
    const test::CommandResult e =
        test::run_command(test::memo_bin() + " eval --checkpoint " + ckpt + " --data " +
                          dir.str("data.txt") + " --split all --seq 32 --batches 2 2>/dev/null");
    EXPECT_EQ(e.exit_code, 0) << ckpt << ": " << e.output;
    const test::CommandResult g =  // the text alone: stderr carries the timings
        test::run_command("(" + test::memo_bin() + " generate --checkpoint " + ckpt +
                          " --prompt ab --max-new-tokens 4 2>/dev/null)");
    EXPECT_EQ(g.exit_code, 0) << ckpt << ": " << g.output;
    return {e.output, g.output};
  }
  test::TempDir dir;
};

// The model tensors of a checkpoint (one file or shards), as fp32 values.
std::map<std::string, std::vector<float>> read_all(const SafetensorsSet& set) {
  std::map<std::string, std::vector<float>> out;
  for (const std::string& name : set.names()) {
    std::vector<float> v(size_t(set.numel(name)));
    set.read_into(name, v.data(), set.shape(name));
    out[name] = std::move(v);
  }
  return out;
}

// A folder of `config` and one f32 model.safetensors holding `tensors`.
void write_f32_folder(const fs::path& d, const LoadedCheckpoint& like,
                      const std::map<std::string, std::vector<float>>& tensors) {
  fs::create_directories(d);
  save_model_config(d / kConfigFile, like.config);
  std::vector<NamedTensor> named;
  for (const auto& [name, v] : tensors) named.push_back({name, like.model.shape(name), v.data()});
  write_safetensors(d / kModelFile, named, {{"format", "pt"}});
}

// Killed at step 10 of 30 while saving every 3 steps in bf16 shards of at most 20 kB (the tiny
// model's 70 kB of bf16 tensors in 4 files), resumed: the losses of the uninterrupted run, bit
// for bit, from the master weights; the resumed run saves in bf16 again by default. Without its
// master file the checkpoint is refused, not resumed from its rounded weights.
TEST_F(CheckpointsOut, killed_run_saving_bf16_shards_resumes_with_identical_losses) {
  const int steps = 30;
  ASSERT_EQ(test::run_command(train_cmd(dir / "full", "--steps " + std::to_string(steps) +
                                                          " --log " + dir.str("full.jsonl")))
                .exit_code,
            0);
  const std::string run =
      train_cmd(dir / "cut", "--steps " + std::to_string(steps) +
                                 " --save-every 3 --save-dtype bf16 --max-shard-size 20kB --log " +
                                 dir.str("cut.jsonl"));
  const std::string kill_at_10 =
      "(" + run + " > /dev/null 2>&1 & pid=$!; " + "while ! grep -q '\"step\":10,' " +
      dir.str("cut.jsonl") + " 2>/dev/null; do sleep 0.01; done; kill -9 $pid; wait $pid; true)";
  ASSERT_EQ(test::run_command(kill_at_10).exit_code, 0);
  ASSERT_LT(losses(dir.str("cut.jsonl")).rbegin()->first, steps) << "the run ended unkilled";
  const fs::path killed_at = find_latest_checkpoint(dir / "cut");
  // a copy without its master weights, taken now: the resumed run's --keep-last may remove it (a
  // kill inside the next save's commit leaves a newer checkpoint beside latest's)
  fs::create_directories(dir / "bare");
  fs::copy(killed_at, dir / "bare" / killed_at.filename());
  fs::remove(dir / "bare" / killed_at.filename() / kMasterFile);
  const test::CommandResult r = test::run_command(
      test::memo_bin() + " train --data " + dir.str("data.txt") + " --steps " +
      std::to_string(steps) + " --resume " + dir.str("cut") + " --log " + dir.str("cut.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memo: checkpoints: model.safetensors in bf16"), std::string::npos)
      << r.output;
  EXPECT_EQ(losses(dir.str("cut.jsonl")), losses(dir.str("full.jsonl")));

  const fs::path last = find_latest_checkpoint(dir / "cut");
  EXPECT_EQ(last.filename(), "step-00000030");
  const LoadedCheckpoint c = load_checkpoint(last);
  EXPECT_EQ(c.model_dtype, DType::kBF16);
  EXPECT_EQ(c.model.num_files(), 4);
  EXPECT_TRUE(fs::exists(last / "model-00004-of-00004.safetensors"));
  EXPECT_FALSE(fs::exists(last / kModelFile));
  ASSERT_TRUE(c.master.has_value());
  for (const std::string& name : c.model.names()) {
    EXPECT_EQ(c.model.dtype(name), "BF16") << name;
    EXPECT_EQ(c.master->dtype(name), "F32") << name;
  }
  EXPECT_EQ(nlohmann::json::parse(test::file_bytes(last / kConfigFile))["torch_dtype"], "bfloat16");

  test::expect_clean_failure(test::memo_bin() + " train --data " + dir.str("data.txt") +
                                 " --steps " + std::to_string(steps) + " --resume " +
                                 dir.str("bare") + " --log " + dir.str("bare.jsonl"),
                             "and no model.fp32.safetensors (the fp32 weights): it cannot be "
                             "resumed bit for bit; use --init-from");
}

// A model loaded from a bf16 folder is saved in bf16 unless --save-dtype f32 says otherwise; one
// memo initialised is saved in f32 as before. eval and generate on a bf16 save see its bf16
// weights (those of an f32 file holding the same values), not the master weights beside them.
TEST_F(CheckpointsOut, bf16_is_the_default_for_a_bf16_model_and_eval_reads_its_bf16_weights) {
  ASSERT_EQ(test::run_command(train_cmd(dir / "base", "--steps 2")).exit_code, 0);
  const fs::path base = find_latest_checkpoint(dir / "base");
  EXPECT_FALSE(fs::exists(base / kMasterFile));
  EXPECT_EQ(load_checkpoint(base).model_dtype, DType::kF32);
  // the trained model as a Hugging Face folder in bf16
  const LoadedCheckpoint trained = load_checkpoint(base);
  const std::map<std::string, std::vector<float>> values = read_all(trained.model);
  std::vector<NamedTensor> named;
  for (const auto& [name, v] : values) named.push_back({name, trained.model.shape(name), v.data()});
  fs::create_directories(dir / "hf");
  save_model_config(dir / "hf" / kConfigFile, trained.config, DType::kBF16);
  write_safetensors(dir / "hf" / kModelFile, named, {{"format", "pt"}}, DType::kBF16);

  const std::string init = test::memo_bin() + " train --init-from " + dir.str("hf") + " --data " +
                           dir.str("data.txt") + " --seq 32 --batch 4 --steps 2 --out ";
  const test::CommandResult r = test::run_command(init + dir.str("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memo: checkpoints: model.safetensors in bf16"), std::string::npos)
      << r.output;
  const fs::path saved = find_latest_checkpoint(dir / "run");
  const LoadedCheckpoint bf16 = load_checkpoint(saved);
  EXPECT_EQ(bf16.model_dtype, DType::kBF16);
  EXPECT_EQ(bf16.model.num_files(), 1);  // the default 5GB: one file
  ASSERT_TRUE(bf16.master.has_value());
  ASSERT_EQ(test::run_command(init + dir.str("run32") + " --save-dtype f32").exit_code, 0);
  const fs::path saved32 = find_latest_checkpoint(dir / "run32");
  EXPECT_FALSE(fs::exists(saved32 / kMasterFile));
  EXPECT_EQ(load_checkpoint(saved32).model_dtype, DType::kF32);
  EXPECT_EQ(test::file_bytes(saved32 / kModelFile), test::file_bytes(saved / kMasterFile));

  write_f32_folder(dir / "rounded", bf16, read_all(bf16.model));
  write_f32_folder(dir / "master", bf16, read_all(*bf16.master));
  const auto of_save = eval_and_generate(saved.string());
  EXPECT_EQ(of_save, eval_and_generate(dir.str("rounded")));
  EXPECT_NE(of_save.first, eval_and_generate(dir.str("master")).first);
}

TEST_F(CheckpointsOut, bad_save_flags_fail_with_one_line_and_write_nothing) {
  test::expect_clean_failure(train_cmd(dir.str("bad"), "--steps 1 --save-dtype fp16"),
                             "--save-dtype: fp16 not in {bf16,f32}");
  test::expect_clean_failure(train_cmd(dir.str("bad"), "--steps 1 --max-shard-size 0"),
                             "--max-shard-size '0' is 0 bytes");
  test::expect_clean_failure(train_cmd(dir.str("bad"), "--steps 1 --max-shard-size 5XB"),
                             "--max-shard-size '5XB': size '5XB' has an unknown unit");
  test::expect_clean_failure(train_cmd(dir.str("bad"), "--steps 1 --max-shard-size -1"),
                             "--max-shard-size");
  EXPECT_FALSE(fs::exists(dir / "bad"));
}

// A config.json whose num_hidden_layers is far above its tensors' (a typo of 100000 for a
// 2-layer model) is refused in one line by eval, generate, --init-from and --resume before a
// model of that size is built (Note [A config that does not describe its tensors]).
TEST_F(CheckpointsOut, a_config_far_larger_than_its_tensors_is_refused_before_a_model_is_built) {
  ASSERT_EQ(test::run_command(train_cmd(dir.str("run"), "--steps 2")).exit_code, 0);
  const fs::path ckpt = find_latest_checkpoint(dir / "run");
  nlohmann::json config = nlohmann::json::parse(test::file_bytes(ckpt / kConfigFile));
  config["num_hidden_layers"] = 60000;
  write_text(ckpt / kConfigFile, config.dump());
  const std::string says = (ckpt / kConfigFile).string() + ": num_hidden_layers = 60000 and";
  const std::string data = " --data " + dir.str("data.txt");
  test::expect_clean_failure(test::memo_bin() + " eval --checkpoint " + ckpt.string() + data, says);
  test::expect_clean_failure(
      test::memo_bin() + " generate --checkpoint " + ckpt.string() + " --prompt ab", says);
  test::expect_clean_failure(test::memo_bin() + " train --init-from " + ckpt.string() + data +
                                 " --out " + dir.str("x") + " --steps 1",
                             says);
  test::expect_clean_failure(
      test::memo_bin() + " train --resume " + ckpt.string() + " --steps 3 --out " + dir.str("y"),
      says);
}

}  // namespace
}  // namespace memo
