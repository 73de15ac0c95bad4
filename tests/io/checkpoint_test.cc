#include "memo/io/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "hf_files.h"
#include "memo/core/dtype.h"
#include "memo/core/error.h"
#include "memo/io/atomic_file.h"
#include "memo/io/config_json.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::error_message;
using test::TempDir;

struct State {
  std::vector<float> embed = {1, 2, 3, 4, 5, 6};
  std::vector<float> norm = {0.5f, 0.25f};
  std::vector<float> m = {9, 8, 7, 6, 5, 4};
  ModelConfig config;
  CheckpointData data(int64_t step) const {
    return {config,
            {{"model.embed_tokens.weight", {3, 2}, embed.data()},
             {"model.norm.weight", {2}, norm.data()}},
            {{"adamw.m.model.embed_tokens.weight", {3, 2}, m.data()}},
            json{{"step", step}, {"seed", 1234}},
            "",  // no tokenizer.json
            {}};
  }
};

float first_embed(const fs::path& dir) {
  LoadedCheckpoint ckpt = load_checkpoint(dir);
  std::vector<float> embed(6);
  ckpt.model.read_into("model.embed_tokens.weight", embed.data(), {3, 2});
  return embed[0];
}

TEST(Checkpoint, save_then_load_round_trips_all_parts) {
  TempDir tmp;
  State s;
  s.config.num_key_value_heads = 2;
  save_checkpoint(tmp / "ckpt", s.data(100));
  LoadedCheckpoint c = load_checkpoint(tmp / "ckpt");
  EXPECT_EQ(c.config.num_key_value_heads, 2);
  EXPECT_EQ(c.model.names(),
            (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight"}));
  EXPECT_EQ(c.model.metadata().at("format"), "pt");
  std::vector<float> norm(2);
  c.model.read_into("model.norm.weight", norm.data(), {2});
  EXPECT_EQ(norm, s.norm);
  ASSERT_TRUE(c.optimizer.has_value());
  std::vector<float> m(6);
  c.optimizer->read_into("adamw.m.model.embed_tokens.weight", m.data(), {3, 2});
  EXPECT_EQ(m, s.m);
  EXPECT_EQ(c.trainer_state["step"], 100);
  // for its weights alone (eval, generate, --init-from), a damaged optimiser state is not read;
  // resuming still refuses it
  std::string bytes = read_file(tmp / "ckpt" / kOptimizerFile);
  bytes[bytes.size() - 1] ^= 0x55;
  std::ofstream(tmp / "ckpt" / kOptimizerFile, std::ios::binary) << bytes;
  const LoadedCheckpoint weights = load_checkpoint(tmp / "ckpt", CheckpointUse::kWeights);
  EXPECT_FALSE(weights.optimizer.has_value());
  weights.model.read_into("model.norm.weight", norm.data(), {2});
  EXPECT_EQ(norm, s.norm);
  EXPECT_THROW(load_checkpoint(tmp / "ckpt"), FormatError);
}

TEST(Checkpoint, model_only_directory_has_no_optimizer_or_trainer_state) {
  TempDir tmp;
  State s;
  // As a Hugging Face model directory: config.json and model.safetensors only.
  fs::create_directories(tmp / "hf");
  save_model_config(tmp / "hf" / kConfigFile, s.config);
  write_safetensors(tmp / "hf" / kModelFile, s.data(0).model);
  LoadedCheckpoint c = load_checkpoint(tmp / "hf");
  EXPECT_FALSE(c.optimizer.has_value());
  EXPECT_TRUE(c.trainer_state.is_null());
  EXPECT_EQ(find_latest_checkpoint(tmp / "hf"), tmp / "hf");

  CheckpointData d = s.data(0);
  d.optimizer.clear();
  d.trainer_state = nullptr;
  save_checkpoint(tmp / "plain", d);
  EXPECT_FALSE(fs::exists(tmp / "plain" / kOptimizerFile));
  EXPECT_FALSE(fs::exists(tmp / "plain" / kTrainerStateFile));
}

// A Hugging Face folder as downloaded: config.json, shards in BF16 and F32, and their index. It
// loads wherever a single model.safetensors does, and a run directory finds it.
TEST(Checkpoint, sharded_hugging_face_folder_loads_and_is_found) {
  TempDir tmp;
  State s;
  const fs::path hf = tmp / "run" / "step-00000007";
  fs::create_directories(hf);
  save_model_config(hf / kConfigFile, s.config);
  test::write_hf_safetensors(hf / "model-00001-of-00002.safetensors",
                             {{"model.embed_tokens.weight", {3, 2}, s.embed, "BF16"}});
  test::write_hf_safetensors(hf / "model-00002-of-00002.safetensors",
                             {{"model.norm.weight", {2}, s.norm, "F32"}});
  test::write_hf_index(hf / kModelIndexFile,
                       {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
                        {"model.norm.weight", "model-00002-of-00002.safetensors"}});
  EXPECT_TRUE(has_model_tensors(hf));
  EXPECT_EQ(find_latest_checkpoint(hf), hf);
  EXPECT_EQ(find_latest_checkpoint(tmp / "run"), hf);  // no `latest`: the highest step
  const LoadedCheckpoint c = load_checkpoint(hf);
  EXPECT_EQ(c.model.num_files(), 2);
  EXPECT_EQ(c.model.path(), hf / kModelIndexFile);
  EXPECT_EQ(c.model.dtype("model.embed_tokens.weight"), "BF16");
  std::vector<float> embed(6), norm(2);
  c.model.read_into("model.embed_tokens.weight", embed.data(), {3, 2});
  c.model.read_into("model.norm.weight", norm.data(), {2});
  EXPECT_EQ(embed, s.embed);
  EXPECT_EQ(norm, s.norm);
  EXPECT_FALSE(c.optimizer.has_value());

  fs::remove(hf / "model-00002-of-00002.safetensors");
  const std::string msg = error_message<DataError>([&] { load_checkpoint(hf); });
  EXPECT_NE(msg.find(" lists shard model-00002-of-00002.safetensors (for tensor "
                     "'model.norm.weight'), but "),
            std::string::npos)
      << msg;
}

// bf16 with shards: model.safetensors' tensors rounded to nearest even in two shards and an index,
// the fp32 master weights beside them whole, config.json's torch_dtype saying which, all read back.
TEST(Checkpoint, bf16_save_in_shards_keeps_the_fp32_master_weights_beside) {
  TempDir tmp;
  State s;
  s.embed = {1.0f + 0x1p-8f + 0x1p-20f, 2, 3.14159f, -4e-3f, 5, 6};  // not all bf16 values
  CheckpointData d = s.data(100);
  d.model_dtype = DType::kBF16;
  d.max_shard_bytes = 12;  // embed's 12 bf16 bytes fill one shard, norm's 4 the next
  save_checkpoint(tmp / "c", d);
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        kModelIndexFile, kMasterFile})
    EXPECT_TRUE(fs::exists(tmp / "c" / f)) << f;
  EXPECT_FALSE(fs::exists(tmp / "c" / kModelFile));
  EXPECT_EQ(json::parse(read_file(tmp / "c" / kConfigFile))["torch_dtype"], "bfloat16");
  EXPECT_EQ(find_latest_checkpoint(tmp / "c"), tmp / "c");
  const LoadedCheckpoint c = load_checkpoint(tmp / "c");
  EXPECT_EQ(c.model_dtype, DType::kBF16);
  EXPECT_EQ(c.model.num_files(), 2);
  ASSERT_TRUE(c.master.has_value());
  EXPECT_EQ(c.master->dtype("model.embed_tokens.weight"), "F32");
  std::vector<float> embed(6), master(6);
  c.model.read_into("model.embed_tokens.weight", embed.data(), {3, 2});
  c.master->read_into("model.embed_tokens.weight", master.data(), {3, 2});
  EXPECT_EQ(master, s.embed);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(embed[i], bf16_to_float(float_to_bf16(s.embed[i]))) << i;
  EXPECT_EQ(embed[0], 1.0f + 0x1p-7f);
  EXPECT_EQ(c.optimizer->dtype("adamw.m.model.embed_tokens.weight"), "F32");

  // f32, the default: one model.safetensors, no master, torch_dtype float32
  save_checkpoint(tmp / "f32", s.data(100));
  EXPECT_FALSE(fs::exists(tmp / "f32" / kMasterFile));
  EXPECT_EQ(json::parse(read_file(tmp / "f32" / kConfigFile))["torch_dtype"], "float32");
  const LoadedCheckpoint f = load_checkpoint(tmp / "f32");
  EXPECT_EQ(f.model_dtype, DType::kF32);
  EXPECT_FALSE(f.master.has_value());
}

