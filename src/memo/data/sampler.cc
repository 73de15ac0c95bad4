// Implementation of data/sampler.h.
#include "memo/data/sampler.h"

#include <algorithm>

#include "memo/core/error.h"
#include "memo/core/targets.h"

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
  if (packed()) pack_examples();
}

// Note [Packed examples]
// Prompt-completion data (data/shards.h) is cut into examples at its document offsets, and
// consecutive examples are packed greedily, in order, into windows of at most seq input tokens:
// a window's examples are whole, its last target is the next example's end-of-text (the end of
// its last example), and the rest of the window is padding (inputs: the end-of-text, targets:
// kIgnoredTarget). An example longer than seq is cut to its first seq tokens, alone in its
// window, and left out when none of the targets it keeps is counted (a prompt that fills the
// window). Training draws a window per (seed, step, micro, row) as in Note [Counter-based
// sampling], uniformly among the windows; evaluation reads them in order. With document masks
// (which memo train turns on for such data) examples do not see each other, so a window's loss
// is the sum of its examples' own losses.
void WindowSampler::pack_examples() {
  const std::optional<std::vector<int64_t>> starts = data_->document_starts();
  if (!starts)
    throw DataError(str(data_->source(), " has a loss mask but no document offsets to cut its ",
                        "examples at; rerun `memo tokenize --format prompt-completion`"));
  const int64_t n = data_->num_tokens(), k = int64_t(starts->size());
  // the last example's length leaves out the split's closing end-of-text, a target only
  auto length_of = [&](int64_t i) {
    return (i + 1 < k ? (*starts)[size_t(i + 1)] : n - 1) - (*starts)[size_t(i)];
  };
  std::vector<uint8_t> mask(static_cast<size_t>(seq_));
  examples_ = k;
  for (int64_t i = 0; i < k;) {
    const int64_t start = (*starts)[size_t(i)];
    int64_t length = length_of(i);
    if (length > seq_) {  // cut to seq: kept when a target it keeps is counted
      ++truncated_;
      const int64_t targets = std::min(seq_, n - 1 - start);
      data_->copy_mask(start + 1, targets, mask.data());
      if (std::find(mask.begin(), mask.begin() + targets, uint8_t(1)) != mask.begin() + targets)
        packs_.push_back({start, seq_});
      else
        ++dropped_;
      ++i;
      continue;
    }
    int64_t j = i + 1;
    for (; j < k && length + length_of(j) <= seq_; ++j) length += length_of(j);
    packs_.push_back({start, length});
    i = j;
  }
  if (packs_.empty())
    throw DataError(str(data_->source(), ": none of its ", k, " examples keeps a counted target ",
                        "within seq = ", seq_, " tokens (every prompt fills the window)"));
}

// Note [Counter-based sampling]
// start = floor(h * (n - seq) / 2^64) with h = mix(mix(mix(mix(seed) ^ step) ^ micro) ^ row),
// n the token count. Every window is a pure function of its coordinates: resuming at step k draws
// exactly what the uninterrupted run drew, with no RNG state in the checkpoint, and gradient
// accumulation (micro) or a changed batch order cannot shift later draws. The multiply-shift maps
// h onto [0, n - seq - 1] with bias below (n - seq) / 2^64. Changing this function changes every
// run's data order: the golden-value test pins it.
uint64_t WindowSampler::draw(int64_t step, int64_t micro, int64_t row) const {
  uint64_t h = mix(seed_);
  h = mix(h ^ uint64_t(step));
  h = mix(h ^ uint64_t(micro));
  return mix(h ^ uint64_t(row));
}

int64_t WindowSampler::window_start(int64_t step, int64_t micro, int64_t row) const {
  const uint64_t num_starts = uint64_t(data_->num_tokens() - seq_);
  return int64_t((static_cast<unsigned __int128>(draw(step, micro, row)) * num_starts) >> 64);
}

void WindowSampler::copy_pack(const Pack& p, int32_t* inputs, int32_t* targets) const {
  data_->copy(p.start, p.length, inputs);
  // every input has its target: a pack ends by the data's last token (pack_examples)
  const int64_t known = std::min(p.length, data_->num_tokens() - 1 - p.start);
  data_->copy(p.start + 1, known, targets);
  std::vector<uint8_t> counted(static_cast<size_t>(known));
  data_->copy_mask(p.start + 1, known, counted.data());
  for (int64_t t = 0; t < known; ++t)
    if (!counted[size_t(t)]) targets[t] = kIgnoredTarget;
  std::fill(targets + known, targets + seq_, kIgnoredTarget);
  std::fill(inputs + p.length, inputs + seq_, inputs[0]);  // the end-of-text
}

void WindowSampler::copy_window(int64_t start, int32_t* inputs, int32_t* targets) const {
  data_->copy(start, seq_, inputs);
  data_->copy(start + 1, seq_, targets);
}

void WindowSampler::fill(int64_t step, int64_t micro, int32_t* inputs, int32_t* targets,
                         int64_t batch) const {
  MEMO_CHECK(batch >= 0 && (batch == 0 || (inputs && targets)), "fill: batch ", batch);
  for (int64_t b = 0; b < batch; ++b) {
    if (packed()) {
      const auto i = size_t(
          (static_cast<unsigned __int128>(draw(step, micro, b)) * uint64_t(packs_.size())) >> 64);
      copy_pack(packs_[i], inputs + b * seq_, targets + b * seq_);
    } else {
      copy_window(window_start(step, micro, b), inputs + b * seq_, targets + b * seq_);
    }
  }
}

void WindowSampler::fill_sequential(int64_t first_window, int32_t* inputs, int32_t* targets,
                                    int64_t batch) const {
  MEMO_CHECK(batch >= 0 && (batch == 0 || (inputs && targets)), "fill_sequential: batch ", batch);
  const int64_t num_windows = num_sequential_windows();
  if (first_window < 0 || batch > num_windows - first_window)
    throw DataError(str("windows [", first_window, ", ", first_window + batch, ") of ",
                        data_->source(), " are outside its ", num_windows,
                        " sequential windows of seq = ", seq_));
  for (int64_t b = 0; b < batch; ++b) {
    if (packed())
      copy_pack(packs_[size_t(first_window + b)], inputs + b * seq_, targets + b * seq_);
    else
      copy_window((first_window + b) * seq_, inputs + b * seq_, targets + b * seq_);
  }
}

}  // namespace memo
