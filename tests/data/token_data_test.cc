#include "memo/data/token_data.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "memo/core/error.h"
#include "memo/data/shards.h"
#include "memo/io/atomic_file.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::error_message;
using test::TempDir;

std::string llmc_header(int32_t magic, int32_t version, int32_t count) {
  std::string h(kLlmcHeaderInts * sizeof(int32_t), '\0');
  int32_t ints[3] = {magic, version, count};
  std::memcpy(h.data(), ints, sizeof ints);
  return h;
}

TEST(TokenData, llmc_file_round_trips) {
  TempDir tmp;
  std::vector<int32_t> tokens = {0, 1, 50256, 65535, 7};
  write_llmc_tokens(tmp / "t.bin", tokens);
  EXPECT_EQ(fs::file_size(tmp / "t.bin"), 1024u + 2 * tokens.size());
  TokenData d = TokenData::load(tmp / "t.bin", 65536);
  std::vector<int32_t> got(size_t(d.num_tokens()));
  d.copy(0, d.num_tokens(), got.data());
  EXPECT_EQ(got, tokens);
  EXPECT_EQ(d.source(), (tmp / "t.bin").string());
}

TEST(TokenData, llama3_llmc_file_has_uint32_tokens) {
  TempDir tmp;
  uint32_t body[3] = {5, 100000, 2};
  write_file_atomic(tmp / "t.bin", llmc_header(kLlmcMagicLlama3, kLlmcVersionLlama3, 3) +
                                       std::string(reinterpret_cast<char*>(body), sizeof body));
  EXPECT_EQ(TokenData::load(tmp / "t.bin", 128256)[1], 100000);
  std::string msg = error_message<DataError>([&] { TokenData::load(tmp / "t.bin", 65536); });
  EXPECT_NE(msg.find("token id 100000 at position 1 of"), std::string::npos) << msg;
}

TEST(TokenData, raw_bytes_are_tokens) {
  TempDir tmp;
  write_file_atomic(tmp / "t.txt", "hi\xff");
  TokenData d = TokenData::load(tmp / "t.txt", 256);
  ASSERT_EQ(d.num_tokens(), 3);
  EXPECT_EQ(d[0], 'h');
  EXPECT_EQ(d[2], 255);
  std::string msg = error_message<DataError>([&] { TokenData::load(tmp / "t.txt", 128); });
  EXPECT_EQ(msg, "token id 255 at position 2 of " + (tmp / "t.txt").string() +
                     " is outside the vocabulary [0, 128)");
}

TEST(TokenData, id_outside_vocabulary_names_id_position_and_path) {
  TempDir tmp;
  write_llmc_tokens(tmp / "train.bin", {1, 2, 50311, 4});
  std::string msg = error_message<DataError>([&] { TokenData::load(tmp / "train.bin", 50257); });
  EXPECT_EQ(msg, "token id 50311 at position 2 of " + (tmp / "train.bin").string() +
                     " is outside the vocabulary [0, 50257)");
  msg = error_message<DataError>([&] { TokenData({3, -1}, "mem", 10); });
  EXPECT_NE(msg.find("token id -1 at position 1 of mem"), std::string::npos) << msg;
}

TEST(TokenData, truncated_llmc_file_names_expected_and_actual_bytes) {
  TempDir tmp;
  write_llmc_tokens(tmp / "t.bin", {1, 2, 3, 4});
  std::string bytes = read_file(tmp / "t.bin");
  write_file_atomic(tmp / "t.bin", bytes.substr(0, bytes.size() - 3));
  std::string msg = error_message<FormatError>([&] { TokenData::load(tmp / "t.bin", 256); });
  EXPECT_NE(msg.find("should be 1032 bytes, but it is 1029 (truncated)"), std::string::npos) << msg;
  write_file_atomic(tmp / "t.bin", bytes.substr(0, 100));
  msg = error_message<FormatError>([&] { TokenData::load(tmp / "t.bin", 256); });
  EXPECT_NE(msg.find("is 100 bytes, shorter than the 1024-byte header"), std::string::npos) << msg;
  write_file_atomic(tmp / "t.bin", llmc_header(kLlmcMagic, 2, 1) + "ab");
  msg = error_message<FormatError>([&] { TokenData::load(tmp / "t.bin", 256); });
  EXPECT_NE(msg.find("version 2"), std::string::npos) << msg;
  write_file_atomic(tmp / "t.bin", llmc_header(kLlmcMagic, 1, -5));
  msg = error_message<FormatError>([&] { TokenData::load(tmp / "t.bin", 256); });
  EXPECT_NE(msg.find("count -5"), std::string::npos) << msg;
}

