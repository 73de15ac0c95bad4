// Implementation of train/run_data.h.
#include "memo/train/run_data.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "memo/core/error.h"
#include "memo/data/shards.h"
#include "memo/data/tokenizer.h"

namespace memo {

DocumentTokens document_tokens(const std::string& data_path, int64_t eot_id, int64_t vocab_size,
                               const char* flag) {
  const std::optional<ShardManifest> m = read_shard_manifest(shard_folder(data_path));
  // `memo tokenize`'s folders name the tokens their documents start and end with: the
  // tokenizer's end of text may come from a tokenizer_config.json the folder does not carry, a
  // Llama tokenizer's documents start with its BOS, and prompt-completion examples may be
  // separated by another (example_separator in data/shards.cc)
  DocumentTokens t{int32_t(std::clamp<int64_t>(eot_id, -1, INT32_MAX)), -1};
  if (eot_id >= 0) {
    t.end = t.start;
  } else if (m && m->end_of_text >= 0) {
    t = {m->document_start, m->end_of_text};
  } else {
    const std::string json = shard_tokenizer_json(data_path);
    if (json.empty())
      throw ConfigError(str(flag, ": ", data_path,
                            " has no tokenizer to name the token that starts each document; "
                            "give it with --eot-id N"));
    const std::optional<int32_t> eot =
        Tokenizer::from_hf_json(nlohmann::json::parse(json), data_path).end_of_text();
    if (!eot)
      throw ConfigError(str(flag, ": the tokenizer of ", data_path,
                            " has no end-of-text token; give the token that starts each "
                            "document with --eot-id N"));
    t = {*eot, *eot};
  }
  if (eot_id >= vocab_size)
    throw ConfigError(
        str("--eot-id ", eot_id, " lies outside the vocabulary of ", vocab_size, " ids"));
  for (const int32_t id : {t.start, t.end})
    if (id < 0 || id >= vocab_size)
      throw ConfigError(str(flag, ": the documents of ", data_path, " start or end with token ", id,
                            ", outside the model's vocabulary of ", vocab_size, " ids"));
  // prompt-completion examples are packed at their end-of-text tokens (the .docs files): a mask
  // cut at another token would let examples see each other and cut each one apart
  if (m && m->data_format == kShardPromptCompletionFormat && m->end_of_text >= 0 && eot_id >= 0 &&
      eot_id != m->end_of_text)
    throw ConfigError(str("--eot-id ", eot_id, ": the prompt-completion examples of ", data_path,
                          " end with token ", m->end_of_text,
                          " (their manifest's end_of_text); give that, or leave --eot-id out"));
  return t;
}

namespace {

// --val-data: a `memo tokenize` folder gives its validation shards (those its own training holds
// out), one without them its shards; anything else is read as --data is.
TokenData given_validation(const std::string& path, int64_t vocab_size) {
  if (std::optional<TokenData> shards = load_validation_shards(path, vocab_size))
    return std::move(*shards);
  return TokenData::load(path, vocab_size);
}

}  // namespace

RunData load_run_data(const RunDataOptions& o, int64_t vocab_size) {
  TokenData all = TokenData::load(o.data_path, vocab_size);
  if (!o.val_data_path.empty())
    return RunData{std::move(all), given_validation(o.val_data_path, vocab_size)};
  if (std::optional<TokenData> shards = load_validation_shards(o.data_path, vocab_size))
    return RunData{std::move(all), std::move(shards)};
  auto [train, val] = split_tail(std::move(all), o.val_fraction);
  return RunData{std::move(train), std::move(val)};
}

std::optional<Tokenizer> data_tokenizer(const std::string& data_path) {
  if (const std::string json = shard_tokenizer_json(data_path); !json.empty())
    return Tokenizer::from_hf_json(nlohmann::json::parse(json), data_path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(data_path, ec)) return std::nullopt;
  // a raw text file: one token per byte, unless it starts as an llm.c token file
  std::ifstream in(data_path, std::ios::binary);
  int32_t magic = 0;
  if (in.read(reinterpret_cast<char*>(&magic), sizeof magic) &&
      (magic == kLlmcMagic || magic == kLlmcMagicLlama3))
    return std::nullopt;
  return Tokenizer::bytes();
}

namespace {

// The spelling of id in t, or nullopt where t has no such id.
std::optional<std::string> spelling(const Tokenizer& t, int32_t id) {
  try {
    return std::string(t.token_bytes(id));
  } catch (const DataError&) {
    return std::nullopt;
  }
}

// A token's bytes quoted: printable ASCII as is, other bytes as \xNN.
std::string shown(const std::optional<std::string>& s) {
  if (!s) return "no token";
  std::string out = "\"";
  char hex[8];
  for (char c : *s) {
    if (c >= ' ' && c < 0x7F && c != '"' && c != '\\') {
      out += c;
    } else {
      std::snprintf(hex, sizeof hex, "\\x%02X", unsigned(static_cast<unsigned char>(c)));
      out += hex;
    }
  }
  return out + "\"";
}

}  // namespace

void check_data_tokenizer(const Tokenizer& expected, const std::string& what,
                          const std::string& data_path, const char* flag) {
  const std::optional<Tokenizer> made = data_tokenizer(data_path);
  if (!made) return;
  const int64_t n = std::min(expected.vocab_size(), made->vocab_size());
  for (int32_t id = 0; id < n; ++id) {
    const std::optional<std::string> a = spelling(expected, id), b = spelling(*made, id);
    if (a == b) continue;
    const bool raw = made->hf_json().is_null();  // the byte tokenizer has no file
    throw ConfigError(
        str(flag, " ", data_path,
            raw ? " is raw text, read as bytes (id i is byte i)"
                : " was tokenised by another tokenizer than " + what + "'s",
            ": id ", id, " is ", shown(b), " there and ", shown(a), " in ", what,
            expected.hf_json().is_null() ? str("; ", what, " reads bytes: give it raw text")
            : raw ? str("; tokenise it with ", what, "'s tokenizer (memo tokenize --tokenizer ...)")
                  : str("; tokenise the data with ", what, "'s tokenizer")));
  }
}

TokenData load_validation_data(const RunDataOptions& o, int64_t vocab_size) {
  if (!o.val_data_path.empty()) return given_validation(o.val_data_path, vocab_size);
  if (std::optional<TokenData> shards = load_validation_shards(o.data_path, vocab_size))
    return std::move(*shards);
  return split_tail(TokenData::load(o.data_path, vocab_size), o.val_fraction).second;
}

}  // namespace memo
