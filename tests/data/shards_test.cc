// memo tokenize's shards: contents, manifest, resume after an interruption, validation split,
// reading them back through memory maps as one stream, and the errors of broken shard folders.
#include "memo/data/shards.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <sstream>

#include "data/small_tokenizer.h"
#include "memo/core/error.h"
#include "memo/core/targets.h"
#include "memo/data/sampler.h"
#include "memo/data/token_data.h"
#include "memo/data/tokenizer.h"
#include "memo/io/atomic_file.h"
#include "memo/io/crc32c.h"
#include "memo/train/run_data.h"
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
  // the .docs files list every document's end-of-text (Note [Document offsets])
  std::vector<int64_t> starts;
  const int32_t eot = *test::small_tokenizer().end_of_text();
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] == eot) starts.push_back(int64_t(i));
  EXPECT_EQ(starts.size(), 23u);
  EXPECT_EQ(d.document_starts(), starts);
  EXPECT_FALSE(d.has_loss_mask());
  const std::optional<ShardManifest> m = read_shard_manifest(dir / "out");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->complete);
  EXPECT_EQ(m->vocab_size, test::small_tokenizer().vocab_size());
  for (const ShardInfo& s : m->shards)
    EXPECT_EQ(s.crc32c, crc32c(0, read_file(dir / "out" / s.file))) << s.file;
  EXPECT_NE(progress_.str().find("MB/s, ETA"), std::string::npos) << progress_.str();
  EXPECT_EQ(Tokenizer::load(dir / "out" / kShardTokenizerFile).vocab_size(), m->vocab_size);
  // A second run finds it complete, writes nothing and reports what the first did.
  const TokenizeResult again = tokenize_corpus(options("out"), progress_);
  EXPECT_TRUE(again.already_complete);
  EXPECT_EQ(again.text_bytes, r.text_bytes);
  EXPECT_GT(again.text_bytes, 0);
  EXPECT_EQ(again.documents, r.documents);
  EXPECT_EQ(again.train_tokens, r.train_tokens);
  EXPECT_EQ(again.shards, r.shards);
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
      for (const std::string& f : {a.shards[i].file, a.shards[i].docs})
        EXPECT_EQ(read_file(dir / "whole-val" / f), read_file(dir / out / f))
            << "stop " << stop << " file " << f;
    }
  }
}

