// Evaluation of a model on token data, the one evaluation loop of memo: forward only over the
// sequential windows of seq tokens from the start of the data, in batches (memo train's
// validation, memo sweep's short runs, memo eval). The report of memo eval adds perplexity
// exp(loss) and bits per byte (the summed loss in bits over the bytes the target tokens decode
// to), so models with different tokenizers compare; a progress bar (one line redrawn with \r)
// goes to `progress` at most once a second.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "memo/backend/allocator.h"
#include "memo/data/sampler.h"
#include "memo/data/token_data.h"
#include "memo/data/tokenizer.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/parallel/communicator.h"

namespace memo {

// The windows [0, min(max_windows, all)) of `sampler`'s data in batches of `batch` windows.
struct EvalSum {
  double loss_sum = 0.0;  // summed token losses, nats
  int64_t tokens = 0;     // the targets the loss counts (Model::counts_target), all without a mask
  int64_t windows = 0;
  // With a position bucket P: bucket k's summed losses and tokens, positions [k P, (k + 1) P)
  // within the window (a target's position is its input's).
  std::vector<double> bucket_loss;
  std::vector<int64_t> bucket_tokens;
  double mean_loss() const { return tokens > 0 ? loss_sum / double(tokens) : 0.0; }
};
// Called after each batch with its targets (rows x seq ids, kIgnoredTarget where the loss does
// not count one) and the sums so far.
using EvalBatchHook = std::function<void(const int32_t* targets, int64_t rows, const EvalSum& sum)>;
// group: data-parallel ranks that share the work (collective): rank r evaluates the r-th of P
// contiguous runs of the batches, and the sums are added over the ranks in rank order (the same
// windows as one process, its sum up to double rounding); after_batch sees this rank's batches.
// position_bucket > 0: also the losses by position (EvalSum::bucket_loss). forward: the loss sum
// of a batch (inputs, targets, rows, seq) where model.forward_loss does not compute it (a pipeline
// rank's: pipeline_forward_loss in train/step.h); not with position buckets.
using EvalForward =
    std::function<double(const int32_t* inputs, const int32_t* targets, int64_t rows, int64_t seq)>;
EvalSum evaluate_windows(Model& model, ActivationStrategy& strategy, ActivationAllocator& alloc,
                         const WindowSampler& sampler, int64_t batch, int64_t max_windows,
                         const EvalBatchHook& after_batch = {}, Communicator* group = nullptr,
                         int64_t position_bucket = 0, const EvalForward& forward = {});

// The mean loss of the targets at positions [from, to) of the windows.
struct PositionLoss {
  int64_t from = 0, to = 0, tokens = 0;
  double loss = 0.0;
};

struct EvalReport {
  double loss = 0.0;        // mean over target tokens, nats
  double perplexity = 0.0;  // exp(loss)
  // sum of losses / ln 2 / bytes; none without a tokenizer (a checkpoint trained on an llm.c
  // token file) or when the targets spell no bytes
  std::optional<double> bits_per_byte;
  int64_t tokens = 0, bytes = 0, windows = 0;
  std::vector<PositionLoss> by_position;  // with a position bucket
};

// max_batches = 0: every sequential window. Errors: seq longer than the model's positions
// (ConfigError), data shorter than seq + 1 tokens (DataError), a target id the tokenizer does
// not know (DataError).
// position_bucket > 0 (at most seq): the report's by_position, buckets of that many positions
// (the last one shorter when it does not divide seq).
// tokenizer: spells the targets' bytes for bits per byte; null: none are counted.
EvalReport evaluate(Model& model, const Tokenizer* tokenizer, const TokenData& data, int64_t seq,
                    int64_t batch, int64_t max_batches, std::ostream* progress,
                    int64_t position_bucket = 0);

}  // namespace memo
