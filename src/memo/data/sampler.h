// Training and evaluation windows over a TokenData. Training windows are drawn from a hash of
// (seed, step, micro, row), not from a stateful RNG, so a resumed run needs only its step to draw
// the same batches (see Note [Counter-based sampling]). Inputs and targets are [batch, seq] int32,
// row-major, targets shifted by one token. Prompt-completion data is packed into windows of
// whole examples instead (Note [Packed examples]). Not a shuffler of documents, not a prefetcher.
#pragma once

#include <cstdint>
#include <vector>

#include "memo/data/token_data.h"

namespace memo {

class WindowSampler {
 public:
  // Keeps a reference to `data`, which must outlive the sampler. seq <= 0: ConfigError; fewer
  // than seq + 1 tokens: DataError naming the source, its count and the seq + 1 needed.
  // Prompt-completion data without document offsets, or with no example that keeps a counted
  // target within seq tokens: DataError.
  WindowSampler(const TokenData& data, int64_t seq, uint64_t seed);
  WindowSampler(TokenData&&, int64_t, uint64_t) = delete;  // would dangle

  // Row b of micro-batch `micro` at `step`: tokens [s, s + seq) and [s + 1, s + seq + 1) with
  // s = window_start(step, micro, b).
  void fill(int64_t step, int64_t micro, int32_t* inputs, int32_t* targets, int64_t batch) const;
  // Uniform in [0, num_tokens - seq - 1], a pure function of (seed, step, micro, row).
  int64_t window_start(int64_t step, int64_t micro, int64_t row) const;

  // Rows are windows first_window .. first_window + batch - 1, window i starting at token i * seq.
  // The range must lie within num_sequential_windows(): DataError otherwise.
  void fill_sequential(int64_t first_window, int32_t* inputs, int32_t* targets,
                       int64_t batch) const;
  int64_t num_sequential_windows() const {
    return packed() ? int64_t(packs_.size()) : (data_->num_tokens() - 1) / seq_;
  }

  // Packed prompt-completion data (Note [Packed examples]): examples, those longer than seq
  // (cut to it), and those left out as nothing they keep is counted.
  bool packed() const { return data_->has_loss_mask(); }
  int64_t num_examples() const { return examples_; }
  int64_t truncated_examples() const { return truncated_; }
  int64_t dropped_examples() const { return dropped_; }

  int64_t seq() const { return seq_; }
  uint64_t seed() const { return seed_; }

 private:
  struct Pack {
    int64_t start, length;  // input tokens [start, start + length), length <= seq
  };
  void pack_examples();
  uint64_t draw(int64_t step, int64_t micro, int64_t row) const;
  void copy_window(int64_t start, int32_t* inputs, int32_t* targets) const;
  void copy_pack(const Pack& p, int32_t* inputs, int32_t* targets) const;

  const TokenData* data_;
  int64_t seq_;
  uint64_t seed_;
  std::vector<Pack> packs_;
  int64_t examples_ = 0, truncated_ = 0, dropped_ = 0;
};

}  // namespace memo
