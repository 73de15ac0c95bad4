// SafetensorsSet: one file or Hugging Face shards with an index, in F32, BF16 and F16; every way
// the index and the shards can disagree is a one-line error naming the file and the tensor. The
// writer: huggingface_hub's split of tensors into shards, and what it writes reads back.
#include "memo/io/safetensors_set.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "hf_files.h"
#include "memo/core/error.h"
#include "memo/io/atomic_file.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::error_message;
using test::HfTensor;
using test::small_values;
using test::TempDir;

// Three shards of three dtypes; weight_map in an order unlike the shards'.
struct Shards {
  TempDir tmp;
  HfTensor a{"model.embed_tokens.weight", {4, 3}, small_values(12, 1), "BF16"};
  HfTensor b{"model.layers.0.mlp.up_proj.weight", {5, 3}, small_values(15, 2), "F16"};
  HfTensor c{"model.norm.weight", {3}, small_values(3, 3), "F32"};
  HfTensor d{"lm_head.weight", {4, 3}, small_values(12, 4), "BF16"};
  fs::path index() const { return tmp / kModelIndexFile; }
  std::string shard(int i) const {
    return "model-0000" + std::to_string(i) + "-of-00003.safetensors";
  }
  std::vector<std::pair<std::string, std::string>> weight_map() const {
    return {{c.name, shard(3)}, {a.name, shard(1)}, {d.name, shard(1)}, {b.name, shard(2)}};
  }
  void write() const {
    test::write_hf_safetensors(tmp / shard(1), {a, d});
    test::write_hf_safetensors(tmp / shard(2), {b});
    test::write_hf_safetensors(tmp / shard(3), {c});
    test::write_hf_index(index(), weight_map());
  }
};

std::vector<float> read(const SafetensorsSet& set, const std::string& name) {
  std::vector<float> v(size_t(set.numel(name)));
  set.read_into(name, v.data(), set.shape(name));
  return v;
}

TEST(SafetensorsSet, shards_of_bf16_f16_and_f32_read_exactly) {
  Shards s;
  s.write();
  const SafetensorsSet set = SafetensorsSet::from_index(s.index());
  EXPECT_EQ(set.num_files(), 3);
  EXPECT_EQ(set.path(), s.index());
  EXPECT_EQ(set.names(), (std::vector<std::string>{s.a.name, s.d.name, s.b.name, s.c.name}));
  for (const HfTensor* t : {&s.a, &s.b, &s.c, &s.d}) {
    EXPECT_EQ(set.dtype(t->name), t->dtype);
    EXPECT_EQ(set.shape(t->name), t->shape);
    EXPECT_EQ(read(set, t->name), t->values) << t->name;
  }
  EXPECT_EQ(set.file_of(s.b.name).path(), s.tmp / s.shard(2));
  EXPECT_EQ(set.metadata().at("format"), "pt");
  const std::string msg = error_message<DataError>([&] { set.shape("model.layers.9.x"); });
  EXPECT_NE(msg.find("'model.layers.9.x' is not in the 3 shards of " + s.index().string()),
            std::string::npos)
      << msg;
}

// The Hugging Face hub cache's snapshot folders hold symbolic links to content-named blobs.
TEST(SafetensorsSet, shards_behind_symbolic_links_load) {
  Shards s;
  s.write();
  const fs::path snapshot = s.tmp / "snapshot";
  fs::create_directories(snapshot);
  for (const std::string& f : {s.shard(1), s.shard(2), s.shard(3), std::string(kModelIndexFile)})
    fs::create_symlink(s.tmp / f, snapshot / f);
  const SafetensorsSet set = SafetensorsSet::from_index(snapshot / kModelIndexFile);
  EXPECT_EQ(read(set, s.b.name), s.b.values);
}

TEST(SafetensorsSet, one_file_is_a_set_of_one) {
  TempDir tmp;
  const HfTensor t{"w", {2, 2}, small_values(4, 5), "F16"};
  test::write_hf_safetensors(tmp / "model.safetensors", {t});
  const SafetensorsSet set(SafetensorsFile(tmp / "model.safetensors"));
  EXPECT_EQ(set.num_files(), 1);
  EXPECT_EQ(set.names(), std::vector<std::string>{"w"});
  EXPECT_EQ(read(set, "w"), t.values);
  const std::string msg = error_message<DataError>([&] { set.shape("v"); });
  EXPECT_NE(msg.find("tensor 'v' is not in " + (tmp / "model.safetensors").string()),
            std::string::npos)
      << msg;
}