// A folder's dtype is its config's torch_dtype (or transformers 5's "dtype"), else its tensors'
// one dtype; a torch_dtype memo does not know is refused by name.
TEST(Checkpoint, model_dtype_is_torch_dtype_else_the_tensors_dtype) {
  TempDir tmp;
  State s;
  fs::create_directories(tmp / "hf");
  json config = model_config_to_json(s.config);
  config.erase("torch_dtype");
  write_file_atomic(tmp / "hf" / kConfigFile, config.dump());
  test::write_hf_safetensors(tmp / "hf" / kModelFile,
                             {{"model.embed_tokens.weight", {3, 2}, s.embed, "BF16"},
                              {"model.norm.weight", {2}, s.norm, "BF16"}});
  EXPECT_EQ(load_checkpoint(tmp / "hf").model_dtype, DType::kBF16);
  config["dtype"] = "float16";
  write_file_atomic(tmp / "hf" / kConfigFile, config.dump());
  EXPECT_EQ(load_checkpoint(tmp / "hf").model_dtype, DType::kF16);
  config["torch_dtype"] = "float32";  // the older name wins
  write_file_atomic(tmp / "hf" / kConfigFile, config.dump());
  EXPECT_EQ(load_checkpoint(tmp / "hf").model_dtype, DType::kF32);
  config["torch_dtype"] = "int8";
  write_file_atomic(tmp / "hf" / kConfigFile, config.dump());
  const std::string msg = error_message<ConfigError>([&] { load_checkpoint(tmp / "hf"); });
  EXPECT_NE(msg.find(kConfigFile + std::string(": torch_dtype = \"int8\" is not one memo reads")),
            std::string::npos)
      << msg;
}

