// Implementation of train/evaluate.h.
#include "memo/train/evaluate.h"

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

EvalReport evaluate(Model& model, const Tokenizer& tokenizer, const TokenData& data, int64_t seq,
                    int64_t batch, int64_t max_batches, std::ostream* progress) {
  const ModelConfig& cfg = model.config();
  if (seq > cfg.max_position_embeddings)
    throw ConfigError(
        str("--seq ", seq, " exceeds ", cfg.positions_field(), " = ", cfg.max_position_embeddings));
  if (batch <= 0) throw ConfigError(str("--batch ", batch, " must be positive"));
  const WindowSampler sampler(data, seq, 0);
  CachingAllocator alloc;
  KeepStrategy strategy(cfg, alloc);
  std::vector<int32_t> inputs(size_t(batch * seq)), targets(inputs.size());
  const int64_t windows = sampler.num_sequential_windows();
  int64_t batches = (windows + batch - 1) / batch;
  if (max_batches > 0) batches = std::min(batches, max_batches);
  EvalReport r;
  double loss_sum = 0.0;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_print = t0;
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t rows = std::min(batch, windows - b * batch);
    sampler.fill_sequential(b * batch, inputs.data(), targets.data(), rows);
    loss_sum += model.forward_loss(inputs.data(), targets.data(), rows, seq, strategy, alloc);
    for (int64_t i = 0; i < rows * seq; ++i)
      r.bytes += int64_t(tokenizer.token_bytes(targets[size_t(i)]).size());
    r.tokens += rows * seq;
    r.windows += rows;
    const auto now = std::chrono::steady_clock::now();
    if (progress && (now - last_print > std::chrono::seconds(1) || b + 1 == batches)) {
      last_print = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      char line[160];
      std::snprintf(line, sizeof line,
                    "eval: %lld / %lld batches (%.0f%%), %.0f tokens/s, ETA %.0f s",
                    static_cast<long long>(b + 1), static_cast<long long>(batches),
                    100.0 * double(b + 1) / double(batches), double(r.tokens) / s,
                    s / double(b + 1) * double(batches - b - 1));
      *progress << "\r" << line << (b + 1 == batches ? "\n" : "") << std::flush;
    }
  }
  r.loss = loss_sum / double(r.tokens);
  r.perplexity = std::exp(r.loss);
  r.bits_per_byte = r.bytes > 0 ? loss_sum / std::log(2.0) / double(r.bytes) : 0.0;
  return r;
}

}  // namespace memo