TEST(TokenData, empty_file_is_data_error) {
  TempDir tmp;
  write_file_atomic(tmp / "e.bin", "");
  std::string msg = error_message<DataError>([&] { TokenData::load(tmp / "e.bin", 256); });
  EXPECT_EQ(msg, (tmp / "e.bin").string() + " is empty");
  write_llmc_tokens(tmp / "e.bin", {});
  msg = error_message<DataError>([&] { TokenData::load(tmp / "e.bin", 256); });
  EXPECT_NE(msg.find(" is empty"), std::string::npos) << msg;
  msg = error_message<DataError>([&] { TokenData::load(tmp / "missing.bin", 256); });
  EXPECT_NE(msg.find("missing.bin"), std::string::npos) << msg;
  msg = error_message<ConfigError>([&] { TokenData::load(tmp / "e.bin", 0); });
  EXPECT_NE(msg.find("vocab_size = 0"), std::string::npos) << msg;
}

TEST(TokenData, writer_rejects_ids_outside_uint16) {
  TempDir tmp;
  std::string msg = error_message<DataError>([&] { write_llmc_tokens(tmp / "t.bin", {1, 70000}); });
  EXPECT_NE(msg.find("token id 70000 at position 1"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(tmp / "t.bin"));
}

// vocab_size has no 65536 limit: a uint16 file's ids all fit a larger vocabulary.
TEST(TokenData, uint16_file_serves_a_vocabulary_over_65536) {
  TempDir tmp;
  write_llmc_tokens(tmp / "t.bin", {0, 65535, 7});
  TokenData d = TokenData::load(tmp / "t.bin", 128256);
  EXPECT_EQ(d[1], 65535);
}

// A manifest's tokenizer of more than 65536 ids cannot have written uint16 shards without losing
// ids: refused, naming the shard; its uint32 shards load.
TEST(TokenData, uint16_shard_of_a_tokenizer_over_65536_ids_is_refused) {
  TempDir tmp;
  const fs::path dir = tmp / "shards";
  fs::create_directories(dir);
  write_llmc_tokens(dir / "train-000000.bin", {1, 2, 3});
  const nlohmann::json manifest = {
      {"format", kShardFormat},
      {"version", kShardFormatVersion},
      {"vocab_size", 128256},
      {"complete", true},
      {"shards",
       {{{"file", "train-000000.bin"}, {"split", "train"}, {"tokens", 3}, {"crc32c", 0}}}}};
  write_file_atomic(dir / kShardManifestFile, manifest.dump());
  const std::string shard = (dir / "train-000000.bin").string();
  for (const fs::path& p : {dir, dir / "train-000000.bin"}) {
    std::string msg = error_message<FormatError>([&] { TokenData::load(p, 128256); });
    EXPECT_NE(msg.find(shard + " holds uint16 token ids"), std::string::npos) << msg;
    EXPECT_NE(msg.find("its tokenizer has 128256 ids, over the 65536"), std::string::npos) << msg;
  }
  uint32_t body[3] = {5, 100000, 2};
  write_file_atomic(dir / "train-000000.bin",
                    llmc_header(kLlmcMagicLlama3, kLlmcVersionLlama3, 3) +
                        std::string(reinterpret_cast<char*>(body), sizeof body));
  EXPECT_EQ(TokenData::load(dir, 128256)[1], 100000);
}

TEST(TokenData, split_tail_takes_validation_from_the_end) {
  std::vector<int32_t> tokens(100);
  for (int i = 0; i < 100; ++i) tokens[size_t(i)] = i;
  auto [train, val] = split_tail(TokenData(tokens, "d.bin", 100), 0.1);
  EXPECT_EQ(train.num_tokens(), 90);
  EXPECT_EQ(val.num_tokens(), 10);
  EXPECT_EQ(val[0], 90);
  EXPECT_EQ(val.source(), "d.bin [tokens 90, 100)");
  EXPECT_EQ(train.source(), "d.bin [tokens 0, 90)");
  auto [t2, v2] = split_tail(TokenData({1, 2}, "s", 10), 0.001);  // at least one each
  EXPECT_EQ(v2.num_tokens(), 1);
  std::string msg = error_message<ConfigError>([&] {
    split_tail(TokenData({1, 2}, "s", 10), 1.0);
  });
  EXPECT_NE(msg.find("fraction 1 for s"), std::string::npos) << msg;
  msg = error_message<DataError>([&] { split_tail(TokenData({1}, "s", 10), 0.5); });
  EXPECT_NE(msg.find("s holds 1 token"), std::string::npos) << msg;
}

}  // namespace
}  // namespace memo