TEST(Checkpoint, load_errors_name_the_directory_and_file) {
  TempDir tmp;
  std::string msg = error_message<DataError>([&] { load_checkpoint(tmp / "none"); });
  EXPECT_NE(msg.find((tmp / "none").string() + " is not a directory"), std::string::npos) << msg;
  fs::create_directories(tmp / "empty");
  msg = error_message<DataError>([&] { load_checkpoint(tmp / "empty"); });
  EXPECT_NE(msg.find("has no model.safetensors and no model.safetensors.index.json"),
            std::string::npos)
      << msg;
  State e;  // an index is read now, and checked
  save_model_config(tmp / "empty" / kConfigFile, e.config);
  write_file_atomic(tmp / "empty" / kModelIndexFile, "{}");
  msg = error_message<FormatError>([&] { load_checkpoint(tmp / "empty"); });
  EXPECT_NE(msg.find((tmp / "empty" / kModelIndexFile).string() + " has no \"weight_map\""),
            std::string::npos)
      << msg;

  State s;
  save_checkpoint(tmp / "c", s.data(1));
  write_file_atomic(tmp / "c" / kTrainerStateFile, "{\"step\": ");
  msg = error_message<FormatError>([&] { load_checkpoint(tmp / "c"); });
  EXPECT_NE(msg.find(kTrainerStateFile), std::string::npos) << msg;
  fs::remove(tmp / "c" / kConfigFile);
  msg = error_message<DataError>([&] { load_checkpoint(tmp / "c"); });
  EXPECT_NE(msg.find(kConfigFile), std::string::npos) << msg;
}

TEST(Checkpoint, run_directory_latest_names_newest_save) {
  TempDir tmp;
  State s;
  fs::path run = tmp / "run";
  EXPECT_EQ(save_run_checkpoint(run, 100, s.data(100)), run / "step-00000100");
  s.embed[0] = 2;
  save_run_checkpoint(run, 200, s.data(200));
  EXPECT_EQ(read_file(run / kLatestFile), "step-00000200\n");
  EXPECT_EQ(find_latest_checkpoint(run), run / "step-00000200");
  EXPECT_EQ(first_embed(find_latest_checkpoint(run)), 2.0f);
  EXPECT_EQ(checkpoint_dir_name(12345678), "step-12345678");
  std::string msg = error_message<ConfigError>([&] { checkpoint_dir_name(-1); });
  EXPECT_NE(msg.find("-1"), std::string::npos) << msg;
}

