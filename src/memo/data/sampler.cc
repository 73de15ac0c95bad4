// Implementation of data/sampler.h.
#include "memo/data/sampler.h"

#include <algorithm>

#include "memo/core/error.h"

namespace memo {
namespace {

// splitmix64's output function (Steele, Lea, Flood 2014): a bijection on 64 bits with full
// avalanche, so chained calls give independent-looking values for neighbouring counters.
uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

WindowSampler::WindowSampler(const TokenData& data, int64_t seq, uint64_t seed)
    : data_(&data), seq_(seq), seed_(seed) {
  if (seq <= 0) throw ConfigError(str("sequence length ", seq, " must be positive"));
  if (data.num_tokens() < seq + 1)
    throw DataError(str(data.source(), " holds ", data.num_tokens(), " tokens; a window of seq = ",
                        seq, " needs ", seq + 1, " (inputs plus the next-token target)"));
}

// Note [Counter-based sampling]
// start = floor(h * (n - seq) / 2^64) with h = mix(mix(mix(mix(seed) ^ step) ^ micro) ^ row),
// n the token count. Every window is a pure function of its coordinates: resuming at step k draws
// exactly what the uninterrupted run drew, with no RNG state in the checkpoint, and gradient
// accumulation (micro) or a changed batch order cannot shift later draws. The multiply-shift maps
// h onto [0, n - seq - 1] with bias below (n - seq) / 2^64. Changing this function changes every
// run's data order: the golden-value test pins it.
int64_t WindowSampler::window_start(int64_t step, int64_t micro, int64_t row) const {
  uint64_t h = mix(seed_);
  h = mix(h ^ uint64_t(step));
  h = mix(h ^ uint64_t(micro));
  h = mix(h ^ uint64_t(row));
  const uint64_t num_starts = uint64_t(data_->num_tokens() - seq_);
  return int64_t((static_cast<unsigned __int128>(h) * num_starts) >> 64);
}

void WindowSampler::copy_window(int64_t start, int32_t* inputs, int32_t* targets) const {
  data_->copy(start, seq_, inputs);
  data_->copy(start + 1, seq_, targets);
}

void WindowSampler::fill(int64_t step, int64_t micro, int32_t* inputs, int32_t* targets,
                         int64_t batch) const {
  MEMO_CHECK(batch >= 0 && (batch == 0 || (inputs && targets)), "fill: batch ", batch);
  for (int64_t b = 0; b < batch; ++b)
    copy_window(window_start(step, micro, b), inputs + b * seq_, targets + b * seq_);
}

void WindowSampler::fill_sequential(int64_t first_window, int32_t* inputs, int32_t* targets,
                                    int64_t batch) const {
  MEMO_CHECK(batch >= 0 && (batch == 0 || (inputs && targets)), "fill_sequential: batch ", batch);
  const int64_t num_windows = num_sequential_windows();
  if (first_window < 0 || batch > num_windows - first_window)
    throw DataError(str("windows [", first_window, ", ", first_window + batch, ") of ",
                        data_->source(), " are outside its ", num_windows,
                        " sequential windows of seq = ", seq_));
  for (int64_t b = 0; b < batch; ++b)
    copy_window((first_window + b) * seq_, inputs + b * seq_, targets + b * seq_);
}

}  // namespace memo