// Note [Document layout]: a tokenizer with a BOS frames each document as BOS ... end-of-text, the
// .docs files and the manifest's document_start name the BOS, a killed run resumes to the same
// files, and a folder written before document_start existed still reads as end-of-text ...
TEST_F(Shards, a_bos_tokenizer_frames_each_document_and_resumes_in_that_layout) {
  write_file_atomic(dir / "bos.json", test::small_bos_tokenizer_json().dump());
  const Tokenizer t = Tokenizer::load(dir / "bos.json");
  const int32_t bos = t.prefix_ids()[0], eot = *t.end_of_text();
  ASSERT_NE(bos, eot);
  EXPECT_EQ(t.document_start(), bos);  // what memo generate --document-mask restarts at
  EXPECT_EQ(test::small_tokenizer().document_start(), eot);
  std::vector<int32_t> want;
  std::vector<int64_t> starts;
  for (const std::string& d : docs_) {
    starts.push_back(int64_t(want.size()));
    want.push_back(bos);
    t.encode(d, want);
    want.push_back(eot);
  }
  TokenizeOptions o = options("bos");
  o.tokenizer = dir.str("bos.json");
  EXPECT_TRUE(tokenize_corpus(o, progress_).complete);
  const TokenData d = TokenData::load(dir / "bos", 1000);
  EXPECT_EQ(read_all(d), want);
  EXPECT_EQ(d.document_starts(), starts);
  const ShardManifest m = *read_shard_manifest(dir / "bos");
  EXPECT_EQ(m.document_start, bos);
  EXPECT_EQ(m.end_of_text, eot);
  const DocumentTokens dt = document_tokens(dir.str("bos"), -1, 1000);
  EXPECT_EQ(dt.start, bos);
  EXPECT_EQ(dt.end, eot);
  EXPECT_EQ(document_tokens(dir.str("bos"), 7, 1000).end, 7);  // --eot-id names both
  // Killed after each of the first shards (one ends inside a document's text, so the resumed
  // document drops its BOS and some text), then rerun: the same files.
  for (int64_t stop : {1, 2}) {
    TokenizeOptions part = o;
    part.out_dir = dir.str("bos-part" + std::to_string(stop));
    part.stop_after_shards = stop;
    EXPECT_FALSE(tokenize_corpus(part, progress_).complete);
    part.stop_after_shards = 0;
    EXPECT_TRUE(tokenize_corpus(part, progress_).complete);
    for (const ShardInfo& s : m.shards)
      for (const std::string& f : {s.file, s.docs})
        EXPECT_EQ(read_file(dir / "bos" / f), read_file(fs::path(part.out_dir) / f)) << f;
  }
  // an unfinished folder whose document_start is not the tokenizer's BOS is not continued
  TokenizeOptions bad = o;
  bad.out_dir = dir.str("bos-bad");
  bad.stop_after_shards = 1;
  tokenize_corpus(bad, progress_);
  nlohmann::json tampered = read_shard_manifest(dir / "bos-bad")->json;
  tampered["document_start"] = 5;
  write_file_atomic(dir / "bos-bad" / kShardManifestFile, tampered.dump());
  bad.stop_after_shards = 0;
  EXPECT_NE(error_message<FormatError>([&] { tokenize_corpus(bad, progress_); })
                .find("manifest.json: document_start 5 is not the first token the tokenizer "
                      "puts before a sequence"),
            std::string::npos);
  // Without document_start (a folder of an older memo) the documents must start with the end
  // of text: these do not, and the offsets' check says so.
  nlohmann::json j = m.json;
  j.erase("document_start");
  write_file_atomic(dir / "bos" / kShardManifestFile, j.dump());
  EXPECT_NE(error_message<FormatError>([&] {
              TokenData::load(dir / "bos", 1000);
            }).find(str("starts with token ", bos, ", not the manifest's document start ", eot)),
            std::string::npos);
  // The old layout's folder without the field reads as before.
  tokenize_corpus(options("plain"), progress_);
  j = read_shard_manifest(dir / "plain")->json;
  EXPECT_EQ(j.at("document_start"), eot);
  j.erase("document_start");
  write_file_atomic(dir / "plain" / kShardManifestFile, j.dump());
  EXPECT_EQ(read_all(TokenData::load(dir / "plain", 1000)), expected_stream());
  EXPECT_EQ(read_shard_manifest(dir / "plain")->document_start, eot);
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
  // Both splits (memo eval --split all) in input order, though the manifest lists the last
  // training shard after validation shards (it is written when the input ends).
  o.out_dir = dir.str("small");
  o.shard_tokens = 300;
  tokenize_corpus(o, progress_);
  const std::optional<ShardManifest> m = read_shard_manifest(dir / "small");
  ASSERT_TRUE(m);
  size_t first_val = 0;
  while (m->shards[first_val].split == "train") ++first_val;
  EXPECT_TRUE(std::any_of(m->shards.begin() + long(first_val), m->shards.end(),
                          [](const ShardInfo& s) { return s.split == "train"; }));
  const std::optional<TokenData> all = TokenData::load_split(dir / "small", "all", 1000);
  ASSERT_TRUE(all);
  EXPECT_EQ(read_all(*all), expected_stream());
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
  EXPECT_NE(msg.find("shard file " + shard.string() + " listed in"), std::string::npos) << msg;
  // a .docs file that does not match its shard (Note [Document offsets])
  tokenize_corpus(options("out2"), progress_);
  const fs::path docs = dir / "out2" / "train-000001.docs";
  std::string d = read_file(docs);
  d[16] = char(d[16] + 1);  // the first listed document no longer starts at end-of-text
  write_file_atomic(docs, d);
  msg = error_message<FormatError>([&] { TokenData::load(dir / "out2", 1000); });
  EXPECT_NE(msg.find(docs.string() + ": the document at offset"), std::string::npos) << msg;
  write_file_atomic(docs, d.substr(0, d.size() - 2));
  msg = error_message<FormatError>([&] { TokenData::load(dir / "out2", 1000); });
  EXPECT_NE(msg.find(docs.string() + " counts"), std::string::npos) << msg;
  // a shard whose llm.c header is damaged is not read as raw bytes
  tokenize_corpus(options("out3"), progress_);
  const fs::path first = dir / "out3" / "train-000000.bin";
  std::string header = read_file(first);
  header[0] = char(header[0] + 1);
  write_file_atomic(first, header);
  msg = error_message<FormatError>([&] { TokenData::load(dir / "out3", 1000); });
  EXPECT_NE(
      msg.find(first.string() + " is listed in its folder's manifest.json but does not start"),
      std::string::npos)
      << msg;
  // named by a glob or one by one, the same shards are held to the same entries
  for (const std::string& named : {dir.str("out3") + "/train-*.bin", first.string()}) {
    msg = error_message<FormatError>([&] { TokenData::load(named, 1000); });
    EXPECT_NE(msg.find(first.string() + " is listed in its folder's manifest.json but does not "),
              std::string::npos)
        << named << ": " << msg;
  }
  write_file_atomic(dir / "out3" / "stray.bin", "raw bytes");
  msg = error_message<DataError>([&] { TokenData::load(dir / "out3" / "stray.bin", 1000); });
  EXPECT_NE(msg.find("stray.bin is not listed in its folder's manifest.json"), std::string::npos)
      << msg;
  header[0] = char(header[0] - 1);
  write_file_atomic(first, header);
  // the folder's tokenizer.json (which checkpoints copy) must be the one the shards were written
  // with
  const fs::path tok = dir / "out3" / kShardTokenizerFile;
  const std::string tok_text = read_file(tok);
  write_file_atomic(tok, "{");
  msg = error_message<FormatError>([&] { shard_tokenizer_json(dir.str("out3")); });
  EXPECT_NE(msg.find(tok.string() + " is not valid JSON"), std::string::npos) << msg;
  nlohmann::json other = nlohmann::json::parse(tok_text);
  other["added_tokens"][0]["content"] = "<|other|>";
  write_file_atomic(tok, other.dump());
  msg = error_message<FormatError>([&] { shard_tokenizer_json(dir.str("out3")); });
  EXPECT_NE(msg.find("is not the tokenizer its shards were written with"), std::string::npos)
      << msg;
  // ... before anything reads the shards, not when the first checkpoint copies it
  msg = error_message<FormatError>([&] { TokenData::load(dir / "out3", 1000); });
  EXPECT_NE(msg.find("is not the tokenizer its shards were written with"), std::string::npos)
      << msg;
  write_file_atomic(tok, tok_text);
  EXPECT_EQ(shard_tokenizer_json(dir.str("out3")), tok_text);
  // the manifest's shard entries: names in the folder, each once, of a known split
  const fs::path manifest = dir / "out3" / kShardManifestFile;
  const nlohmann::json good = nlohmann::json::parse(read_file(manifest));
  for (const auto& [field, value, want] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"file", "../out/train-000000.bin", "is not a file name in the folder"},
           {"file", ".", "is not a file name in the folder"},
           {"file", "train-000001.bin", "is listed twice"},
           {"split", "test", "neither \"train\" nor \"val\""},
           {"tokens", -5, "has -5 tokens"}}) {
    nlohmann::json j = good;
    j["shards"][0][field] = value;
    write_file_atomic(manifest, j.dump());
    msg = error_message<FormatError>([&] { TokenData::load(dir / "out3", 1000); });
    EXPECT_NE(msg.find(want), std::string::npos) << field << ": " << msg;
  }
  nlohmann::json j = good;
  j["shards"][1]["tokens"] = j["shards"][1]["tokens"].get<int64_t>() + 1;
  write_file_atomic(manifest, j.dump());
  msg = error_message<FormatError>([&] { TokenData::load(dir / "out3", 1000); });
  EXPECT_NE(msg.find("train-000001.bin holds"), std::string::npos) << msg;
}

