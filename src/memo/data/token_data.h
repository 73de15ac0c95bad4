// A token dataset held in memory as int32 ids, each checked against the vocabulary on load.
// Files are either llm.c token files (a 256 x int32 header: magic 20240520, version 1, count, then
// uint16 tokens; or llm.c's Llama 3 variant: magic 20240801, version 7, uint32 tokens) or raw
// bytes, one token per byte (vocabulary 256). Not a tokeniser, not a streaming reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace memo {

inline constexpr int32_t kLlmcMagic = 20240520;  // llm.c GPT-2 token files: uint16 tokens
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int32_t kLlmcMagicLlama3 = 20240801;  // llm.c Llama 3 token files: uint32 tokens
inline constexpr int32_t kLlmcVersionLlama3 = 7;
inline constexpr int64_t kLlmcHeaderInts = 256;

class TokenData {
 public:
  // Reads `path` (llm.c if it starts with a known magic, else raw bytes). Errors: missing or empty
  // file, a token id outside [0, vocab_size): DataError naming the id, position and path; an llm.c
  // header that disagrees with the file size or has an unknown version: FormatError.
  static TokenData load(const std::filesystem::path& path, int64_t vocab_size);

  // Tokens already in memory; `source` names them in messages. Checks every id like load().
  TokenData(std::vector<int32_t> tokens, std::string source, int64_t vocab_size);

  int64_t num_tokens() const { return int64_t(tokens_.size()); }
  std::span<const int32_t> tokens() const { return tokens_; }
  int32_t operator[](int64_t i) const { return tokens_[size_t(i)]; }
  const std::string& source() const { return source_; }  // the path, or "path [tokens a, b)"
  int64_t vocab_size() const { return vocab_size_; }

 private:
  struct Checked {};  // ids known to be in range: skip the scan
  TokenData(Checked, std::vector<int32_t> tokens, std::string source, int64_t vocab_size);
  friend std::pair<TokenData, TokenData> split_tail(TokenData data, double val_fraction);

  std::vector<int32_t> tokens_;
  std::string source_;
  int64_t vocab_size_ = 0;
};

// (train, validation): validation is the last round(val_fraction * n) tokens (at least 1 and
// leaving at least 1). val_fraction must lie in (0, 1): ConfigError; fewer than 2 tokens:
// DataError.
std::pair<TokenData, TokenData> split_tail(TokenData data, double val_fraction);

// Writes an llm.c GPT-2 token file (uint16 tokens) atomically. Ids must lie in [0, 65536):
// DataError naming the id and its position otherwise.
void write_llmc_tokens(const std::filesystem::path& path, const std::vector<int32_t>& tokens);

}  // namespace memo
