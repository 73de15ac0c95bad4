// memo tokenize's shards: contents, manifest, resume after an interruption, validation split,
// reading them back through memory maps as one stream, and the errors of broken shard folders.
#include "memo/data/shards.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "data/small_tokenizer.h"
#include "memo/core/error.h"
#include "memo/data/token_data.h"
#include "memo/data/tokenizer.h"
#include "memo/io/atomic_file.h"
#include "memo/io/crc32c.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::error_message;

class Shards : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file_atomic(dir / "tok.json", test::small_tokenizer_json().dump());
    fs::create_directories(dir / "in" / "sub");
    std::mt19937 rng(4);
    // Plain text files (one document each) and a JSON lines file (one per line).
    for (int i = 0; i < 3; ++i) {
      add_random_doc(rng, 3000 + 1000 * i);
      write_file_atomic(dir / "in" / ("a" + std::to_string(i) + ".txt"), docs_.back());
    }
    std::string jsonl;
    for (int i = 0; i < 20; ++i) {
      add_random_doc(rng, 200 + rng() % 800);
      jsonl += nlohmann::json{{"text", docs_.back()}, {"id", i}}.dump() + "\n";
    }
    write_file_atomic(dir / "in" / "sub" / "b.jsonl", jsonl);
  }
  // Appends a document of at least n bytes to docs_, built in place (GCC 12 raises a false
  // -Warray-bounds on pushing a returned string here when this file is compiled in a batch).
  void add_random_doc(std::mt19937& rng, size_t n) {
    const char* words[] = {" the", " and", " of", " hello", "\n", "  ", "in", "ing", "!!", " x"};
    std::string& s = docs_.emplace_back();
    while (s.size() < n) s += words[rng() % 10];
  }
  TokenizeOptions options(const std::string& out) const {
    TokenizeOptions o;
    o.tokenizer = dir.str("tok.json");
    o.out_dir = dir.str(out);
    o.inputs = {dir.str("in")};
    o.shard_tokens = 1500;
    o.batch_bytes = 4000;  // several batches
    return o;
  }
  // EOT + ids of every document, in input order (a*.txt, then sub/b.jsonl line by line).
  std::vector<int32_t> expected_stream() const {
    const Tokenizer t = test::small_tokenizer();
    std::vector<int32_t> all;
    for (const std::string& d : docs_) {
      all.push_back(*t.end_of_text());
      t.encode(d, all);
    }
    return all;
  }
  static std::vector<int32_t> read_all(const TokenData& d) {
    std::vector<int32_t> v(size_t(d.num_tokens()));
    d.copy(0, d.num_tokens(), v.data());
    return v;
  }
  test::TempDir dir;
  std::vector<std::string> docs_;
  std::ostringstream progress_;
};

TEST_F(Shards, hold_every_document_after_end_of_text_in_input_order) {
  const TokenizeResult r = tokenize_corpus(options("out"), progress_);
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.documents, 23);
  const std::vector<int32_t> want = expected_stream();
  EXPECT_EQ(r.train_tokens, int64_t(want.size()));
  EXPECT_EQ(r.val_tokens, 0);
  EXPECT_EQ(r.shards, (int64_t(want.size()) + 1499) / 1500);
  const TokenData d = TokenData::load(dir / "out", 1000);
  EXPECT_EQ(d.num_files(), r.shards);
  EXPECT_EQ(read_all(d), want);
  const std::optional<ShardManifest> m = read_shard_manifest(dir / "out");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->complete);
  EXPECT_EQ(m->vocab_size, test::small_tokenizer().vocab_size());
  for (const ShardInfo& s : m->shards)
    EXPECT_EQ(s.crc32c, crc32c(0, read_file(dir / "out" / s.file))) << s.file;
  EXPECT_NE(progress_.str().find("MB/s, ETA"), std::string::npos) << progress_.str();
  EXPECT_EQ(Tokenizer::load(dir / "out" / kShardTokenizerFile).vocab_size(), m->vocab_size);
  // A second run finds it complete and writes nothing.
  EXPECT_TRUE(tokenize_corpus(options("out"), progress_).already_complete);
}

TEST_F(Shards, interrupted_runs_resume_to_the_same_files) {
  tokenize_corpus(options("whole"), progress_);
  for (int64_t stop : {1, 2, 3}) {
    const std::string out = "part" + std::to_string(stop);
    TokenizeOptions o = options(out);
    o.val_fraction = 0.3;
    TokenizeOptions whole = options("whole-val");
    whole.val_fraction = 0.3;
    if (stop == 1) tokenize_corpus(whole, progress_);
    o.stop_after_shards = stop;
    EXPECT_FALSE(tokenize_corpus(o, progress_).complete);
    EXPECT_THROW(TokenData::load(dir / out, 1000), DataError);  // unfinished: refused
    o.stop_after_shards = 1;
    const TokenizeResult again = tokenize_corpus(o, progress_);  // stops once more
    EXPECT_TRUE(again.resumed);
    o.stop_after_shards = 0;
    EXPECT_TRUE(tokenize_corpus(o, progress_).complete);
    const ShardManifest a = *read_shard_manifest(dir / "whole-val");
    const ShardManifest b = *read_shard_manifest(dir / out);
    ASSERT_EQ(a.shards.size(), b.shards.size());
    for (size_t i = 0; i < a.shards.size(); ++i) {
      EXPECT_EQ(a.shards[i].file, b.shards[i].file);
      EXPECT_EQ(read_file(dir / "whole-val" / a.shards[i].file),
                read_file(dir / out / b.shards[i].file))
          << "stop " << stop << " shard " << a.shards[i].file;
    }
  }
}

