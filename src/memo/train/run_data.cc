// Implementation of train/run_data.h.
#include "memo/train/run_data.h"

#include <utility>

namespace memo {

RunData load_run_data(const RunDataOptions& o, int64_t vocab_size) {
  TokenData all = TokenData::load(o.data_path, vocab_size);
  if (!o.val_data_path.empty())
    return RunData{std::move(all), TokenData::load(o.val_data_path, vocab_size)};
  if (std::optional<TokenData> shards = load_validation_shards(o.data_path, vocab_size))
    return RunData{std::move(all), std::move(shards)};
  auto [train, val] = split_tail(std::move(all), o.val_fraction);
  return RunData{std::move(train), std::move(val)};
}

TokenData load_validation_data(const RunDataOptions& o, int64_t vocab_size) {
  if (!o.val_data_path.empty()) return TokenData::load(o.val_data_path, vocab_size);
  if (std::optional<TokenData> shards = load_validation_shards(o.data_path, vocab_size))
    return std::move(*shards);
  return split_tail(TokenData::load(o.data_path, vocab_size), o.val_fraction).second;
}

}  // namespace memo