TEST_F(Shards, another_run_in_the_same_folder_is_refused) {
  tokenize_corpus(options("out"), progress_);
  TokenizeOptions o = options("out");
  o.shard_tokens = 999;
  const std::string msg = error_message<ConfigError>([&] { tokenize_corpus(o, progress_); });
  EXPECT_NE(msg.find("holds shards of another run"), std::string::npos) << msg;
}

// Shards are tokens already: a folder of them given as input, or found inside one, is refused.
TEST_F(Shards, an_input_holding_shards_is_refused) {
  tokenize_corpus(options("out"), progress_);
  TokenizeOptions o = options("again");
  o.inputs = {dir.str("out")};
  std::string msg = error_message<DataError>([&] { tokenize_corpus(o, progress_); });
  EXPECT_NE(msg.find("holds memo tokenize shards (manifest.json): they are tokens already; "
                     "train on them with --data " +
                     dir.str("out")),
            std::string::npos)
      << msg;
  o.inputs = {dir.str("")};
  msg = error_message<DataError>([&] { tokenize_corpus(o, progress_); });
  EXPECT_NE(msg.find("train on them with --data " + dir.str("out")), std::string::npos) << msg;
}

TEST_F(Shards, json_line_without_text_names_the_file_and_offset) {
  write_file_atomic(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  TokenizeOptions o = options("out");
  o.inputs = {dir.str("bad.jsonl")};
  const std::string msg = error_message<DataError>([&] { tokenize_corpus(o, progress_); });
  EXPECT_NE(msg.find(dir.str("bad.jsonl") + " at byte 15"), std::string::npos) << msg;
}

// --format prompt-completion (Note [Loss mask files]): examples of both kinds, their tokens,
// masks and starts built here from the JSON fields, the tokenizer's ids and the documented
// template; examples packed whole (Note [Packed examples]); resumed runs write the same files.
class PromptCompletion : public Shards {
 protected:
  void SetUp() override {
    Shards::SetUp();
    nlohmann::json tj = test::small_tokenizer_json();
    // add_prefix_space: where a piece stands changes its ids (TextStart)
    tj["pre_tokenizer"]["add_prefix_space"] = true;
    const int32_t base = tj["added_tokens"].back()["id"].get<int32_t>() + 1;
    tj["added_tokens"].push_back({{"id", base}, {"content", "<|im_start|>"}, {"special", true}});
    tj["added_tokens"].push_back({{"id", base + 1}, {"content", "<|im_end|>"}, {"special", true}});
    write_file_atomic(dir / "chat.json", tj.dump());
    const Tokenizer t = Tokenizer::load(dir / "chat.json");
    const int32_t eot = *t.end_of_text(), im_start = base, im_end = base + 1;
    std::mt19937 rng(5);
    const char* words[] = {" the", " and", " of", " hello", "\n", " in", "ing", " that", " he"};
    auto text = [&](size_t n) {
      std::string x;
      while (x.size() < n) x += words[rng() % 9];
      return x;
    };
    bool end_counted = false;
    auto part = [&](const std::vector<int32_t>& ids, bool counted) {
      ids_.insert(ids_.end(), ids.begin(), ids.end());
      mask_.insert(mask_.end(), ids.size(), uint8_t(counted));
    };
    std::string lines;
    for (int i = 0; i < 40; ++i) {
      starts_.push_back(int64_t(ids_.size()));
      part({eot}, end_counted);
      // at seq 48, every 10th example's prompt fills the window (left out) and another's long
      // answer is cut
      const std::string prompt = text(i % 10 == 9 ? 160 : 10 + rng() % 40);
      const std::string answer = text(i % 10 == 4 ? 160 : rng() % 30);
      if (i % 3 == 2) {
        lines += nlohmann::json{{"messages",
                                 {{{"role", "user"}, {"content", prompt}},
                                  {{"role", "assistant"}, {"content", answer}}}}}
                     .dump() +
                 "\n";
        const TextStart after = TextStart::after_special, cont = TextStart::continued;
        part({im_start}, false), part(t.encode("user\n", after), false);
        part(t.encode(prompt, cont), false);
        part({im_end}, false), part(t.encode("\n", after), false);
        part({im_start}, false), part(t.encode("assistant\n", after), false);
        part(t.encode(answer, cont), true);
        part({im_end}, true), part(t.encode("\n", after), false);
        end_counted = false;
      } else {
        lines += nlohmann::json{{"prompt", prompt}, {"completion", answer}}.dump() + "\n";
        part(t.encode(prompt), false), part(t.encode(answer, TextStart::continued), true);
        end_counted = true;
      }
    }
    part({eot}, end_counted);  // the end of the last example
    write_file_atomic(dir / "sft.jsonl", lines);
  }
  TokenizeOptions sft_options(const std::string& out) const {
    TokenizeOptions o = options(out);
    o.tokenizer = dir.str("chat.json");
    o.inputs = {dir.str("sft.jsonl")};
    o.format = kShardPromptCompletionFormat;
    o.shard_tokens = 300;  // several shards
    return o;
  }
  std::vector<int32_t> ids_;
  std::vector<uint8_t> mask_;
  std::vector<int64_t> starts_;
};

TEST_F(PromptCompletion, examples_carry_a_mask_of_what_the_loss_counts) {
  ASSERT_TRUE(tokenize_corpus(sft_options("out"), progress_).complete);
  const TokenData d = TokenData::load(dir / "out", 1000);
  ASSERT_GT(d.num_files(), 2);
  EXPECT_EQ(read_all(d), ids_);
  ASSERT_TRUE(d.has_loss_mask());
  std::vector<uint8_t> mask(static_cast<size_t>(d.num_tokens()));
  d.copy_mask(0, d.num_tokens(), mask.data());
  EXPECT_EQ(mask, mask_);
  EXPECT_EQ(d.document_starts(), starts_);
  const ShardManifest manifest = *read_shard_manifest(dir / "out");
  for (const ShardInfo& s : manifest.shards)
    EXPECT_EQ(s.mask_crc32c, crc32c(0, read_file(dir / "out" / s.mask))) << s.mask;
  // a split's view keeps its share of the starts and the mask
  auto [train, val] = split_tail(TokenData::load(dir / "out", 1000), 0.5);
  std::vector<int64_t> tail;
  for (int64_t s : starts_)
    if (s >= train.num_tokens()) tail.push_back(s - train.num_tokens());
  EXPECT_EQ(val.document_starts(), tail);
  {  // a split exactly at an example's start: the start is the validation view's, at 0
    ASSERT_GT(starts_.size(), 2u);
    const int64_t n = int64_t(ids_.size()), at = starts_[starts_.size() / 2];
    auto [head, rest] = split_tail(TokenData::load(dir / "out", 1000), double(n - at) / double(n));
    ASSERT_EQ(head.num_tokens(), at);
    const std::vector<int64_t> before(starts_.begin(),
                                      starts_.begin() + ptrdiff_t(starts_.size() / 2));
    EXPECT_EQ(head.document_starts(), before);
    ASSERT_TRUE(rest.document_starts().has_value());
    EXPECT_EQ(rest.document_starts()->front(), 0);
  }
  uint8_t bit = 2;
  val.copy_mask(0, 1, &bit);
  EXPECT_EQ(bit, mask_[size_t(train.num_tokens())]);
  // an interrupted run resumes to the same files
  for (int64_t stop : {1, 3}) {
    const std::string out = "part" + std::to_string(stop);
    TokenizeOptions o = sft_options(out);
    o.stop_after_shards = stop;
    EXPECT_FALSE(tokenize_corpus(o, progress_).complete);
    o.stop_after_shards = 0;
    EXPECT_TRUE(tokenize_corpus(o, progress_).complete);
    for (const ShardInfo& s : manifest.shards)
      for (const std::string& f : {s.file, s.docs, s.mask})
        EXPECT_EQ(read_file(dir / "out" / f), read_file(dir / out / f)) << "stop " << stop << f;
  }
  // masks come with the folder only
  const std::string msg =
      error_message<ConfigError>([&] { TokenData::load(dir.str("out") + "/train-*.bin", 1000); });
  EXPECT_NE(msg.find("names prompt-completion shards one by one"), std::string::npos) << msg;
}

// A ChatML fine-tune of a Llama 2 or Mistral tokenizer names <|im_end|> its eos_token: examples
// are then separated by its </s>, not by the token that ends each turn (document masks would cut
// every example at its turns), and training's document masks start where the manifest says.
TEST_F(PromptCompletion, a_turn_end_named_eos_token_does_not_separate_examples) {
  nlohmann::json tj = nlohmann::json::parse(read_file(dir / "chat.json"));
  for (nlohmann::json& t : tj["added_tokens"])
    if (t["content"] == "<|endoftext|>") t["content"] = "</s>";
  fs::create_directories(dir / "hermes");
  write_file_atomic(dir / "hermes" / "tokenizer.json", tj.dump());
  write_file_atomic(dir / "hermes" / "tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
  const Tokenizer t = Tokenizer::load(dir / "hermes");
  const int32_t im_end = *t.special_id("<|im_end|>"), sep = *t.special_id("</s>");
  ASSERT_EQ(t.end_of_text(), im_end);
  TokenizeOptions o = sft_options("hermes-out");
  o.tokenizer = dir.str("hermes");
  ASSERT_TRUE(tokenize_corpus(o, progress_).complete);
  EXPECT_EQ(read_shard_manifest(dir / "hermes-out")->end_of_text, sep);
  const TokenData d = TokenData::load(dir / "hermes-out", 1000);
  EXPECT_EQ(read_all(d), ids_);  // </s> has <|endoftext|>'s id
  EXPECT_EQ(d.document_starts(), starts_);
  EXPECT_EQ(document_tokens(dir.str("hermes-out"), -1, 1000, "--document-mask").start, sep);
  // with no other end-of-text token the examples could not be told apart: refused
  for (nlohmann::json& t : tj["added_tokens"])
    if (t["content"] == "</s>") t["content"] = "<|sep|>";
  write_file_atomic(dir / "hermes" / "tokenizer.json", tj.dump());
  o.out_dir = dir.str("hermes-out2");
  const std::string msg = error_message<ConfigError>([&] { tokenize_corpus(o, progress_); });
  EXPECT_NE(msg.find("also ends each chat turn"), std::string::npos) << msg;
}

TEST_F(PromptCompletion, windows_hold_whole_examples_and_count_their_completions) {
  tokenize_corpus(sft_options("out"), progress_);
  const TokenData d = TokenData::load(dir / "out", 1000);
  constexpr int64_t seq = 48;
  const WindowSampler sampler(d, seq, 3);
  ASSERT_TRUE(sampler.packed());
  const int32_t eot = ids_[0];
  // every example once, in order: whole, or cut to the window, or left out when its prompt
  // fills the window
  std::vector<int32_t> in(static_cast<size_t>(seq)), tgt(in.size());
  size_t example = 0;
  int64_t cut = 0, left_out = 0;
  for (int64_t w = 0; w < sampler.num_sequential_windows(); ++w) {
    sampler.fill_sequential(w, in.data(), tgt.data(), 1);
    int64_t t = 0;
    while (t < seq && example < starts_.size()) {
      const int64_t s = starts_[example];
      // (the last example ends before the split's closing end-of-text, a target only)
      const int64_t end =
          example + 1 < starts_.size() ? starts_[example + 1] : int64_t(ids_.size()) - 1;
      if (t > 0 && t + end - s > seq) break;  // the next window's
      bool counted = false;
      for (int64_t i = s + 1; i < std::min(end + 1, s + seq + 1); ++i) counted |= mask_[size_t(i)];
      if (end - s > seq && !counted) {  // left out: the window starts at the next example
        ++left_out, ++example;
        continue;
      }
      cut += end - s > seq;
      const int64_t n = std::min(end - s, seq);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(in[size_t(t + i)], ids_[size_t(s + i)]) << "window " << w;
        const size_t g = size_t(s + i + 1);
        const int32_t want = g < ids_.size() && mask_[g] ? ids_[g] : kIgnoredTarget;
        ASSERT_EQ(tgt[size_t(t + i)], want) << "window " << w << " token " << t + i;
      }
      t += n;
      ++example;
    }
    ASSERT_GT(t, 0) << "window " << w << " holds no example";
    for (; t < seq; ++t) {  // padding
      EXPECT_EQ(in[size_t(t)], eot);
      EXPECT_EQ(tgt[size_t(t)], kIgnoredTarget);
    }
  }
  for (; example < starts_.size(); ++example, ++left_out)  // left out after the last window
    EXPECT_EQ(std::count(mask_.begin() + starts_[example] + 1,
                         mask_.begin() + starts_[example] + seq + 1, uint8_t(1)),
              0);
  EXPECT_EQ(sampler.num_examples(), int64_t(starts_.size()));
  EXPECT_EQ(sampler.truncated_examples(), cut + left_out);
  EXPECT_EQ(sampler.dropped_examples(), left_out);
  EXPECT_GT(cut, 0);
  EXPECT_GT(left_out, 0);
  // training draws are windows of the same list, a function of their coordinates
  std::vector<int32_t> a(size_t(4 * seq)), b(a.size()), ta(a.size()), tb(a.size());
  sampler.fill(7, 1, a.data(), ta.data(), 4);
  WindowSampler(d, seq, 3).fill(7, 1, b.data(), tb.data(), 4);
  EXPECT_EQ(a, b);
  EXPECT_EQ(ta, tb);
  EXPECT_EQ(a[0], eot);
  // every packed window is drawn: 64 draws a window find each of them
  std::set<std::vector<int32_t>> seen;
  const int64_t windows = sampler.num_sequential_windows();
  for (int64_t step = 0; step < 64 * windows; ++step) {
    sampler.fill(step, 0, in.data(), tgt.data(), 1);
    seen.insert(in);
  }
  EXPECT_EQ(int64_t(seen.size()), windows);
}

// A .docs file of prompt-completion shards that lost an entry (its count made to match) would
// merge two examples into one that sees both: every end-of-text there must be listed.
TEST_F(PromptCompletion, an_unlisted_example_start_is_refused) {
  ASSERT_TRUE(tokenize_corpus(sft_options("out"), progress_).complete);
  const fs::path docs = dir / "out" / "train-000001.docs";
  std::string d = read_file(docs);
  uint32_t count = 0;
  std::memcpy(&count, d.data() + 12, 4);
  ASSERT_GE(count, 2u);
  d.erase(16 + 4, 4);  // the second entry
  --count;
  std::memcpy(d.data() + 12, &count, 4);
  write_file_atomic(docs, d);
  const std::string msg = error_message<FormatError>([&] { TokenData::load(dir / "out", 1000); });
  EXPECT_NE(msg.find(docs.string() + " does not list the end-of-text at offset "),
            std::string::npos)
      << msg;
  // an entry repeated (the count unchanged): an empty example, refused
  ASSERT_TRUE(tokenize_corpus(sft_options("twice"), progress_).complete);
  const fs::path twice = dir / "twice" / "train-000001.docs";
  std::string t = read_file(twice);
  std::memcpy(t.data() + 16 + 4, t.data() + 16, 4);  // the second entry = the first
  write_file_atomic(twice, t);
  const std::string again =
      error_message<FormatError>([&] { TokenData::load(dir / "twice", 1000); });
  EXPECT_NE(again.find(twice.string() + ": document offset "), std::string::npos) << again;
  EXPECT_NE(again.find("(entry 1) is not ascending"), std::string::npos) << again;
}

// The last example of a split holds its tokens up to the split's closing end-of-text, which is
// its last target and no input: an example of exactly seq tokens there is packed whole.
TEST_F(PromptCompletion, a_last_example_of_exactly_the_window_is_whole) {
  write_file_atomic(dir / "last.jsonl",
                    "{\"prompt\": \" the\", \"completion\": \" and\"}\n"
                    "{\"prompt\": \" hello the and of\", \"completion\": \" in that he the\"}\n");
  TokenizeOptions o = sft_options("last");
  o.inputs = {dir.str("last.jsonl")};
  ASSERT_TRUE(tokenize_corpus(o, progress_).complete);
  const TokenData d = TokenData::load(dir / "last", 1000);
  const int64_t last = d.num_tokens() - 1 - d.document_starts()->back();
  ASSERT_GT(last, d.document_starts()->at(1) - d.document_starts()->at(0));
  const WindowSampler sampler(d, last, 1);
  EXPECT_EQ(sampler.truncated_examples(), 0);
  EXPECT_EQ(sampler.num_sequential_windows(), 2);
}

// Examples that fill a window exactly share it: three of L tokens make two windows of 2 L.
TEST_F(PromptCompletion, examples_that_fill_a_window_exactly_share_it) {
  std::string lines;
  for (int i = 0; i < 3; ++i) lines += "{\"prompt\": \" the and\", \"completion\": \" of that\"}\n";
  write_file_atomic(dir / "three.jsonl", lines);
  TokenizeOptions o = sft_options("three");
  o.inputs = {dir.str("three.jsonl")};
  ASSERT_TRUE(tokenize_corpus(o, progress_).complete);
  const TokenData d = TokenData::load(dir / "three", 1000);
  const std::vector<int64_t> starts = *d.document_starts();
  ASSERT_EQ(starts.size(), 3u);
  const int64_t L = starts[1] - starts[0];
  ASSERT_EQ(starts[2] - starts[1], L);
  ASSERT_EQ(d.num_tokens() - 1 - starts[2], L);
  EXPECT_EQ(WindowSampler(d, 2 * L, 1).num_sequential_windows(), 2);
  EXPECT_EQ(WindowSampler(d, 2 * L - 1, 1).num_sequential_windows(), 3);
}

TEST_F(PromptCompletion, lines_that_are_not_examples_name_the_file_and_offset) {
  auto fails = [&](const std::string& file, const std::string& content, const std::string& want,
                   const std::string& tokenizer = "chat.json") {
    write_file_atomic(dir / file, content);
    TokenizeOptions o = sft_options("bad-" + file);
    o.inputs = {dir.str(file)};
    o.tokenizer = dir.str(tokenizer);
    std::string msg;
    try {
      tokenize_corpus(o, progress_);
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  };
  fails("plain.txt", "text", "is plain text; --format prompt-completion reads JSON lines");
  fails("a.jsonl", "{\"prompt\": \"x\", \"completion\": \"y\"}\n{\"prompt\": 1}\n",
        "a.jsonl at byte 35: a prompt-completion line needs the string fields");
  fails("b.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
        "b.jsonl at byte 0: the messages hold no \"assistant\" message");
  fails("m.jsonl",
        "{\"prompt\": \"a\", \"completion\": \"b\", \"messages\": [{\"role\": "
        "\"assistant\", \"content\": \"x\"}]}\n",
        "m.jsonl at byte 0: a line has \"messages\" or \"prompt\" and \"completion\", not both");
  fails("c.jsonl", "{\"messages\": [{\"role\": \"assistant\", \"content\": \"hi\"}]}\n",
        "has neither", "tok.json");
}

// Llama 3's chat tokens (<|start_header_id|>, <|end_header_id|>, <|eot_id|>): each message
// rendered as header, role, end of header, "\n\n", content, <|eot_id|>; the loss counts an
// assistant message's content and the <|eot_id|> that ends it (the model learns to stop), nothing
// of the other messages.
TEST_F(PromptCompletion, llama3_messages_count_the_assistants_content_and_its_eot_id) {
  nlohmann::json tj = nlohmann::json::parse(read_file(dir / "chat.json"));
  int32_t next = 0;
  for (nlohmann::json& t : tj["added_tokens"]) {
    if (t["content"] == "<|im_start|>") t["content"] = "<|start_header_id|>";
    if (t["content"] == "<|im_end|>") t["content"] = "<|eot_id|>";
    next = std::max(next, t["id"].get<int32_t>() + 1);
  }
  tj["added_tokens"].push_back({{"id", next}, {"content", "<|end_header_id|>"}, {"special", true}});
  write_file_atomic(dir / "llama3.json", tj.dump());
  const Tokenizer t = Tokenizer::load(dir / "llama3.json");
  const int32_t eot = *t.end_of_text(), header = *t.special_id("<|start_header_id|>"),
                end_header = *t.special_id("<|end_header_id|>"),
                eot_id = *t.special_id("<|eot_id|>");
  write_file_atomic(dir / "l3.jsonl", R"({"messages": [{"role": "user", "content": "hello the"}, )"
                                      R"({"role": "assistant", "content": "and of"}]})"
                                      "\n");
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  auto part = [&](const std::vector<int32_t>& x, bool counted) {
    ids.insert(ids.end(), x.begin(), x.end());
    mask.insert(mask.end(), x.size(), uint8_t(counted));
  };
  const TextStart after = TextStart::after_special, cont = TextStart::continued;
  part({eot}, false);
  part({header}, false), part(t.encode("user", after), false), part({end_header}, false);
  part(t.encode("\n\n", after), false), part(t.encode("hello the", cont), false);
  part({eot_id}, false);
  part({header}, false), part(t.encode("assistant", after), false), part({end_header}, false);
  part(t.encode("\n\n", after), false), part(t.encode("and of", cont), true);
  part({eot_id}, true);
  part({eot}, false);
  TokenizeOptions o = sft_options("l3-out");
  o.tokenizer = dir.str("llama3.json");
  o.inputs = {dir.str("l3.jsonl")};
  ASSERT_TRUE(tokenize_corpus(o, progress_).complete);
  const TokenData d = TokenData::load(dir / "l3-out", 1000);
  EXPECT_EQ(read_all(d), ids);
  std::vector<uint8_t> got(static_cast<size_t>(d.num_tokens()));
  d.copy_mask(0, d.num_tokens(), got.data());
  EXPECT_EQ(got, mask);
}

}  // namespace
}  // namespace memo