TEST(Checkpoint, partially_written_temp_directory_is_never_picked) {
  TempDir tmp;
  State s;
  fs::path run = tmp / "run";
  save_run_checkpoint(run, 100, s.data(100));
  // A save killed before its commit leaves only its temporary sibling, perhaps with whole files.
  fs::path partial = run / "step-00000200.tmp-99999";
  fs::create_directories(partial);
  write_safetensors(partial / kModelFile, s.data(200).model);
  EXPECT_EQ(find_latest_checkpoint(run), run / "step-00000100");
  // shards and their index in a temporary sibling are skipped the same way
  fs::create_directories(run / "step-00000300.tmp-99999");
  write_safetensors_set(run / "step-00000300.tmp-99999", s.data(300).model, {}, DType::kBF16, 4);
  ASSERT_TRUE(fs::exists(run / "step-00000300.tmp-99999" / kModelIndexFile));
  fs::remove(run / kLatestFile);  // even without `latest`, the scan skips temporaries
  EXPECT_EQ(find_latest_checkpoint(run), run / "step-00000100");
}

// What a writer killed mid-save left (its pid no longer runs) is removed by the next save into
// the run directory; a live process's temporaries and other names stay.
TEST(Checkpoint, the_next_save_removes_a_killed_writers_temporaries) {
  TempDir tmp;
  State s;
  fs::path run = tmp / "run";
  save_run_checkpoint(run, 100, s.data(100));
  const std::string dead = "999999999";  // above any pid_max (at most 2^22)
  const std::string alive = std::to_string(::getppid());
  for (const std::string& name :
       {"step-00000200.tmp-" + dead, "step-00000100.old-" + dead, "step-00000200.tmp-" + alive,
        "notes.tmp-" + dead, "step-00000200.tmp-" + dead + "x"})
    fs::create_directories(run / name / "sub");
  for (const std::string& name : {"latest.tmp-" + dead, "best.tmp-" + dead})
    write_file_atomic(run / name, "step-00000200\n");
  save_run_checkpoint(run, 300, s.data(300));
  std::set<std::string> left;
  for (const fs::directory_entry& e : fs::directory_iterator(run))
    left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"latest", "step-00000100", "step-00000300",
                                         "step-00000200.tmp-" + alive, "notes.tmp-" + dead,
                                         "step-00000200.tmp-" + dead + "x"}));
}

TEST(Checkpoint, interrupted_save_leaves_previous_checkpoint_loadable) {
  TempDir tmp;
  State s;
  fs::path run = tmp / "run";
  save_run_checkpoint(run, 100, s.data(100));
  // The model file is written, then the optimizer tensor list is invalid: the save fails midway,
  // both as a new step and when overwriting the existing one.
  s.embed[0] = 99;
  CheckpointData bad = s.data(200);
  bad.optimizer.push_back({"neg", {-1}, nullptr});
  EXPECT_THROW(save_run_checkpoint(run, 200, bad), DataError);
  EXPECT_THROW(save_checkpoint(run / "step-00000100", bad), DataError);
  bad.model_dtype = DType::kBF16;  // shards, their index and the master written, then the failure
  bad.max_shard_bytes = 4;
  EXPECT_THROW(save_run_checkpoint(run, 200, bad), DataError);
  EXPECT_EQ(find_latest_checkpoint(run), run / "step-00000100");
  EXPECT_EQ(first_embed(run / "step-00000100"), 1.0f);
  EXPECT_EQ(load_checkpoint(run / "step-00000100").trainer_state["step"], 100);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(run)) ++entries;
  EXPECT_EQ(entries, 2);  // step-00000100 and latest: no temporaries left
}

TEST(Checkpoint, find_latest_errors_name_the_run_directory) {
  TempDir tmp;
  std::string msg = error_message<DataError>([&] { find_latest_checkpoint(tmp.path()); });
  EXPECT_NE(msg.find("no checkpoint in " + tmp.path().string()), std::string::npos) << msg;
  write_file_atomic(tmp / kLatestFile, "step-00000300\n");
  msg = error_message<DataError>([&] { find_latest_checkpoint(tmp.path()); });
  EXPECT_NE(msg.find("names step-00000300"), std::string::npos) << msg;
  write_file_atomic(tmp / kLatestFile, "../elsewhere\n");
  msg = error_message<FormatError>([&] { find_latest_checkpoint(tmp.path()); });
  EXPECT_NE(msg.find("'../elsewhere'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace memo
