// Implementation of train/evaluate.h.
#include "memo/train/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/core/error.h"
#include "memo/data/sampler.h"
#include "memo/memory/strategy.h"

namespace memo {

EvalSum evaluate_windows(Model& model, ActivationStrategy& strategy, ActivationAllocator& alloc,
                         const WindowSampler& sampler, int64_t batch, int64_t max_windows,
                         const EvalBatchHook& after_batch, Communicator* group,
                         int64_t position_bucket, const EvalForward& forward) {
  MEMO_CHECK(batch > 0 && max_windows >= 0 && position_bucket >= 0, "evaluation in batches of ",
             batch, " windows, at most ", max_windows, ", position buckets of ", position_bucket);
  MEMO_CHECK(!forward || position_bucket == 0,
             "evaluation: losses by position need the model's "
             "token losses");
  const int64_t seq = sampler.seq();
  const int64_t buckets = position_bucket > 0 ? (seq + position_bucket - 1) / position_bucket : 0;
  const int64_t windows = std::min(max_windows, sampler.num_sequential_windows());
  batch = std::min(batch, std::max<int64_t>(windows, 1));  // no rows for windows there are not
  std::vector<float> token_losses(position_bucket > 0 ? size_t(batch * seq) : 0);
  std::vector<int32_t> inputs(size_t(batch * seq)), targets(inputs.size());
  EvalSum r;
  r.bucket_loss.assign(size_t(buckets), 0.0);
  r.bucket_tokens.assign(size_t(buckets), 0);
  const int64_t batches = (windows + batch - 1) / batch;
  const int64_t ranks = group ? group->size() : 1, rank = group ? group->rank() : 0;
  for (int64_t b = batches * rank / ranks; b < batches * (rank + 1) / ranks; ++b) {
    const int64_t w = b * batch;
    const int64_t rows = std::min(batch, windows - w);
    sampler.fill_sequential(w, inputs.data(), targets.data(), rows);
    r.loss_sum += forward ? forward(inputs.data(), targets.data(), rows, seq)
                          : model.forward_loss(
                                inputs.data(), targets.data(), rows, seq, strategy, alloc,
                                std::span<float>(token_losses.data(),
                                                 position_bucket > 0 ? size_t(rows * seq) : 0));
    // the targets the loss does not count (Model::counts_target) marked kIgnoredTarget for
    // the buckets and the hook: their losses are 0, and the means leave them out
    int64_t counted = 0;
    for (int64_t t = 0; t < rows * seq; ++t) {
      if (!model.counts_target(inputs[size_t(t)], targets[size_t(t)])) {
        targets[size_t(t)] = kIgnoredTarget;
        continue;
      }
      ++counted;
      if (position_bucket <= 0) continue;
      const size_t k = size_t(t % seq / position_bucket);
      r.bucket_loss[k] += token_losses[size_t(t)];
      ++r.bucket_tokens[k];
    }
    r.tokens += counted;
    r.windows += rows;
    if (after_batch) after_batch(targets.data(), rows, r);
  }
  if (ranks > 1) {
    std::vector<double> sums = {r.loss_sum, double(r.tokens), double(r.windows)};
    sums.insert(sums.end(), r.bucket_loss.begin(), r.bucket_loss.end());
    sums.insert(sums.end(), r.bucket_tokens.begin(), r.bucket_tokens.end());
    group->all_reduce_sum(std::span<double>(sums));
    r.loss_sum = sums[0];
    r.tokens = int64_t(sums[1]);
    r.windows = int64_t(sums[2]);
    for (int64_t k = 0; k < buckets; ++k) {
      r.bucket_loss[size_t(k)] = sums[size_t(3 + k)];
      r.bucket_tokens[size_t(k)] = int64_t(sums[size_t(3 + buckets + k)]);
    }
  }
  return r;
}

EvalReport evaluate(Model& model, const Tokenizer* tokenizer, const TokenData& data, int64_t seq,
                    int64_t batch, int64_t max_batches, std::ostream* progress,
                    int64_t position_bucket) {
  const ModelConfig& cfg = model.config();
  if (seq <= 0) throw ConfigError(str("--seq ", seq, " must be positive"));
  if (seq > cfg.max_positions())
    throw ConfigError(str("--seq ", seq, " exceeds ", cfg.positions_limit()));
  if (batch <= 0) throw ConfigError(str("--batch ", batch, " must be positive"));
  if (position_bucket < 0 || position_bucket > seq)
    throw ConfigError(str("--by-position ", position_bucket, " must lie in [1, --seq ", seq, "]"));
  const WindowSampler sampler(data, seq, 0);
  CachingAllocator alloc(0, model.backend().allocator(model.backend().device_space()));
  KeepStrategy strategy(model.skeletal(), alloc);
  const int64_t all_windows = sampler.num_sequential_windows();
  batch = std::min(batch, std::max<int64_t>(all_windows, 1));  // --batch past the data: one batch
  const int64_t max_windows =
      max_batches > 0 && max_batches < all_windows / batch + 1 ? max_batches * batch : all_windows;
  const int64_t batches = (std::min(max_windows, all_windows) + batch - 1) / batch;
  EvalReport r;
  int64_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_print = t0;
  const EvalSum sum = evaluate_windows(
      model, strategy, alloc, sampler, batch, max_windows,
      [&](const int32_t* targets, int64_t rows, const EvalSum& so_far) {
        for (int64_t i = 0; tokenizer && i < rows * seq; ++i)
          // a control token (end of text) predicts a boundary, not text: no bytes
          if (targets[i] != kIgnoredTarget && !tokenizer->is_control(targets[i]))
            r.bytes += int64_t(tokenizer->token_bytes(targets[i]).size());
        ++done;
        const auto now = std::chrono::steady_clock::now();
        if (progress && (now - last_print > std::chrono::seconds(1) || done == batches)) {
          last_print = now;
          const double s = std::chrono::duration<double>(now - t0).count();
          char line[160];
          std::snprintf(line, sizeof line,
                        "eval: %lld / %lld batches (%.0f%%), %.0f tokens/s, ETA %.0f s",
                        static_cast<long long>(done), static_cast<long long>(batches),
                        100.0 * double(done) / double(batches), double(so_far.tokens) / s,
                        s / double(done) * double(batches - done));
          *progress << "\r" << line << (done == batches ? "\n" : "") << std::flush;
        }
      },
      nullptr, position_bucket);
  if (sum.tokens == 0)
    throw DataError(str(data.source(), ": the ", sum.windows, " windows of ", seq,
                        " tokens evaluated count none of their targets (each is masked out: "
                        "--eod-mask-loss, or prompt-completion data); there is no loss to report"));
  r.tokens = sum.tokens;
  r.windows = sum.windows;
  r.loss = sum.mean_loss();
  r.perplexity = std::exp(r.loss);
  if (r.bytes > 0) r.bits_per_byte = sum.loss_sum / std::log(2.0) / double(r.bytes);
  for (size_t k = 0; k < sum.bucket_loss.size(); ++k) {
    const int64_t from = int64_t(k) * position_bucket;
    r.by_position.push_back(
        {from, std::min(seq, from + position_bucket), sum.bucket_tokens[k],
         sum.bucket_tokens[k] > 0 ? sum.bucket_loss[k] / double(sum.bucket_tokens[k]) : 0.0});
  }
  return r;
}

}  // namespace memo
