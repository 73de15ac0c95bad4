// Implementation of train/run_data.h.
#include "memo/train/run_data.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "memo/core/error.h"
#include "memo/data/shards.h"
#include "memo/data/tokenizer.h"

namespace memo {

int32_t document_start_token(const std::string& data_path, int64_t eot_id, int64_t vocab_size,
                             const char* flag) {
  if (eot_id < 0) {
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
    eot_id = *eot;
  }
  if (eot_id >= vocab_size)
    throw ConfigError(
        str("--eot-id ", eot_id, " lies outside the vocabulary of ", vocab_size, " ids"));
  return int32_t(eot_id);
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

TokenData load_validation_data(const RunDataOptions& o, int64_t vocab_size) {
  if (!o.val_data_path.empty()) return given_validation(o.val_data_path, vocab_size);
  if (std::optional<TokenData> shards = load_validation_shards(o.data_path, vocab_size))
    return std::move(*shards);
  return split_tail(TokenData::load(o.data_path, vocab_size), o.val_fraction).second;
}

}  // namespace memo
