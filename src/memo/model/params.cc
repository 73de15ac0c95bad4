#include "memo/model/params.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "memo/core/error.h"
#include "memo/core/random.h"
#include "memo/model/architecture.h"

namespace memo {

ParamLayout::ParamLayout(const ModelConfig& config) : ParamLayout(config, TensorShard{}) {}

namespace {

constexpr int64_t kAlignFloats = 16;  // 64 bytes: every tensor starts on a cache line

int64_t aligned(int64_t numel) { return (numel + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

}  // namespace

ParamLayout::ParamLayout(const ModelConfig& config, TensorShard shard) : shard_(shard) {
  MEMO_CHECK(shard.ranks >= 1 && shard.rank >= 0 && shard.rank < shard.ranks, "rank ", shard.rank,
             " of ", shard.ranks, " tensor-parallel ranks");
  params_ = architecture(config.arch).params(config);
  for (ParamInfo& p : params_) {
    p.index = &p - params_.data();
    p.full_shape = p.shape;
    if (shard.ranks > 1 && p.pad_split) {  // ceil(V / t) rows, each rank some of V's
      int64_t& d = p.shape.at(0);
      const int64_t part = (d + shard.ranks - 1) / shard.ranks;
      if (part * (shard.ranks - 1) >= d)
        throw ConfigError(str("tensor parallel ", shard.ranks, ": ", p.name, " has ", d,
                              " rows, too few to give each of ", shard.ranks, " ranks some"));
      d = part;
    } else if (shard.ranks > 1 && p.split >= 0) {
      int64_t& d = p.shape.at(size_t(p.split));
      if (d % (int64_t(shard.ranks) * p.split_blocks) != 0)
        throw ConfigError(str("tensor parallel ", shard.ranks, ": ", p.name, " has ", d,
                              p.split == 0 ? " rows" : " columns", ", which do not split into ",
                              shard.ranks, " equal parts"));
      d /= shard.ranks;
    }
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= d;
    p.offset = total_numel_;
    total_numel_ += aligned(p.numel);
  }
}

ParamLayout::ParamLayout(const ParamLayout& full, const std::function<bool(const ParamInfo&)>& keep)
    : shard_(full.shard_) {
  for (const ParamInfo& p : full.params_) {
    if (!keep(p)) continue;
    params_.push_back(p);
    params_.back().offset = total_numel_;
    total_numel_ += aligned(p.numel);
  }
}

ParamLayout::ParamLayout(const ParamLayout& full, size_t first, size_t last) : shard_(full.shard_) {
  MEMO_CHECK(first <= last && last <= full.params_.size(), "tensors [", first, ", ", last,
             ") of a layout of ", full.params_.size());
  base_offset_ = first < full.params_.size() ? full.params_[first].offset : full.total_numel_;
  const int64_t end = last < full.params_.size() ? full.params_[last].offset : full.total_numel_;
  params_.assign(full.params_.begin() + std::ptrdiff_t(first),
                 full.params_.begin() + std::ptrdiff_t(last));
  for (ParamInfo& p : params_) p.offset -= base_offset_;
  total_numel_ = end - base_offset_;
}

int64_t ParamLayout::count() const {
  int64_t n = 0;
  for (const ParamInfo& p : params_) n += p.numel;
  return n;
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  for (const ParamInfo& p : params_)
    if (p.name == name) return p;
  throw ConfigError(str("no parameter named '", name, "' in this model"));
}

ModelWeights bind_weights(const ModelConfig& config, const ParamLayout& layout, Tensor base) {
  ModelWeights w;
  w.layers.resize(size_t(config.num_hidden_layers));
  for (const ParamInfo& p : layout.params()) {
    Shape s;
    for (int64_t d : p.shape) s.dims[s.ndim++] = d;
    const Tensor view = base.part(p.offset, s);
    switch (p.role) {
      case ParamRole::kEmbedding:
        w.embed = view;
        break;
      case ParamRole::kPositions:
        w.pos = view;
        break;
      case ParamRole::kNorm:
        w.norm = view;
        break;
      case ParamRole::kNormBias:
        w.norm_b = view;
        break;
      case ParamRole::kHead:
        w.head = view;
        break;
      case ParamRole::kLayer: {
        LayerWeights& l = w.layers.at(size_t(p.layer));
        MEMO_CHECK(l.count < kMaxLayerParams, "layer ", p.layer, " has more than ", kMaxLayerParams,
                   " tensors");
        l.tensors[size_t(l.count++)] = view;
        break;
      }
    }
  }
  if (w.head.empty()) w.head = w.embed;  // tied
  return w;
}

void init_weights(const ParamLayout& layout, float* base, double std, uint64_t seed) {
  std::vector<float> whole;
  for (size_t i = 0; i < layout.params().size(); ++i) {
    const ParamInfo& p = layout.params()[i];
    float* w = base + p.offset;
    if (p.init != ParamInit::kNormal) {  // norm weights start at one, biases at zero
      const float value = p.init == ParamInit::kOne ? 1.0f : 0.0f;
      for (int64_t j = 0; j < p.numel; ++j) w[j] = value;
      continue;
    }
    NormalStream rng(seed, uint64_t(p.index));
    const double s = std * p.init_std_scale;
    if (!p.is_split()) {
      for (int64_t j = 0; j < p.numel; ++j) w[j] = float(s * rng.next());
      continue;
    }
    whole.resize(size_t(p.full_numel()));
    for (float& x : whole) x = float(s * rng.next());
    extract_shard(p, layout.shard(), whole.data(), w);
  }
}

namespace {

// Calls f(whole offset, part offset, count) for each contiguous run of the part.
template <class F>
void for_each_shard_run(const ParamInfo& p, TensorShard shard, F&& f) {
  MEMO_CHECK(p.full_shape.size() == p.shape.size(), p.name, ": shapes of ", p.full_shape.size(),
             " and ", p.shape.size(), " dimensions");
  if (!p.is_split()) return f(int64_t(0), int64_t(0), p.numel);
  const int64_t rows = p.shape[0], blocks = p.split_blocks;
  if (p.pad_split) {  // rows [r rows, (r + 1) rows) of the whole, those below its end
    const int64_t row = p.numel / rows, first = int64_t(shard.rank) * rows;
    const int64_t valid = std::clamp(p.full_shape[0] - first, int64_t(0), rows);
    return f(first * row, int64_t(0), valid * row);
  }
  if (p.split == 0) {  // rows: one run per block
    const int64_t row = p.numel / rows, part = rows / blocks * row, whole = part * shard.ranks;
    for (int64_t b = 0; b < blocks; ++b) f(b * whole + int64_t(shard.rank) * part, b * part, part);
    return;
  }
  MEMO_CHECK(p.split == 1 && p.shape.size() == 2, p.name, ": split along dimension ", p.split);
  const int64_t cols = p.shape[1], full_cols = p.full_shape[1], part = cols / blocks;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b)
      f(r * full_cols + b * (full_cols / blocks) + int64_t(shard.rank) * part, r * cols + b * part,
        part);
}

}  // namespace

std::vector<ShardRun> shard_runs(const ParamInfo& p, TensorShard shard) {
  std::vector<ShardRun> runs;
  for_each_shard_run(p, shard, [&](int64_t w, int64_t q, int64_t n) { runs.push_back({w, q, n}); });
  return runs;
}

void extract_shard(const ParamInfo& p, TensorShard shard, const float* whole, float* part) {
  std::fill(part, part + p.numel, 0.0f);  // a padded part's rows past the whole's end
  for_each_shard_run(p, shard, [&](int64_t w, int64_t q, int64_t n) {
    std::copy(whole + w, whole + w + n, part + q);
  });
}

void insert_shard(const ParamInfo& p, TensorShard shard, const float* part, float* whole) {
  for_each_shard_run(p, shard, [&](int64_t w, int64_t q, int64_t n) {
    std::copy(part + q, part + q + n, whole + w);
  });
}

}  // namespace memo
