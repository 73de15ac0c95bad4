// A token dataset: int32 ids read through memory maps (llm.c token files and shards) or held in
// memory, each id checked against the vocabulary on load. Files are llm.c token files (a 256 x
// int32 header: magic 20240520, version 1, count, then uint16 tokens; or llm.c's Llama 3 variant:
// magic 20240801, version 7, uint32 tokens) or raw bytes, one token per byte (vocabulary 256).
// Several files (a shard directory of `memo tokenize`, or a glob) are one concatenated stream, in
// order. A shard directory also gives where its documents start and, for prompt-completion
// data, which targets the loss counts (data/shards.h). Not a tokeniser, not a prefetcher.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memo {

inline constexpr int32_t kLlmcMagic = 20240520;  // llm.c GPT-2 token files: uint16 tokens
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int32_t kLlmcMagicLlama3 = 20240801;  // llm.c Llama 3 token files: uint32 tokens
inline constexpr int32_t kLlmcVersionLlama3 = 7;
inline constexpr int64_t kLlmcHeaderInts = 256;

struct TokenStore;  // the files or the vector behind a TokenData (token_data.cc)

class TokenData {
 public:
  // Maps `path`: a file (llm.c if it starts with a known magic, else raw bytes), a shard
  // directory (its manifest.json's training shards, see data/shards.h; without a manifest every
  // *.bin in it, sorted), or a glob of files (sorted). Errors: a missing, empty or truncated file,
  // a token id outside [0, vocab_size): DataError naming the id, position and file; an llm.c
  // header that disagrees with the file size or has an unknown version: FormatError; a shard
  // directory whose tokenizer has more ids than vocab_size: ConfigError. vocab_size has no upper
  // bound: a uint16 file's ids all lie below 65536, so it serves any larger vocabulary, but a
  // uint16 file whose manifest's tokenizer has more than 65536 ids is a FormatError naming it.
  // A shard directory's .docs and .mask files are read too: a missing one is a DataError, a
  // malformed one (wrong size, header or offsets, a listed document that does not start with
  // end-of-text) a FormatError naming it; prompt-completion shards named one by one or by a glob
  // are a ConfigError (their masks come with the directory only).
  static TokenData load(const std::filesystem::path& path, int64_t vocab_size);
  // The shards of one split ("train", "val"; "all": both, in the manifest's order) of the
  // `memo tokenize` directory `dir`, with their document offsets and loss masks; nullopt when the
  // manifest lists none. Errors as load().
  static std::optional<TokenData> load_split(const std::filesystem::path& dir,
                                             const std::string& split, int64_t vocab_size);
  // Maps `files` (no shard manifest's: load() holds those to their entries) in order as one
  // stream named `source`; same errors as load().
  static TokenData load_files(const std::vector<std::filesystem::path>& files,
                              const std::string& source, int64_t vocab_size);

  // Tokens already in memory; `source` names them in messages. Checks every id like load().
  TokenData(std::vector<int32_t> tokens, std::string source, int64_t vocab_size);

  int64_t num_tokens() const { return end_ - begin_; }
  // Tokens [start, start + count) into out; the range must lie within num_tokens().
  void copy(int64_t start, int64_t count, int32_t* out) const;
  int32_t operator[](int64_t i) const;
  const std::string& source() const { return source_; }  // the path, or "path [tokens a, b)"
  int64_t vocab_size() const { return vocab_size_; }
  int64_t num_files() const;  // mapped token files behind it (0 in memory)

  // Prompt-completion data (Note [Loss mask files] in data/shards.h): whether the loss counts
  // token i as a target, for i in [start, start + count) (1 counted, 0 not), into out.
  bool has_loss_mask() const;
  void copy_mask(int64_t start, int64_t count, uint8_t* out) const;
  // Where this view's documents start, relative to its first token, ascending (a document cut
  // by the view's start is not listed); nullopt when the data does not record them (raw files,
  // shards of version 1).
  std::optional<std::vector<int64_t>> document_starts() const;

 private:
  TokenData(std::shared_ptr<const TokenStore> store, int64_t begin, int64_t end, std::string source,
            int64_t vocab_size);
  friend std::pair<TokenData, TokenData> split_tail(TokenData data, double val_fraction);

  std::shared_ptr<const TokenStore> store_;
  int64_t begin_ = 0, end_ = 0;  // this view's range of the store's stream
  std::string source_;
  int64_t vocab_size_ = 0;
};

// (train, validation): validation is the last round(val_fraction * n) tokens (at least 1 and
// leaving at least 1). val_fraction must lie in (0, 1): ConfigError; fewer than 2 tokens:
// DataError.
std::pair<TokenData, TokenData> split_tail(TokenData data, double val_fraction);

// The validation shards of a `memo tokenize` directory, or nullopt when `path` is not one or it
// has none (then callers split the training stream's tail).
std::optional<TokenData> load_validation_shards(const std::filesystem::path& path,
                                                int64_t vocab_size);

// Writes an llm.c GPT-2 token file (uint16 tokens) atomically. Ids must lie in [0, 65536):
// DataError naming the id and its position otherwise.
void write_llmc_tokens(const std::filesystem::path& path, const std::vector<int32_t>& tokens);

}  // namespace memo