TEST(SafetensorsSet, missing_shard_names_the_index_the_shard_and_a_tensor) {
  Shards s;
  s.write();
  fs::remove(s.tmp / s.shard(1));
  const std::string msg = error_message<DataError>([&] { SafetensorsSet::from_index(s.index()); });
  EXPECT_EQ(msg, s.index().string() + " lists shard " + s.shard(1) +
                     " (for tensor 'lm_head.weight' and 1 more), but " +
                     (s.tmp / s.shard(1)).string() + " does not exist");
  fs::create_directory(s.tmp / s.shard(1));
  const std::string dir = error_message<DataError>([&] { SafetensorsSet::from_index(s.index()); });
  EXPECT_NE(dir.find((s.tmp / s.shard(1)).string() + " is a directory"), std::string::npos) << dir;
}

// nlohmann::json would keep the second mapping silently; the index parse sees both.
TEST(SafetensorsSet, tensor_named_twice_in_the_index_is_refused) {
  Shards s;
  s.write();
  auto map = s.weight_map();
  map.push_back({s.c.name, s.shard(1)});
  test::write_hf_index(s.index(), map);
  const std::string msg =
      error_message<FormatError>([&] { SafetensorsSet::from_index(s.index()); });
  EXPECT_EQ(msg, s.index().string() +
                     ": tensor 'model.norm.weight' is named twice in weight_map; each tensor "
                     "must map to one shard");
}

TEST(SafetensorsSet, listed_tensor_missing_from_its_shard_is_refused) {
  Shards s;
  s.write();
  test::write_hf_safetensors(s.tmp / s.shard(1), {s.a});  // lm_head.weight left out
  const std::string msg =
      error_message<FormatError>([&] { SafetensorsSet::from_index(s.index()); });
  EXPECT_EQ(msg, s.index().string() + " maps tensor 'lm_head.weight' to " + s.shard(1) + ", but " +
                     (s.tmp / s.shard(1)).string() + " does not hold it");
}

TEST(SafetensorsSet, shard_tensor_the_index_does_not_list_is_refused) {
  Shards s;
  s.write();
  const HfTensor extra{"model.layers.7.mlp.up_proj.weight", {2}, small_values(2, 6), "F32"};
  test::write_hf_safetensors(s.tmp / s.shard(3), {s.c, extra});
  std::string msg = error_message<FormatError>([&] { SafetensorsSet::from_index(s.index()); });
  EXPECT_EQ(msg, (s.tmp / s.shard(3)).string() +
                     " holds tensor 'model.layers.7.mlp.up_proj.weight', which " +
                     s.index().string() + " does not map to this shard");
  // The same tensor in two shards: the one the index does not name for it is refused.
  test::write_hf_safetensors(s.tmp / s.shard(3), {s.c, s.b});
  msg = error_message<FormatError>([&] { SafetensorsSet::from_index(s.index()); });
  EXPECT_NE(msg.find(" holds tensor 'model.layers.0.mlp.up_proj.weight', which "),
            std::string::npos)
      << msg;
}