TEST_F(Shards, validation_takes_the_documents_of_the_last_input_bytes) {
  TokenizeOptions o = options("out");
  o.val_fraction = 0.2;
  const TokenizeResult r = tokenize_corpus(o, progress_);
  ASSERT_GT(r.val_tokens, 0);
  const TokenData train = TokenData::load(dir / "out", 1000);
  const std::optional<TokenData> val = load_validation_shards(dir / "out", 1000);
  ASSERT_TRUE(val);
  std::vector<int32_t> joined = read_all(train), v = read_all(*val);
  joined.insert(joined.end(), v.begin(), v.end());
  EXPECT_EQ(joined, expected_stream());  // val documents are the last ones, in order
  EXPECT_FALSE(load_validation_shards(dir / "in", 1000));
}

TEST_F(Shards, windows_across_shard_boundaries_equal_the_concatenation) {
  tokenize_corpus(options("out"), progress_);
  const TokenData shards = TokenData::load(dir / "out", 1000);
  const TokenData glob = TokenData::load(dir.str("out") + "/train-*.bin", 1000);
  const TokenData memory(expected_stream(), "memory", 1000);
  ASSERT_EQ(shards.num_tokens(), memory.num_tokens());
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    const int64_t n = 1 + rng() % 4000, start = rng() % (memory.num_tokens() - n);
    std::vector<int32_t> a(static_cast<size_t>(n)), b(a.size()), c(a.size());
    shards.copy(start, n, a.data());
    glob.copy(start, n, b.data());
    memory.copy(start, n, c.data());
    ASSERT_EQ(a, c);
    ASSERT_EQ(b, c);
  }
  auto [train, val] = split_tail(TokenData::load(dir / "out", 1000), 0.25);
  EXPECT_EQ(train.num_tokens() + val.num_tokens(), memory.num_tokens());
  EXPECT_EQ(val[0], memory[train.num_tokens()]);
}

TEST_F(Shards, missing_truncated_or_out_of_vocabulary_shards_name_the_file) {
  tokenize_corpus(options("out"), progress_);
  const int64_t vocab = test::small_tokenizer().vocab_size();
  std::string msg = error_message<ConfigError>([&] { TokenData::load(dir / "out", 300); });
  EXPECT_NE(msg.find("has " + std::to_string(vocab) + " ids but the model's vocab_size is 300"),
            std::string::npos)
      << msg;
  msg = error_message<ConfigError>([&] { TokenData::load(dir.str("out") + "/train-*.bin", 300); });
  EXPECT_NE(msg.find("but the model's vocab_size is 300"), std::string::npos) << msg;
  const fs::path shard = dir / "out" / "train-000001.bin";
  const std::string bytes = read_file(shard);
  write_file_atomic(shard, bytes.substr(0, bytes.size() - 10));
  msg = error_message<FormatError>([&] { TokenData::load(dir / "out", 1000); });
  EXPECT_NE(msg.find(shard.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("(truncated)"), std::string::npos) << msg;
  std::string bad = bytes;
  bad[1024 + 6] = char(0xFF);  // token 3 becomes >= 65280
  bad[1024 + 7] = char(0xFF);
  write_file_atomic(shard, bad);
  msg = error_message<DataError>([&] { TokenData::load(dir / "out", 1000); });
  EXPECT_NE(msg.find("token id 65535 at position 3 of " + shard.string()), std::string::npos)
      << msg;
  fs::remove(shard);
  msg = error_message<DataError>([&] { TokenData::load(dir / "out", 1000); });
  EXPECT_NE(msg.find("shard " + shard.string() + " listed in"), std::string::npos) << msg;
}

TEST_F(Shards, another_run_in_the_same_folder_is_refused) {
  tokenize_corpus(options("out"), progress_);
  TokenizeOptions o = options("out");
  o.shard_tokens = 999;
  const std::string msg = error_message<ConfigError>([&] { tokenize_corpus(o, progress_); });
  EXPECT_NE(msg.find("holds shards of another run"), std::string::npos) << msg;
}

TEST_F(Shards, json_line_without_text_names_the_file_and_offset) {
  write_file_atomic(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  TokenizeOptions o = options("out");
  o.inputs = {dir.str("bad.jsonl")};
  const std::string msg = error_message<DataError>([&] { tokenize_corpus(o, progress_); });
  EXPECT_NE(msg.find(dir.str("bad.jsonl") + " at byte 15"), std::string::npos) << msg;
}

}  // namespace
}  // namespace memo
