// The one train/validation split of memo train, memo sweep and memo eval: the validation tokens
// are --val-data when given (a `memo tokenize` folder's validation shards where it has them),
// else the validation shards of a `memo tokenize` folder
// (data/shards.h), else the last --val-fraction of the training data, which training then does
// not see. Loads and checks every token before a caller writes any output. Not a sampler.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "memo/data/token_data.h"
#include "memo/data/tokenizer.h"

namespace memo {

struct RunDataOptions {
  std::string data_path;       // raw text (bytes), an llm.c token file, a shard folder or a glob
  std::string val_data_path;   // empty: the shard folder's val-*.bin, else the tail of data_path
  double val_fraction = 0.05;  // the held-out tail when there is neither
};

struct RunData {
  TokenData train;
  std::optional<TokenData> val;  // load_run_data always sets it
};

// The training and validation tokens of `o`. Errors: those of TokenData::load and split_tail.
RunData load_run_data(const RunDataOptions& o, int64_t vocab_size);

// The token that starts each document under --document-mask (Note [Document masks]), and the
// one whose predictions --eod-mask-loss leaves out.
struct DocumentTokens {
  int32_t start = -1;
  int32_t end = -1;
};

// The document tokens of the data at data_path: eot_id for both when >= 0; else those the
// manifest of the `memo tokenize` folder behind it names (its document_start and end_of_text:
// Note [Document layout] in data/shards.h); else the end of text of the tokenizer beside it, for
// both. ConfigError, naming `flag`, when there is none, or an id lies outside the vocabulary.
DocumentTokens document_tokens(const std::string& data_path, int64_t eot_id, int64_t vocab_size,
                               const char* flag = "--document-mask");

// The tokenizer that made the tokens at `data_path`, where memo can tell: a `memo tokenize`
// folder's (or its shards' or glob's), or the byte tokenizer for a raw text file; nullopt for an
// llm.c token file and for folders or globs without a manifest.
std::optional<Tokenizer> data_tokenizer(const std::string& data_path);

// ConfigError when the tokens at `data_path` (given by `flag`) were made by a tokenizer whose ids
// mean other text than `expected`'s (the tokenizer of `what`: a checkpoint, the training data),
// as far as data_tokenizer can tell: the model would train on, or be scored on, ids that spell
// something else, without any other error. Ids past the smaller vocabulary are not compared
// (added tokens appended to a vocabulary keep the ids before them).
void check_data_tokenizer(const Tokenizer& expected, const std::string& what,
                          const std::string& data_path, const char* flag);

// The validation tokens alone, the same as load_run_data's: the training data is read only when
// the validation set is its tail.
TokenData load_validation_data(const RunDataOptions& o, int64_t vocab_size);

}  // namespace memo