TEST(SafetensorsSet, bad_indexes_are_format_errors_naming_the_index) {
  Shards s;
  s.write();
  auto expect = [&](const std::string& text, const std::string& needle) {
    write_file_atomic(s.index(), text);
    const std::string msg =
        error_message<FormatError>([&] { SafetensorsSet::from_index(s.index()); });
    EXPECT_EQ(msg.rfind(s.index().string(), 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  };
  expect("{\"weight_map\": {\"a\": ", "malformed JSON at byte");
  expect("{\"metadata\": {}}", "has no \"weight_map\" object");
  expect("{\"weight_map\": {}}", "weight_map lists no tensors");
  expect("{\"weight_map\": {\"a\": \"../x.safetensors\"}}",
         "maps tensor 'a' to \"../x.safetensors\"; expected the file name of a shard");
  expect("{\"weight_map\": {\"a\": 3}}", "maps tensor 'a' to 3");
  expect("{\"weight_map\": {\"a\": \"x\"}, \"weight_map\": {\"b\": \"y\"}}",
         "key 'weight_map' appears twice");
  const std::string msg =
      error_message<DataError>([&] { SafetensorsSet::from_index(s.tmp / "none.index.json"); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

using Shards2 = std::vector<std::vector<size_t>>;

// The docstring's example of split_state_dict_into_shards_factory (limit 10: [6, 6, 2, 6, 2, 2]
// gives [6], [6+2], [6+2+2]), its oversize rule, and the edges.
TEST(SafetensorsSet, plan_shards_splits_as_huggingface_hub_does) {
  EXPECT_EQ(plan_shards({6, 6, 2, 6, 2, 2}, 10), (Shards2{{0}, {1, 2}, {3, 4, 5}}));
  // a tensor over the limit gets a shard of its own when met; the open shard stays open
  EXPECT_EQ(plan_shards({2, 12, 3}, 10), (Shards2{{1}, {0, 2}}));
  EXPECT_EQ(plan_shards({12, 13}, 10), (Shards2{{0}, {1}}));
  EXPECT_EQ(plan_shards({10, 10}, 10), (Shards2{{0}, {1}}));  // exactly the limit fits
  EXPECT_EQ(plan_shards({4, 6, 1}, 10), (Shards2{{0, 1}, {2}}));
  EXPECT_EQ(plan_shards({1, 2, 3}, 5'000'000'000), (Shards2{{0, 1, 2}}));
  EXPECT_EQ(plan_shards({}, 10), Shards2{});
  EXPECT_THROW(plan_shards({1}, 0), ConfigError);
}

struct WriteSet {
  TempDir tmp;
  std::vector<float> embed = small_values(12, 1), up = small_values(15, 2), norm = {0.5f, 2, 3};
  std::vector<NamedTensor> tensors() const {  // 48, 60 and 12 bytes in F32: [48], [60 + 12] in 72
    return {{"model.embed_tokens.weight", {4, 3}, embed.data()},
            {"model.layers.0.mlp.up_proj.weight", {5, 3}, up.data()},
            {"model.norm.weight", {3}, norm.data()}};
  }
};

// Past the limit: shards named as transformers names them and an index with total_size and the
// weight map (keys sorted) that SafetensorsSet reads back to the same tensors, each one's shard
// holding only what the index maps to it.
TEST(SafetensorsSet, written_shards_and_index_read_back_to_the_same_tensors) {
  WriteSet w;
  const std::vector<std::string> files =
      write_safetensors_set(w.tmp.path(), w.tensors(), {{"format", "pt"}}, DType::kF32, 72);
  const std::string s1 = "model-00001-of-00002.safetensors",
                    s2 = "model-00002-of-00002.safetensors";
  EXPECT_EQ(files, (std::vector<std::string>{s1, s2, kModelIndexFile}));
  EXPECT_FALSE(fs::exists(w.tmp / kModelFile));
  const nlohmann::json index = nlohmann::json::parse(read_file(w.tmp / kModelIndexFile));
  EXPECT_EQ(index, nlohmann::json::parse(R"({"metadata": {"total_size": 120}, "weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.mlp.up_proj.weight": "model-00002-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"}})"));
  const SafetensorsSet set = SafetensorsSet::from_index(w.tmp / kModelIndexFile);
  EXPECT_EQ(set.num_files(), 2);
  EXPECT_EQ(set.file_of("model.norm.weight").path(), w.tmp / s2);
  EXPECT_EQ(set.metadata().at("format"), "pt");
  for (const NamedTensor& t : w.tensors()) {
    const std::vector<float> v = read(set, t.name);
    EXPECT_EQ(std::vector<float>(t.data, t.data + v.size()), v) << t.name;
    EXPECT_EQ(set.shape(t.name), t.shape);
  }
  // bf16 halves the bytes: 24 + 30 + 6 fit in one shard of 72, written as model.safetensors
  TempDir one;
  EXPECT_EQ(write_safetensors_set(one.path(), w.tensors(), {}, DType::kBF16, 72),
            std::vector<std::string>{kModelFile});
  EXPECT_FALSE(fs::exists(one / kModelIndexFile));
  EXPECT_EQ(SafetensorsFile(one / kModelFile).dtype("model.norm.weight"), "BF16");
}

TEST(SafetensorsSet, writer_refuses_a_name_used_twice_across_shards) {
  WriteSet w;
  std::vector<NamedTensor> t = w.tensors();
  t.push_back(t[0]);
  const std::string msg = error_message<DataError>(
      [&] { write_safetensors_set(w.tmp.path(), t, {}, DType::kF32, 64); });
  EXPECT_NE(msg.find("tensor name 'model.embed_tokens.weight' is used twice"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace memo
