// The memo command with GPT-2 configs end to end: configs/gpt2-tiny.json trains (the loss falls),
// a killed run resumes bit for bit, a checkpoint holds exactly the Hugging Face GPT-2 tensor names
// (tied: no lm_head.weight), weights named without "transformer." load too, and a sequence
// longer than n_positions or an unsupported activation is a one-line error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "memo/io/safetensors.h"
#include "test_util.h"

namespace memo {
namespace {

using test::corpus;
using test::losses;
using test::write_text;

const char* kTinyGpt2 = R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4,
  "n_positions": 128, "vocab_size": 256, "activation_function": "gelu_new"})";

class GptCli : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir / "config.json", kTinyGpt2);
    write_text(dir / "data.txt", corpus(20000));
  }
  std::string train_cmd(const std::string& config, const std::string& out,
                        const std::string& extra) const {
    return test::memo_bin() + " train --config " + config + " --data " + dir.str("data.txt") +
           " --seq 32 --batch 4 --micro-batch 2 --lr 3e-3 --warmup 2 --out " + out + " " + extra;
  }
  test::TempDir dir;
};

TEST_F(GptCli, shipped_gpt2_tiny_config_trains_and_the_loss_falls) {
  const std::string config = test::source_dir() + "/configs/gpt2-tiny.json";
  const test::CommandResult r = test::run_command(
      train_cmd(config, dir.str("run"), "--steps 30 --log " + dir.str("run.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("891648 parameters"), std::string::npos) << r.output;
  const auto l = losses(dir.str("run.jsonl"));
  ASSERT_EQ(l.size(), 30u);
  EXPECT_LT(std::stod(l.rbegin()->second), 0.8 * std::stod(l.begin()->second));
}

TEST_F(GptCli, killed_run_resumes_with_identical_losses) {
  const int steps = 40;
  const std::string config = dir.str("config.json");
  ASSERT_EQ(test::run_command(
                train_cmd(config, dir.str("full"),
                          "--steps " + std::to_string(steps) + " --log " + dir.str("full.jsonl")))
                .exit_code,
            0);
  // Start the same run, SIGKILL it once step 15 is logged (checkpoints every 3 steps), resume.
  const std::string run = train_cmd(
      config, dir.str("cut"),
      "--steps " + std::to_string(steps) + " --save-every 3 --log " + dir.str("cut.jsonl"));
  const std::string kill_at_15 =
      "(" + run + " > /dev/null 2>&1 & pid=$!; " + "while ! grep -q '\"step\":15,' " +
      dir.str("cut.jsonl") + " 2>/dev/null; do sleep 0.01; done; kill -9 $pid; wait $pid; true)";
  ASSERT_EQ(test::run_command(kill_at_15).exit_code, 0);
  const auto before = losses(dir.str("cut.jsonl"));
  ASSERT_LT(before.rbegin()->first, steps) << "the run ended before it was killed";
  const test::CommandResult r = test::run_command(
      test::memo_bin() + " train --data " + dir.str("data.txt") + " --steps " +
      std::to_string(steps) + " --resume " + dir.str("cut") + " --log " + dir.str("cut.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step"), std::string::npos) << r.output;
  EXPECT_EQ(losses(dir.str("cut.jsonl")), losses(dir.str("full.jsonl")));
}

TEST_F(GptCli, checkpoint_holds_exactly_the_hugging_face_gpt2_names) {
  ASSERT_EQ(
      test::run_command(train_cmd(dir.str("config.json"), dir.str("run"), "--steps 2")).exit_code,
      0);
  const std::filesystem::path ckpt = dir.path() / "run" / "step-00000002";
  SafetensorsFile model(ckpt / "model.safetensors");
  std::set<std::string> want = {"transformer.wte.weight", "transformer.wpe.weight",
                                "transformer.ln_f.weight", "transformer.ln_f.bias"};
  for (int i = 0; i < 2; ++i)
    for (const char* n :
         {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
      want.insert("transformer.h." + std::to_string(i) + "." + n);
  const std::vector<std::string> names = model.names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), want);
  EXPECT_EQ(names.size(), want.size());
  // Hugging Face layouts: Conv1D weights [in, out], wpe [n_positions, C]
  EXPECT_EQ(model.shape("transformer.wte.weight"), (std::vector<int64_t>{256, 32}));
  EXPECT_EQ(model.shape("transformer.wpe.weight"), (std::vector<int64_t>{128, 32}));
  EXPECT_EQ(model.shape("transformer.h.0.attn.c_attn.weight"), (std::vector<int64_t>{32, 96}));
  EXPECT_EQ(model.shape("transformer.h.0.attn.c_attn.bias"), (std::vector<int64_t>{96}));
  EXPECT_EQ(model.shape("transformer.h.1.mlp.c_fc.weight"), (std::vector<int64_t>{32, 128}));
  EXPECT_EQ(model.shape("transformer.h.1.mlp.c_proj.weight"), (std::vector<int64_t>{128, 32}));
  std::ifstream in(ckpt / "config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  EXPECT_EQ(config.at("model_type"), "gpt2");
  EXPECT_EQ(config.at("n_inner"), 128);
  EXPECT_TRUE(std::filesystem::exists(ckpt / "optimizer.safetensors"));
}

// A GPT2Model's save names tensors without "transformer." (the Hub's gpt2 files do): the same
// weights under those names evaluate to the same loss, bit for bit.
TEST_F(GptCli, weights_without_the_transformer_prefix_load) {
  ASSERT_EQ(
      test::run_command(train_cmd(dir.str("config.json"), dir.str("run"), "--steps 2")).exit_code,
      0);
  const std::filesystem::path ckpt = dir.path() / "run" / "step-00000002";
  SafetensorsFile model(ckpt / "model.safetensors");
  std::vector<std::vector<float>> data;
  std::vector<NamedTensor> bare;
  for (const std::string& name : model.names()) {
    const std::vector<int64_t> shape = model.shape(name);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.emplace_back(size_t(n));
    model.read_into(name, data.back().data(), shape);
    ASSERT_EQ(name.rfind("transformer.", 0), 0u) << name;
    bare.push_back({name.substr(12), shape, data.back().data()});
  }
  std::filesystem::create_directories(dir.path() / "bare");
  std::filesystem::copy_file(ckpt / "config.json", dir.path() / "bare" / "config.json");
  write_safetensors(dir.path() / "bare" / "model.safetensors", bare, {{"format", "pt"}});
  auto eval = [&](const std::string& name) {
    const test::CommandResult r =
        test::run_command(test::memo_bin() + " eval --checkpoint " + dir.str(name) + " --data " +
                          dir.str("data.txt") + " --seq 32 --batches 2 2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  const std::string want = eval("run");
  EXPECT_NE(want.find("\"loss\""), std::string::npos) << want;
  EXPECT_EQ(eval("bare"), want);
}

TEST_F(GptCli, sequence_longer_than_n_positions_is_a_one_line_error) {
  test::expect_clean_failure(test::memo_bin() + " train --config " + dir.str("config.json") +
                                 " --data " + dir.str("data.txt") + " --seq 129 --batch 2 " +
                                 "--steps 1 --out " + dir.str("run"),
                             "--seq 129 exceeds n_positions = 128");
}

TEST_F(GptCli, unsupported_activation_is_a_one_line_error) {
  write_text(dir / "relu.json", R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2,
    "n_head": 4, "vocab_size": 256, "activation_function": "relu"})");
  test::expect_clean_failure(train_cmd(dir.str("relu.json"), dir.str("run"), "--steps 1"),
                             "activation_function = \"relu\" is not supported");
}

}  // namespace
}  // namespace memo
