// load_model_tensors: a checkpoint's tensors into a model, every name and shape checked; tensors
// the model does not have are refused by name, except the buffers Hugging Face files carry. A bf16
// save in shards reads back, in memo and in the independent PyTorch reference, as the same model.
#include "memo/train/checkpoints.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "io/hf_files.h"
#include "memo/backend/caching_allocator.h"
#include "memo/core/error.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/data/token_data.h"
#include "memo/io/checkpoint.h"
#include "memo/io/safetensors.h"
#include "memo/io/safetensors_set.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "test_util.h"

namespace memo {
namespace {

using test::error_message;
using test::TempDir;

ModelConfig tiny(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = arch == Arch::kGpt2 ? 2 : 1;
  c.vocab_size = 40;
  c.max_position_embeddings = 32;
  c.tie_word_embeddings = arch == Arch::kGpt2;
  if (arch == Arch::kGpt2) c.position_embedding = PositionEmbedding::kLearned;
  return c;
}

// The model's tensors under their names (less `strip` at the front), plus `extra`.
std::vector<NamedTensor> tensors_of(Model& m, const std::vector<NamedTensor>& extra,
                                    const std::string& strip = "") {
  std::vector<NamedTensor> out;
  for (const ParamInfo& p : m.layout().params()) {
    std::string name = p.name;
    if (!strip.empty() && name.rfind(strip, 0) == 0) name = name.substr(strip.size());
    out.push_back({name, p.shape, m.params() + p.offset});
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

bool same_params(Model& a, Model& b) {
  return std::memcmp(a.params(), b.params(), size_t(a.params_numel()) * sizeof(float)) == 0;
}

TEST(Checkpoints, tensor_the_model_lacks_is_refused_by_name_before_any_is_read) {
  TempDir tmp;
  Model a(tiny(Arch::kLlama), cpu_backend()), b(tiny(Arch::kLlama), cpu_backend());
  a.init(1);
  b.init(2);
  std::vector<float> bias(32, 0.5f);
  write_safetensors(tmp / "m.safetensors",
                    tensors_of(a, {{"model.layers.1.mlp.gate_proj.bias", {32}, bias.data()}}));
  const SafetensorsSet file(SafetensorsFile(tmp / "m.safetensors"));
  Model before(tiny(Arch::kLlama), cpu_backend());
  before.init(2);
  const std::string msg = error_message<DataError>([&] { load_model_tensors(b, file); });
  EXPECT_EQ(msg, (tmp / "m.safetensors").string() +
                     " holds 1 tensor that the llama model of this config does not have: "
                     "'model.layers.1.mlp.gate_proj.bias' [32]; the checkpoint is of another "
                     "model or config");
  EXPECT_TRUE(same_params(b, before)) << "nothing read";
}

// In a sharded folder the extra tensor is named with its shard.
TEST(Checkpoints, extra_tensor_of_a_shard_is_named_with_the_shard) {
  TempDir tmp;
  Model a(tiny(Arch::kLlama), cpu_backend()), b(tiny(Arch::kLlama), cpu_backend());
  a.init(1);
  const std::vector<NamedTensor> params = tensors_of(a, {});
  write_safetensors(tmp / "model-00001-of-00002.safetensors", params);
  test::write_hf_safetensors(
      tmp / "model-00002-of-00002.safetensors",
      {{"model.layers.0.self_attn.q_norm.weight", {8}, std::vector<float>(8, 1.0f)}});
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (const NamedTensor& t : params)
    weight_map.push_back({t.name, "model-00001-of-00002.safetensors"});
  weight_map.push_back(
      {"model.layers.0.self_attn.q_norm.weight", "model-00002-of-00002.safetensors"});
  test::write_hf_index(tmp / kModelIndexFile, weight_map);
  const SafetensorsSet set = SafetensorsSet::from_index(tmp / kModelIndexFile);
  const std::string msg = error_message<DataError>([&] { load_model_tensors(b, set); });
  EXPECT_EQ(msg, (tmp / kModelIndexFile).string() +
                     "'s shards hold 1 tensor that the llama model of this config does not have: "
                     "'model.layers.0.self_attn.q_norm.weight' [8] in "
                     "model-00002-of-00002.safetensors; the checkpoint is of another model or "
                     "config");
}

// A checkpoint of a deeper model: the extra layers are named, not dropped.
TEST(Checkpoints, deeper_checkpoint_names_its_extra_layers) {
  TempDir tmp;
  ModelConfig deep = tiny(Arch::kLlama);
  deep.num_hidden_layers = 4;
  Model a(deep, cpu_backend()), b(tiny(Arch::kLlama), cpu_backend());
  a.init(1);
  write_safetensors(tmp / "m.safetensors", tensors_of(a, {}));
  const std::string msg = error_message<DataError>(
      [&] { load_model_tensors(b, SafetensorsSet(SafetensorsFile(tmp / "m.safetensors"))); });
  EXPECT_NE(msg.find(" holds 18 tensors that the llama model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'model.layers.2."), std::string::npos) << msg;
}

// LLaMA's rotary inverse frequencies and GPT-2's mask buffers come with Hugging Face files; they
// derive from the config and load as nothing.
TEST(Checkpoints, hugging_face_buffers_are_skipped) {
  TempDir tmp;
  std::vector<float> inv_freq(4, 1.0f), mask(32 * 32, 1.0f), masked(1, -1e4f);
  {
    Model a(tiny(Arch::kLlama), cpu_backend()), b(tiny(Arch::kLlama), cpu_backend());
    a.init(1);
    write_safetensors(
        tmp / "llama.safetensors",
        tensors_of(a, {{"model.layers.0.self_attn.rotary_emb.inv_freq", {4}, inv_freq.data()},
                       {"model.layers.1.self_attn.rotary_emb.inv_freq", {4}, inv_freq.data()}}));
    load_model_tensors(b, SafetensorsSet(SafetensorsFile(tmp / "llama.safetensors")));
    EXPECT_TRUE(same_params(a, b));
  }
  Model a(tiny(Arch::kGpt2), cpu_backend()), b(tiny(Arch::kGpt2), cpu_backend());
  a.init(1);
  write_safetensors(tmp / "gpt2.safetensors",  // GPT2Model's names, without "transformer."
                    tensors_of(a,
                               {{"h.0.attn.bias", {1, 1, 32, 32}, mask.data()},
                                {"h.0.attn.masked_bias", {}, masked.data()},
                                {"h.1.attn.bias", {1, 1, 32, 32}, mask.data()}},
                               "transformer."));
  load_model_tensors(b, SafetensorsSet(SafetensorsFile(tmp / "gpt2.safetensors")));
  EXPECT_TRUE(same_params(a, b));
}

// A tied model's file may still hold lm_head.weight (GPT2LMHeadModel written by PyTorch, tied
// Llama checkpoints): the head is the embedding, so the copy is skipped, whatever it holds.
TEST(Checkpoints, a_tied_models_lm_head_copy_is_skipped) {
  TempDir tmp;
  std::vector<float> head(40 * 16, 0.5f);  // not the embedding's values
  for (Arch arch : {Arch::kLlama, Arch::kGpt2}) {
    ModelConfig c = tiny(arch);
    c.tie_word_embeddings = true;
    Model a(c, cpu_backend()), b(c, cpu_backend());
    a.init(1);
    write_safetensors(tmp / "tied.safetensors",
                      tensors_of(a, {{"lm_head.weight", {40, 16}, head.data()}}));
    load_model_tensors(b, SafetensorsSet(SafetensorsFile(tmp / "tied.safetensors")));
    EXPECT_TRUE(same_params(a, b)) << int(arch);
  }
}

// q_proj stored [in, out] has q_proj's element count: only its shape tells it apart.
TEST(Checkpoints, transposed_weight_is_refused_with_both_shapes) {
  TempDir tmp;
  ModelConfig c = tiny(Arch::kLlama);
  c.num_key_value_heads = 2;  // k_proj [16, 16]: square, so use mlp's [32, 16] instead
  Model a(c, cpu_backend()), b(c, cpu_backend());
  a.init(1);
  std::vector<NamedTensor> t = tensors_of(a, {});
  for (NamedTensor& n : t)
    if (n.name == "model.layers.0.mlp.up_proj.weight") n.shape = {16, 32};
  write_safetensors(tmp / "m.safetensors", t);
  const std::string msg = error_message<DataError>(
      [&] { load_model_tensors(b, SafetensorsSet(SafetensorsFile(tmp / "m.safetensors"))); });
  EXPECT_NE(msg.find("tensor 'model.layers.0.mlp.up_proj.weight' has shape [16, 32] (512 "
                     "elements), expected [32, 16]"),
            std::string::npos)
      << msg;
}

// A model saved in bf16 shards of at most 1,000 bytes (each layer's tensors spread over several)
// loads into memo as the bf16 rounding of its weights, bit for bit, and scripts/torch_reference.py
// reads the shards through the index with its own safetensors reader (names and shapes checked
// against its own model) to the loss memo computes on those weights: within 1e-5 relative, the
// fp32 forward against float64 on identical weights, as in tests/model/torch_compare_util.h.
TEST(Checkpoints, bf16_shards_read_back_the_same_in_memo_and_the_torch_reference) {
  for (const Arch arch : {Arch::kLlama, Arch::kGpt2}) {
    TempDir tmp;
    Model a(tiny(arch), cpu_backend()), b(tiny(arch), cpu_backend());
    a.init(5);
    CheckpointData data;
    data.config = a.config();
    for (const ParamInfo& p : a.layout().params())
      data.model.push_back({p.name, p.shape, a.params() + p.offset});
    data.model_dtype = DType::kBF16;
    data.max_shard_bytes = 1000;
    save_checkpoint(tmp / "ckpt", data);
    const LoadedCheckpoint ckpt = load_checkpoint(tmp / "ckpt");
    EXPECT_GT(ckpt.model.num_files(), 4);
    load_model_tensors(b, ckpt.model);
    for (int64_t i = 0; i < a.params_numel(); ++i)
      ASSERT_EQ(b.params()[i], bf16_to_float(float_to_bf16(a.params()[i]))) << i;

    const int64_t batch = 2, seq = 16;
    std::vector<int32_t> tokens(size_t(batch * seq + 1));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7 + 3) % 40);
    write_llmc_tokens(tmp / "tokens.bin", tokens);
    std::vector<int32_t> inputs, targets;
    for (int64_t r = 0; r < batch; ++r)
      for (int64_t t = 0; t < seq; ++t) {
        inputs.push_back(tokens[size_t(r * seq + t)]);
        targets.push_back(tokens[size_t(r * seq + t + 1)]);
      }
    const std::string cmd = "/usr/bin/python3 " + test::source_dir() +
                            "/scripts/torch_reference.py --checkpoint " + tmp.str("ckpt") +
                            " --tokens " + tmp.str("tokens.bin") +
                            " --seq 16 --batch 2 --steps 0 --lr 0 --beta1 0.9 --beta2 0.95 "
                            "--eps 1e-8 --weight-decay 0 --out " +
                            tmp.str("ref.safetensors");
    const test::CommandResult r = test::run_command(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    float ref_loss = 0;
    SafetensorsFile(tmp / "ref.safetensors").read_into("loss", &ref_loss, {1});
    CachingAllocator alloc;
    KeepStrategy keep(b.skeletal(), alloc);
    const double loss = b.forward_loss(inputs.data(), targets.data(), batch, seq, keep, alloc) /
                        double(batch * seq);
    EXPECT_NEAR(loss, ref_loss, 1e-5 * std::fabs(ref_loss))
        << (arch == Arch::kGpt2 ? "gpt2" : "llama");
  }
}

}  // namespace
}  // namespace memo
