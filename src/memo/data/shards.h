// Token shards: what `memo tokenize` writes and `memo train --data DIR` reads.
//   DIR/tokenizer.json        the tokenizer (Hugging Face format), copied into checkpoints
//   DIR/train-000000.bin ...  llm.c token files, uint16 ids (magic 20240520) when the vocabulary
//   DIR/val-000000.bin ...    has at most 65536 ids, else uint32 (llm.c's Llama 3 variant,
//                             magic 20240801 version 7); each document starts with end-of-text
//   DIR/manifest.json         the run (tokenizer checksum, inputs, options), each shard's split,
//                             token count and CRC-32C, totals, and where to resume
// Shards and the manifest are written atomically; after a kill, rerunning the same command
// continues after the last complete shard (see Note [Resuming a tokenize run]).
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace memo {

inline constexpr const char* kShardManifestFile = "manifest.json";
inline constexpr const char* kShardTokenizerFile = "tokenizer.json";
inline constexpr const char* kShardFormat = "memo-token-shards";
inline constexpr int kShardFormatVersion = 1;

struct ShardInfo {
  std::string file;   // name inside the directory
  std::string split;  // "train" or "val"
  int64_t tokens = 0;
  uint32_t crc32c = 0;  // of the whole file, header included
};

struct ShardManifest {
  int64_t vocab_size = 0;  // of the tokenizer
  bool complete = false;
  std::vector<ShardInfo> shards;
  nlohmann::json json;  // the whole manifest
};

// The manifest of shard directory `dir`, or nullopt if it has none. A malformed manifest:
// FormatError naming it.
std::optional<ShardManifest> read_shard_manifest(const std::filesystem::path& dir);

// The tokenizer.json of the shard directory behind a --data value (the directory itself, or the
// folder of a shard file or glob), or "" when there is none (raw text, a lone llm.c file).
std::string shard_tokenizer_json(const std::string& data_path);

struct TokenizeOptions {
  std::string tokenizer;  // Tokenizer::load path
  std::string out_dir;
  std::vector<std::string> inputs;  // files or folders; *.jsonl / *.json are JSON lines
  int64_t shard_tokens = 100'000'000;
  // Documents whose first byte lies in the last val_fraction of the input bytes go to val-*.bin;
  // 0: no validation shards (training then holds out the tail of the training stream).
  double val_fraction = 0.0;
  int64_t batch_bytes = 16 << 20;  // text tokenised in parallel per batch
  int64_t stop_after_shards = 0;   // tests: return (as if killed) after this many new shards
};

struct TokenizeResult {
  int64_t documents = 0, text_bytes = 0, train_tokens = 0, val_tokens = 0, shards = 0;
  bool already_complete = false;
  bool resumed = false;
  bool complete = false;  // false only when stop_after_shards stopped it
  double seconds = 0.0;
};

// Tokenises every document of the inputs into shards in options.out_dir, printing a progress
// line (MB/s, ETA) at most once a second. Errors: unreadable inputs, a JSON line without a
// string "text" field (DataError naming file and line), a tokenizer without an end-of-text token,
// an out_dir holding another run's shards (ConfigError).
TokenizeResult tokenize_corpus(const TokenizeOptions& options, std::ostream& progress);

}  // namespace memo
