// Evaluation of a model on token data: mean loss per token (nats), perplexity exp(loss) and bits
// per byte (the summed loss in bits over the bytes the target tokens decode to), so models with
// different tokenizers compare. Windows of seq tokens are read in order from the start of the
// data; a progress bar (one line redrawn with \r) goes to `progress` at most once a second.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "memo/data/token_data.h"
#include "memo/data/tokenizer.h"
#include "memo/model/model.h"

namespace memo {

struct EvalReport {
  double loss = 0.0;           // mean over target tokens, nats
  double perplexity = 0.0;     // exp(loss)
  double bits_per_byte = 0.0;  // sum of losses / ln 2 / bytes
  int64_t tokens = 0, bytes = 0, windows = 0;
};

// max_batches = 0: every sequential window. Errors: seq longer than the model's positions
// (ConfigError), data shorter than seq + 1 tokens (DataError), a target id the tokenizer does
// not know (DataError).
EvalReport evaluate(Model& model, const Tokenizer& tokenizer, const TokenData& data, int64_t seq,
                    int64_t batch, int64_t max_batches, std::ostream* progress);

}  // namespace memo
